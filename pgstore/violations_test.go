package pgstore_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/verdict"
)

func denied(rule, key string, keyInt uint64) verdict.Event {
	return verdict.Event{Route: "/v1/", Tier: "API", Rule: rule, Cost: 1, Outcome: verdict.Denied, RetryAfter: 1500 * time.Millisecond, Key: key, KeyInt: keyInt}
}

// salt is the tests' secret for the default key hash (MinSalt bytes).
var salt = []byte("a test's secret!")

type violationRow struct {
	rule, outcome string
	key           *string
	retryMs       int64
}

func violationRows(t *testing.T, pool *pgxpool.Pool, table string) []violationRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT rule, outcome, key, retry_after_ms FROM "+table+" ORDER BY at, rule")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []violationRow
	for rows.Next() {
		var r violationRow
		if err := rows.Scan(&r.rule, &r.outcome, &r.key, &r.retryMs); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestViolationLog: denials written in batches, allowed requests not; keys
// hashed by default (one client's rows alike, the key itself nowhere), or
// as they are with RawKey.
func TestViolationLog(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	pool := srv.Pool(t)

	for _, raw := range []bool{false, true} {
		table := "violations_hashed"
		opts := pgstore.ViolationOptions{Table: table, Batch: 3, Flush: 20 * time.Millisecond, Salt: salt}
		if raw {
			table = "violations_raw"
			opts.Table, opts.Key = table, pgstore.RawKey
		}
		v, err := pgstore.NewViolationLog(ctx, pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		v.Observe(verdict.Event{Rule: "PerUser", Outcome: verdict.Allowed, Key: "alice"})
		for range 4 {
			v.Observe(denied("PerUser", "alice", 0))
		}
		v.Observe(denied("PerUser", "bob", 0))
		v.Observe(denied("PerEndpoint", "", 42))
		v.Observe(denied("Global", "", 0))
		if err := v.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if written, dropped, failed := v.Stats(); written != 7 || dropped != 0 || failed != 0 {
			t.Errorf("raw=%v: written %d, dropped %d, failed batches %d; want 7, 0, 0", raw, written, dropped, failed)
		}
		rows := violationRows(t, pool, table)
		if len(rows) != 7 {
			t.Fatalf("raw=%v: %d rows, want the 7 denials", raw, len(rows))
		}
		keys := map[string][]string{}
		for _, r := range rows {
			if r.outcome != "denied" || r.retryMs != 1500 {
				t.Errorf("raw=%v: row %+v", raw, r)
			}
			k := "<null>"
			if r.key != nil {
				k = *r.key
			}
			keys[r.rule] = append(keys[r.rule], k)
		}
		if keys["Global"][0] != "<null>" {
			t.Errorf("raw=%v: a global rule's row has key %q, want none", raw, keys["Global"][0])
		}
		perUser := keys["PerUser"]
		if raw {
			slices.Sort(perUser) // events of one microsecond have no order in the table
			if strings.Join(perUser, ",") != "alice,alice,alice,alice,bob" {
				t.Errorf("raw keys: PerUser %v", perUser)
			}
			if keys["PerEndpoint"][0] != "42" {
				t.Errorf("raw keys: PerEndpoint %v, want 42", keys["PerEndpoint"])
			}
			continue
		}
		count := map[string]int{}
		for _, k := range append(perUser, keys["PerEndpoint"]...) {
			count[k]++
			if len(k) != 32 || strings.Contains(k, "alice") || strings.Contains(k, "bob") || k == "42" {
				t.Errorf("hashed key %q", k)
			}
		}
		if len(count) != 3 || !hasCount(count, 4) {
			t.Errorf("hashed keys %v: want alice's 4 rows alike, bob's and 42's apart", count)
		}
	}
}

// TestViolationLogSalt: the default key hash is refused without a secret of
// MinSalt bytes (a service that forgot it would log keys anyone could
// recover from their hashes), saying what to do; RawKey or an own Key need
// none. Nothing is created when the options are refused.
func TestViolationLogSalt(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	pool := srv.Pool(t)
	for _, s := range [][]byte{nil, {}, salt[:pgstore.MinSalt-1]} {
		opts := pgstore.ViolationOptions{Table: "refused", Salt: s}
		if v, err := pgstore.NewViolationLog(ctx, pool, opts); err == nil || !strings.Contains(err.Error(), "Salt of at least 16 bytes") || !strings.Contains(err.Error(), "pgstore.RawKey") {
			if v != nil {
				v.Close(ctx) //nolint:errcheck // a log that should not exist
			}
			t.Errorf("salt of %d bytes: err %v; want the default hash refused, naming the fix", len(s), err)
		}
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('refused') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Errorf("refused options made the table (%v, %v)", exists, err)
	}
	for _, opts := range []pgstore.ViolationOptions{
		{Table: "raw", Key: pgstore.RawKey},
		{Table: "own", Key: func(verdict.Event) string { return "account" }},
		{Table: "salted", Salt: salt},
	} {
		v, err := pgstore.NewViolationLog(ctx, pool, opts)
		if err != nil {
			t.Fatalf("%s: %v", opts.Table, err)
		}
		if err := v.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func hasCount(m map[string]int, n int) bool {
	for _, c := range m {
		if c == n {
			return true
		}
	}
	return false
}

// TestViolationLogBounded: a flood beyond the queue is dropped and counted,
// never blocking; every event is either written or counted as dropped.
func TestViolationLogBounded(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	pool := srv.Pool(t)
	v, err := pgstore.NewViolationLog(ctx, pool, pgstore.ViolationOptions{Queue: 3, Batch: 1000, Flush: time.Hour, Key: pgstore.RawKey})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		v.Observe(denied("PerUser", "alice", 0))
	}
	if err := v.Close(ctx); err != nil {
		t.Fatal(err)
	}
	written, dropped, _ := v.Stats()
	if written+dropped != 100 || written > 6 || dropped < 94 {
		t.Errorf("written %d, dropped %d: want at most 6 (queue and batch) written, the rest dropped, 100 in all", written, dropped)
	}
	if rows := violationRows(t, pool, pgstore.DefaultViolationsTable); len(rows) != int(written) {
		t.Errorf("%d rows, %d written", len(rows), written)
	}
}

// TestViolationLogDatabaseDown: batches that fail while the database is down
// are reported and kept; after it is back they are written, none lost.
func TestViolationLogDatabaseDown(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	pool := srv.Pool(t)
	var reports atomic.Int64
	v, err := pgstore.NewViolationLog(ctx, pool, pgstore.ViolationOptions{Flush: 20 * time.Millisecond, Salt: salt,
		Report: func(error) { reports.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for range 10 {
		v.Observe(denied("PerUser", "alice", 0))
	}
	deadline := time.Now().Add(10 * time.Second)
	for reports.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, failed := v.Stats(); failed == 0 || reports.Load() == 0 {
		t.Fatalf("the database down: %d failed batches, %d reports", failed, reports.Load())
	}
	srv.Restart(t)
	closeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := v.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if written, dropped, _ := v.Stats(); written != 10 || dropped != 0 {
		t.Errorf("after the database came back: written %d, dropped %d; want 10, 0", written, dropped)
	}
	if rows := violationRows(t, pool, pgstore.DefaultViolationsTable); len(rows) != 10 {
		t.Errorf("%d rows, want 10", len(rows))
	}
}

// TestViolationLogMiddleware: end to end, the generated middleware's
// observer is a ViolationLog on one PostgreSQL while its shared rules are
// checked on another. Denials, a request without a key, and the decisions
// the failure settings make after the store's server is stopped all reach
// the table, with their door, route, rule, cost, wait, store error and the key
// hashed as documented (HMAC-SHA-256 with the salt, 16 bytes in hex);
// allowed requests do not. An integer key is hashed as its decimal digits.
func TestViolationLogMiddleware(t *testing.T) {
	store, logs := pgtest.Start(t), pgtest.Start(t)
	ctx := context.Background()
	st, err := pgstore.New(ctx, store.Pool(t), pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	lims := sharedlimits.New(sharedlimits.WithStore(st))
	mw, err := sharedlimits.NewMiddleware(lims, sharedlimits.Hooks{
		UserID: func(r *http.Request) (string, bool) { return r.Header.Get("X-User"), r.Header.Get("X-User") != "" },
		PlanOf: func(*http.Request) (sharedlimits.Plan, bool) { return sharedlimits.PlanFree, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	logPool := logs.Pool(t)
	vlog, err := pgstore.NewViolationLog(ctx, logPool, pgstore.ViolationOptions{Salt: salt, Flush: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mw.Config.Observer = vlog
	app := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func(method, path, user string) int {
		r := httptest.NewRequest(method, path, nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		w := httptest.NewRecorder()
		app.ServeHTTP(w, r)
		return w.Code
	}
	codes := map[int]int{}
	for range 23 { // PerUser's free burst is 20
		codes[send("GET", "/hello", "alice")]++
	}
	codes[send("GET", "/hello", "")]++ // no key
	for range 4 {                      // Exports: 3 an hour, an integer key
		codes[send("POST", "/export/77", "")]++
	}
	if codes[http.StatusOK] != 23 || codes[http.StatusTooManyRequests] != 4 || len(codes) != 3 {
		t.Fatalf("statuses %v: want 23 admitted, 4 denied, one refused for its missing key", codes)
	}
	store.Stop() // PerUser's on_failure is local (half its burst), Exports' is deny
	for range 3 {
		send("GET", "/hello", "bob")
	}
	send("POST", "/export/78", "")
	if err := vlog.Close(ctx); err != nil {
		t.Fatal(err)
	}

	hash := func(k string) string {
		mac := hmac.New(sha256.New, salt)
		mac.Write([]byte(k))
		return hex.EncodeToString(mac.Sum(nil)[:16])
	}
	rows, err := logPool.Query(ctx, `SELECT door || ' ' || route, tier, rule, coalesce(key, '<none>'), cost, outcome, retry_after_ms > 0, store_error <> '', count(*)
		FROM `+pgstore.DefaultViolationsTable+` GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1, 3, 6, 4`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var route, tier, rule, key, outcome string
		var cost, n int64
		var waits, storeErr bool
		if err := rows.Scan(&route, &tier, &rule, &key, &cost, &outcome, &waits, &storeErr, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s|%s|%s|%s|%d|%s|wait %v|store error %v|%d", route, tier, rule, key, cost, outcome, waits, storeErr, n))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"http GET /hello||PerUser|" + hash("bob") + "|1|degraded_allowed|wait false|store error true|3",
		"http GET /hello||PerUser|" + hash("alice") + "|1|denied|wait true|store error false|3",
		"http GET /hello||PerUser|<none>|0|missing_key|wait false|store error false|1",                           // refused unchecked: nothing taken
		"http POST /export/{account}||Exports|" + hash("78") + "|1|degraded_denied|wait true|store error true|1", // on_failure deny: retry after a second
		"http POST /export/{account}||Exports|" + hash("77") + "|1|denied|wait true|store error false|1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violation log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A table an earlier version made, without the door column, gains it when a
// ViolationLog opens it: its rows say "" (unknown), new ones their door.
func TestViolationLogAddsDoor(t *testing.T) {
	pool := pgtest.Start(t).Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE old_violations (at timestamptz NOT NULL, route text NOT NULL, tier text NOT NULL,
		rule text NOT NULL, key text, cost bigint NOT NULL, outcome text NOT NULL, retry_after_ms bigint NOT NULL, store_error text NOT NULL);
		INSERT INTO old_violations VALUES (now(), 'GET /a', '', 'R', NULL, 1, 'denied', 1000, '')`); err != nil {
		t.Fatal(err)
	}
	vlog, err := pgstore.NewViolationLog(ctx, pool, pgstore.ViolationOptions{Table: "old_violations", Key: pgstore.RawKey})
	if err != nil {
		t.Fatal(err)
	}
	vlog.Observe(verdict.Event{Door: verdict.DoorGRPC, Route: "/pkg.S/M", Rule: "R", Cost: 1, Outcome: verdict.Denied})
	if err := vlog.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var doors []string
	rows, err := pool.Query(ctx, "SELECT door || ':' || route FROM old_violations ORDER BY at")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			t.Fatal(err)
		}
		doors = append(doors, d)
	}
	if strings.Join(doors, ",") != ":GET /a,grpc:/pkg.S/M" {
		t.Errorf("rows %q, want the old row with no door and the new one with grpc", doors)
	}
}

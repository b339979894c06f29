package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/storetest"
	"github.com/redis/go-redis/v9"
)

// The numbers hash on one redis-server, watched by eight instances
// (storetest.SourceConvergence).
func TestNumbersHash(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	f := storetest.SourceConvergence(t, numbersSource(admin, func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	}))
	t.Logf("Redis numbers hash: %v", f)
}

// The numbers hash on a Cluster of three masters: PutNumbers's transaction
// (HSET and PUBLISH) runs on the hash's master, the message reaches
// subscribers on every node, and eight instances with Cluster clients
// converge as on one server.
func TestNumbersHashCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { admin.Close() })
	f := storetest.SourceConvergence(t, numbersSource(admin, func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	}))
	t.Logf("Redis Cluster numbers hash: %v", f)
}

// numbersSource is the numbers hash as storetest.SourceConvergence drives
// it: rows written through admin, instances on clients newClient makes.
func numbersSource(admin redis.UniversalClient, newClient func() redis.UniversalClient) storetest.Source {
	ctx := context.Background()
	row := func(r storetest.Row) redisstore.NumbersRow {
		return redisstore.NumbersRow{Rule: r.Rule, Plan: r.Plan, Key: r.Key, Rate: r.Rate, Burst: r.Burst, Inactive: !r.Active}
	}
	const refresh = 500 * time.Millisecond
	return storetest.Source{
		Refresh: refresh,
		Instance: func(t *testing.T, report func(error)) *sharedlimits.Limits {
			c := newClient()
			t.Cleanup(func() { c.Close() })
			st, err := redisstore.New(ctx, c, redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			l := sharedlimits.New(sharedlimits.WithStore(st))
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := redisstore.Numbers(wctx, c, l.ApplyNumbers, redisstore.NumbersOptions{Refresh: refresh, Report: report}); err != nil {
					report(err)
				}
			}()
			t.Cleanup(func() { cancel(); <-done })
			return l
		},
		Put: func(t *testing.T, id int, r storetest.Row) {
			err := redisstore.PutNumbers(ctx, admin, "", strconv.Itoa(id), row(r), nil)
			if errors.Is(err, overlay.ErrInvalid) {
				// A row PutNumbers refuses reaches readers only from another
				// writer (redis-cli): write it and notify as one would.
				v, merr := json.Marshal(row(r))
				if merr != nil {
					t.Fatal(merr)
				}
				err = admin.HSet(ctx, redisstore.DefaultNumbersHash, strconv.Itoa(id), v).Err()
				if err == nil {
					err = admin.Publish(ctx, redisstore.DefaultNumbersHash, strconv.Itoa(id)).Err()
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		},
		PutQuietly: func(t *testing.T, id int, r storetest.Row) {
			v, err := json.Marshal(row(r))
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.HSet(ctx, redisstore.DefaultNumbersHash, strconv.Itoa(id), v).Err(); err != nil {
				t.Fatal(err)
			}
		},
		Delete: func(t *testing.T, id int) {
			if err := redisstore.DeleteNumbers(ctx, admin, "", strconv.Itoa(id)); err != nil {
				t.Fatal(err)
			}
		},
		RowName: func(id int) string { return redisstore.DefaultNumbersHash + " field " + strconv.Itoa(id) },
	}
}

// A numbers hash that is gone (FLUSHALL: a Redis restarted without its data)
// after a reload found it leaves the numbers in force and is reported once
// (not at every reload) until it is written again; a hash whose last row was deleted
// with DeleteNumbers keeps its marker and is applied as empty, on purpose.
// The marker is no row id.
func TestNumbersHashGone(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	var mu sync.Mutex
	var applied []int // the size of each Set applied
	var reports []string
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		redisstore.Numbers(wctx, c, func(s overlay.Set) error { //nolint:errcheck // returns nil when ctx ends
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, len(s))
			return nil
		}, redisstore.NumbersOptions{Refresh: 20 * time.Millisecond, Report: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, err.Error())
		}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	last := func() (size, n int, said []string) {
		mu.Lock()
		defer mu.Unlock()
		if len(applied) > 0 {
			size = applied[len(applied)-1]
		}
		return size, len(applied), slices.Clone(reports)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				size, n, said := last()
				t.Fatalf("not within 5 s: %s (last Set applied of %d entries, %d applied, reports %q)", what, size, n, said)
			}
		}
	}
	row := redisstore.NumbersRow{Rule: "PerUser", Rate: "5/min", Burst: 5}
	put := func(id string) {
		t.Helper()
		if err := redisstore.PutNumbers(ctx, c, "", id, row, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("1")
	waitFor("row 1 applied", func() bool { size, _, _ := last(); return size == 1 })
	if err := redisstore.DeleteNumbers(ctx, c, "", "1"); err != nil {
		t.Fatal(err)
	}
	waitFor("the emptied hash applied", func() bool { size, _, _ := last(); return size == 0 })
	put("1")
	waitFor("row 1 applied again", func() bool { size, _, _ := last(); return size == 1 })
	_, before, _ := last()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor("the gone hash reported", func() bool {
		_, _, said := last()
		return len(said) >= 1 && strings.Contains(said[0], "is gone")
	})
	time.Sleep(200 * time.Millisecond) // ten refreshes: the same state is not said again
	if size, n, said := last(); size != 1 || n != before || len(said) != 1 {
		t.Fatalf("after FLUSHALL: %d Sets applied since (last of %d entries), reports %q; want none, the numbers kept, and one report", n-before, size, said)
	}
	put("2")
	waitFor("row 2 applied after the hash was written again", func() bool { size, n, _ := last(); return n > before && size == 1 })
	for _, err := range []error{
		redisstore.PutNumbers(ctx, c, "", redisstore.NumbersMarker, row, nil),
		redisstore.DeleteNumbers(ctx, c, "", redisstore.NumbersMarker),
	} {
		if err == nil || !strings.Contains(err.Error(), "marker") {
			t.Errorf("the marker as a row id: %v", err)
		}
	}
}

// A row's zero value is active (as pgstore's column defaults to true), and
// so is a JSON row without "active"; PutNumbers refuses, writing nothing, a
// row every reader would refuse, and with a package's CheckNumbers a row
// that makes the whole hash one ApplyNumbers refuses.
func TestPutNumbersChecks(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	lims := sharedlimits.New()
	hlen := func() int64 {
		t.Helper()
		n, err := c.HLen(ctx, redisstore.DefaultNumbersHash).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		row  redisstore.NumbersRow
		want string
	}{
		{"a rate that does not parse", redisstore.NumbersRow{Rule: "PerUser", Rate: "5 a minute", Burst: 5}, "field 1: "},
		{"burst 0", redisstore.NumbersRow{Rule: "PerUser", Rate: "5/min"}, "burst 0 admits nothing"},
		{"an unknown rule", redisstore.NumbersRow{Rule: "PerUsr", Rate: "5/min", Burst: 5}, "PerUsr"},
		{"numbers the rule refuses", redisstore.NumbersRow{Rule: "PerUser", Rate: "5/min", Burst: 1 << 62}, "field 1"},
	} {
		err := redisstore.PutNumbers(ctx, c, "", "1", tc.row, lims.CheckNumbers)
		if err == nil || !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal wrapping overlay.ErrInvalid that says %q", tc.name, err, tc.want)
		}
		if n := hlen(); n != 0 {
			t.Fatalf("%s: refused, but the hash has %d fields", tc.name, n)
		}
	}
	// A good row is written; then a bad one beside it is refused for what
	// the whole hash would be.
	if err := redisstore.PutNumbers(ctx, c, "", "1", redisstore.NumbersRow{Rule: "PerUser", Rate: "5/min", Burst: 5}, lims.CheckNumbers); err != nil {
		t.Fatal(err)
	}
	acme := "acme"
	dup := redisstore.NumbersRow{Rule: "PerUser", Rate: "6/min", Burst: 6}
	if err := redisstore.PutNumbers(ctx, c, "", "2", dup, lims.CheckNumbers); err == nil || !strings.Contains(err.Error(), "field 2") {
		t.Errorf("a second row for the same rule and plan: %v, want a refusal naming field 2", err)
	}
	if err := redisstore.PutNumbers(ctx, c, "", "2", redisstore.NumbersRow{Rule: "PerUser", Key: &acme, Rate: "60/min", Burst: 60}, lims.CheckNumbers); err != nil {
		t.Fatal(err)
	}
	// Raw JSON as another writer would put it: without "active" a row is
	// active, with "active": false it is kept and not applied.
	if err := c.HSet(ctx, redisstore.DefaultNumbersHash,
		"3", `{"rule":"PerUser","key":"beta","rate":"7/min","burst":7}`,
		"4", `{"rule":"PerUser","key":"gamma","rate":"8/min","burst":8,"active":false}`).Err(); err != nil {
		t.Fatal(err)
	}
	set, err := redisstore.LoadNumbers(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range set {
		got = append(got, fmt.Sprintf("%s %s %v", e.Pos, e.Key, e.Numbers))
	}
	want := []string{
		"limitgen:numbers field 1  5 per 1m0s, burst 5",
		"limitgen:numbers field 2 acme 60 per 1m0s, burst 60",
		"limitgen:numbers field 3 beta 7 per 1m0s, burst 7",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("loaded %q, want %q", got, want)
	}
	if err := lims.ApplyNumbers(set); err != nil {
		t.Fatal(err)
	}
	if n, o := lims.PerUser.NumbersFor(sharedlimits.PlanFree, "acme"); n.Burst != 60 || o != atomicbucket.FromKeyOverride {
		t.Fatalf("acme: %v %v", n, o)
	}
}

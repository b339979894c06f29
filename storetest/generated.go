package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// GeneratedInstances: two instances of a service generated from
// sharedpolicy.yaml (instance makes one, with its own store client) on one
// server: a shared rule's limit holds across both (together they admit its
// burst, not twice it), a local rule's does not (each admits its own), and a
// service without a store says its shared rules run locally.
func GeneratedInstances(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()

	admitted := 0
	for i := range 30 {
		lim := a
		if i%2 == 1 {
			lim = b
		}
		res := lim.PerUser.AllowN(ctx, sharedlimits.PlanFree, "alice", 1)
		if res.Degraded {
			t.Fatalf("check %d degraded: %v", i, res.Err)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 20 {
		t.Errorf("two instances admitted %d of 30 for alice; the shared burst is 20", admitted)
	}
	if res := b.PerUser.AllowN(ctx, sharedlimits.PlanPro, "alice", 1); !res.Allowed || res.Remaining != 199 {
		t.Errorf("alice on pro has a bucket of her own: %+v", res)
	}
	for i := range 3 {
		if res := a.Exports.AllowN(ctx, 42, 1); !res.Allowed || res.Remaining != int64(2-i) {
			t.Fatalf("export %d: %+v", i, res)
		}
	}
	if res := b.Exports.AllowN(ctx, 42, 1); res.Allowed || res.RetryAfter <= 0 {
		t.Errorf("a fourth export from the other instance: %+v", res)
	}

	local := 0
	for _, lim := range []*sharedlimits.Limits{a, b} {
		for range 10 {
			if lim.PerInstance.Allow("alice") {
				local++
			}
		}
	}
	if local != 10 {
		t.Errorf("a local rule admitted %d over two instances; each has its own burst of 5", local)
	}

	alone := sharedlimits.New()
	if alone.SharedErr() == nil {
		t.Error("without a store, SharedErr is nil")
	}
	if res := alone.PerUser.AllowN(ctx, sharedlimits.PlanFree, "alice", 1); !res.Allowed || res.Remaining != 19 {
		t.Errorf("without a store, AllowN decides locally: %+v", res)
	}
}

// GeneratedCompositeKey: a shared rule keyed by a tenant's user, from two
// instances on one server: a key's burst of 4 holds across both; a key
// differing in either field, or whose tenant holds the form's separator or
// escapes ("acme,7" is not acme's user 7), is a bucket of its own; two
// tenants of 256 bytes (a form longer than a store key, kept under its hash)
// differing in their last byte are two; a key's own numbers (run-time
// numbers, by its text form) apply to it alone.
func GeneratedCompositeKey(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	admitted := func(k sharedlimits.TenantUserKey, n int) int {
		got := 0
		for i := range n {
			lim := a
			if i%2 == 1 {
				lim = b
			}
			res := lim.TenantUser.AllowN(ctx, k, 1)
			if res.Degraded {
				t.Fatalf("%v: degraded: %v", k, res.Err)
			}
			if res.Allowed {
				got++
			}
		}
		return got
	}
	long := strings.Repeat("t", verdict.MaxKeyLen-1)
	for _, k := range []sharedlimits.TenantUserKey{
		{Tenant: "acme", User: 7}, {Tenant: "acme", User: 8}, {Tenant: "globex", User: 7},
		{Tenant: "acme,7", User: 7}, {Tenant: "acme%2C7", User: 7}, {Tenant: "#acme", User: 7},
		{Tenant: long + "a", User: 7}, {Tenant: long + "b", User: 7},
	} {
		if got := admitted(k, 6); got != 4 {
			t.Errorf("%q: %d of 6 admitted across two instances, want its burst, 4", k.String(), got)
		}
	}
	key := "acme,9"
	for _, lim := range []*sharedlimits.Limits{a, b} {
		if err := lim.ApplyNumbers(overlay.Set{overlay.NewEntry("test", "TenantUser", "", &key, "1/min", 2)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := admitted(sharedlimits.TenantUserKey{Tenant: "acme", User: 9}, 6); got != 2 {
		t.Errorf("acme's user 9, given a burst of 2 by run-time numbers: %d of 6 admitted", got)
	}
	if got := admitted(sharedlimits.TenantUserKey{Tenant: "acme", User: 10}, 6); got != 4 {
		t.Errorf("acme's user 10, beside 9's own numbers: %d of 6 admitted, want 4", got)
	}
	bad := "acme"
	if err := a.CheckNumbers(overlay.Set{overlay.NewEntry("test", "TenantUser", "", &bad, "1/min", 2)}); err == nil {
		t.Error("numbers for key \"acme\" (no user) were taken")
	}
}

// GeneratedOneWay: every deciding method of a shared rule goes to the store:
// Allow (the default cost) and AllowN from two instances share one burst,
// Wait waits for the store's bucket (here after the other instance emptied
// it) and gives up at once when the wait would pass ctx's deadline, and the
// process-local limiter, reached only through Local, counts apart from the
// store. Without a store every value, Default and the package-level
// functions included, says so: SharedErr, and the Err of every result.
func GeneratedOneWay(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	admitted := 0
	for i := range 40 {
		lim := a
		if i%2 == 1 {
			lim = b
		}
		if lim.PerUser.Allow(ctx, sharedlimits.PlanFree, "olga") {
			admitted++
		}
	}
	if admitted != 20 {
		t.Errorf("Allow on two instances admitted %d of 40 for olga; the shared burst is 20", admitted)
	}
	if d := a.PerUser.Local().AllowN(sharedlimits.PlanFree, "olga", 1); !d.Allowed || d.Remaining != 19 {
		t.Errorf("the local limiter should count apart from the store: %+v", d)
	}

	// Fast: 10/s, burst 2. a empties the bucket; b's Wait must sleep until the
	// store has a token again (100 ms), not return at once.
	for i := range 2 {
		if res := a.Fast.AllowN(ctx, "pat", 1); !res.Allowed || res.Degraded {
			t.Fatalf("Fast %d: %+v", i, res)
		}
	}
	start := time.Now()
	if err := b.Fast.Wait(ctx, "pat", 1); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("Wait returned after %v for a key the other instance emptied on the store; a token takes 100 ms", waited)
	}
	if res := a.Fast.AllowN(ctx, "pat", 1); res.Allowed {
		t.Errorf("Wait took the token on the store, yet another check was allowed: %+v", res)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start = time.Now()
	if err := b.Fast.Wait(short, "pat", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with 20 ms left for a token 100 ms away: %v, want DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited > 15*time.Millisecond {
		t.Errorf("Wait slept %v before giving up on a wait beyond the deadline", waited)
	}
	if err := b.Fast.Wait(ctx, "pat", 3); !errors.Is(err, atomicbucket.ErrCostExceedsBurst) {
		t.Errorf("Wait for more than the burst: %v", err)
	}

	for name, lim := range map[string]*sharedlimits.Limits{"New()": sharedlimits.New(), "Default": sharedlimits.Default} {
		if err := lim.SharedErr(); !errors.Is(err, shared.ErrNoStore) {
			t.Errorf("%s.SharedErr() = %v, want shared.ErrNoStore", name, err)
		}
		if res := lim.PerUser.AllowN(ctx, sharedlimits.PlanFree, "quinn", 1); !res.Allowed || !errors.Is(res.Err, shared.ErrNoStore) {
			t.Errorf("%s: AllowN without a store: %+v, want allowed locally with Err ErrNoStore", name, res)
		}
		if res := lim.Request(ctx, sharedlimits.PlanFree, "quinn"); !res.Allowed || !errors.Is(res.Err, shared.ErrNoStore) {
			t.Errorf("%s: Request without a store: %+v, want allowed locally with Err ErrNoStore", name, res)
		}
	}
	if res := sharedlimits.Request(ctx, sharedlimits.PlanFree, "rui"); !errors.Is(res.Err, shared.ErrNoStore) {
		t.Errorf("the package-level Request (Default, no store): %+v, want Err ErrNoStore", res)
	}
	if res := sharedlimits.PerUser.AllowN(ctx, sharedlimits.PlanFree, "rui", 1); !errors.Is(res.Err, shared.ErrNoStore) {
		t.Errorf("the package-level PerUser (Default, no store): %+v, want Err ErrNoStore", res)
	}
}

// GeneratedMiddleware: the generated middleware on two instances: a route on
// a shared rule answers 429 once the instances together have used the rule's
// burst.
func GeneratedMiddleware(t *testing.T, instance func() *sharedlimits.Limits) {
	var muxes []http.Handler
	for range 2 {
		mw := middleware(t, instance())
		mux := mw.NewServeMux()
		mux.HandleFunc("GET /hello", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("POST /export/{account}", func(http.ResponseWriter, *http.Request) {})
		muxes = append(muxes, mux)
	}
	codes := map[int]int{}
	for i := range 24 {
		r := httptest.NewRequest("GET", "/hello", nil)
		r.Header.Set("X-User", "bob")
		w := httptest.NewRecorder()
		muxes[i%2].ServeHTTP(w, r)
		codes[w.Code]++
	}
	if codes[200] != 20 || codes[429] != 4 {
		t.Errorf("24 requests over two instances: %v, want 20 admitted and 4 refused", codes)
	}
}

// GeneratedTier: a tier of shared rules across two instances: per-user and
// global buckets on the store, all or nothing; the global burst of 50 holds
// over both instances and every user, and a denial names the rule that
// denied.
func GeneratedTier(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	inst := []*sharedlimits.Limits{instance(), instance()}
	admitted := map[string]int{}
	var lastDenied sharedlimits.RuleName
	n := 0
	for _, u := range []string{"bob", "carol", "dave"} {
		for range 20 {
			res := inst[n%2].Request(ctx, sharedlimits.PlanFree, u)
			n++
			if res.Degraded {
				t.Fatalf("degraded: %v", res.Err)
			}
			if res.Allowed {
				admitted[u]++
			} else {
				lastDenied = res.DeniedBy
			}
		}
	}
	if admitted["bob"] != 20 || admitted["carol"] != 20 || admitted["dave"] != 10 || lastDenied != sharedlimits.RuleGlobal {
		t.Errorf("admitted %v, last denied by %v; want 20, 20 and 10 (the global burst of 50), denied by Global", admitted, lastDenied)
	}
	// dave's per-user bucket gave back what the denied requests took: 10 spent, 10 left.
	if res := inst[1].PerUser.AllowN(ctx, sharedlimits.PlanFree, "dave", 10); !res.Allowed || res.Remaining != 0 {
		t.Errorf("dave's per-user bucket after the global rule denied: %+v", res)
	}
}

// GeneratedLeasedTier: a leased tier across four instances: Downloads
// (burst 30 a user, leases of 8) and DownloadsGlobal (leases of 100).
// Together the instances admit each user's burst and no more, with fewer
// store calls (calls counts them so far) than checks.
func GeneratedLeasedTier(t *testing.T, instance func() *sharedlimits.Limits, calls func() int64) {
	ctx := context.Background()
	var inst []*sharedlimits.Limits
	for range 4 {
		inst = append(inst, instance())
	}
	for _, u := range []string{"erin", "frank"} {
		before := calls()
		admitted := 0
		for i := range 80 {
			res := inst[i%4].Download(ctx, u)
			if res.Degraded {
				t.Fatalf("degraded: %v", res.Err)
			}
			if res.Allowed {
				admitted++
			}
		}
		// 30 a user; a lease holding tokens when another instance asks
		// keeps them, so the four instances together may admit fewer.
		if admitted > 30 || admitted < 20 {
			t.Errorf("%s: four instances admitted %d of 80; the shared burst is 30", u, admitted)
		}
		n := calls() - before
		t.Logf("%s: %d of 80 admitted by four instances, %d store calls", u, admitted, n)
		if n >= 40 {
			t.Errorf("%s: %d store calls for 80 leased checks", u, n)
		}
	}
}

// GeneratedCoalesced: a generated package's checks reach a coalescing
// store's coalescer (instance makes one over such a store): 16 callers, 40
// checks each of one hot key, all admitted, in fewer than half as many round
// trips as checks (statements counts the store's round trips so far).
func GeneratedCoalesced(t *testing.T, instance func() *sharedlimits.Limits, statements func() int64) {
	lims := instance()
	ctx := context.Background()
	before := statements()
	var wg sync.WaitGroup
	var denied atomic.Int64
	const callers, each = 16, 40
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if res := lims.Wide.AllowN(ctx, "hot", 1); !res.Allowed || res.Degraded {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	n := statements() - before
	t.Logf("%d checks through the generated package, %d round trips (%.2f a check)", callers*each, n, float64(n)/(callers*each))
	if denied.Load() > 0 {
		t.Errorf("%d checks denied or degraded; the rule admits them all", denied.Load())
	}
	if n*2 >= callers*each {
		t.Errorf("%d round trips for %d concurrent checks: the generated path does not coalesce", n, callers*each)
	}
}

// GeneratedMiddlewareDegraded: the generated middleware on a store whose
// server stop stops: every observer hears of it. Before the stop, a request
// is counted allowed; after it, the rule's on_failure setting decides and
// Counters count degraded_allowed and degraded_denied (PerUser's local share
// of 0.5 admits 10 of its burst of 20, Exports fails closed), each Event
// names the store error's class, and the denial log says the store failed.
func GeneratedMiddlewareDegraded(t *testing.T, instance func() *sharedlimits.Limits, stop func()) {
	var logged bytes.Buffer
	var mu sync.Mutex
	var events []verdict.Event
	mw := middleware(t, instance())
	denials := verdict.NewDenialLog(slog.New(slog.NewTextHandler(&logged, nil)), 1000)
	mw.Config.Observer = verdict.ObserverFunc(func(e verdict.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		denials.Observe(e)
	})
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var last *httptest.ResponseRecorder
	do := func(method, path string) int {
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("X-User", "uma")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		last = w
		return w.Code
	}
	if code := do("GET", "/hello"); code != 200 {
		t.Fatalf("before the stop: %d", code)
	}
	stop()
	codes := map[int]int{}
	for range 12 {
		codes[do("GET", "/hello")]++
	}
	if codes[200] != 10 || codes[429] != 2 {
		t.Errorf("12 requests with the store stopped: %v, want 10 admitted by the local share and 2 refused", codes)
	}
	if code := do("POST", "/export/7"); code != 503 {
		t.Errorf("an export with the store stopped: %d, want 503 (on_failure: deny: an outage, not a quota)", code)
	} else if ra, body := last.Header().Get("Retry-After"), last.Body.String(); ra == "" || !strings.Contains(body, "#store-unavailable") {
		// The problem type is limithttp.ProblemStoreUnavailable; storetest
		// names it by its fragment so as to import no door of its own.
		t.Errorf("the outage's answer: Retry-After %q, body %s; want a Retry-After and the store-unavailable problem type", ra, body)
	}
	snap := mw.Config.Counters.Snapshot()
	var perUser, exports verdict.Count
	for _, rc := range snap {
		switch {
		case rc.Route == "GET /hello" && rc.Rule == "PerUser":
			perUser = rc
		case rc.Route == "POST /export/{account}" && rc.Rule == "Exports":
			exports = rc
		}
	}
	if o := perUser.Outcomes; o[verdict.Allowed] != 1 || o[verdict.DegradedAllowed] != 10 || o[verdict.DegradedDenied] != 2 || o[verdict.Denied] != 0 {
		t.Errorf("PerUser's counts: %v, want 1 allowed, 10 degraded_allowed, 2 degraded_denied", o)
	}
	if o := exports.Outcomes; o[verdict.DegradedDenied] != 1 || o[verdict.Denied] != 0 {
		t.Errorf("Exports' counts: %v, want 1 degraded_denied", o)
	}
	mu.Lock()
	for i, e := range events {
		if (i == 0) != (e.StoreError == "") {
			t.Errorf("event %d: %+v: want a store error class after the stop, none before", i, e)
		}
	}
	mu.Unlock()
	out := logged.String()
	if !strings.Contains(out, "outcome=degraded_denied") || !strings.Contains(out, "store_error=") || strings.Contains(out, "store_error=\"\"") {
		t.Errorf("the denial log does not say the store failed:\n%s", out)
	}
}

// GeneratedLeasedFields: a client that obeys the RateLimit field of a leased
// tier (Downloads, burst 30 a user, leases of 8; DownloadsGlobal, leases of
// 100) through the generated middleware: while r is above 0 every request is
// admitted, and r reaches 0 only when the user's 30 tokens are spent, with t
// the wait for the next one (a minute's rate). Before, r was the lease's
// local remainder (r=0 on the first response while the shared bucket held
// 29): a client obeying it backed off for nothing.
func GeneratedLeasedFields(t *testing.T, instance func() *sharedlimits.Limits) {
	mw := middleware(t, instance())
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	admitted := 0
	var last string
	for i := range 40 {
		r := httptest.NewRequest("GET", "/download/file", nil)
		r.Header.Set("X-User", "vera")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		last = w.Header().Get("RateLimit")
		rv, tv, ok := rateLimitField(last)
		if !ok {
			t.Fatalf("request %d: RateLimit %q", i, last)
		}
		if w.Code != 200 {
			t.Fatalf("request %d refused (%d) although the previous response said r > 0 (RateLimit %q)", i, w.Code, last)
		}
		admitted++
		if want := int64(30 - admitted); rv != want {
			t.Errorf("request %d: r = %d, want %d (the user's shared tokens left)", i, rv, want)
		}
		if rv == 0 {
			if tv < 55 || tv > 61 {
				t.Errorf("r = 0 with t = %d; the next token is a minute away", tv)
			}
			break
		}
	}
	if admitted != 30 {
		t.Errorf("a client obeying r made %d requests (last RateLimit %q); the user's burst is 30", admitted, last)
	}
}

// rateLimitField reads r and t from a RateLimit field value ("Name";r=9;t=54).
func rateLimitField(v string) (r, t int64, ok bool) {
	var nr, nt bool
	for _, part := range strings.Split(v, ";")[1:] {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		switch k {
		case "r":
			r, nr = n, true
		case "t":
			t, nt = n, true
		}
	}
	return r, t, nr && nt
}

// middleware returns the generated middleware over l: its user is the
// X-User header, every request is on the free plan, and it observes
// nothing.
func middleware(t *testing.T, l *sharedlimits.Limits) *sharedlimits.Middleware {
	mw, err := sharedlimits.NewMiddleware(l, sharedlimits.Hooks{
		UserID: func(r *http.Request) (string, bool) { return r.Header.Get("X-User"), r.Header.Get("X-User") != "" },
		PlanOf: func(r *http.Request) (sharedlimits.Plan, bool) { return sharedlimits.PlanFree, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	mw.Config.Observer = nil
	return mw
}

// Refund: what an allowed check took goes back to the bucket with
// Bound.Refund (a mixed tier's give-back when a local window denies after
// the store allowed), never beyond full. A bucket of burst 5: three taken,
// two given back, then exactly four more; a full bucket given tokens still
// holds its burst and no more.
func Refund(t *testing.T, st shared.Store) {
	ctx := context.Background()
	b, err := st.Bind([]shared.Rule{{Namespace: "refund", Name: "PerKey",
		Limit: atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	step := func(key string, cost int64) verdict.Result {
		t.Helper()
		res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: key, Cost: cost})
		if res.Degraded {
			t.Fatalf("degraded: %v", res.Err)
		}
		return res
	}
	for i := range 3 {
		if !step("k", 1).Allowed {
			t.Fatalf("check %d of a full bucket of 5 denied", i+1)
		}
	}
	if err := b.Refund(ctx, []shared.Step{{Rule: 0, Key: "k", Cost: 2}}); err != nil {
		t.Fatal(err)
	}
	if res := step("k", 4); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("after 3 taken and 2 given back, a cost of 4: %+v; want allowed with 0 left", res.Decision)
	}
	if step("k", 1).Allowed {
		t.Fatal("a bucket of 5 gave a sixth")
	}
	if err := b.Refund(ctx, []shared.Step{{Rule: 0, Key: "full", Cost: 3}}); err != nil {
		t.Fatal(err)
	}
	if step("full", 5).Allowed == false || step("full", 1).Allowed {
		t.Fatal("a refund to a full bucket filled it beyond its burst")
	}
}

// GeneratedMixedTier: a generated tier of local and shared rules (Seat:
// SeatLocal, 3 a user in each instance; SeatShared, 5 a user on the store;
// SeatDay, a local window of 3 an hour) across instances, all or nothing,
// each part at its own key. A request a local rule denies never reaches the
// store; one the store denies gives the local bucket back what it took and
// counts in no local window; each denial names its rule.
func GeneratedMixedTier(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b, c := instance(), instance(), instance()
	run := func(l *sharedlimits.Limits, local, store string, day func(int) string, n int) string {
		t.Helper()
		return outcomes(t, n, func(i int) sharedlimits.TierResult { return l.Seat(ctx, local, store, day(i)) })
	}
	same := func(k string) func(int) string { return func(int) string { return k } }
	// a: the local window (3 an hour) denies the 4th and 5th before anything
	// is taken; the store took 3.
	if got, want := run(a, "ann", "ann", same("ann"), 5), "ok ok ok SeatDay SeatDay"; got != want {
		t.Fatalf("instance a: %s; want %s", got, want)
	}
	// b: the store holds 5 − 3 = 2 for ann: 2 admitted, then the store denies.
	if got, want := run(b, "ann", "ann", same("ann"), 4), "ok ok SeatShared SeatShared"; got != want {
		t.Fatalf("instance b: %s; want %s (the store's 5 less a's 3)", got, want)
	}
	// b's bucket gave back what the store-denied requests took (3 − 2 = 1
	// left), and its window counted only the 2 admitted (3 − 2 = 1 left).
	if !b.SeatLocal.Peek("ann", 1).Allowed || b.SeatLocal.Peek("ann", 2).Allowed {
		t.Errorf("b's SeatLocal after 2 admitted and 2 denied by the store: want exactly 1 left")
	}
	if !b.SeatDay.Peek("ann", 1).Allowed || b.SeatDay.Peek("ann", 2).Allowed {
		t.Errorf("b's SeatDay counted requests the store denied: want exactly 1 of 3 left")
	}
	if a.SeatShared.Allow(ctx, "ann") {
		t.Errorf("the store admitted a sixth for ann")
	}
	// c: a fresh window key each time, so the local bucket (3) denies the 4th
	// and 5th: they take nothing from the store, which holds 5 − 3 = 2.
	fresh := func(i int) string { return fmt.Sprint("cy-day-", i) }
	if got, want := run(c, "cy", "cy-store", fresh, 5), "ok ok ok SeatLocal SeatLocal"; got != want {
		t.Fatalf("instance c: %s; want %s", got, want)
	}
	if res := c.SeatShared.AllowN(ctx, "cy-store", 2); !res.Allowed || res.Remaining != 0 {
		t.Errorf("the store after 3 admitted and 2 denied by the local bucket: %+v; want exactly 2 left", res)
	}
	if c.SeatShared.Allow(ctx, "cy-store") {
		t.Errorf("the store admitted beyond its burst of 5")
	}
}

// GeneratedMeteredTier: a generated tier of a bucket and a window on the store
// (Metered: MeterShared, 5 a user; MeterWindow, 3 an hour a user) across two
// instances, all or nothing: the buckets are asked first, then the window;
// a request the window denies gives the bucket back what it took, and one
// the bucket denies is never counted by the window.
func GeneratedMeteredTier(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	run := func(l *sharedlimits.Limits, bucket string, window func(int) string, n int) string {
		t.Helper()
		return outcomes(t, n, func(i int) sharedlimits.TierResult { return l.Metered(ctx, bucket, window(i)) })
	}
	same := func(k string) func(int) string { return func(int) string { return k } }
	if got, want := run(a, "mo", same("mo"), 4), "ok ok ok MeterWindow"; got != want {
		t.Fatalf("instance a: %s; want %s", got, want)
	}
	if got, want := run(b, "mo", same("mo"), 1), "MeterWindow"; got != want {
		t.Fatalf("instance b: %s; want %s (the window holds 3 across instances)", got, want)
	}
	// The bucket gave back what the two window denials took: 5 − 3 = 2.
	if res := a.MeterShared.AllowN(ctx, "mo", 2); !res.Allowed || res.Remaining != 0 {
		t.Errorf("MeterShared after 3 admitted and 2 denied by the window: %+v; want exactly 2 left", res)
	}
	// A bucket denial counts in no window: "nb" admits 5 (fresh windows), the
	// sixth is denied by the bucket, and its window "wz" is untouched.
	fresh := func(i int) string {
		if i == 5 {
			return "wz"
		}
		return fmt.Sprint("w-", i)
	}
	if got, want := run(b, "nb", fresh, 6), "ok ok ok ok ok MeterShared"; got != want {
		t.Fatalf("instance b, bucket nb: %s; want %s", got, want)
	}
	if res := a.MeterWindow.AllowN(ctx, "wz", 3); !res.Allowed || res.Remaining != 0 {
		t.Errorf("the window of a request the bucket denied: %+v; want its whole 3", res)
	}
}

// outcomes runs n tier checks and lists their outcomes: ok, or the rule that
// denied. A degraded check fails the test.
func outcomes(t *testing.T, n int, check func(i int) sharedlimits.TierResult) string {
	t.Helper()
	var out []string
	for i := range n {
		res := check(i)
		if res.Degraded || res.Err != nil {
			t.Fatalf("check %d degraded: %v", i, res.Err)
		}
		if res.Allowed {
			out = append(out, "ok")
		} else {
			out = append(out, res.DeniedBy.String())
		}
	}
	return strings.Join(out, " ")
}

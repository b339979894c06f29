package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/storetest"
	"github.com/redis/go-redis/v9"
)

// openWindow is storetest.OpenWindow on client: a Window deciding at at's
// time (the script's test variant) or, with at nil, on Redis's clock,
// coalescing at most coalesce checks a call.
func openWindow(c redis.UniversalClient, coalesce int) storetest.OpenWindow {
	return func(t *testing.T, name string, rule atomicwindow.Rule, at func() time.Time) storetest.WindowCheck {
		w, err := newWindow(c, name+"-c"+strconv.Itoa(coalesce), rule, WindowOptions{Coalesce: coalesce}, at != nil)
		if err != nil {
			t.Fatal(err)
		}
		w.now = at
		t.Cleanup(w.Close)
		return w.AllowN
	}
}

// openSettleWindow is openWindow giving the window as a settlement meets
// it.
func openSettleWindow(c redis.UniversalClient, coalesce int) storetest.OpenSettleWindow {
	return func(t *testing.T, name string, rule atomicwindow.Rule, at func() time.Time) storetest.SettleWindow {
		w, err := newWindow(c, name+"-c"+strconv.Itoa(coalesce), rule, WindowOptions{Coalesce: coalesce}, at != nil)
		if err != nil {
			t.Fatal(err)
		}
		w.now = at
		t.Cleanup(w.Close)
		return w
	}
}

// The store's windows against the reference, at their edges, and with 64
// callers on two keys, one call a check and coalesced (storetest).
func TestWindowContract(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	t.Run("MatchesReference", func(t *testing.T) { storetest.WindowMatchesReference(t, openWindow(c, 0), 24, 300, 30) })
	for _, co := range []int{0, 8} {
		t.Run(fmt.Sprintf("SettleMatchesReference/coalesce=%d", co), func(t *testing.T) {
			settled, back := storetest.WindowSettleMatchesReference(t, openSettleWindow(c, co), 24, 200, 31)
			if back < settled/4 {
				t.Fatalf("%d settlements, %d gave back: the draw misses give-backs", settled, back)
			}
			t.Logf("%d settlements (%d gave back) equal to the reference", settled, back)
		})
	}
	t.Run("Edges", func(t *testing.T) { storetest.WindowEdges(t, openWindow(c, 0)) })
	t.Run("Versions", func(t *testing.T) { storetest.WindowVersions(t, openWindow(c, 0)) })
	t.Run("ExactlyN", func(t *testing.T) { storetest.WindowExactlyN(t, openWindow(c, 0), 64, 50, 1000) })
	t.Run("ExactlyNCoalesced", func(t *testing.T) { storetest.WindowExactlyN(t, openWindow(c, 64), 64, 50, 1000) })
}

// TestWindowRedisDown: a window whose Redis is gone answers an error within
// its timeout, and a denial; a key longer than shared.MaxKeyLen is refused
// before any call.
func TestWindowRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	w, err := NewWindow(c, "down", atomicwindow.MustRule(10, time.Minute), WindowOptions{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := w.AllowN(context.Background(), "k", 1); err != nil || !d.Allowed {
		t.Fatalf("before: %+v %v", d, err)
	}
	if _, err := w.AllowN(context.Background(), strings.Repeat("k", 1000), 1); err == nil {
		t.Error("a 1000-byte key: no error")
	}
	srv.Stop()
	start := time.Now()
	d, err := w.AllowN(context.Background(), "k", 1)
	if err == nil || d.Allowed {
		t.Fatalf("Redis stopped: %+v %v, want a denial with an error", d, err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("the error took %v", el)
	}
}

// TestWindowBatchesMatchReference: coalesced batches (runs of one key and
// cost decided at once, other keys between them) at explicit times decide
// as the reference does one check after another.
func TestWindowBatchesMatchReference(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(31, 9))
	for run := range 12 {
		limit := 1 + rng.Int64N(20)
		window := time.Duration(1+rng.Int64N(50)) * 100 * time.Millisecond
		if run%2 == 1 {
			limit, window = 65+rng.Int64N(100), time.Duration(1+rng.Int64N(20))*40*time.Millisecond
		}
		rule := atomicwindow.MustRule(limit, window)
		w, err := newWindow(c, "b"+strconv.Itoa(run), rule, WindowOptions{}, true)
		if err != nil {
			t.Fatal(err)
		}
		ref := reference.NewWindow(reference.WindowParams{Limit: limit, Window: int64(window), Grain: int64(rule.Grain())})
		now := time.Unix(1_800_000_000, 0)
		w.now = func() time.Time { return now }
		runs := 0
		for step := range 60 {
			now = now.Add(time.Duration(rng.Int64N(int64(window)/4+1)) / time.Microsecond * time.Microsecond)
			var checks []windowCheck
			for range 1 + rng.IntN(24) {
				if len(checks) > 0 && rng.IntN(3) > 0 {
					checks = append(checks, checks[len(checks)-1]) // a run
					continue
				}
				checks = append(checks, windowCheck{key: []string{"a", "b"}[rng.IntN(2)], cost: []int64{0, 1, 1, 2, limit / 2, limit + 1, -1}[rng.IntN(7)]})
			}
			for i := 1; i < len(checks); i++ {
				if checks[i] == checks[i-1] {
					runs++
				}
			}
			ds, err := w.decide(ctx, checks)
			if err != nil {
				t.Fatal(err)
			}
			for i, ch := range checks {
				if want := ref.AllowN(ch.key, now.UnixNano(), ch.cost); ds[i] != want {
					t.Fatalf("run %d (%d in %v) step %d, check %d (%s, cost %d): %+v, reference %+v", run, limit, window, step, i, ch.key, ch.cost, ds[i], want)
				}
			}
		}
		if runs == 0 {
			t.Fatal("no batch had a run")
		}
	}
}

// TestSharedWindowOnStore: a window bound to a Store (shared.BindWindow, as
// a generated package binds its shared window rules) with Redis down at
// start: each failure setting decides meanwhile (FailDeny: an outage;
// FailAllow: admitted; FailLocal: a window of the share, 2 of 5), degraded
// and with the error; the breaker then answers without waiting for Redis;
// once Redis is up the store decides, and its window is the one other
// instances share.
func TestSharedWindowOnStore(t *testing.T) {
	srv := redistest.Prepare(t) // not started: down at start
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	st, err := New(ctx, c, Options{Namespace: "test", Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rule := atomicwindow.MustRule(5, time.Hour)
	bind := func(name string, f shared.Failure) *shared.Window {
		w, err := shared.BindWindow(st, "policy", name, rule, f)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	deny, allow, local := bind("deny", shared.Failure{}), bind("allow", shared.Failure{Mode: shared.FailAllow}), bind("local", shared.Failure{Mode: shared.FailLocal, Share: 0.5})
	if r := deny.AllowN(ctx, "k", 1); r.Allowed || !r.Degraded || !r.Outage || r.Err == nil || r.RetryAfter != time.Second {
		t.Errorf("FailDeny, Redis down: %+v", r)
	}
	if r := allow.AllowN(ctx, "k", 1); !r.Allowed || !r.Degraded || r.Outage || r.Err == nil {
		t.Errorf("FailAllow, Redis down: %+v", r)
	}
	for i, want := range []bool{true, true, false} { // the share: ⌊5 · 0.5⌋ = 2
		if r := local.AllowN(ctx, "k", 1); r.Allowed != want || !r.Degraded || r.Outage || r.Err == nil {
			t.Errorf("FailLocal, Redis down, check %d: %+v, want allowed %v", i, r, want)
		}
	}
	for range shared.BreakerFailures {
		deny.AllowN(ctx, "k", 1)
	}
	start := time.Now()
	if r := deny.AllowN(ctx, "k", 1); !errors.Is(r.Err, shared.ErrCircuitOpen) || time.Since(start) > 50*time.Millisecond {
		t.Errorf("the breaker open: %+v after %v", r, time.Since(start))
	}
	if deny.Health() == nil {
		t.Error("Health is nil with the breaker open")
	}
	srv.Restart(t)
	time.Sleep(shared.BreakerMaxPause + 100*time.Millisecond)
	other, err := shared.BindWindow(st, "policy", "deny", rule, shared.Failure{}) // another instance's binding
	if err != nil {
		t.Fatal(err)
	}
	var admitted int
	for i := range 8 {
		w := deny
		if i%2 == 1 {
			w = other
		}
		r := w.AllowN(ctx, "k", 1)
		if r.Err != nil && !errors.Is(r.Err, shared.ErrCircuitOpen) {
			t.Fatalf("check %d, Redis up: %+v", i, r)
		}
		if r.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("two bindings of one window on Redis admitted %d of 8, want 5", admitted)
	}
	if deny.Health() != nil {
		t.Errorf("Health with Redis up: %v", deny.Health())
	}
}

// TestWindowOnCluster: a store over a 3-master Cluster, coalescing, keeps
// window rules: keys in every slot (a batch would span slots, so its
// windows do not coalesce), each holding exactly its limit.
func TestWindowOnCluster(t *testing.T) {
	_, _, st := clusterStore(t, 0, 64)
	ctx := context.Background()
	w, err := shared.BindWindow(st, "policy", "Quota", atomicwindow.MustRule(3, time.Hour), shared.Failure{})
	if err != nil {
		t.Fatal(err)
	}
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
	var wg sync.WaitGroup
	var admitted [8]atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				for i, u := range users {
					res := w.AllowN(ctx, u, 1)
					if res.Err != nil {
						t.Error(res.Err)
						return
					}
					if res.Allowed {
						admitted[i].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	for i, u := range users {
		if got := admitted[i].Load(); got != 3 {
			t.Errorf("%s: %d admitted of 12, want 3", u, got)
		}
	}
}

// openLeasedWindow is storetest.OpenLeasedWindow on client.
func openLeasedWindow(c redis.UniversalClient) storetest.OpenLeasedWindow {
	return func(t *testing.T, name string, rule atomicwindow.Rule, at func() time.Time) (storetest.WindowCheck, storetest.WindowLease) {
		w, err := newWindow(c, name, rule, WindowOptions{}, at != nil)
		if err != nil {
			t.Fatal(err)
		}
		w.now = at
		t.Cleanup(w.Close)
		return w.AllowN, w.Lease
	}
}

// TestWindowLease: the store's window leases never let a key's window hold
// more than its limit, whatever lessees and checks do, and settle as they
// say (storetest).
func TestWindowLease(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	t.Run("Envelope", func(t *testing.T) {
		total, leased := storetest.WindowLeaseEnvelope(t, openLeasedWindow(c), 40, 5)
		t.Logf("%d units admitted, %d of them from leases", total, leased)
	})
	t.Run("Settles", func(t *testing.T) { storetest.WindowLeaseSettles(t, openLeasedWindow(c)) })
	t.Run("Throughput", func(t *testing.T) {
		exact, counted := storetest.WindowLeaseThroughput(t, openLeasedWindow(c))
		t.Logf("kept full by a lease: %.1f%% of the limit a window, exact (4 s); %.1f%%, counted (an hour)", 100*exact, 100*counted)
	})
}

// TestWindowValueKeepsItsHeader: a window's value is "W,L|" and its pairs,
// then "#G", its slots' generation, so that the script of an earlier
// version (which reads "W,L|" and every "slot:count" after it) still reads
// its numbers and pairs during a rolling upgrade; a lease's generation is
// the one in the value.
func TestWindowValueKeepsItsHeader(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	w, err := NewWindow(c, "header", atomicwindow.MustRule(10, time.Hour), WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if d, err := w.AllowN(ctx, "k", 2); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	g, err := w.Lease(ctx, "k", 1, 4, shared.Settlement{})
	if err != nil || !g.Allowed {
		t.Fatalf("%+v %v", g, err)
	}
	v, err := c.Get(ctx, "limitgen:window:header:k").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^3600000000,0\|\d+:2,\d+:\d+#(\d+)$`).FindStringSubmatch(v)
	if m == nil || m[1] != strconv.FormatInt(g.Gen, 10) {
		t.Fatalf("the value %q: want W,L|, two pairs, and #%d", v, g.Gen)
	}
}

package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// TestWindowMatchesReference holds the store's window, exact and counted,
// to the sliding-log reference at its grain, decision by decision, at
// explicit microsecond times (Unix time: the counted window's sub-windows
// fall where Redis's clock puts them): random keys, costs (0, in range,
// above the limit, negative) and steps, one script call a check and
// coalesced batches of every check of a step; and every admission stream
// holds at most the limit in any window.
func TestWindowMatchesReference(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(30, 7))
	for run := range 24 {
		limit := 1 + rng.Int64N(64)
		window := time.Duration(1+rng.Int64N(5000)) * time.Millisecond
		if run%2 == 1 { // counted: sub-windows of whole microseconds
			limit = 65 + rng.Int64N(300)
			window = time.Duration(1+rng.Int64N(2000)) * 40 * time.Millisecond
		}
		rule := atomicbucket.MustWindowRule(limit, window)
		w, err := newWindow(c, "w"+strconv.Itoa(run), rule, WindowOptions{}, true)
		if err != nil {
			t.Fatal(err)
		}
		ref := reference.NewWindow(reference.WindowParams{Limit: limit, Window: int64(window), Grain: int64(rule.Grain())})
		now := time.Unix(1_800_000_000, 0)
		w.now = func() time.Time { return now }
		var adm []reference.Admission
		keys := []string{"a", "b", "c"}
		for step := range 300 {
			now = now.Add(time.Duration(rng.Int64N(int64(window)/limit*2+1)) / time.Microsecond * time.Microsecond)
			key := keys[rng.IntN(len(keys))]
			cost := []int64{0, 1, 1, 1, 2, limit / 3, limit, limit + 1, -1}[rng.IntN(9)]
			got, err := w.AllowN(ctx, key, cost)
			if err != nil {
				t.Fatal(err)
			}
			want := ref.AllowN(key, now.UnixNano(), cost)
			if got != want {
				t.Fatalf("run %d (%d in %v, exact %v) step %d, %s cost %d: %+v, reference %+v", run, limit, window, rule.Exact(), step, key, cost, got, want)
			}
			if got.Allowed && cost > 0 {
				adm = append(adm, reference.Admission{Key: key, At: now.UnixNano(), Cost: cost})
			}
		}
		if err := reference.CheckWindow(limit, int64(window), adm); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
}

// TestWindowConcurrentExactlyN: 64 callers on two keys of an hour's window,
// on Redis's own clock, one call a check and coalesced (each batch one
// call): each key admits exactly its limit, no more and no less, and what a
// caller was told adds up (the admitted costs' sum).
func TestWindowConcurrentExactlyN(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	for _, coalesce := range []int{0, 64} {
		for _, limit := range []int64{50, 1000} {
			rule := atomicbucket.MustWindowRule(limit, time.Hour)
			w, err := NewWindow(c, "hot"+strconv.Itoa(coalesce)+"-"+strconv.FormatInt(limit, 10), rule, WindowOptions{Coalesce: coalesce})
			if err != nil {
				t.Fatal(err)
			}
			var admitted [2]atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 3 * int(limit) / 32 {
						key := []string{"x", "y"}[(g+i)%2]
						cost := int64(1 + (g+i)%3)
						d, err := w.AllowN(ctx, key, cost)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted[(g+i)%2].Add(cost)
						}
					}
				}()
			}
			wg.Wait()
			w.Close()
			for k := range admitted {
				// Each key gets ≥ 3·limit of demand; small costs fill it to
				// the last unit or within a cost of it.
				if got := admitted[k].Load(); got > limit || got < limit-2 {
					t.Errorf("coalesce %d, limit %d, key %d: %d admitted, want %d (at most, and no less than %d)", coalesce, limit, k, got, limit, limit-2)
				}
			}
		}
	}
}

// TestWindowRedisDown: a window whose Redis is gone answers an error within
// its timeout, and a denial; a key longer than shared.MaxKeyLen is refused
// before any call.
func TestWindowRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	w, err := NewWindow(c, "down", atomicbucket.MustWindowRule(10, time.Minute), WindowOptions{Timeout: 200 * time.Millisecond})
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

// TestWindowEdge is pgstore's by-hand edge check on the Redis window.
func TestWindowEdge(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	base := time.Unix(1_800_000_000, 0)
	var now time.Time
	for _, tc := range []struct {
		name  string
		rule  atomicbucket.WindowRule
		after []time.Duration
		cost  []int64
		want  []atomicbucket.Decision
	}{
		{"exact", atomicbucket.MustWindowRule(1, time.Second),
			[]time.Duration{0, time.Second, time.Second + time.Microsecond, time.Second + time.Microsecond},
			[]int64{1, 1, 1, 2},
			[]atomicbucket.Decision{{Allowed: true, Reset: time.Second + 999}, {RetryAfter: 999, Reset: 999},
				{Allowed: true, Reset: time.Second + 999}, {RetryAfter: atomicbucket.Never, Reset: time.Second + 999}}},
		{"counted", atomicbucket.MustWindowRule(65, 16*time.Second),
			[]time.Duration{500 * time.Millisecond, 17*time.Second - time.Microsecond, 17 * time.Second},
			[]int64{65, 1, 64},
			[]atomicbucket.Decision{{Allowed: true, Reset: 16*time.Second + 500*time.Millisecond - 1},
				{RetryAfter: time.Microsecond - 1, Reset: time.Microsecond - 1}, {Allowed: true, Remaining: 1, Reset: 17*time.Second - 1}}},
	} {
		w, err := newWindow(c, "edge-"+tc.name, tc.rule, WindowOptions{}, true)
		if err != nil {
			t.Fatal(err)
		}
		w.now = func() time.Time { return now }
		for i := range tc.after {
			now = base.Add(tc.after[i])
			got, err := w.AllowN(context.Background(), "k", tc.cost[i])
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want[i] {
				t.Errorf("%s step %d: %+v, want %+v", tc.name, i, got, tc.want[i])
			}
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
	rule := atomicbucket.MustWindowRule(5, time.Hour)
	bind := func(name string, f shared.Failure) *shared.SharedWindow {
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
	w, err := shared.BindWindow(st, "policy", "Quota", atomicbucket.MustWindowRule(3, time.Hour), shared.Failure{})
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
		rule := atomicbucket.MustWindowRule(limit, window)
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
				checks = append(checks, windowCheck{[]string{"a", "b"}[rng.IntN(2)], []int64{0, 1, 1, 2, limit / 2, limit + 1, -1}[rng.IntN(7)]})
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

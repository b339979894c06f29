package pgstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/pgstore/pgtest"
)

// TestWindowMatchesReference holds the store's window, exact and counted,
// to the sliding-log reference at its grain, decision by decision, at
// explicit microsecond times (Unix time, where the counted window's
// sub-windows fall on the server's clock): random keys, costs (0, in range,
// above the limit, negative) and steps; every admission stream holds at
// most the limit in any window; and a sweep deletes only empty windows.
func TestWindowMatchesReference(t *testing.T) {
	srv := pgtest.Start(t)
	pool := srv.Pool(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(30, 8))
	for run := range 12 {
		limit := 1 + rng.Int64N(64)
		window := time.Duration(1+rng.Int64N(5000)) * time.Millisecond
		if run%2 == 1 {
			limit = 65 + rng.Int64N(300)
			window = time.Duration(1+rng.Int64N(2000)) * 40 * time.Millisecond
		}
		rule := atomicbucket.MustWindowRule(limit, window)
		w, err := NewWindow(ctx, pool, "w"+strconv.Itoa(run), rule, WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ref := reference.NewWindow(reference.WindowParams{Limit: limit, Window: int64(window), Grain: int64(rule.Grain())})
		now := time.Unix(1_800_000_000, 0)
		w.at = func() time.Time { return now }
		var adm []reference.Admission
		keys := []string{"a", "b", "c"}
		for step := range 200 {
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

// TestWindowConcurrentExactlyN: 16 callers on two keys of an hour's window,
// on the server's clock: each key admits exactly its limit (within a cost
// of it), never more; then a sweep deletes nothing (the windows are full)
// and, for a window already empty, its row.
func TestWindowConcurrentExactlyN(t *testing.T) {
	srv := pgtest.Start(t)
	pool := srv.Pool(t)
	ctx := context.Background()
	for _, limit := range []int64{50, 500} {
		w, err := NewWindow(ctx, pool, "hot"+strconv.FormatInt(limit, 10), atomicbucket.MustWindowRule(limit, time.Hour), WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var admitted [2]atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 3 * int(limit) / 8 {
					k := (g + i) % 2
					cost := int64(1 + (g+i)%3)
					d, err := w.AllowN(ctx, []string{"x", "y"}[k], cost)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted[k].Add(cost)
					}
				}
			}()
		}
		wg.Wait()
		for k := range admitted {
			if got := admitted[k].Load(); got > limit || got < limit-2 {
				t.Errorf("limit %d, key %d: %d admitted, want %d (at most, and no less than %d)", limit, k, got, limit, limit-2)
			}
		}
		if n, err := w.Sweep(ctx); err != nil || n != 0 {
			t.Errorf("a sweep of full windows deleted %d rows (%v)", n, err)
		}
	}
	w, err := NewWindow(ctx, pool, "short", atomicbucket.MustWindowRule(5, 10*time.Millisecond), WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := w.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	time.Sleep(atomicbucket.SweepGrace + 50*time.Millisecond)
	if n, err := w.Sweep(ctx); err != nil || n != 1 {
		t.Errorf("a sweep after the window emptied deleted %d rows (%v), want 1", n, err)
	}
}

// TestWindowEdge, by hand: 1 in any second, exact, and 65 in any 16 s,
// counted (sub-windows of a second): an admission counts through the last
// nanosecond of its microsecond (its sub-window) plus the window.
func TestWindowEdge(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	windowEdge(t, func(name string, rule atomicbucket.WindowRule, at func() time.Time) func(string, int64) (atomicbucket.Decision, error) {
		w, err := NewWindow(ctx, srv.Pool(t), name, rule, WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.at = at
		return func(key string, cost int64) (atomicbucket.Decision, error) { return w.AllowN(ctx, key, cost) }
	})
}

// windowEdge checks a store's window at its edges, by hand.
func windowEdge(t *testing.T, make func(string, atomicbucket.WindowRule, func() time.Time) func(string, int64) (atomicbucket.Decision, error)) {
	base := time.Unix(1_800_000_000, 0) // a whole second: a sub-window's start
	var now time.Time
	at := func() time.Time { return now }
	for _, c := range []struct {
		name  string
		rule  atomicbucket.WindowRule
		steps []struct {
			after time.Duration
			cost  int64
			want  atomicbucket.Decision
		}
	}{
		{"exact", atomicbucket.MustWindowRule(1, time.Second), []struct {
			after time.Duration
			cost  int64
			want  atomicbucket.Decision
		}{
			{0, 1, atomicbucket.Decision{Allowed: true, Reset: time.Second + 999}},
			{time.Second, 1, atomicbucket.Decision{RetryAfter: 999, Reset: 999}},
			{time.Second + time.Microsecond, 1, atomicbucket.Decision{Allowed: true, Reset: time.Second + 999}},
			{time.Second + time.Microsecond, 2, atomicbucket.Decision{RetryAfter: atomicbucket.Never, Reset: time.Second + 999}},
		}},
		{"counted", atomicbucket.MustWindowRule(65, 16*time.Second), []struct {
			after time.Duration
			cost  int64
			want  atomicbucket.Decision
		}{
			{500 * time.Millisecond, 65, atomicbucket.Decision{Allowed: true, Reset: 16*time.Second + 500*time.Millisecond - 1}},
			{17*time.Second - time.Microsecond, 1, atomicbucket.Decision{RetryAfter: time.Microsecond - 1, Reset: time.Microsecond - 1}},
			{17 * time.Second, 64, atomicbucket.Decision{Allowed: true, Remaining: 1, Reset: 16*time.Second + time.Second - 1}},
		}},
	} {
		check := make("edge-"+c.name, c.rule, at)
		for i, s := range c.steps {
			now = base.Add(s.after)
			got, err := check("k", s.cost)
			if err != nil {
				t.Fatal(err)
			}
			if got != s.want {
				t.Errorf("%s step %d (+%v, cost %d): %+v, want %+v", c.name, i, s.after, s.cost, got, s.want)
			}
		}
	}
}

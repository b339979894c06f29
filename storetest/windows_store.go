package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/shared"
)

// WindowCheck is one check of a store's window rule: redisstore.Window's or
// pgstore.Window's AllowN.
type WindowCheck func(ctx context.Context, key string, cost int64) (atomicbucket.Decision, error)

// OpenWindow makes a store's window rule named name with rule's numbers,
// deciding at the time at gives (nil: the server's clock).
type OpenWindow func(t *testing.T, name string, rule atomicwindow.Rule, at func() time.Time) WindowCheck

// WindowMatchesReference holds a store's window rules, exact and counted,
// to the sliding-log reference at its grain, decision by decision, at
// explicit microsecond times (Unix time: the counted window's sub-windows
// fall where the server's clock puts them): random keys, costs (0, in range,
// above the limit, negative) and steps; every admission stream holds at
// most the limit in any window.
func WindowMatchesReference(t *testing.T, open OpenWindow, runs, steps int, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	for run := range runs {
		limit := 1 + rng.Int64N(64)
		window := time.Duration(1+rng.Int64N(5000)) * time.Millisecond
		if run%2 == 1 { // counted: sub-windows of whole microseconds
			limit = 65 + rng.Int64N(300)
			window = time.Duration(1+rng.Int64N(2000)) * 40 * time.Millisecond
		}
		rule := atomicwindow.MustRule(limit, window)
		now := time.Unix(1_800_000_000, 0)
		check := open(t, "w"+strconv.Itoa(run), rule, func() time.Time { return now })
		ref := reference.NewWindow(reference.WindowParams{Limit: limit, Window: int64(window), Grain: int64(rule.Grain())})
		var adm []reference.Admission
		keys := []string{"a", "b", "c"}
		for step := range steps {
			now = now.Add(time.Duration(rng.Int64N(int64(window)/limit*2+1)) / time.Microsecond * time.Microsecond)
			key := keys[rng.IntN(len(keys))]
			cost := []int64{0, 1, 1, 1, 2, limit / 3, limit, limit + 1, -1}[rng.IntN(9)]
			got, err := check(ctx, key, cost)
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

// WindowEdges, by hand: 1 in any second, exact, and 65 in any 16 s,
// counted (sub-windows of a second): an admission counts through the last
// nanosecond of its microsecond (its sub-window) plus the window.
func WindowEdges(t *testing.T, open OpenWindow) {
	base := time.Unix(1_800_000_000, 0) // a whole second: a sub-window's start
	var now time.Time
	type step struct {
		after time.Duration
		cost  int64
		want  atomicbucket.Decision
	}
	for _, c := range []struct {
		name  string
		rule  atomicwindow.Rule
		steps []step
	}{
		{"exact", atomicwindow.MustRule(1, time.Second), []step{
			{0, 1, atomicbucket.Decision{Allowed: true, Reset: time.Second + 999}},
			{time.Second, 1, atomicbucket.Decision{RetryAfter: 999, Reset: 999}},
			{time.Second + time.Microsecond, 1, atomicbucket.Decision{Allowed: true, Reset: time.Second + 999}},
			{time.Second + time.Microsecond, 2, atomicbucket.Decision{RetryAfter: atomicbucket.Never, Reset: time.Second + 999}},
		}},
		{"counted", atomicwindow.MustRule(65, 16*time.Second), []step{
			{500 * time.Millisecond, 65, atomicbucket.Decision{Allowed: true, Reset: 16*time.Second + 500*time.Millisecond - 1}},
			{17*time.Second - time.Microsecond, 1, atomicbucket.Decision{RetryAfter: time.Microsecond - 1, Reset: time.Microsecond - 1}},
			{17 * time.Second, 64, atomicbucket.Decision{Allowed: true, Remaining: 1, Reset: 17*time.Second - 1}},
		}},
	} {
		check := open(t, "edge-"+c.name, c.rule, func() time.Time { return now })
		for i, s := range c.steps {
			now = base.Add(s.after)
			got, err := check(context.Background(), "k", s.cost)
			if err != nil {
				t.Fatal(err)
			}
			if got != s.want {
				t.Errorf("%s step %d (+%v, cost %d): %+v, want %+v", c.name, i, s.after, s.cost, got, s.want)
			}
		}
	}
}

// WindowExactlyN: callers on two keys of an hour's window, on the server's
// clock: each key admits exactly its limit (within a cost of it: costs are
// 1 to 3), never more.
func WindowExactlyN(t *testing.T, open OpenWindow, callers int, limits ...int64) {
	ctx := context.Background()
	for _, limit := range limits {
		check := open(t, "hot"+strconv.FormatInt(limit, 10), atomicwindow.MustRule(limit, time.Hour), nil)
		var admitted [2]atomic.Int64
		var wg sync.WaitGroup
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 6 * int(limit) / callers {
					k := (g + i) % 2
					cost := int64(1 + (g+i)%3)
					d, err := check(ctx, []string{"x", "y"}[k], cost)
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
	}
}

// WindowVersions: two versions of one window rule side by side, as in a
// rolling deploy (the same name, other numbers: exact 40 in 2 s and counted
// 100 in 1.6 s, then exact 10 in 400 ms), checking alternately at explicit
// microsecond times: each carries what the other wrote into its own form,
// so in any interval of the shorter window at most the larger limit is
// admitted, and neither version forgets what the other admitted (a version
// that read the other's slots as its own would).
func WindowVersions(t *testing.T, open OpenWindow) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(30, 40))
	for i, pair := range [][2]atomicwindow.Rule{
		{atomicwindow.MustRule(40, 2*time.Second), atomicwindow.MustRule(100, 1600*time.Millisecond)},
		{atomicwindow.MustRule(100, 1600*time.Millisecond), atomicwindow.MustRule(10, 400*time.Millisecond)},
	} {
		now := time.Unix(1_800_000_000, 0)
		at := func() time.Time { return now }
		name := "versions" + strconv.Itoa(i)
		a, b := open(t, name, pair[0], at), open(t, name, pair[1], at)
		limit := max(pair[0].Limit(), pair[1].Limit())
		window := min(pair[0].Window(), pair[1].Window())
		var adm []reference.Admission
		admitted := [2]int64{}
		for step := range 3000 {
			now = now.Add(time.Duration(rng.Int64N(int64(2*time.Millisecond))) / time.Microsecond * time.Microsecond)
			v := step % 2
			cost := 1 + rng.Int64N(3)
			d, err := []WindowCheck{a, b}[v](ctx, "k", cost)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted[v] += cost
				adm = append(adm, reference.Admission{Key: "k", At: now.UnixNano(), Cost: cost})
			}
		}
		if err := reference.CheckWindow(limit, int64(window), adm); err != nil {
			t.Fatalf("versions %v and %v: %v", pair[0].Window(), pair[1].Window(), err)
		}
		if admitted[0] == 0 || admitted[1] == 0 {
			t.Fatalf("versions %v and %v: admitted %v: one version never admitted", pair[0].Window(), pair[1].Window(), admitted)
		}
	}
}

// WindowNumbersChange: a shared window's numbers changed at run time
// (shared.Window.SetNumbers, as an overlay does): what each key's window
// holds is carried into the new numbers on the store, never reset. A window
// of 5 an hour holding 4: cut to 3, nothing more is admitted; raised to 8,
// exactly 4 more; cleared (5 again), nothing while it holds 8. A counted
// window (100 in 16 minutes) raised to 200 admits the other 100 and no more.
// Numbers a window cannot take are refused, changing nothing.
func WindowNumbersChange(t *testing.T, st shared.Store) {
	ctx := context.Background()
	bind := func(name string, limit int64, window time.Duration) *shared.Window {
		r, err := atomicwindow.NewRule(limit, window)
		if err != nil {
			t.Fatal(err)
		}
		w, err := shared.BindWindow(st, "numbers", name, r, shared.Failure{Mode: shared.FailDeny})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	admit := func(w *shared.Window, key string, n int) int {
		t.Helper()
		got := 0
		for range n {
			res := w.AllowN(ctx, key, 1)
			if res.Degraded {
				t.Fatalf("degraded: %v", res.Err)
			}
			if res.Allowed {
				got++
			}
		}
		return got
	}
	set := func(w *shared.Window, limit int64, window time.Duration) {
		t.Helper()
		if err := w.SetNumbers(atomicbucket.Numbers{Tokens: limit, Period: window, Burst: limit}, 1); err != nil {
			t.Fatal(err)
		}
	}
	w := bind("Exact", 5, time.Hour)
	if got := admit(w, "k", 4); got != 4 {
		t.Fatalf("%d of 4 admitted under 5 an hour", got)
	}
	set(w, 3, time.Hour)
	if got := admit(w, "k", 3); got != 0 {
		t.Fatalf("cut to 3 while holding 4: %d admitted", got)
	}
	set(w, 8, time.Hour)
	if got := admit(w, "k", 6); got != 4 || w.Rule().Limit() != 8 {
		t.Fatalf("raised to 8 while holding 4: %d of 6 admitted (limit %d), want 4", got, w.Rule().Limit())
	}
	w.ClearNumbers()
	if got := admit(w, "k", 2); got != 0 || w.Rule().Limit() != 5 {
		t.Fatalf("back to 5 while holding 8: %d admitted (limit %d)", got, w.Rule().Limit())
	}
	if err := w.SetNumbers(atomicbucket.Numbers{Tokens: 5, Period: time.Hour, Burst: 9}, 1); err == nil || w.Rule().Limit() != 5 {
		t.Fatalf("numbers with a burst other than the limit: %v (limit %d)", err, w.Rule().Limit())
	}

	c := bind("Counted", 100, 16*time.Minute)
	if got := admit(c, "k", 100); got != 100 {
		t.Fatalf("counted: %d of 100", got)
	}
	set(c, 200, 16*time.Minute)
	if got := admit(c, "k", 120); got != 100 {
		t.Fatalf("counted, raised to 200 while holding 100: %d of 120 admitted, want 100", got)
	}
	// Cut to 80 while holding 200 (all admitted within the last seconds):
	// the answers tell the truth. Nothing remains (not −120), a cost of 0
	// is admitted, and a denial waits for the units to leave, a whole
	// window from now (less the seconds since), never a fraction of it.
	set(c, 80, 16*time.Minute)
	res := c.AllowN(ctx, "k", 1)
	if res.Degraded || res.Allowed || res.Remaining != 0 || res.RetryAfter < 15*time.Minute || res.RetryAfter > 17*time.Minute {
		t.Errorf("counted, cut to 80 while holding 200: %+v, want denied, 0 remaining, a wait of about 16 minutes", res)
	}
	if res := c.AllowN(ctx, "k", 0); res.Degraded || !res.Allowed || res.Remaining != 0 {
		t.Errorf("counted, cut to 80 while holding 200, a cost of 0: %+v, want admitted, 0 remaining", res)
	}
	set(w, 2, time.Hour) // the exact one, holding 5, cut to 2
	if res := w.AllowN(ctx, "k", 0); res.Degraded || !res.Allowed || res.Remaining != 0 {
		t.Errorf("exact, cut to 2 while holding 5, a cost of 0: %+v, want admitted, 0 remaining", res)
	}
	if res := w.AllowN(ctx, "k", 1); res.Degraded || res.Allowed || res.Remaining != 0 || res.RetryAfter < 59*time.Minute {
		t.Errorf("exact, cut to 2 while holding 5: %+v, want denied, 0 remaining, a wait of about an hour", res)
	}
}

// WindowKeyNumbers: a key of a shared window given numbers of its own (a
// customer's quota raised or cut) is checked by them on the store, exact
// and counted, while the other keys keep the window's; its window is
// carried into them holding what it held, and back when they are taken
// away; numbers the store cannot take and the empty key are refused.
func WindowKeyNumbers(t *testing.T, st shared.Store) {
	ctx := context.Background()
	for _, c := range []struct {
		name          string
		limit, raised int64
		window        time.Duration
	}{{"Exact", 5, 8, time.Hour}, {"Counted", 100, 160, 16 * time.Minute}} {
		r, err := atomicwindow.NewRule(c.limit, c.window)
		if err != nil {
			t.Fatal(err)
		}
		w, err := shared.BindWindow(st, "keynumbers", c.name, r, shared.Failure{Mode: shared.FailDeny})
		if err != nil {
			t.Fatal(err)
		}
		admit := func(key string, n int64) int64 {
			t.Helper()
			var got int64
			for range n {
				res := w.AllowN(ctx, key, 1)
				if res.Degraded {
					t.Fatalf("%s: degraded: %v", c.name, res.Err)
				}
				if res.Allowed {
					got++
				}
			}
			return got
		}
		if got := admit("alice", c.limit-2); got != c.limit-2 {
			t.Fatalf("%s: %d of %d admitted", c.name, got, c.limit-2)
		}
		raised := atomicbucket.Numbers{Tokens: c.raised, Period: c.window, Burst: c.raised}
		if err := w.SetKeyNumbers(ctx, "alice", raised, 1); err != nil {
			t.Fatal(err)
		}
		if r, own := w.KeyRule("alice"); !own || r.Limit() != c.raised {
			t.Errorf("%s: alice's rule %v (own %v), want %d of her own", c.name, r.Limit(), own, c.raised)
		}
		// alice holds limit-2 and takes what her raise leaves; bob keeps the window's.
		if got := admit("alice", c.raised); got != c.raised-(c.limit-2) {
			t.Errorf("%s: alice raised to %d holding %d: %d more admitted, want %d", c.name, c.raised, c.limit-2, got, c.raised-(c.limit-2))
		}
		if got := admit("bob", c.limit+3); got != c.limit {
			t.Errorf("%s: bob, on the window's %d: %d of %d admitted", c.name, c.limit, got, c.limit+3)
		}
		// Back to the window's numbers: alice holds more than them.
		w.ClearKeyNumbers(ctx, "alice")
		if got := admit("alice", 2); got != 0 {
			t.Errorf("%s: alice back on %d holding %d: %d admitted", c.name, c.limit, c.raised, got)
		}
		if _, own := w.KeyRule("alice"); own {
			t.Errorf("%s: alice still has numbers of her own", c.name)
		}
	}
	// Concurrent checks of keys with and without numbers of their own, which
	// a coalescing store sends together: each key by its own numbers.
	r, _ := atomicwindow.NewRule(10, time.Hour)
	mixed, err := shared.BindWindow(st, "keynumbers", "Mixed", r, shared.Failure{Mode: shared.FailDeny})
	if err != nil {
		t.Fatal(err)
	}
	if err := mixed.SetKeyNumbers(ctx, "alice", atomicbucket.Numbers{Tokens: 4, Period: time.Hour, Burst: 4}, 1); err != nil {
		t.Fatal(err)
	}
	var admitted [2]atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				for i, key := range []string{"alice", "bob"} {
					res := mixed.AllowN(ctx, key, 1)
					if res.Degraded {
						t.Errorf("mixed: degraded: %v", res.Err)
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
	if a, b := admitted[0].Load(), admitted[1].Load(); a != 4 || b != 10 {
		t.Errorf("80 concurrent checks each: alice (4 of her own) %d admitted, bob (the window's 10) %d", a, b)
	}

	r, _ = atomicwindow.NewRule(5, time.Hour)
	w, err := shared.BindWindow(st, "keynumbers", "Refusals", r, shared.Failure{Mode: shared.FailDeny})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetKeyNumbers(ctx, "", atomicbucket.Numbers{Tokens: 3, Period: time.Hour, Burst: 3}, 1); !errors.Is(err, atomicbucket.ErrEmptyKey) {
		t.Errorf("the empty key: %v, want ErrEmptyKey", err)
	}
	if err := w.SetKeyNumbers(ctx, "k", atomicbucket.Numbers{Tokens: 3, Period: time.Hour, Burst: 4}, 1); err == nil {
		t.Error("a burst other than the limit: accepted")
	}
	if err := w.SetKeyNumbers(ctx, "k", atomicbucket.Numbers{Tokens: 100, Period: time.Millisecond, Burst: 100}, 1); err == nil {
		t.Error("a counted window of sixteenths shorter than a microsecond: accepted")
	}
	if _, own := w.KeyRule("k"); own {
		t.Error("a refused change gave k numbers of its own")
	}
}

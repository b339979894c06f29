package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// Settler is a store that settles a request's cost after the fact at
// explicit times (Unix sec seconds and usec µs): the difference given back,
// or owed as debt (shared.StoreRule.SettleStep), and the tokens forgiven
// beyond the debt bound.
type Settler interface {
	Settle(rule any, key string, estimate, actual, sec, usec int64) (forgiven int64, err error)
}

func (s *TimedStore) Settle(rule any, key string, estimate, actual, sec, usec int64) (int64, error) {
	r := rule.(*shared.StoreRule)
	c, mode, ok, forgiven := r.SettleStep(key, estimate, actual)
	if !ok {
		return forgiven, nil
	}
	rep, err := s.b.TierAt([]shared.Call{c}, mode, sec, usec)
	if err != nil {
		return 0, err
	}
	return r.Forgiven(c, mode, rep, actual-estimate), nil
}

// storeReference is the exact reference for rule (a store's, from
// Store.Rule) of l: its debt bound the store's (shared.Integers.MaxDebt,
// which 2^53 may hold below the local one).
func storeReference(rule any, l atomicbucket.Limit) *reference.Reference {
	r := atomicbucket.MustRule(l)
	p := reference.ParamsOf(&r, 0, false)
	if sr, ok := rule.(*shared.StoreRule); ok {
		p.MaxDebt = sr.Integers().MaxDebt
	}
	return reference.NewReference(p)
}

// Settle drives rules random rules (greedy and interval), 80 requests each at random microsecond times from start
// (Unix seconds): each a check taking its estimate, and a settlement of most
// of those it admits with an actual from nothing to three times the
// estimate, or far beyond any debt bound; every decision and every count of
// tokens forgiven equal to the exact reference's (reference.Settle) at the
// same times, for the rules whose units are exact. It returns the rules
// compared and the settlements that owed a debt.
func Settle(t *testing.T, st Store, seed uint64, rules int, start int64) (exact, owed int) {
	settler, ok := st.(Settler)
	if !ok {
		t.Fatalf("%T does not settle (storetest.Settler)", st)
	}
	rng := rand.New(rand.NewPCG(seed, 29))
	for i := range rules {
		l := RandomGreedy(rng)
		if i%3 == 2 {
			l = atomicbucket.Limit{Tokens: 1 + rng.Int64N(20), Period: []time.Duration{time.Millisecond, time.Second, 90 * time.Second}[rng.IntN(3)],
				Burst: 1 + rng.Int64N(60), Refill: atomicbucket.Interval, Aligned: rng.IntN(3) == 0}
		}
		// New buckets start full: a store forgets a bucket refilled (or
		// given back) to full, and one starting below full would start
		// again (stricter, never looser), which the reference's tables do
		// only when they reclaim.
		l.Initial, l.InitialSet = 0, false
		r, ex, err := st.Rule(fmt.Sprintf("s%d_%d", seed, i), l)
		if err != nil || !ex {
			continue
		}
		exact++
		ref := storeReference(r, l)
		sec, usec := start+rng.Int64N(86400), rng.Int64N(1e6)
		step := max(int64(l.Period)/1000/l.Tokens, 1) // a token's time, µs
		for range 80 {
			usec += rng.Int64N(3 * step)
			sec, usec = sec+usec/1e6, usec%1e6
			now := int64(atomicbucket.FromWall(sec*1e9 + usec*1e3))
			key := []string{"alice", "bob", "42"}[rng.IntN(3)]
			estimate := rng.Int64N(min(l.Burst, 50) + 1)
			got, _, err := st.Check([]Part{{r, key, estimate}}, true, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			if want := ref.AllowN(key, now, estimate); got != want {
				t.Fatalf("%+v key %s at %d.%06d estimate %d: store %+v, reference %+v", l, key, sec, usec, estimate, got, want)
			}
			if !got.Allowed || rng.IntN(5) == 0 {
				continue
			}
			actual := rng.Int64N(3*estimate + 2)
			if rng.IntN(10) == 0 {
				actual = estimate + 3*l.Burst + 7
			}
			f, err := settler.Settle(r, key, estimate, actual, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			if want := ref.Settle(key, now, estimate, actual); f != want {
				t.Fatalf("%+v key %s at %d.%06d: settling %d at %d forgave %d, reference %d", l, key, sec, usec, estimate, actual, f, want)
			}
			if actual > estimate {
				owed++
			}
		}
	}
	if exact < rules/4 {
		t.Fatalf("only %d of %d rules exact", exact, rules)
	}
	return exact, owed
}

// SettleWindow is a store's window as a settlement meets it
// (redisstore.Window, pgstore.Window): its checks with where they counted
// an admission (shared.WindowMarker), its count of a settlement's excess
// (shared.WindowSettler), and its lease call, which gives a lower actual's
// units back from where they were counted (shared.Window.Settle sends a
// settlement of that much of a grant).
type SettleWindow interface {
	shared.WindowMarker
	shared.WindowSettler
	Lease(ctx context.Context, key string, cost, want int64, prev shared.Settlement) (shared.Granted, error)
}

// OpenSettleWindow is OpenWindow giving the window as a settlement meets it.
type OpenSettleWindow func(t *testing.T, name string, rule atomicwindow.Rule, at func() time.Time) SettleWindow

// WindowSettleMatchesReference holds a store's window rules, exact and
// counted, to the sliding-log reference at explicit microsecond times
// through checks and settlements: a settlement of an admitted check, at
// once or some checks later, with an actual from nothing to twice its
// cost, or beyond the limit. A higher actual counts the excess (at most the
// limit) whatever the window holds; a lower one gives the difference back
// from where the store counted the check (its mark), as shared.Window.Settle
// does. Every later decision, and every count of units forgiven, equals the
// reference's (reference.Window.Settle). It returns the settlements made,
// and how many gave back.
func WindowSettleMatchesReference(t *testing.T, open OpenSettleWindow, runs, steps int, seed uint64) (settled, gaveBack int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 41))
	type admission struct {
		key      string
		at, cost int64
		mark     verdict.WindowMark
	}
	for run := range runs {
		limit := 1 + rng.Int64N(64)
		window := time.Duration(1+rng.Int64N(5000)) * time.Millisecond
		if run%2 == 1 { // counted
			limit = 65 + rng.Int64N(300)
			window = time.Duration(1+rng.Int64N(2000)) * 40 * time.Millisecond
		}
		rule := atomicwindow.MustRule(limit, window)
		now := time.Unix(1_800_000_000, 0)
		w := open(t, "ws"+strconv.Itoa(run), rule, func() time.Time { return now })
		ref := reference.NewWindow(reference.WindowParams{Limit: limit, Window: int64(window), Grain: int64(rule.Grain())})
		keys := []string{"a", "b"}
		var pending []admission
		for step := range steps {
			now = now.Add(time.Duration(rng.Int64N(int64(window)/limit*2+1)) / time.Microsecond * time.Microsecond)
			if len(pending) > 0 && rng.IntN(3) == 0 { // settle one admitted earlier
				i := rng.IntN(len(pending))
				a := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				actual := rng.Int64N(2*a.cost + 2)
				if rng.IntN(8) == 0 {
					actual = a.cost + 2*limit + 5
				}
				want := ref.Settle(a.key, now.UnixNano(), a.at, a.cost, actual)
				f := int64(0)
				var err error
				switch {
				case actual > a.cost:
					f, err = w.Settle(ctx, a.key, actual-a.cost)
				case actual < a.cost && a.mark != (verdict.WindowMark{}):
					_, err = w.Lease(ctx, a.key, 0, 0, shared.Settlement{Second: a.mark.Slot, Size: a.cost, Unspent: a.cost - actual, Gen: a.mark.Gen})
					gaveBack++
				case actual < a.cost:
					t.Fatalf("run %d step %d: an admission of %d left no mark", run, step, a.cost)
				}
				if err != nil {
					t.Fatal(err)
				}
				settled++
				if f != want {
					t.Fatalf("run %d (%d in %v) step %d, %s: settling %d at %d forgave %d, reference %d", run, limit, window, step, a.key, a.cost, actual, f, want)
				}
				continue
			}
			key := keys[rng.IntN(len(keys))]
			cost := []int64{0, 1, 1, 2, limit / 3, limit}[rng.IntN(6)]
			got, mark, err := w.AllowNMark(ctx, key, cost)
			if err != nil {
				t.Fatal(err)
			}
			if want := ref.AllowN(key, now.UnixNano(), cost); got != want {
				t.Fatalf("run %d (%d in %v, exact %v) step %d, %s cost %d: %+v, reference %+v", run, limit, window, rule.Exact(), step, key, cost, got, want)
			}
			if got.Allowed && cost > 0 {
				pending = append(pending, admission{key, now.UnixNano(), cost, mark})
			}
		}
	}
	return settled, gaveBack
}

package atomicbucket

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The no-minting invariant: whatever changes of numbers a table or a bucket
// goes through (plans' and keys' numbers set and cleared, sweeps between),
// it never admits a request that a bucket with the envelope's numbers (the
// largest burst and the fastest rate it has had), fed the same admissions,
// would deny, and never holds more tokens than that bucket — keys' own
// numbers kept within the rule's, since above them they are a raise. A sequence of
// cuts that ends at the numbers it started from is the case the envelope is
// the starting numbers themselves: no change would have been fuller.
//
// The twin is a table (a bucket) built with the envelope's numbers and never
// changed; every admission of the changed one is forced on it, and must be
// admitted there too.
func TestChangesNeverMint(t *testing.T) {
	for _, refill := range []Refill{Greedy, Interval} {
		for _, cutsOnly := range []bool{true, false} {
			t.Run(fmt.Sprintf("refill=%v/cuts=%v", refill, cutsOnly), func(t *testing.T) {
				for seed := range uint64(300) {
					mintTrace(t, seed, refill, cutsOnly)
					if t.Failed() {
						return
					}
				}
			})
		}
	}
}

// mintTrace runs one random trace; see TestChangesNeverMint.
func mintTrace(t *testing.T, seed uint64, refill Refill, cutsOnly bool) {
	rng := rand.New(rand.NewPCG(seed, 7))
	period := time.Second
	start := Numbers{Tokens: 10, Period: period, Burst: 20}
	// The numbers the trace may install, chosen first so the twin can be built.
	var pool []Numbers
	env := start
	for range 4 {
		n := Numbers{Tokens: 1 + rng.Int64N(12), Period: period, Burst: 1 + rng.Int64N(30)}
		if cutsOnly {
			n.Tokens, n.Burst = min(n.Tokens, start.Tokens), min(n.Burst, start.Burst)
		}
		pool = append(pool, n)
		env.Tokens, env.Burst = max(env.Tokens, n.Tokens), max(env.Burst, n.Burst)
	}
	lim := func(n Numbers) Limit {
		return Limit{Tokens: n.Tokens, Period: n.Period, Burst: n.Burst, Refill: refill}
	}
	tb := NewTable[int](MustRule(lim(start)), TableOptions{})
	twin := NewTable[int](MustRule(lim(env)), TableOptions{})
	t0 := Time(int64(time.Hour))
	b := NewBucketAt(MustRule(lim(start)), t0)
	bt := NewBucketAt(MustRule(lim(env)), t0)
	now := t0
	keys := []int{1, 2, 3}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d, at %v: "+format, append([]any{seed, time.Duration(now - t0)}, args...)...)
	}
	compare := func(what string) {
		t.Helper()
		for _, k := range keys {
			got, twinHas := tb.PeekAt(k, now, 0).Remaining, twin.PeekAt(k, now, 0).Remaining
			if got > twinHas {
				fail("%s: key %d holds %d tokens, a bucket with the envelope's numbers %d", what, k, got, twinHas)
			}
		}
		if got, twinHas := b.PeekAt(now, 0).Remaining, bt.PeekAt(now, 0).Remaining; got > twinHas {
			fail("%s: the bucket holds %d tokens, one with the envelope's numbers %d", what, got, twinHas)
		}
	}
	for step := range 120 {
		now += Time(rng.Int64N(int64(800 * time.Millisecond)))
		what := ""
		switch op := rng.IntN(10); {
		case op < 5:
			k, cost := keys[rng.IntN(len(keys))], 1+rng.Int64N(6)
			what = fmt.Sprintf("step %d: take %d from key %d", step, cost, k)
			if tb.AllowNAt(k, now, cost).Allowed && !twin.AllowNAt(k, now, cost).Allowed {
				fail("%s: admitted where the envelope's bucket denies", what)
			}
			if b.AllowNAt(now, cost).Allowed && !bt.AllowNAt(now, cost).Allowed {
				fail("%s: the bucket admitted where the envelope's denies", what)
			}
		case op == 5:
			n := pool[rng.IntN(len(pool))]
			what = fmt.Sprintf("step %d: set %v", step, n)
			if err := tb.SetNumbersAt(now, n, CarryAsIs); err != nil {
				t.Fatal(err)
			}
			if err := b.SetNumbersAt(now, n, CarryAsIs); err != nil {
				t.Fatal(err)
			}
		case op == 6:
			// A key's own numbers are not taken into the envelope: above the
			// rule's (here, the starting numbers) they are a raise, which
			// gives a bucket full long enough the new burst as it gives a new
			// key. Keep them within the rule's.
			k, n := keys[rng.IntN(len(keys))], pool[rng.IntN(len(pool))]
			n.Tokens, n.Burst = min(n.Tokens, start.Tokens), min(n.Burst, start.Burst)
			what = fmt.Sprintf("step %d: key %d set %v", step, k, n)
			if err := tb.SetKeyNumbersAt(now, k, n, CarryAsIs); err != nil {
				t.Fatal(err)
			}
		case op == 7:
			k := keys[rng.IntN(len(keys))]
			what = fmt.Sprintf("step %d: key %d cleared", step, k)
			tb.ClearKeyNumbersAt(now, k, CarryAsIs)
		case op == 8:
			what = fmt.Sprintf("step %d: plan cleared", step)
			tb.ClearNumbersAt(now, CarryAsIs)
			b.ClearNumbersAt(now, CarryAsIs)
		default:
			now += Time(rng.Int64N(int64(4 * time.Second)))
			what = fmt.Sprintf("step %d: sweep", step)
			tb.SweepAt(now)
		}
		compare(what)
	}
	// Back to the numbers the trace started from, then time for refills.
	tb.ClearNumbersAt(now, CarryAsIs)
	b.ClearNumbersAt(now, CarryAsIs)
	for _, k := range keys {
		tb.ClearKeyNumbersAt(now, k, CarryAsIs)
	}
	compare("restored")
	for range 5 {
		now += Time(rng.Int64N(int64(time.Second)))
		tb.SweepAt(now)
		compare("restored, later")
	}
}

// The case the outside check found: a burst cut below what a bucket holds and
// then restored gave the bucket its whole burst back (it was full by the cut
// numbers, and full stayed full).
func TestCutAndRestore(t *testing.T) {
	r := MustRule(Limit{Tokens: 1, Period: time.Second, Burst: 100})
	now := Time(int64(time.Hour))
	for _, single := range []bool{false, true} {
		tb := NewTable[string](r, TableOptions{})
		b := NewBucketAt(r, now)
		take := func(cost int64) bool {
			if single {
				return b.AllowNAt(now, cost).Allowed
			}
			return tb.AllowNAt("k", now, cost).Allowed
		}
		set := func(n Numbers) {
			if single {
				_ = b.SetNumbersAt(now, n, CarryAsIs)
			} else {
				_ = tb.SetNumbersAt(now, n, CarryAsIs)
			}
		}
		if !take(90) {
			t.Fatal("a full bucket denied 90")
		}
		set(Numbers{Tokens: 1, Period: time.Second, Burst: 5}) // holds 10: cut to 5, which is full
		now += Time(3 * time.Second)                           // full for the cut numbers; 13 with none
		tb.SweepAt(now + Time(SweepGrace))                     // not reclaimed: it could not be full by the policy's
		set(Numbers{Tokens: 1, Period: time.Second, Burst: 100})
		if take(6) {
			t.Errorf("single=%v: after a cut to burst 5 and back, 6 admitted at once (the cut bucket holds 5)", single)
		}
		if !take(5) {
			t.Errorf("single=%v: the 5 tokens the cut bucket held were lost", single)
		}
		// Idle long enough to fill by the restored numbers: full again.
		now += Time(200 * time.Second)
		if !take(100) {
			t.Errorf("single=%v: a bucket idle for 200 s at 1/s is not full", single)
		}
	}
}

// A reservation cancelled after its bucket's numbers changed gives nothing
// back (its tokens were carried with the bucket) and says so.
func TestCancelAfterChange(t *testing.T) {
	r := MustRule(Limit{Tokens: 1, Period: time.Second, Burst: 10})
	now := Time(int64(time.Hour))
	for _, single := range []bool{false, true} {
		tb := NewTable[string](r, TableOptions{})
		b := NewBucketAt(r, now)
		var res Reservation
		if single {
			res = b.ReserveAt(now, 8, time.Minute)
		} else {
			res = tb.ReserveAt("k", now, 8, time.Minute)
		}
		if !res.OK {
			t.Fatal("reservation of 8 refused on a full bucket of 10")
		}
		n := Numbers{Tokens: 1, Period: time.Second, Burst: 20}
		if single {
			_ = b.SetNumbersAt(now, n, CarryAsIs)
		} else {
			_ = tb.SetNumbersAt(now, n, CarryAsIs)
		}
		if res.CancelAt(now - 1) {
			t.Errorf("single=%v: Cancel after a change reports tokens given back", single)
		}
		var rem int64
		if single {
			rem = b.PeekAt(now, 0).Remaining
		} else {
			rem = tb.PeekAt("k", now, 0).Remaining
		}
		if rem != 2 {
			t.Errorf("single=%v: after the change and the cancel the bucket holds %d, want the 2 it carried", single, rem)
		}
	}
}

// Debt (reservations ahead of time) is carried as it is under every carry:
// proportional does not scale it, additive does not pay it off with the
// burst's growth.
func TestDebtCarried(t *testing.T) {
	r := MustRule(Limit{Tokens: 1, Period: time.Second, Burst: 10})
	for _, c := range []Carry{CarryAsIs, CarryProportional, CarryAdditive} {
		now := Time(int64(time.Hour))
		b := NewBucketAt(r, now)
		if res := b.ReserveAt(now, 10, 0); !res.OK {
			t.Fatal("10 refused on a full bucket of 10")
		}
		if res := b.ReserveAt(now, 5, time.Minute); !res.OK || res.Delay != 5*time.Second {
			t.Fatalf("5 more ahead of time: %+v, want a delay of 5s", res)
		}
		if err := b.SetNumbersAt(now, Numbers{Tokens: 1, Period: time.Second, Burst: 20}, c); err != nil {
			t.Fatal(err)
		}
		if d := b.PeekAt(now, 1); d.RetryAfter != 6*time.Second {
			t.Errorf("%v: a bucket 5 in debt, burst 10 → 20: the next token in %v, want 6s (the debt kept)", c, d.RetryAfter)
		}
	}
}

package atomicbucket

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
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
//
// With skew, checks and changes are stamped up to skew before the latest time
// of the trace, so they land out of their clock order: a check stamped before
// a change that lands after it, a change stamped before checks already made.
// A check is judged at its own time, so one made out of order on a slower
// bucket may pass where the faster twin, judging it at the same stamp, denies:
// what must hold is that the admissions, taken in the order of their stamps,
// are admissions of a bucket with the envelope's numbers (none is over what
// any numbers allowed at its time), and that the bucket then holds no more
// than that one. The skew stays within SweepGrace, the staleness a sweep
// allows for (guarantees.md, "Stale clock readings").
func TestChangesNeverMint(t *testing.T) {
	for _, refill := range []Refill{Greedy, Interval} {
		for _, cutsOnly := range []bool{true, false} {
			for _, skew := range []time.Duration{0, 300 * time.Millisecond, SweepGrace - time.Millisecond} {
				t.Run(fmt.Sprintf("refill=%v/cuts=%v/skew=%v", refill, cutsOnly, skew), func(t *testing.T) {
					for seed := range uint64(300) {
						mintTrace(t, seed, refill, cutsOnly, skew)
						if t.Failed() {
							return
						}
					}
				})
			}
		}
	}
}

// mintTrace runs one random trace; see TestChangesNeverMint.
func mintTrace(t *testing.T, seed uint64, refill Refill, cutsOnly bool, skew time.Duration) {
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
	type admission struct {
		at   Time
		cost int64
	}
	taken := map[int][]admission{} // by key; 0 is the bucket's
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
		at := now // the operation's stamp
		if skew > 0 {
			at = max(now-Time(rng.Int64N(int64(skew))), t0)
		}
		what := ""
		switch op := rng.IntN(10); {
		case op < 5:
			k, cost := keys[rng.IntN(len(keys))], 1+rng.Int64N(6)
			what = fmt.Sprintf("step %d: take %d from key %d at %v", step, cost, k, time.Duration(at-t0))
			if tb.AllowNAt(k, at, cost).Allowed {
				taken[k] = append(taken[k], admission{at, cost})
				if skew == 0 && !twin.AllowNAt(k, at, cost).Allowed {
					fail("%s: admitted where the envelope's bucket denies", what)
				}
			}
			if b.AllowNAt(at, cost).Allowed {
				taken[0] = append(taken[0], admission{at, cost})
				if skew == 0 && !bt.AllowNAt(at, cost).Allowed {
					fail("%s: the bucket admitted where the envelope's denies", what)
				}
			}
		case op == 5:
			n := pool[rng.IntN(len(pool))]
			what = fmt.Sprintf("step %d: set %v at %v", step, n, time.Duration(at-t0))
			if err := tb.SetNumbersAt(at, n, CarryAsIs); err != nil {
				t.Fatal(err)
			}
			if err := b.SetNumbersAt(at, n, CarryAsIs); err != nil {
				t.Fatal(err)
			}
		case op == 6:
			// A key's own numbers are not taken into the envelope: above the
			// rule's (here, the starting numbers) they are a raise, which
			// gives a bucket full long enough the new burst as it gives a new
			// key. Keep them within the rule's.
			k, n := keys[rng.IntN(len(keys))], pool[rng.IntN(len(pool))]
			n.Tokens, n.Burst = min(n.Tokens, start.Tokens), min(n.Burst, start.Burst)
			what = fmt.Sprintf("step %d: key %d set %v at %v", step, k, n, time.Duration(at-t0))
			if err := tb.SetKeyNumbersAt(at, k, n, CarryAsIs); err != nil {
				t.Fatal(err)
			}
		case op == 7:
			k := keys[rng.IntN(len(keys))]
			what = fmt.Sprintf("step %d: key %d cleared at %v", step, k, time.Duration(at-t0))
			tb.ClearKeyNumbersAt(at, k, CarryAsIs)
		case op == 8:
			what = fmt.Sprintf("step %d: plan cleared at %v", step, time.Duration(at-t0))
			tb.ClearNumbersAt(at, CarryAsIs)
			b.ClearNumbersAt(at, CarryAsIs)
		default:
			now += Time(rng.Int64N(int64(4 * time.Second)))
			what = fmt.Sprintf("step %d: sweep", step)
			tb.SweepAt(now)
		}
		if skew == 0 {
			compare(what)
		}
	}
	if skew > 0 {
		// The envelope's bucket, fed the admissions in the order of their
		// stamps, admits every one, and holds at least as much afterwards.
		twin = NewTable[int](MustRule(lim(env)), TableOptions{})
		bt = NewBucketAt(MustRule(lim(env)), t0)
		for k, as := range taken {
			slices.SortStableFunc(as, func(a, b admission) int { return cmp.Compare(a.at, b.at) })
			for _, a := range as {
				var ok bool
				if k == 0 {
					ok = bt.AllowNAt(a.at, a.cost).Allowed
				} else {
					ok = twin.AllowNAt(k, a.at, a.cost).Allowed
				}
				if !ok {
					fail("key %d (0: the bucket): %d admitted at %v, over what a bucket with the envelope's numbers admits, taking the admissions in the order of their stamps", k, a.cost, time.Duration(a.at-t0))
				}
			}
		}
		compare("in stamp order")
		return
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

// The outside check's two sequences: a check and a change applied out of the
// order of their times. First, a check stamped before a cut that lands after
// it: 7 taken at t0 on burst 7, the rate cut at t0+90ms, then 2 more at t0
// (the cut's slower refill, reckoned back from the change, left 2.7 tokens at
// t0: 9 admitted at one instant). Then a change stamped before a check
// already made: 7 taken at t0+30ms under 100 per 3 s, the rate raised back to
// 300 per 3 s as of t0, then a peek of 2 at t0+30ms (the raise refilled the
// 30 ms at the faster rate: 2 tokens a bucket with 300 per 3 s all along,
// fed the same 7, does not hold).
func TestOutOfOrderChanges(t *testing.T) {
	t0 := Time(int64(time.Hour))
	lim := func(tokens int64) Limit {
		return Limit{Tokens: tokens, Period: 3 * time.Second, Burst: 7, Refill: Greedy}
	}
	cut := Numbers{Tokens: 10, Period: 3 * time.Second, Burst: 7}
	slow := Numbers{Tokens: 100, Period: 3 * time.Second, Burst: 7}
	fast := Numbers{Tokens: 300, Period: 3 * time.Second, Burst: 7}
	type target struct {
		allow func(at Time, cost int64) Decision
		peek  func(at Time, cost int64) Decision
		set   func(at Time, n Numbers) error
	}
	targets := map[string]func(l Limit) target{
		"table": func(l Limit) target {
			tb := NewTable[string](MustRule(l), TableOptions{})
			return target{
				func(at Time, cost int64) Decision { return tb.AllowNAt("k", at, cost) },
				func(at Time, cost int64) Decision { return tb.PeekAt("k", at, cost) },
				func(at Time, n Numbers) error { return tb.SetNumbersAt(at, n, CarryAsIs) },
			}
		},
		"key numbers": func(l Limit) target {
			tb := NewTable[string](MustRule(l), TableOptions{})
			return target{
				func(at Time, cost int64) Decision { return tb.AllowNAt("k", at, cost) },
				func(at Time, cost int64) Decision { return tb.PeekAt("k", at, cost) },
				func(at Time, n Numbers) error { return tb.SetKeyNumbersAt(at, "k", n, CarryAsIs) },
			}
		},
		"bucket": func(l Limit) target {
			b := NewBucketAt(MustRule(l), t0-Time(time.Minute))
			return target{
				func(at Time, cost int64) Decision { return b.AllowNAt(at, cost) },
				func(at Time, cost int64) Decision { return b.PeekAt(at, cost) },
				func(at Time, n Numbers) error { return b.SetNumbersAt(at, n, CarryAsIs) },
			}
		},
	}
	for name, make := range targets {
		t.Run(name+"/check stamped before a cut", func(t *testing.T) {
			x := make(lim(100))
			if !x.allow(t0, 7).Allowed {
				t.Fatal("a full bucket of 7 denied 7")
			}
			if err := x.set(t0+Time(90*time.Millisecond), cut); err != nil {
				t.Fatal(err)
			}
			if d := x.allow(t0, 2); d.Allowed || d.RetryAfter <= 0 {
				t.Errorf("2 more at t0 after 7 at t0 on burst 7: %+v, want a denial with a wait", d)
			}
			if d := x.peek(t0, 1); d.Allowed || d.Remaining != 0 {
				t.Errorf("a peek at t0: %+v, want a denial holding 0", d)
			}
			// As of the cut, the bucket holds the 3 tokens 90 ms of 100 per 3 s gave.
			if d := x.peek(t0+Time(90*time.Millisecond), 3); !d.Allowed {
				t.Errorf("a peek of 3 at the cut: %+v, want allowed (the carry is exact from the change on)", d)
			}
		})
		t.Run(name+"/change stamped before a check", func(t *testing.T) {
			x := make(lim(300))
			if err := x.set(t0-Time(time.Second), slow); err != nil {
				t.Fatal(err)
			}
			if !x.allow(t0+Time(30*time.Millisecond), 7).Allowed {
				t.Fatal("a full bucket of 7 denied 7")
			}
			if err := x.set(t0, fast); err != nil {
				t.Fatal(err)
			}
			if d := x.peek(t0+Time(30*time.Millisecond), 2); d.Allowed {
				t.Errorf("a peek of 2 at t0+30ms after 7 taken then: %+v, want denied", d)
			}
			// From the check on, the raise refills at its rate: 10 ms a token.
			if d := x.peek(t0+Time(50*time.Millisecond), 2); !d.Allowed {
				t.Errorf("a peek of 2 at t0+50ms: %+v, want allowed (20 ms at 300 per 3 s)", d)
			}
		})
	}
}

// Two cases the outside check found stricter than the docs. Under
// CarryAdditive an empty bucket (0 tokens, not in debt) gains what the burst
// grew by, as any other count does. And a bucket that has taken nothing
// counts as full however young the process: the same calls at the start of
// the package's time and 1000 s later give the same answers.
func TestCarryAsDocumented(t *testing.T) {
	t.Run("additive from empty", func(t *testing.T) {
		l := Limit{Tokens: 7, Period: time.Second, Burst: 5}
		t0 := Time(int64(time.Hour))
		tb := NewTable[string](MustRule(l), TableOptions{})
		b := NewBucketAt(MustRule(l), t0)
		if !tb.AllowNAt("k", t0, 5).Allowed || !b.AllowNAt(t0, 5).Allowed {
			t.Fatal("a full bucket of 5 denied 5")
		}
		grown := Numbers{Tokens: 7, Period: time.Second, Burst: 10}
		if err := tb.SetNumbersAt(t0, grown, CarryAdditive); err != nil {
			t.Fatal(err)
		}
		if err := b.SetNumbersAt(t0, grown, CarryAdditive); err != nil {
			t.Fatal(err)
		}
		if d := tb.PeekAt("k", t0, 5); !d.Allowed || d.Remaining != 0 {
			t.Errorf("table: a peek of 5 after 0 of 5 grew additively to burst 10: %+v, want allowed", d)
		}
		if d := b.PeekAt(t0, 5); !d.Allowed || d.Remaining != 0 {
			t.Errorf("bucket: a peek of 5 after 0 of 5 grew additively to burst 10: %+v, want allowed", d)
		}
	})
	t.Run("young process", func(t *testing.T) {
		l := Limit{Tokens: 1, Period: time.Second, Burst: 10}
		cut := Numbers{Tokens: 1, Period: time.Second, Burst: 5}
		held := func(t0 Time) (table, bucket int64) {
			tb := NewTable[string](MustRule(l), TableOptions{})
			b := NewBucketAt(MustRule(l), t0)
			// One taken and refilled by the cut: full, and long enough.
			if !tb.AllowNAt("k", t0, 1).Allowed || !b.AllowNAt(t0, 1).Allowed {
				t.Fatal("a full bucket denied 1")
			}
			at := t0 + Time(time.Second)
			_ = tb.SetNumbersAt(at, cut, CarryAsIs)
			_ = b.SetNumbersAt(at, cut, CarryAsIs)
			at += Time(time.Second)
			tb.ClearNumbersAt(at, CarryAsIs)
			b.ClearNumbersAt(at, CarryAsIs)
			return tb.PeekAt("k", at, 0).Remaining, b.PeekAt(at, 0).Remaining
		}
		youngT, youngB := held(0)
		oldT, oldB := held(Time(1000 * time.Second))
		if youngT != oldT || youngB != oldB || oldT != 10 || oldB != 10 {
			t.Errorf("a full bucket cut to burst 5 and restored holds (table, bucket) %d, %d at the package's start and %d, %d 1000 s later; want 10 both times", youngT, youngB, oldT, oldB)
		}
	})
}

package atomicbucket

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/keycap"
)

// TestCapFreesItself: a table at its key cap, with no sweeper running, admits a
// new key once an old one has been full for the grace (the hostile trial's
// first finding: it used to deny every new key for good, with RetryAfter 1s).
func TestCapFreesItself(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 10, Period: time.Second, Burst: 10})
	tb := NewTable[string](r, TableOptions{MaxKeys: 3})
	for _, k := range []string{"a", "b", "c"} {
		if !tb.AllowNAt(k, hour, 10).Allowed {
			t.Fatalf("%s denied below the cap", k)
		}
	}
	// Full again at +1s, reclaimable at +2s: the sweep the new key makes learns it.
	d := tb.AllowNAt("d", hour, 1)
	if d.Allowed || d.RetryAfter != 2*time.Second {
		t.Fatalf("new key at the cap: %+v, want denied with RetryAfter 2s", d)
	}
	if d := tb.AllowNAt("d", hour+Time(time.Second), 1); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("a second later: %+v, want denied with RetryAfter 1s", d)
	}
	if d := tb.AllowNAt("d", hour+Time(2*time.Second), 1); !d.Allowed {
		t.Fatalf("once the old keys are reclaimable: %+v, want allowed", d)
	}
	if tb.Len() != 1 || tb.Stats().Evictions != 3 || tb.Stats().AtCapHits != 2 {
		t.Fatalf("Len %d, Evictions %d, AtCapHits %d; want 1, 3, 2", tb.Len(), tb.Stats().Evictions, tb.Stats().AtCapHits)
	}
}

// TestTableSweepsItself: an uncapped table that new keys double past
// keycap.AutoSweepMin removes its idle buckets without a sweeper.
func TestTableSweepsItself(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 1, Period: time.Millisecond, Burst: 1})
	tb := NewTable[int](r, TableOptions{})
	for i := range keycap.AutoSweepMin {
		tb.AllowAt(i, hour) // full again 1ms later
	}
	if tb.Len() != keycap.AutoSweepMin || tb.Stats().Evictions != 0 {
		t.Fatalf("Len %d, Evictions %d before the threshold", tb.Len(), tb.Stats().Evictions)
	}
	later := hour + Time(SweepGrace) + Time(time.Millisecond)
	tb.AllowAt(keycap.AutoSweepMin, later) // one past the threshold: sweeps
	if tb.Stats().Evictions != keycap.AutoSweepMin || tb.Len() != 1 {
		t.Fatalf("after passing the threshold: Len %d, Evictions %d; want 1 and %d", tb.Len(), tb.Stats().Evictions, keycap.AutoSweepMin)
	}
}

// TestCheckThatTakesNothingCreatesNothing: AllowN with cost 0 or a cost that can
// never pass, and Reserve of such a cost, leave a new key absent and the cap's
// slots free (the hostile trial: AllowN(-1) inserted the key).
func TestCheckThatTakesNothingCreatesNothing(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 1, Period: time.Second, Burst: 2})
	tb := NewTable[string](r, TableOptions{MaxKeys: 1})
	for _, cost := range []int64{-1, 0, 3, -1 << 63} {
		tb.AllowNAt("x", hour, cost)
		tb.ReserveAt("x", hour, cost, time.Second)
		tb.PeekAt("x", hour, cost)
		tb.RefundAt("x", hour, cost)
	}
	if tb.Len() != 0 {
		t.Fatalf("Len %d after checks that take nothing, want 0", tb.Len())
	}
	if !tb.AllowNAt("y", hour, 1).Allowed {
		t.Fatal("the cap's one slot was taken by checks that took nothing")
	}
}

// TestRunSweeperNonPositiveInterval: RunSweeper(ctx, 0) and a negative interval
// run with keycap.DefaultSweepInterval instead of panicking in the goroutine (which
// would kill the service), and return when ctx is done.
func TestRunSweeperNonPositiveInterval(t *testing.T) {
	tb := NewTable[string](mustRule(t, Limit{Tokens: 1, Period: time.Second, Burst: 1}), TableOptions{})
	for _, d := range []time.Duration{0, -time.Second} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan any)
		go func() {
			defer func() { done <- recover() }()
			tb.RunSweeper(ctx, d)
		}()
		cancel()
		if p := <-done; p != nil {
			t.Fatalf("RunSweeper(ctx, %v) panicked: %v", d, p)
		}
	}
}

// TestRetryAfterHeader: whole seconds rounded up, and no header for an allowed
// request or one that can never pass (the README's old snippet printed
// 9223372037 for Never).
func TestRetryAfterHeader(t *testing.T) {
	for _, c := range []struct {
		d    Decision
		want string
		ok   bool
	}{
		{Decision{RetryAfter: 0}, "0", true},
		{Decision{RetryAfter: 1}, "1", true},
		{Decision{RetryAfter: time.Second}, "1", true},
		{Decision{RetryAfter: time.Second + 1}, "2", true},
		{Decision{RetryAfter: 90 * time.Minute}, "5400", true},
		{Decision{RetryAfter: Never}, "", false},
		{Decision{Allowed: true}, "", false},
		{Decision{RetryAfter: -1}, "", false},
	} {
		got, ok := c.d.RetryAfterHeader()
		if got != c.want || ok != c.ok {
			t.Errorf("%+v: RetryAfterHeader() = %q, %v; want %q, %v", c.d, got, ok, c.want, c.ok)
		}
	}
}

// TestKeyAnchorsSpreadAndAgree: a table places an anchored interval key's grid
// where Rule.KeyAnchor says, for string keys and integer keys alike (by the
// decimal form), and different keys get different phases.
func TestKeyAnchorsSpreadAndAgree(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 5, Period: 10 * time.Second, Burst: 5, Refill: Interval})
	ts := NewTable[string](r, TableOptions{})
	ti := NewTable[int64](r, TableOptions{})
	phases := map[int64]bool{}
	for i := range 100 {
		k := fmt.Sprint(i)
		ts.AllowNAt(k, hour, 1)
		ti.AllowNAt(int64(i), hour, 1)
		sa, na := ts.m.anchorOf(ts.m.load(k)), ti.m.anchorOf(ti.m.load(int64(i)))
		want := r.KeyAnchor(k)
		if sa != want || na != want || want > 0 || want <= -int64(10*time.Second) {
			t.Fatalf("key %s: anchors %d (string), %d (int64), KeyAnchor %d", k, sa, na, want)
		}
		phases[want] = true
	}
	if len(phases) < 90 {
		t.Fatalf("100 keys share %d phases", len(phases))
	}
}

// TestCapSweepsSpacedOut: sweeps at the key cap start at least MaxKeys ×
// keycap.CapSweepSpacing apart, so keys that become reclaimable one after another
// cannot make every new key's request pay for a sweep of the whole table; the
// denied key's RetryAfter says when the next sweep may run.
func TestCapSweepsSpacedOut(t *testing.T) {
	const capKeys = 4000 // spacing: 4000 × 256ns = 1.024ms
	r := mustRule(t, Limit{Tokens: 1, Period: time.Millisecond, Burst: 1})
	tb := NewTable[int](r, TableOptions{MaxKeys: capKeys})
	for i := range capKeys {
		tb.AllowAt(i, hour) // each full again 1ms later, reclaimable a grace after that
	}
	s1 := hour + Time(time.Second)
	// The new key sweeps, frees nothing, and learns the exact time, s1+1ms;
	// the spacing is longer.
	if d := tb.AllowNAt(-1, s1, 1); d.Allowed || d.RetryAfter != 1024*time.Microsecond {
		t.Fatalf("first new key at the cap: %+v, want denied until the next sweep may run, 1.024ms", d)
	}
	// At s1+1ms the keys are reclaimable, but the last sweep at the cap was 1ms ago.
	if d := tb.AllowNAt(-1, s1.Add(time.Millisecond), 1); d.Allowed || d.RetryAfter != 24*time.Microsecond || tb.Stats().Evictions != 0 {
		t.Fatalf("within the spacing: %+v, %d evictions; want denied for 24µs more, none evicted", d, tb.Stats().Evictions)
	}
	if d := tb.AllowNAt(-1, s1.Add(1024*time.Microsecond), 1); !d.Allowed || tb.Stats().Evictions != capKeys {
		t.Fatalf("after the spacing: %+v, %d evictions; want allowed, %d evicted", d, tb.Stats().Evictions, capKeys)
	}
}

// BenchmarkSweep measures a sweep that visits every key and removes none (the
// work a sweep at the cap does when nothing is reclaimable), per key; the cost
// keycap.CapSweepSpacing is set against.
func BenchmarkSweep(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			r := MustRule(Limit{Tokens: 1, Period: time.Hour, Burst: 2})
			tb := NewTable[int](r, TableOptions{Presize: n})
			for i := range n {
				tb.AllowNAt(i, hour, 1) // not full for an hour: no sweep removes it
			}
			b.ResetTimer()
			for b.Loop() {
				if tb.SweepAt(hour) != 0 {
					b.Fatal("removed a bucket")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/key")
		})
	}
}

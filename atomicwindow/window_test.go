package atomicwindow

import (
	"errors"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// The exact window (3 in 10 s) by hand, at a base time of an hour: each
// admission counts as made at the last nanosecond of its microsecond.
const hour = atomicbucket.Time(time.Hour)

func TestWindowExactByHand(t *testing.T) {
	w := NewWindow(MustRule(3, 10*time.Second))
	if !w.Rule().Exact() || w.Rule().Grain() != time.Microsecond || w.Rule().StateBytes() != 32 {
		t.Fatalf("3 in 10 s: exact %v, grain %v, %d bytes a key; want exact, 1µs, 32", w.Rule().Exact(), w.Rule().Grain(), w.Rule().StateBytes())
	}
	s := atomicbucket.Time(time.Second)
	for i, c := range []struct {
		at   atomicbucket.Time
		cost int64
		want atomicbucket.Decision
	}{
		{0, 1, atomicbucket.Decision{Allowed: true, Remaining: 2, Reset: 10*time.Second + 999}},
		{s, 2, atomicbucket.Decision{Allowed: true, Remaining: 0, Reset: 10*time.Second + 999}},
		// the unit at 0 (held at 999 ns) leaves at 10 s + 999 ns
		{2 * s, 1, atomicbucket.Decision{Remaining: 0, Reset: 9*time.Second + 999, RetryAfter: 8*time.Second + 999}},
		{10*s + 998, 1, atomicbucket.Decision{Remaining: 0, Reset: time.Second + 1, RetryAfter: 1}},
		{10*s + 999, 1, atomicbucket.Decision{Allowed: true, Remaining: 0, Reset: 10 * time.Second}},
		{10*s + 999, 4, atomicbucket.Decision{Remaining: 0, Reset: 10 * time.Second, RetryAfter: atomicbucket.Never}},
		{10*s + 999, -1, atomicbucket.Decision{Remaining: 0, Reset: 10 * time.Second, RetryAfter: atomicbucket.Never}},
		{10*s + 999, 0, atomicbucket.Decision{Allowed: true, Remaining: 0, Reset: 10 * time.Second}},
		// the two at 1 s leave at 11 s + 999 ns; the one at 10 s + 999 ns stays
		{12 * s, 3, atomicbucket.Decision{Remaining: 2, Reset: 8*time.Second + 999, RetryAfter: 8*time.Second + 999}},
		{12 * s, 2, atomicbucket.Decision{Allowed: true, Remaining: 0, Reset: 10*time.Second + 999}},
	} {
		if got := w.AllowNAt(hour+c.at, c.cost); got != c.want {
			t.Errorf("step %d, at %v, cost %d: %+v, want %+v", i, time.Duration(c.at), c.cost, got, c.want)
		}
	}
}

// The counted window (100 in 16 s: sub-windows of a second) by hand, at a
// base time of an hour (sub-window 3600): a unit counts until its
// sub-window's end plus the window.
func TestWindowCountedByHand(t *testing.T) {
	w := NewWindow(MustRule(100, 16*time.Second))
	if w.Rule().Exact() || w.Rule().Grain() != time.Second || w.Rule().StateBytes() != 8*(2+Slices) {
		t.Fatalf("100 in 16 s: exact %v, grain %v, %d bytes a key; want counted, 1s, %d", w.Rule().Exact(), w.Rule().Grain(), w.Rule().StateBytes(), 8*(2+Slices))
	}
	s := atomicbucket.Time(time.Second)
	for i, c := range []struct {
		at   atomicbucket.Time
		cost int64
		want atomicbucket.Decision
	}{
		{s / 2, 100, atomicbucket.Decision{Allowed: true, Remaining: 0, Reset: 16*time.Second + 500*time.Millisecond - 1}},
		// held at 3601 s − 1 ns: counted until 3617 s − 1 ns
		{16 * s, 1, atomicbucket.Decision{Remaining: 0, Reset: time.Second - 1, RetryAfter: time.Second - 1}},
		{17*s - 2, 1, atomicbucket.Decision{Remaining: 0, Reset: 1, RetryAfter: 1}},
		{17*s - 1, 1, atomicbucket.Decision{Allowed: true, Remaining: 99, Reset: 16 * time.Second}},
		// sub-window 3617, with sub-window 3616's 1 frozen behind it
		{17*s + s/2, 99, atomicbucket.Decision{Allowed: true, Remaining: 0, Reset: 16*time.Second + 500*time.Millisecond - 1}},
		{32 * s, 1, atomicbucket.Decision{Remaining: 0, Reset: 2*time.Second - 1, RetryAfter: time.Second - 1}},
		{32 * s, 2, atomicbucket.Decision{Remaining: 0, Reset: 2*time.Second - 1, RetryAfter: 2*time.Second - 1}},
		{33*s - 1, 1, atomicbucket.Decision{Allowed: true, Remaining: 0, Reset: 16 * time.Second}},
		// 20 s later, everything has left
		{53 * s, 100, atomicbucket.Decision{Allowed: true, Remaining: 0, Reset: 17*time.Second - 1}},
	} {
		if got := w.AllowNAt(hour+c.at, c.cost); got != c.want {
			t.Errorf("step %d, at %v, cost %d: %+v, want %+v", i, time.Duration(c.at), c.cost, got, c.want)
		}
	}
}

func TestWindowRuleRefuses(t *testing.T) {
	for _, c := range []struct {
		limit  int64
		window time.Duration
	}{
		{0, time.Second},
		{-1, time.Second},
		{LimitMax + 1, time.Hour},
		{10, 0},
		{10, 999 * time.Nanosecond},
		{10, time.Second + 1},
		{10, atomicbucket.MaxUptime + time.Microsecond},
		{65, 39 * time.Millisecond},      // sub-windows shorter than SliceMin
		{65, 40*time.Millisecond + 1000}, // 40001000 ns: not a multiple of 16
	} {
		_, err := NewRule(c.limit, c.window)
		if !errors.Is(err, atomicbucket.ErrInvalidLimit) {
			t.Errorf("%d in %v: %v, want ErrInvalidLimit", c.limit, c.window, err)
		}
	}
}

// An empty window holds nothing: a sweep reclaims the key only once its window
// has been empty for SweepGrace, and a key that comes back is fresh.
func TestWindowTableReclaims(t *testing.T) {
	tbl := NewTable[string](MustRule(2, time.Minute), atomicbucket.TableOptions{MaxKeys: 1})
	if !tbl.AllowAt("a", hour) || !tbl.AllowAt("a", hour) || tbl.AllowAt("a", hour) {
		t.Fatal("2 in a minute: the first two should pass, the third not")
	}
	if d := tbl.AllowNAt("b", hour+atomicbucket.Time(time.Second), 1); d.Allowed || d.RetryAfter != time.Minute-time.Second+999+atomicbucket.SweepGrace {
		t.Fatalf("a second key at the cap of 1: %+v, want denied until a's window has been empty for the grace", d)
	}
	empty := hour + atomicbucket.Time(time.Minute+999)
	if n := tbl.SweepAt(empty + atomicbucket.Time(atomicbucket.SweepGrace) - 1); n != 0 {
		t.Fatalf("a sweep within the grace removed %d keys", n)
	}
	if n := tbl.SweepAt(empty + atomicbucket.Time(atomicbucket.SweepGrace)); n != 1 || tbl.Len() != 0 {
		t.Fatalf("a sweep after the grace removed %d keys, %d left; want 1, 0", n, tbl.Len())
	}
	if d := tbl.AllowNAt("a", empty+atomicbucket.Time(atomicbucket.SweepGrace), 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("a comes back: %+v, want its whole window", d)
	}
	if st := tbl.Stats(); st.Keys != 1 || st.Evictions != 1 || st.AtCapHits != 1 {
		t.Fatalf("stats %+v, want 1 key, 1 eviction, 1 cap hit", st)
	}
}

// A key's own numbers on a window table: one customer's quota raised, then
// cut below what its window holds, then taken away; the table's own
// numbers change for the others only.
func TestWindowKeyNumbers(t *testing.T) {
	tbl := NewTable[string](MustRule(3, time.Minute), atomicbucket.TableOptions{})
	at := func(s int) atomicbucket.Time { return hour + atomicbucket.Time(s)*atomicbucket.Time(time.Second) }
	for i := range 3 {
		if !tbl.AllowAt("a", at(i)) || !tbl.AllowAt("b", at(i)) {
			t.Fatalf("admission %d of 3 denied", i)
		}
	}
	five := atomicbucket.Numbers{Tokens: 5, Period: time.Minute, Burst: 5}
	if err := tbl.SetKeyNumbersAt(at(3), "a", five, 1); err != nil {
		t.Fatal(err)
	}
	if n, o := tbl.KeyNumbersFor("a"); n != five || o != atomicbucket.FromKeyOverride || tbl.KeysWithNumbers() != 1 {
		t.Errorf("a's numbers %v %v (%d keys with their own), want %v, a key's own, 1", n, o, tbl.KeysWithNumbers(), five)
	}
	// a holds its 3 and takes 2 more; b stays at 3 a minute.
	if d := tbl.AllowNAt("a", at(4), 2); !d.Allowed || d.Remaining != 0 {
		t.Errorf("a, 5 a minute holding 3: 2 more %+v, want allowed, 0 left", d)
	}
	if tbl.AllowAt("b", at(4)) {
		t.Error("b, 3 a minute holding 3: admitted")
	}
	// The table's numbers change for b, not for a.
	if err := tbl.SetNumbers(atomicbucket.Numbers{Tokens: 10, Period: time.Minute, Burst: 10}, 1); err != nil {
		t.Fatal(err)
	}
	if !tbl.AllowAt("b", at(5)) || tbl.AllowAt("a", at(5)) {
		t.Error("after the table's 10 a minute: want b admitted, a (5 of its own, full) denied")
	}
	// Cut a to 2 a minute: its 5 (at 0, 1, 2 and two at 4 s) stay counted
	// until 4 of them have left: the first at 4 s leaves at 64 s + 999 ns.
	if err := tbl.SetKeyNumbersAt(at(6), "a", atomicbucket.Numbers{Tokens: 2, Period: time.Minute, Burst: 2}, 1); err != nil {
		t.Fatal(err)
	}
	if d := tbl.PeekAt("a", at(30), 1); d.Allowed || d.RetryAfter != 34*time.Second+999 {
		t.Errorf("a cut to 2 a minute holding 5: %+v, want denied until the fourth oldest leaves (at 64 s + 999 ns)", d)
	}
	// Taken away: a has the table's 10 a minute, its 5 still counted.
	tbl.ClearKeyNumbersAt(at(31), "a")
	if n, o := tbl.KeyNumbersFor("a"); o != atomicbucket.FromOverride || n.Tokens != 10 || tbl.KeysWithNumbers() != 0 {
		t.Errorf("a's numbers after the clear: %v %v, want the table's 10, an override", n, o)
	}
	if d := tbl.AllowNAt("a", at(31), 5); !d.Allowed || d.Remaining != 0 {
		t.Errorf("a back on 10 a minute holding 5: 5 more %+v, want allowed, 0 left", d)
	}
	if err := tbl.SetKeyNumbersAt(at(32), "", five, 1); !errors.Is(err, atomicbucket.ErrEmptyKey) {
		t.Errorf("the empty key: %v, want ErrEmptyKey", err)
	}
	if err := tbl.SetKeyNumbersAt(at(32), "a", atomicbucket.Numbers{Tokens: 5, Period: time.Minute, Burst: 4}, 1); !errors.Is(err, ErrNumbers) {
		t.Errorf("a burst other than the limit: %v, want ErrNumbers", err)
	}
	if err := tbl.SetKeyNumbersAt(at(32), "a", atomicbucket.Numbers{Tokens: 2, Period: time.Minute, Burst: 2}, 3); !errors.Is(err, ErrNumbers) {
		t.Errorf("a limit below the default cost: %v, want ErrNumbers", err)
	}
	if _, o := tbl.KeyNumbersFor("a"); o == atomicbucket.FromKeyOverride {
		t.Error("a refused change gave a numbers of its own")
	}
}

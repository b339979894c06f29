package atomicbucket

import (
	"errors"
	"testing"
	"time"
)

// The exact window (3 in 10 s) by hand, at a base time of an hour: each
// admission counts as made at the last nanosecond of its microsecond.
func TestWindowExactByHand(t *testing.T) {
	w := NewWindow(MustWindowRule(3, 10*time.Second))
	if !w.Rule().Exact() || w.Rule().Grain() != time.Microsecond || w.Rule().StateBytes() != 32 {
		t.Fatalf("3 in 10 s: exact %v, grain %v, %d bytes a key; want exact, 1µs, 32", w.Rule().Exact(), w.Rule().Grain(), w.Rule().StateBytes())
	}
	s := Time(time.Second)
	for i, c := range []struct {
		at   Time
		cost int64
		want Decision
	}{
		{0, 1, Decision{Allowed: true, Remaining: 2, Reset: 10*time.Second + 999}},
		{s, 2, Decision{Allowed: true, Remaining: 0, Reset: 10*time.Second + 999}},
		// the unit at 0 (held at 999 ns) leaves at 10 s + 999 ns
		{2 * s, 1, Decision{Remaining: 0, Reset: 9*time.Second + 999, RetryAfter: 8*time.Second + 999}},
		{10*s + 998, 1, Decision{Remaining: 0, Reset: time.Second + 1, RetryAfter: 1}},
		{10*s + 999, 1, Decision{Allowed: true, Remaining: 0, Reset: 10 * time.Second}},
		{10*s + 999, 4, Decision{Remaining: 0, Reset: 10 * time.Second, RetryAfter: Never}},
		{10*s + 999, -1, Decision{Remaining: 0, Reset: 10 * time.Second, RetryAfter: Never}},
		{10*s + 999, 0, Decision{Allowed: true, Remaining: 0, Reset: 10 * time.Second}},
		// the two at 1 s leave at 11 s + 999 ns; the one at 10 s + 999 ns stays
		{12 * s, 3, Decision{Remaining: 2, Reset: 8*time.Second + 999, RetryAfter: 8*time.Second + 999}},
		{12 * s, 2, Decision{Allowed: true, Remaining: 0, Reset: 10*time.Second + 999}},
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
	w := NewWindow(MustWindowRule(100, 16*time.Second))
	if w.Rule().Exact() || w.Rule().Grain() != time.Second || w.Rule().StateBytes() != 8*(2+WindowSlices) {
		t.Fatalf("100 in 16 s: exact %v, grain %v, %d bytes a key; want counted, 1s, %d", w.Rule().Exact(), w.Rule().Grain(), w.Rule().StateBytes(), 8*(2+WindowSlices))
	}
	s := Time(time.Second)
	for i, c := range []struct {
		at   Time
		cost int64
		want Decision
	}{
		{s / 2, 100, Decision{Allowed: true, Remaining: 0, Reset: 16*time.Second + 500*time.Millisecond - 1}},
		// held at 3601 s − 1 ns: counted until 3617 s − 1 ns
		{16 * s, 1, Decision{Remaining: 0, Reset: time.Second - 1, RetryAfter: time.Second - 1}},
		{17*s - 2, 1, Decision{Remaining: 0, Reset: 1, RetryAfter: 1}},
		{17*s - 1, 1, Decision{Allowed: true, Remaining: 99, Reset: 16 * time.Second}},
		// sub-window 3617, with sub-window 3616's 1 frozen behind it
		{17*s + s/2, 99, Decision{Allowed: true, Remaining: 0, Reset: 16*time.Second + 500*time.Millisecond - 1}},
		{32 * s, 1, Decision{Remaining: 0, Reset: 2*time.Second - 1, RetryAfter: time.Second - 1}},
		{32 * s, 2, Decision{Remaining: 0, Reset: 2*time.Second - 1, RetryAfter: 2*time.Second - 1}},
		{33*s - 1, 1, Decision{Allowed: true, Remaining: 0, Reset: 16 * time.Second}},
		// 20 s later, everything has left
		{53 * s, 100, Decision{Allowed: true, Remaining: 0, Reset: 17*time.Second - 1}},
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
		{WindowLimitMax + 1, time.Hour},
		{10, 0},
		{10, 999 * time.Nanosecond},
		{10, time.Second + 1},
		{10, MaxUptime + time.Microsecond},
		{65, 39 * time.Millisecond},      // sub-windows shorter than WindowSliceMin
		{65, 40*time.Millisecond + 1000}, // 40001000 ns: not a multiple of 16
	} {
		_, err := NewWindowRule(c.limit, c.window)
		if !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%d in %v: %v, want ErrInvalidLimit", c.limit, c.window, err)
		}
	}
}

// An empty window holds nothing: a sweep reclaims the key only once its window
// has been empty for SweepGrace, and a key that comes back is fresh.
func TestWindowTableReclaims(t *testing.T) {
	tbl := NewWindowTable[string](MustWindowRule(2, time.Minute), TableOptions{MaxKeys: 1})
	if !tbl.AllowAt("a", hour) || !tbl.AllowAt("a", hour) || tbl.AllowAt("a", hour) {
		t.Fatal("2 in a minute: the first two should pass, the third not")
	}
	if d := tbl.AllowNAt("b", hour+Time(time.Second), 1); d.Allowed || d.RetryAfter != time.Minute-time.Second+999+SweepGrace {
		t.Fatalf("a second key at the cap of 1: %+v, want denied until a's window has been empty for the grace", d)
	}
	empty := hour + Time(time.Minute+999)
	if n := tbl.SweepAt(empty + Time(SweepGrace) - 1); n != 0 {
		t.Fatalf("a sweep within the grace removed %d keys", n)
	}
	if n := tbl.SweepAt(empty + Time(SweepGrace)); n != 1 || tbl.Len() != 0 {
		t.Fatalf("a sweep after the grace removed %d keys, %d left; want 1, 0", n, tbl.Len())
	}
	if d := tbl.AllowNAt("a", empty+Time(SweepGrace), 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("a comes back: %+v, want its whole window", d)
	}
	if st := tbl.Stats(); st.Keys != 1 || st.Evictions != 1 || st.AtCapHits != 1 {
		t.Fatalf("stats %+v, want 1 key, 1 eviction, 1 cap hit", st)
	}
}

package fuzz

import (
	"math"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
)

// FuzzRule feeds arbitrary numbers to NewRule. It must never panic; every rule
// it accepts must keep its promises at the edges of its budget (no overflow at
// MaxUptime with reservations MaxWait ahead, relative error ≤ MaxRelativeError)
// and, when exact, decide a burst, a denial and a reservation like the reference.
func FuzzRule(f *testing.F) {
	f.Add(int64(10), int64(time.Second), int64(5), int64(-1), uint8(0))
	f.Add(int64(3), int64(time.Second), int64(1), int64(0), uint8(1))
	f.Add(int64(999_999), int64(time.Second), int64(10), int64(-1), uint8(0))
	f.Add(int64(1), int64(20*365*24*time.Hour), int64(2), int64(-1), uint8(0))
	f.Add(int64(1)<<40, int64(1), int64(1), int64(-1), uint8(1))
	f.Add(int64(97), int64(time.Millisecond), int64(63083), int64(144), uint8(2))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), uint8(3))
	f.Fuzz(func(t *testing.T, tokens, period, burst, initial int64, flags uint8) {
		l := atomicbucket.Limit{Tokens: tokens, Period: time.Duration(period), Burst: burst}
		switch flags % 4 {
		case 1:
			l.Refill = atomicbucket.Interval
		case 2:
			l.Refill, l.Aligned = atomicbucket.Interval, true
		case 3:
			l.Aligned = true // invalid: aligned greedy
		}
		if initial >= 0 {
			l.Initial, l.InitialSet = initial, true
		}
		r, err := atomicbucket.NewRule(l)
		if err != nil {
			return
		}
		if e := r.RelativeError(); e < 0 || e > atomicbucket.MaxRelativeError {
			t.Fatalf("%+v: accepted with relative error %g", l, e)
		}
		sane := func(what string, d atomicbucket.Decision) {
			if d.Remaining < 0 || d.Remaining > l.Burst || d.Reset < 0 || d.RetryAfter < 0 || d.Allowed && d.RetryAfter != 0 {
				t.Fatalf("%+v: %s: insane decision %+v", l, what, d)
			}
		}
		// The far edge of the budget.
		end := atomicbucket.Time(atomicbucket.MaxUptime)
		b := atomicbucket.NewBucketAt(r, end)
		res := b.ReserveAt(end, l.Burst, atomicbucket.MaxWait)
		if !res.OK && l.InitialSet && l.Initial < l.Burst {
			res = b.ReserveAt(end, l.Burst-l.Initial, atomicbucket.MaxWait)
		}
		sane("after a reservation at MaxUptime", b.AllowNAt(end, l.Burst))
		sane("peek at MaxUptime", b.PeekAt(end, 1))
		res.CancelAt(end)
		sane("after cancelling", b.PeekAt(end, l.Burst))

		if !r.Exact() {
			return
		}
		// Exact rules agree with the reference on a short program.
		t0 := int64(time.Hour)
		ref := reference.NewReference(reference.SingleParamsOf(&r))
		bk := atomicbucket.NewBucketAt(r, atomicbucket.Time(t0))
		step := min(max(period/tokens, 1), (int64(end)-t0)/4) // stay inside MaxUptime, where time stops
		for i, at := range []int64{t0, t0, t0 + 1, t0 + step, t0 + 3*step} {
			for _, cost := range []int64{l.Burst, 1, 0} {
				got, want := bk.AllowNAt(atomicbucket.Time(at), cost), ref.AllowN("", at, cost)
				if got != want {
					t.Fatalf("%+v: step %d cost %d: %s, reference %s", l, i, cost, describe(got), describe(want))
				}
			}
		}
	})
}

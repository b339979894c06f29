package genimpl

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Global answers as the bucket under it does: random calls at explicit
// times through a Global and directly on a twin bucket get the same
// decisions; Allow takes the default cost; numbers below a request's cost
// are refused, changing nothing.
func TestGlobalAnswersAsItsBucket(t *testing.T) {
	for _, cost := range []int64{1, 4} {
		l := atomicbucket.Limit{Tokens: 9, Period: time.Second, Burst: 16}
		g := NewGlobal(atomicbucket.NewBucketAt(atomicbucket.MustRule(l), 0), Cost{Default: cost})
		twin := atomicbucket.NewBucketAt(atomicbucket.MustRule(l), 0)
		rng := rand.New(rand.NewPCG(uint64(cost), 31))
		now := atomicbucket.Time(0)
		for i := range 20000 {
			now += atomicbucket.Time(rng.Int64N(int64(40 * time.Millisecond)))
			n := rng.Int64N(18)
			switch rng.IntN(8) {
			case 0:
				if got, want := g.AllowAt(now), twin.AllowNAt(now, cost).Allowed; got != want {
					t.Fatalf("cost %d, step %d: AllowAt = %v, the bucket %v", cost, i, got, want)
				}
			case 1:
				if got, want := g.AllowNAt(now, n), twin.AllowNAt(now, n); got != want {
					t.Fatalf("cost %d, step %d: AllowNAt(%d) = %+v, the bucket %+v", cost, i, n, got, want)
				}
			case 2:
				if got, want := g.PeekAt(now, n), twin.PeekAt(now, n); got != want {
					t.Fatalf("cost %d, step %d: PeekAt = %+v, the bucket %+v", cost, i, got, want)
				}
			case 3:
				g.RefundAt(now, n)
				twin.RefundAt(now, n)
			case 4:
				r1, r2 := g.ReserveAt(now, n, time.Second), twin.ReserveAt(now, n, time.Second)
				if r1.OK != r2.OK || r1.Delay != r2.Delay {
					t.Fatalf("cost %d, step %d: ReserveAt = %v %v, the bucket %v %v", cost, i, r1.OK, r1.Delay, r2.OK, r2.Delay)
				}
			case 5:
				g.ResetAt(now)
				twin.ResetAt(now)
			case 6:
				nums := atomicbucket.Numbers{Tokens: 1 + n, Period: time.Second, Burst: 4 + n}
				if e1, e2 := g.SetNumbersAt(now, nums, atomicbucket.CarryAsIs), twin.SetNumbersAt(now, nums, atomicbucket.CarryAsIs); e1 != nil || e2 != nil {
					t.Fatalf("cost %d, step %d: SetNumbersAt(%v): %v, the bucket %v", cost, i, nums, e1, e2)
				}
			case 7:
				g.ClearNumbersAt(now, atomicbucket.CarryAsIs)
				twin.ClearNumbersAt(now, atomicbucket.CarryAsIs)
			}
			n1, o1 := g.NumbersFor()
			n2, o2 := twin.NumbersFor()
			if n1 != n2 || o1 != o2 {
				t.Fatalf("cost %d, step %d: NumbersFor = %v %v, the bucket %v %v", cost, i, n1, o1, n2, o2)
			}
		}
	}
	g := NewGlobal(atomicbucket.NewBucketAt(atomicbucket.MustRule(atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 20}), 0), Cost{Default: 5})
	if err := g.SetNumbers(atomicbucket.Numbers{Tokens: 1, Period: time.Second, Burst: 4}, atomicbucket.CarryAsIs); !errors.Is(err, atomicbucket.ErrInvalidLimit) {
		t.Errorf("a burst of 4 under a cost of 5: %v, want ErrInvalidLimit", err)
	}
	if _, o := g.NumbersFor(); o != atomicbucket.FromPolicy {
		t.Errorf("after the refusal: numbers from %v, want the policy's", o)
	}
	allowed := 0
	for range 6 {
		if g.AllowAt(0) {
			allowed++
		}
	}
	if allowed != 4 {
		t.Errorf("Allow at a default cost of 5 from a burst of 20: %d allowed, want 4", allowed)
	}
}

package genimpl

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Keyed answers as the table under it does: a random sequence of calls at
// explicit times, made through a Keyed over one table and directly on a twin
// table, gets the same decisions (its parameters in their order, Allow at the
// default cost, numbers given and taken away per key and for all).
func TestKeyedAnswersAsItsTable(t *testing.T) {
	for _, cost := range []int64{1, 3} {
		l := atomicbucket.Limit{Tokens: 7, Period: time.Second, Burst: 12}
		k := NewKeyed(atomicbucket.NewTable[string](atomicbucket.MustRule(l), atomicbucket.TableOptions{}), Cost{Default: cost}, NonEmpty)
		twin := atomicbucket.NewTable[string](atomicbucket.MustRule(l), atomicbucket.TableOptions{})
		rng := rand.New(rand.NewPCG(uint64(cost), 29))
		keys := []string{"a", "b", "c"}
		now := atomicbucket.Time(0)
		for i := range 20000 {
			now += atomicbucket.Time(rng.Int64N(int64(60 * time.Millisecond)))
			key := keys[rng.IntN(len(keys))]
			n := rng.Int64N(14)
			switch op := rng.IntN(11); op {
			case 0:
				if got, want := k.AllowAt(key, now), twin.AllowNAt(key, now, cost).Allowed; got != want {
					t.Fatalf("cost %d, step %d: AllowAt(%s) = %v, the table %v", cost, i, key, got, want)
				}
			case 1:
				if got, want := k.AllowNAt(key, now, n), twin.AllowNAt(key, now, n); got != want {
					t.Fatalf("cost %d, step %d: AllowNAt(%s, %d) = %+v, the table %+v", cost, i, key, n, got, want)
				}
			case 2:
				if got, want := k.PeekAt(key, now, n), twin.PeekAt(key, now, n); got != want {
					t.Fatalf("cost %d, step %d: PeekAt = %+v, the table %+v", cost, i, got, want)
				}
			case 3:
				k.RefundAt(key, now, n)
				twin.RefundAt(key, now, n)
			case 4:
				r1, r2 := k.ReserveAt(key, now, n, time.Second), twin.ReserveAt(key, now, n, time.Second)
				if r1.OK != r2.OK || r1.Delay != r2.Delay {
					t.Fatalf("cost %d, step %d: ReserveAt = %v %v, the table %v %v", cost, i, r1.OK, r1.Delay, r2.OK, r2.Delay)
				}
			case 5:
				k.ResetAt(key, now)
				twin.ResetAt(key, now)
			case 6:
				nums := atomicbucket.Numbers{Tokens: 1 + n, Period: time.Second, Burst: 3 + n}
				e1, e2 := k.SetKeyNumbersAt(key, now, nums, atomicbucket.CarryAsIs), twin.SetKeyNumbersAt(now, key, nums, atomicbucket.CarryAsIs)
				if e1 != nil || e2 != nil {
					t.Fatalf("cost %d, step %d: SetKeyNumbersAt(%v): %v, the table %v", cost, i, nums, e1, e2)
				}
			case 7:
				k.ClearKeyNumbersAt(key, now, atomicbucket.CarryAsIs)
				twin.ClearKeyNumbersAt(now, key, atomicbucket.CarryAsIs)
			case 8:
				nums := atomicbucket.Numbers{Tokens: 2 + n, Period: time.Second, Burst: 4 + n}
				e1, e2 := k.SetNumbersAt(now, nums, atomicbucket.CarryAsIs), twin.SetNumbersAt(now, nums, atomicbucket.CarryAsIs)
				if e1 != nil || e2 != nil {
					t.Fatalf("cost %d, step %d: SetNumbersAt(%v): %v, the table %v", cost, i, nums, e1, e2)
				}
			case 9:
				k.ClearNumbersAt(now, atomicbucket.CarryAsIs)
				twin.ClearNumbersAt(now, atomicbucket.CarryAsIs)
			case 10:
				n1, o1 := k.NumbersFor(key)
				n2, o2 := twin.NumbersFor(key)
				if n1 != n2 || o1 != o2 {
					t.Fatalf("cost %d, step %d: NumbersFor = %v %v, the table %v %v", cost, i, n1, o1, n2, o2)
				}
			}
		}
		if k.Len() != twin.Len() || k.Rule().Limit() != twin.Rule().Limit() {
			t.Errorf("cost %d: %d keys and rule %+v, the table %d and %+v", cost, k.Len(), k.Rule().Limit(), twin.Len(), twin.Rule().Limit())
		}
	}
}

// Keyed refuses, changing nothing, what its table would take but a policy
// would not: numbers for a key no door checks (keyOK), and a burst below a
// request's default cost (as the generator refuses such a policy).
func TestKeyedRefuses(t *testing.T) {
	l := atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 20}
	k := NewKeyed(atomicbucket.NewTable[string](atomicbucket.MustRule(l), atomicbucket.TableOptions{}), Cost{Default: 5}, func(key string) bool { return key != "" && key != "nobody" })
	if err := k.SetKeyNumbers("nobody", atomicbucket.Numbers{Tokens: 1, Period: time.Second, Burst: 50}, atomicbucket.CarryAsIs); !errors.Is(err, atomicbucket.ErrEmptyKey) {
		t.Errorf("SetKeyNumbers for a key keyOK refuses: %v, want ErrEmptyKey", err)
	}
	low := atomicbucket.Numbers{Tokens: 1, Period: time.Second, Burst: 4}
	if err := k.SetKeyNumbers("alice", low, atomicbucket.CarryAsIs); !errors.Is(err, atomicbucket.ErrInvalidLimit) {
		t.Errorf("SetKeyNumbers with a burst of 4 under a cost of 5: %v, want ErrInvalidLimit", err)
	}
	if err := k.SetNumbers(low, atomicbucket.CarryAsIs); !errors.Is(err, atomicbucket.ErrInvalidLimit) {
		t.Errorf("SetNumbers with a burst of 4 under a cost of 5: %v, want ErrInvalidLimit", err)
	}
	for _, key := range []string{"nobody", "alice", "bob"} {
		if n, o := k.NumbersFor(key); n != atomicbucket.NumbersOf(l) || o != atomicbucket.FromPolicy {
			t.Errorf("%s after the refusals: %v from %v, want the policy's", key, n, o)
		}
	}
	// Allow takes the default cost: 20 tokens are four requests of 5.
	allowed := 0
	for range 6 {
		if k.AllowAt("alice", 0) {
			allowed++
		}
	}
	if allowed != 4 {
		t.Errorf("AllowAt at a default cost of 5 from a burst of 20: %d allowed, want 4", allowed)
	}
	// Allow reads the clock itself; 5 tokens come back in half a second, far
	// more than six calls take.
	allowed = 0
	for range 6 {
		if k.Allow("bob") {
			allowed++
		}
	}
	if allowed != 4 {
		t.Errorf("Allow at a default cost of 5 from a burst of 20: %d allowed, want 4", allowed)
	}
}

// A limiter holds the most a request of its routes may cost: numbers whose
// burst is below it are refused, naming the route, and nothing changes.
func TestCostMost(t *testing.T) {
	l := atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 20}
	c := Cost{Default: 2, Most: 5, Of: `route "POST /upload"`}
	k := NewKeyed(atomicbucket.NewTable[string](atomicbucket.MustRule(l), atomicbucket.TableOptions{}), c, NonEmpty)
	g := NewGlobal(atomicbucket.NewBucketAt(atomicbucket.MustRule(l), 0), c)
	low := atomicbucket.Numbers{Tokens: 1, Period: time.Second, Burst: 4}
	for name, set := range map[string]func() error{
		"Keyed.SetNumbers":    func() error { return k.SetNumbers(low, atomicbucket.CarryAsIs) },
		"Keyed.SetKeyNumbers": func() error { return k.SetKeyNumbers("a", low, atomicbucket.CarryAsIs) },
		"Global.SetNumbers":   func() error { return g.SetNumbers(low, atomicbucket.CarryAsIs) },
	} {
		if err := set(); !errors.Is(err, atomicbucket.ErrInvalidLimit) || !strings.Contains(err.Error(), c.Of) {
			t.Errorf("%s(burst 4) = %v, want a refusal naming %s", name, err, c.Of)
		}
	}
	if n, _ := k.NumbersFor("a"); n.Burst != 20 {
		t.Errorf("a's numbers after the refusals: %v", n)
	}
	if k.MinBurst() != 5 || g.MinBurst() != 5 || k.Cost() != 2 {
		t.Errorf("MinBurst %d, %d, Cost %d; want 5, 5, 2", k.MinBurst(), g.MinBurst(), k.Cost())
	}
	if err := k.CheckBurst(atomicbucket.Numbers{Tokens: 1, Period: time.Second, Burst: 5}); err != nil {
		t.Errorf("burst 5: %v", err)
	}
}

func TestAddForgivenSaturates(t *testing.T) {
	for _, c := range [][3]int64{{0, 0, 0}, {3, 4, 7}, {math.MaxInt64 - 1, 1, math.MaxInt64}, {math.MaxInt64 - 1, math.MaxInt64 - 1, math.MaxInt64}} {
		if got := AddForgiven(c[0], c[1]); got != c[2] {
			t.Errorf("AddForgiven(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}

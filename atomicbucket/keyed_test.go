package atomicbucket

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// Keyed answers as the table under it does: a random sequence of calls at
// explicit times, made through a Keyed over one table and directly on a twin
// table, gets the same decisions (its parameters in their order, Allow at the
// default cost, numbers given and taken away per key and for all).
func TestKeyedAnswersAsItsTable(t *testing.T) {
	for _, cost := range []int64{1, 3} {
		l := Limit{Tokens: 7, Period: time.Second, Burst: 12}
		k := NewKeyed(NewTable[string](MustRule(l), TableOptions{}), cost, NonEmpty)
		twin := NewTable[string](MustRule(l), TableOptions{})
		rng := rand.New(rand.NewPCG(uint64(cost), 29))
		keys := []string{"a", "b", "c"}
		now := Time(0)
		for i := range 20000 {
			now += Time(rng.Int64N(int64(60 * time.Millisecond)))
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
				nums := Numbers{Tokens: 1 + n, Period: time.Second, Burst: 3 + n}
				e1, e2 := k.SetKeyNumbersAt(key, now, nums, CarryAsIs), twin.SetKeyNumbersAt(now, key, nums, CarryAsIs)
				if e1 != nil || e2 != nil {
					t.Fatalf("cost %d, step %d: SetKeyNumbersAt(%v): %v, the table %v", cost, i, nums, e1, e2)
				}
			case 7:
				k.ClearKeyNumbersAt(key, now, CarryAsIs)
				twin.ClearKeyNumbersAt(now, key, CarryAsIs)
			case 8:
				nums := Numbers{Tokens: 2 + n, Period: time.Second, Burst: 4 + n}
				e1, e2 := k.SetNumbersAt(now, nums, CarryAsIs), twin.SetNumbersAt(now, nums, CarryAsIs)
				if e1 != nil || e2 != nil {
					t.Fatalf("cost %d, step %d: SetNumbersAt(%v): %v, the table %v", cost, i, nums, e1, e2)
				}
			case 9:
				k.ClearNumbersAt(now, CarryAsIs)
				twin.ClearNumbersAt(now, CarryAsIs)
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
	l := Limit{Tokens: 10, Period: time.Second, Burst: 20}
	k := NewKeyed(NewTable[string](MustRule(l), TableOptions{}), 5, func(key string) bool { return key != "" && key != "nobody" })
	if err := k.SetKeyNumbers("nobody", Numbers{Tokens: 1, Period: time.Second, Burst: 50}, CarryAsIs); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("SetKeyNumbers for a key keyOK refuses: %v, want ErrEmptyKey", err)
	}
	low := Numbers{Tokens: 1, Period: time.Second, Burst: 4}
	if err := k.SetKeyNumbers("alice", low, CarryAsIs); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("SetKeyNumbers with a burst of 4 under a cost of 5: %v, want ErrInvalidLimit", err)
	}
	if err := k.SetNumbers(low, CarryAsIs); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("SetNumbers with a burst of 4 under a cost of 5: %v, want ErrInvalidLimit", err)
	}
	for _, key := range []string{"nobody", "alice", "bob"} {
		if n, o := k.NumbersFor(key); n != NumbersOf(l) || o != FromPolicy {
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

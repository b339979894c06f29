package shared

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// admits counts how many checks of cost 1 of rule for key the binding allows
// out of tries.
func admits(t *testing.T, b *Binding, rule int, key string, tries int) int {
	t.Helper()
	n := 0
	for range tries {
		if b.CheckStep(context.Background(), Step{Rule: rule, Key: key, Cost: 1}).Allowed {
			n++
		}
	}
	return n
}

// TestBindingNumbers: a binding's checks go to the store with the rule in
// force for the key (its own numbers, else the rule's changed ones, else
// the bound ones), every bad change is refused whole, Reset forgets the
// bucket on the store, and the local share follows the numbers in force.
// The fake store's buckets never refill: a bucket admits its burst less what
// was taken.
func TestBindingNumbers(t *testing.T) {
	ctx := context.Background()
	f := newFake(1)
	e := NewEngine(f, time.Second, 0)
	minute := func(burst int64) atomicbucket.Numbers {
		return atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: burst}
	}
	bd, err := e.Bind([]Rule{
		{Name: "a", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 10}, Failure: Failure{Mode: FailLocal, Share: 0.5}},
		{Name: "g", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 10}, Global: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := bd.(*Binding)
	var _ Numbered = b

	if got := admits(t, b, 0, "x", 12); got != 10 {
		t.Fatalf("before any change x admitted %d of 12, want the bound burst 10", got)
	}
	if err := b.SetKeyNumbers([]int{0}, "vip", minute(20)); err != nil {
		t.Fatal(err)
	}
	if got := admits(t, b, 0, "vip", 25); got != 20 {
		t.Errorf("vip with a burst of its own of 20 admitted %d of 25", got)
	}
	if n, o := b.NumbersFor(0, "vip"); n != minute(20) || o != atomicbucket.FromKeyOverride {
		t.Errorf("NumbersFor vip: %v %v", n, o)
	}
	if err := b.SetNumbers(0, minute(4)); err != nil {
		t.Fatal(err)
	}
	if got := admits(t, b, 0, "y", 6); got != 4 {
		t.Errorf("y under the rule's changed burst of 4 admitted %d of 6", got)
	}
	if n, o := b.NumbersFor(0, "y"); n != minute(4) || o != atomicbucket.FromOverride {
		t.Errorf("NumbersFor y: %v %v", n, o)
	}
	if n, o := b.NumbersFor(1, ""); n != minute(10) || o != atomicbucket.FromPolicy {
		t.Errorf("NumbersFor g: %v %v", n, o)
	}

	// Refused whole, with the generator's message or the store's reason.
	bad := []struct {
		name  string
		apply func() error
		is    error
	}{
		{"no tokens", func() error { return b.SetNumbers(0, atomicbucket.Numbers{Period: time.Second, Burst: 3}) }, atomicbucket.ErrInvalidLimit},
		{"too fine for a µs clock", func() error {
			return b.SetNumbers(0, atomicbucket.Numbers{Tokens: 1_000_000_000, Period: time.Second, Burst: 5_000_000_000_000_000})
		}, ErrInvalidNumbers},
		{"a key's on a rule not bound", func() error { return b.SetKeyNumbers([]int{0, 7}, "k", minute(3)) }, ErrInvalidStep},
		{"the empty key of a keyed rule", func() error { return b.SetKeyNumbers([]int{0}, "", minute(3)) }, ErrInvalidStep},
		{"a key on the global rule", func() error { return b.SetKeyNumbers([]int{1}, "k", minute(3)) }, ErrInvalidStep},
	}
	for _, c := range bad {
		if err := c.apply(); !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want an error wrapping %v", c.name, err, c.is)
		}
	}
	if n, o := b.NumbersFor(0, "k"); n != minute(4) || o != atomicbucket.FromOverride {
		t.Errorf("after refused changes, k has %v %v, want the changed rule's", n, o)
	}

	// The store down: the local share (0.5) of the numbers in force decides.
	f.setDown("n0", true)
	if got := admits(t, b, 0, "z", 5); got != 2 {
		t.Errorf("store down, z under half of the changed burst 4 admitted %d of 5", got)
	}
	if got := admits(t, b, 0, "vip", 15); got != 10 {
		t.Errorf("store down, vip under half of its own burst 20 admitted %d of 15", got)
	}
	f.setDown("n0", false)

	if err := b.Reset(ctx, []int{0}, "vip"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(BreakerMaxPause / 20) // let the breaker's pause pass
	for deadline := time.Now().Add(3 * BreakerMaxPause); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if res := b.CheckStep(ctx, Step{Rule: 0, Key: "probe", Cost: 0}); !res.Degraded {
			break
		}
	}
	if got := admits(t, b, 0, "vip", 25); got != 20 {
		t.Errorf("after Reset vip admitted %d of 25, want its whole burst of 20", got)
	}
	b.ClearKeyNumbers([]int{0}, "vip")
	if got := admits(t, b, 0, "vip", 1); got != 0 {
		t.Errorf("vip back on the rule's burst 4, with 20 taken, admitted %d", got)
	}
	b.ClearNumbers(0)
	if n, o := b.NumbersFor(0, "vip"); n != minute(10) || o != atomicbucket.FromPolicy {
		t.Errorf("after both clears vip has %v %v", n, o)
	}
	if err := b.Reset(ctx, []int{1}, "x"); !errors.Is(err, ErrInvalidStep) {
		t.Errorf("Reset of a key on the global rule: %v", err)
	}
}

// TestBindingNumbersLeased: a leased rule's leases are replaced after a
// change of its numbers, so a check spends from a grant made in the numbers
// in force, and the old lease's grant goes back to the store.
func TestBindingNumbersLeased(t *testing.T) {
	f := newFake(1)
	e := NewEngine(f, time.Second, 0)
	bd, err := e.Bind([]Rule{{Name: "l", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 30}, Lease: 8}})
	if err != nil {
		t.Fatal(err)
	}
	b := bd.(*Binding)
	if got := admits(t, b, 0, "k", 3); got != 3 {
		t.Fatalf("admitted %d of 3", got)
	}
	old, ok := b.Leases().Lookup(0, "k")
	if !ok {
		t.Fatal("no lease kept for k")
	}
	if err := b.SetNumbers(0, atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	if got := admits(t, b, 0, "k", 10); got != 2 {
		t.Errorf("after the burst fell to 5, with 3 spent, k admitted %d of 10, want 2", got)
	}
	nl, _ := b.Leases().Lookup(0, "k")
	if nl == old {
		t.Error("the lease made before the change is still in use")
	}
	if nl.burst != 5 {
		t.Errorf("the new lease's burst is %d, want 5", nl.burst)
	}
}

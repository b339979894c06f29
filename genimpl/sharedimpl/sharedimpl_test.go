package sharedimpl

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/genimpl"
	"github.com/limitgen/limitgen/shared"
)

var limit = atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 12}

// keyed is a shared keyed rule of default cost 3 over a fresh table, on s.
func keyed(s *State) Keyed[string] {
	t := atomicbucket.NewTable[string](atomicbucket.MustRule(limit), atomicbucket.TableOptions{})
	return NewKeyed(genimpl.NewKeyed(t, genimpl.Cost{Default: 3}, genimpl.NonEmpty), s, 0, Text)
}

// Without a store every shared rule is decided in this process, whole, and
// says why: the State's error, which wraps shared.ErrNoStore and names the
// package.
func TestNoStoreDecidesHere(t *testing.T) {
	s := Bind("limits", nil, []shared.Rule{{Namespace: "svc", Name: "R", Limit: limit}}, 2)
	if !errors.Is(s.Err(), shared.ErrNoStore) || !strings.HasPrefix(s.Err().Error(), "limits: ") {
		t.Fatalf("Err() = %v, want limits: … shared.ErrNoStore", s.Err())
	}
	if len(s.Windows) != 2 || s.Bound != nil {
		t.Fatalf("State = %+v, want no binding and room for 2 windows", s)
	}
	l := keyed(s)
	ctx := context.Background()
	for i := range 4 { // a burst of 12 at the default cost of 3
		if !l.Allow(ctx, "ann") {
			t.Fatalf("Allow #%d denied", i+1)
		}
	}
	res := l.AllowN(ctx, "ann", 1)
	if res.Allowed || res.Err != s.Why || res.Degraded {
		t.Fatalf("AllowN after the burst = %+v, want a denial carrying the State's error", res)
	}
	if err := l.Wait(ctx, "bob", 13); err == nil {
		t.Fatal("Wait for more than the burst returned nil")
	}
	g := NewGlobal(genimpl.NewGlobal(atomicbucket.NewBucketAt(atomicbucket.MustRule(limit), atomicbucket.Now()), genimpl.Cost{}), s, 1)
	if d := g.AllowN(ctx, 12); !d.Allowed || d.Err != s.Why {
		t.Fatalf("Global AllowN(12) = %+v, want allowed with the State's error", d)
	}
	if g.Allow(ctx) {
		t.Fatal("Global Allow after its burst allowed")
	}
}

// Numbers change the process-local limiter without a store, and numbers it
// cannot hold (a burst below a request's default cost) change nothing.
func TestNumbersWithoutStore(t *testing.T) {
	l := keyed(Bind("limits", nil, nil, 0))
	ctx := context.Background()
	if err := l.SetNumbers(atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: 2}); err == nil {
		t.Fatal("SetNumbers with a burst of 2 under a cost of 3: no error")
	}
	if _, from := l.NumbersFor("ann"); from != atomicbucket.FromPolicy {
		t.Fatalf("after a refused SetNumbers, ann's numbers come from %v", from)
	}
	six := atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: 6}
	if err := l.SetKeyNumbers("ann", six); err != nil {
		t.Fatal(err)
	}
	if n, from := l.NumbersFor("ann"); n != six || from != atomicbucket.FromKeyOverride {
		t.Fatalf("ann's numbers = %+v from %v, want %+v of her own", n, from, six)
	}
	if !l.Allow(ctx, "ann") || !l.Allow(ctx, "ann") || l.Allow(ctx, "ann") {
		t.Fatal("ann's own burst of 6 does not hold two requests of 3 and no third")
	}
	if err := l.Reset(ctx, "ann"); err != nil || !l.Allow(ctx, "ann") {
		t.Fatalf("after Reset (%v), ann's bucket is not full", err)
	}
	if err := l.ClearKeyNumbers("ann"); err != nil {
		t.Fatal(err)
	}
	if _, from := l.NumbersFor("ann"); from != atomicbucket.FromPolicy {
		t.Fatalf("after ClearKeyNumbers, ann's numbers come from %v", from)
	}
}

// An overlay Set reaches a shared rule through its target, whose keys are
// held to what a store can keep.
func TestKeyedTarget(t *testing.T) {
	l := keyed(Bind("limits", nil, nil, 0))
	tg := KeyedTarget(l, nil)
	for _, bad := range []string{"", strings.Repeat("k", shared.MaxKeyLen+1)} {
		if tg.CheckKey(bad) == nil {
			t.Errorf("CheckKey of a %d-byte key: no error", len(bad))
		}
	}
	if err := tg.CheckKey("ann"); err != nil {
		t.Fatal(err)
	}
	if err := tg.Check(0, atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: 2}); err == nil {
		t.Fatal("Check of a burst below the default cost: no error")
	}
	if b := tg.Base(0); b.Cost != 3 || b.Numbers.Burst != 12 {
		t.Fatalf("Base = %+v, want the policy's burst of 12 and a least burst of 3", b)
	}
	key := "ann"
	nine := atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: 9}
	if err := tg.Set(0, &key, nine); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.NumbersFor("ann"); n != nine {
		t.Fatalf("after Set, ann's numbers = %+v", n)
	}
	tg.Clear(0, &key)
	if _, from := l.NumbersFor("ann"); from != atomicbucket.FromPolicy {
		t.Fatalf("after Clear, ann's numbers come from %v", from)
	}
	ints := KeyedTarget(NewKeyed(genimpl.NewKeyed(atomicbucket.NewTable[int64](atomicbucket.MustRule(limit), atomicbucket.TableOptions{}), genimpl.Cost{}, nil),
		Bind("limits", nil, nil, 0), 0, func(k int64) string { return "" }), nil)
	if ints.CheckKey("7") == nil {
		t.Fatal("a target of int64 keys made without its parse read a key")
	}
}

// Refuse leaves every shared rule in this process: no binding, no window.
func TestRefuse(t *testing.T) {
	s := &State{Windows: make([]*shared.Window, 1), pkg: "limits"}
	s.Windows[0] = &shared.Window{}
	cause := errors.New("no such namespace")
	s.Refuse("the window rule Q", cause)
	if s.Windows[0] != nil || s.Bound != nil || !errors.Is(s.Err(), cause) ||
		s.Err().Error() != "limits: the store refused the window rule Q: no such namespace" {
		t.Fatalf("after Refuse: %+v, Err() = %v", s, s.Err())
	}
}

// A global shared rule's numbers change through its target, whole or not at
// all, and without a store they are the process-local bucket's.
func TestGlobalTarget(t *testing.T) {
	local := genimpl.NewGlobal(atomicbucket.NewBucketAt(atomicbucket.MustRule(limit), atomicbucket.Now()), genimpl.Cost{Default: 4})
	g := NewGlobal(local, Bind("limits", nil, nil, 0), 0)
	tg := GlobalTarget(g)
	if tg.Keyed() || tg.CheckKey("anything") != nil {
		t.Fatal("a global target is keyed, or refuses a key it ignores")
	}
	if err := tg.Check(0, atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: 3}); err == nil {
		t.Fatal("Check of a burst of 3 under a default cost of 4: no error")
	}
	if err := tg.Set(0, nil, atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: 3}); err == nil {
		t.Fatal("Set of a burst of 3 under a default cost of 4: no error")
	}
	if _, from := g.NumbersFor(); from != atomicbucket.FromPolicy {
		t.Fatalf("after a refused Set, the numbers come from %v", from)
	}
	eight := atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: 8}
	if err := tg.Set(0, nil, eight); err != nil {
		t.Fatal(err)
	}
	if n, from := g.NumbersFor(); n != eight || from != atomicbucket.FromOverride {
		t.Fatalf("after Set: %+v from %v", n, from)
	}
	ctx := context.Background()
	if !g.Allow(ctx) || !g.Allow(ctx) || g.Allow(ctx) {
		t.Fatal("a burst of 8 does not hold two requests of 4 and no third")
	}
	if err := g.Reset(ctx); err != nil || !g.Allow(ctx) {
		t.Fatalf("after Reset (%v) the bucket is not full", err)
	}
	tg.Clear(0, nil)
	if _, from := g.NumbersFor(); from != atomicbucket.FromPolicy {
		t.Fatalf("after Clear, the numbers come from %v", from)
	}
	if b := tg.Base(0); b.Cost != 4 || b.Numbers.Burst != 12 {
		t.Fatalf("Base = %+v", b)
	}
}

package overlay_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/genimpl"
	"github.com/limitgen/limitgen/overlay"
)

// Window rules as overlay targets: a Set gives a keyed and a global window
// new numbers (a limit per window, the limit as burst), which their next
// checks go by, a keyed one's key its own; a burst other than the limit and a
// limit under the default cost are refused, naming the rule; scaling
// multiplies the limit by the rate factor; an empty Set returns the policy's.
func TestWindowTargets(t *testing.T) {
	keyed := genimpl.NewKeyedWindow(atomicwindow.NewTable[string](atomicwindow.MustRule(10, time.Minute), atomicbucket.TableOptions{}), 2)
	global := genimpl.NewGlobalWindow(atomicwindow.NewWindow(atomicwindow.MustRule(100, time.Hour)), 1)
	a := overlay.NewApplier(overlay.Policy[overlay.Target]{Rules: map[string]overlay.Target{
		"Exports": overlay.WindowTarget(keyed, nil), "Site": overlay.GlobalWindowTarget(global),
	}})
	set := overlay.Set{
		overlay.NewEntry("t 1", "Exports", "", nil, "4/min", 4),
		overlay.NewEntry("t 2", "Site", "", nil, "1000/d", 1000),
	}
	if err := a.Apply(set); err != nil {
		t.Fatal(err)
	}
	if n, o := keyed.Table().NumbersFor(); n != (atomicbucket.Numbers{Tokens: 4, Period: time.Minute, Burst: 4}) || o != atomicbucket.FromOverride {
		t.Errorf("Exports after the Set: %v from %v", n, o)
	}
	if d := keyed.AllowN("k", 4); !d.Allowed || d.Remaining != 0 {
		t.Errorf("Exports, 4 of a limit of 4: %+v", d)
	}
	if d := global.AllowN(1000); !d.Allowed || d.Remaining != 0 {
		t.Errorf("Site, 1000 of a limit of 1000 a day: %+v", d)
	}
	// A key's own numbers: acme's quota raised, over the rule's 4 a minute.
	key := "acme"
	if err := a.Apply(append(set, overlay.NewEntry("t 3", "Exports", "", &key, "6/min", 6))); err != nil {
		t.Fatal(err)
	}
	if n, o := keyed.NumbersFor("acme"); n != (atomicbucket.Numbers{Tokens: 6, Period: time.Minute, Burst: 6}) || o != atomicbucket.FromKeyOverride {
		t.Errorf("acme after its own 6/min: %v from %v", n, o)
	}
	if d := keyed.AllowN("acme", 6); !d.Allowed {
		t.Errorf("acme, 6 a minute of its own: 6 denied: %+v", d)
	}
	for _, c := range []struct {
		e    overlay.Entry
		want string
	}{
		{overlay.NewEntry("t 4", "Exports", "", nil, "5/min", 6), "limit as burst"},
		{overlay.NewEntry("t 5", "Exports", "", nil, "1/min", 1), "default cost, 2"},
	} {
		err := a.Apply(overlay.Set{c.e})
		if !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.e.Pos) {
			t.Errorf("%s: %v, want a refusal saying %q", c.e.Pos, err, c.want)
		}
	}
	if n, _ := keyed.Table().NumbersFor(); n.Tokens != 4 {
		t.Errorf("a refused Set changed Exports: %v", n)
	}
	if err := a.Apply(overlay.Set{overlay.NewEntry("t 6", "Site", "", &key, "5/min", 5)}); !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), "no keys") {
		t.Errorf("a key's own numbers on a global window: %v, want a refusal", err)
	}
	if err := a.Scale("Site", 500, overlay.One); err != nil {
		t.Fatal(err)
	}
	if n, _ := global.Window().NumbersFor(); n != (atomicbucket.Numbers{Tokens: 500, Period: 24 * time.Hour, Burst: 500}) {
		t.Errorf("Site scaled by 0.5: %v, want 500 a day", n)
	}
	if err := a.Scale("Site", overlay.One, overlay.One); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(overlay.Set{}); err != nil {
		t.Fatal(err)
	}
	if _, o := keyed.NumbersFor("acme"); o != atomicbucket.FromPolicy {
		t.Errorf("acme after an empty Set: numbers from %v, want the policy's", o)
	}
	for name, o := range map[string]atomicbucket.Origin{"Exports": func() atomicbucket.Origin { _, o := keyed.Table().NumbersFor(); return o }(), "Site": func() atomicbucket.Origin { _, o := global.Window().NumbersFor(); return o }()} {
		if o != atomicbucket.FromPolicy {
			t.Errorf("%s after an empty Set: numbers from %v, want the policy's", name, o)
		}
	}
}

// A window rule with plans as a target: a Set for one plan changes that
// plan's window only, one for every plan (no plan named) each plan's, each
// checked against its plan's default cost; Base is each plan's policy
// numbers.
func TestPlannedWindowTarget(t *testing.T) {
	free := atomicwindow.NewTable[string](atomicwindow.MustRule(2, time.Hour), atomicbucket.TableOptions{})
	pro := atomicwindow.NewTable[string](atomicwindow.MustRule(10, time.Hour), atomicbucket.TableOptions{})
	target := overlay.PlannedWindowTarget[overlay.StoreWindow](true, []int64{1, 3}, nil, free, pro)
	a := overlay.NewApplier(overlay.Policy[overlay.Target]{Plans: []string{"free", "pro"}, Rules: map[string]overlay.Target{"Quota": target}})
	if target.Plans() != 2 || !target.Keyed() || target.Base(1).Numbers.Tokens != 10 || target.Base(1).Cost != 3 || !target.Base(0).Window {
		t.Fatalf("Plans %d, Keyed %v, Base(pro) %+v", target.Plans(), target.Keyed(), target.Base(1))
	}
	if err := a.Apply(overlay.Set{overlay.NewEntry("t 1", "Quota", "pro", nil, "20/h", 20)}); err != nil {
		t.Fatal(err)
	}
	if f, _ := free.NumbersFor(); f.Tokens != 2 {
		t.Errorf("free changed with pro: %v", f)
	}
	if p, o := pro.NumbersFor(); p.Tokens != 20 || o != atomicbucket.FromOverride {
		t.Errorf("pro after its Set: %v from %v", p, o)
	}
	// 2 an hour for every plan: below pro's default cost of 3, refused whole.
	err := a.Apply(overlay.Set{overlay.NewEntry("t 2", "Quota", "", nil, "2/h", 2)})
	if !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), "default cost, 3") {
		t.Errorf("2 an hour on every plan, pro's cost 3: %v", err)
	}
	if p, _ := pro.NumbersFor(); p.Tokens != 20 {
		t.Errorf("a refused Set changed pro: %v", p)
	}
	if err := a.Apply(overlay.Set{overlay.NewEntry("t 3", "Quota", "", nil, "5/h", 5)}); err != nil {
		t.Fatal(err)
	}
	if f, _ := free.NumbersFor(); f.Tokens != 5 {
		t.Errorf("free after 5/h on every plan: %v", f)
	}
	if p, _ := pro.NumbersFor(); p.Tokens != 5 {
		t.Errorf("pro after 5/h on every plan: %v", p)
	}
}

// countingStore is a shared window's binding to a store that counts the
// changes it is given; a nil one panics, as a nil *shared.Window would.
type countingStore struct{ sets, clears int }

func (s *countingStore) SetNumbers(atomicbucket.Numbers, int64) error { s.sets++; return nil }
func (s *countingStore) ClearNumbers()                                { s.clears++ }

// A shared window's target changes its store's numbers and then its local
// window's; one whose binding is a nil pointer (a shared rule given no store)
// changes the local window alone, as a local rule's would.
func TestSharedWindowTargetStores(t *testing.T) {
	n := atomicbucket.Numbers{Tokens: 20, Period: time.Minute, Burst: 20}
	for _, store := range []*countingStore{{}, nil} {
		local := atomicwindow.NewWindow(atomicwindow.MustRule(10, time.Minute))
		target := overlay.SharedWindowTarget(local, store, 1, false)
		if err := target.Set(-1, nil, n); err != nil {
			t.Fatalf("store %v: Set: %v", store, err)
		}
		if got := local.Rule().Limit(); got != 20 {
			t.Errorf("store %v: the local window's limit is %d after Set, want 20", store, got)
		}
		target.Clear(-1, nil)
		if got := local.Rule().Limit(); got != 10 {
			t.Errorf("store %v: the local window's limit is %d after Clear, want the policy's 10", store, got)
		}
		if store != nil && (store.sets != 1 || store.clears != 1) {
			t.Errorf("the store was given %d sets and %d clears, want 1 and 1", store.sets, store.clears)
		}
	}
}

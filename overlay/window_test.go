package overlay_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/overlay"
)

// Window rules as overlay targets: a Set gives a keyed and a global window
// new numbers (a limit per window, the limit as burst), which their next
// checks go by; a key's own numbers, a burst other than the limit and a
// limit under the default cost are refused, naming the rule; scaling
// multiplies the limit by the rate factor; an empty Set returns the policy's.
func TestWindowTargets(t *testing.T) {
	keyed := atomicbucket.NewKeyedWindow(atomicbucket.NewWindowTable[string](atomicbucket.MustWindowRule(10, time.Minute), atomicbucket.TableOptions{}), 2)
	global := atomicbucket.NewGlobalWindow(atomicbucket.NewWindow(atomicbucket.MustWindowRule(100, time.Hour)), 1)
	a := overlay.NewApplier(overlay.Policy[overlay.Target]{Rules: map[string]overlay.Target{
		"Exports": overlay.WindowTarget(keyed), "Site": overlay.GlobalWindowTarget(global),
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
	key := "acme"
	for _, c := range []struct {
		e    overlay.Entry
		want string
	}{
		{overlay.NewEntry("t 3", "Exports", "", &key, "5/min", 5), "for every key"},
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
	for name, o := range map[string]atomicbucket.Origin{"Exports": func() atomicbucket.Origin { _, o := keyed.Table().NumbersFor(); return o }(), "Site": func() atomicbucket.Origin { _, o := global.Window().NumbersFor(); return o }()} {
		if o != atomicbucket.FromPolicy {
			t.Errorf("%s after an empty Set: numbers from %v, want the policy's", name, o)
		}
	}
}

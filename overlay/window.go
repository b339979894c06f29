package overlay

import (
	"errors"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// errKeyWindow refuses a key's own numbers for a window rule.
var errKeyWindow = errors.New("a window rule's numbers are the rule's, for every key: give them without a key")

// windowNumbers is what a window limiter whose numbers change has: a
// WindowTable's and a Window's methods.
type windowNumbers interface {
	Rule() *atomicbucket.WindowRule
	SetNumbers(n atomicbucket.Numbers, cost int64) error
	ClearNumbers()
}

// windowTarget is a window rule as an overlay Set changes it: its numbers
// are a limit per window (rate: "1000/h", the limit as burst), for the
// whole rule (a key's own are refused).
type windowTarget struct {
	w     windowNumbers
	store *shared.Window // a shared window's binding to its store; nil for a local one, or without a store
	base  atomicbucket.Numbers
	cost  int64
	keyed bool
}

// WindowTarget is l (a generated package's keyed window limiter, which
// embeds atomicbucket.KeyedWindow) as a Target.
func WindowTarget[K comparable](l atomicbucket.KeyedWindow[K]) Target {
	return windowTarget{w: l.Table(), base: atomicbucket.WindowNumbersOf(l.Table().PolicyRule()), cost: l.Cost(), keyed: true}
}

// GlobalWindowTarget is l (a generated package's global window limiter) as
// a Target.
func GlobalWindowTarget(l atomicbucket.GlobalWindow) Target {
	return windowTarget{w: l.Window(), base: atomicbucket.WindowNumbersOf(l.Window().PolicyRule()), cost: l.Cost()}
}

// SharedWindowTarget is a generated package's shared window limiter as a
// Target: local is its process-local window (a keyed one's WindowTable, a
// global one's Window: what decides without a store), store its binding to
// the store (nil without one). A change goes to the store first (which
// carries each key's window into the new numbers: shared.Window.SetNumbers),
// then to the local window; numbers the store refuses change neither.
func SharedWindowTarget(local interface {
	windowNumbers
	PolicyRule() *atomicbucket.WindowRule
}, store *shared.Window, cost int64, keyed bool) Target {
	return windowTarget{w: local, store: store, base: atomicbucket.WindowNumbersOf(local.PolicyRule()), cost: cost, keyed: keyed}
}

func (t windowTarget) Plans() int  { return 0 }
func (t windowTarget) Keyed() bool { return t.keyed }

func (t windowTarget) Check(_ int, n atomicbucket.Numbers) error {
	_, err := atomicbucket.WindowRuleOf(n, t.cost)
	return err
}

func (t windowTarget) CheckKey(string) error { return errKeyWindow }

func (t windowTarget) Set(_ int, key *string, n atomicbucket.Numbers) error {
	if key != nil {
		return errKeyWindow
	}
	if t.store != nil {
		if err := t.store.SetNumbers(n, t.cost); err != nil {
			return err
		}
	}
	return t.w.SetNumbers(n, t.cost)
}

func (t windowTarget) Clear(_ int, key *string) {
	if key == nil {
		if t.store != nil {
			t.store.ClearNumbers()
		}
		t.w.ClearNumbers()
	}
}

func (t windowTarget) Base(int) Base { return Base{Numbers: t.base, Cost: t.cost, Window: true} }

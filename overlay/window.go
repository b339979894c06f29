package overlay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/genimpl"
)

// errKeyWindow refuses a key's own numbers for a window rule that cannot
// take them: a global one, one with plans, or a shared one.
var errKeyWindow = errors.New("a key's own numbers are taken by a keyed window rule kept in the process, without plans; this one's are the rule's, for every key: give them without a key")

// WindowNumbers is what a window whose numbers change has: an
// atomicwindow.Table's and an atomicwindow.Window's methods (a
// shared.Window's too).
type WindowNumbers interface {
	Rule() *atomicwindow.Rule
	PolicyRule() *atomicwindow.Rule
	SetNumbers(n atomicbucket.Numbers, cost int64) error
	ClearNumbers()
}

// StoreWindow is a shared window's binding to its store, as an overlay Set
// changes it (shared.Window's methods): overlay needs no store of its own,
// so a package with no shared rule links none.
type StoreWindow interface {
	SetNumbers(n atomicbucket.Numbers, cost int64) error
	ClearNumbers()
}

// storeOf is s, or nil when s holds a nil pointer (a shared rule without a
// store).
func storeOf[S StoreWindow](s S) StoreWindow {
	if v := reflect.ValueOf(any(s)); !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return s
}

// windowTarget is a window rule as an overlay Set changes it: its numbers
// are a limit per window (rate: "1000/h", the limit as burst), for the
// whole rule, on each plan when it has plans (a key's own: keyedWindowTarget).
type windowTarget struct {
	w       []WindowNumbers // the process's window (or table), one a plan when planned
	store   []StoreWindow   // a shared window's bindings to its store, as w; nil for a local one or without a store
	cost    []int64         // the default cost, as w
	planned bool
	keyed   bool
}

// WindowTarget is l (a generated package's keyed window limiter, which
// embeds genimpl.KeyedWindow) as a Target: its numbers for every key,
// and a key's own (a key given as text read by parse, as for KeyedTarget).
func WindowTarget[K comparable](l genimpl.KeyedWindow[K], parse func(string) (K, error)) Target {
	return keyedWindowTarget[K]{windowTarget{w: []WindowNumbers{l.Table()}, cost: []int64{l.Cost()}, keyed: true}, keyedTarget[K]{parse: parse}, l}
}

// keyedWindowTarget is a keyed window rule kept in the process, without
// plans: a windowTarget that takes keys' own numbers too.
type keyedWindowTarget[K comparable] struct {
	windowTarget
	keys keyedTarget[K] // reads keys
	l    genimpl.KeyedWindow[K]
}

func (t keyedWindowTarget[K]) CheckKey(key string) error { return t.keys.CheckKey(key) }

func (t keyedWindowTarget[K]) Set(plan int, key *string, n atomicbucket.Numbers) error {
	if key == nil {
		return t.windowTarget.Set(plan, nil, n)
	}
	k, err := t.keys.key(*key)
	if err != nil {
		return err
	}
	return t.l.SetKeyNumbers(k, n)
}

func (t keyedWindowTarget[K]) Clear(plan int, key *string) {
	if key == nil {
		t.windowTarget.Clear(plan, nil)
		return
	}
	if k, err := t.keys.key(*key); err == nil { // a key that does not parse has no numbers
		t.l.ClearKeyNumbers(k)
	}
}

// GlobalWindowTarget is l (a generated package's global window limiter) as
// a Target.
func GlobalWindowTarget(l genimpl.GlobalWindow) Target {
	return windowTarget{w: []WindowNumbers{l.Window()}, cost: []int64{l.Cost()}}
}

// SharedWindowTarget is a generated package's shared window limiter as a
// Target: local is its process-local window (a keyed one's atomicwindow.Table, a
// global one's Window: what decides without a store), store its binding to
// the store (nil without one). A change goes to the store first (which
// carries each key's window into the new numbers: shared.Window.SetNumbers),
// then to the local window; numbers the store refuses change neither.
func SharedWindowTarget[S StoreWindow](local WindowNumbers, store S, cost int64, keyed bool) Target {
	return windowTarget{w: []WindowNumbers{local}, store: []StoreWindow{storeOf(store)}, cost: []int64{cost}, keyed: keyed}
}

// KeyNumbers is what a generated package's keyed shared window limiter
// (without plans) has for its keys' own numbers: on the store and in its
// process-local window.
type KeyNumbers[K comparable] interface {
	SetKeyNumbers(ctx context.Context, key K, n atomicbucket.Numbers) error
	ClearKeyNumbers(ctx context.Context, key K)
}

// KeyedSharedWindowTarget is SharedWindowTarget for a keyed shared window
// without plans whose keys may have numbers of their own: l is the
// generated limiter, which sets them on the store and in its local window;
// a key given as text is read by parse (as for KeyedTarget).
func KeyedSharedWindowTarget[K comparable, S StoreWindow](local WindowNumbers, store S, cost int64, l KeyNumbers[K], parse func(string) (K, error)) Target {
	return sharedKeyedWindowTarget[K]{windowTarget{w: []WindowNumbers{local}, store: []StoreWindow{storeOf(store)}, cost: []int64{cost}, keyed: true}, keyedTarget[K]{parse: parse}, l}
}

type sharedKeyedWindowTarget[K comparable] struct {
	windowTarget
	keys keyedTarget[K] // reads keys
	l    KeyNumbers[K]
}

func (t sharedKeyedWindowTarget[K]) CheckKey(key string) error { return t.keys.CheckKey(key) }

func (t sharedKeyedWindowTarget[K]) Set(plan int, key *string, n atomicbucket.Numbers) error {
	if key == nil {
		return t.windowTarget.Set(plan, nil, n)
	}
	k, err := t.keys.key(*key)
	if err != nil {
		return err
	}
	return t.l.SetKeyNumbers(context.Background(), k, n)
}

func (t sharedKeyedWindowTarget[K]) Clear(plan int, key *string) {
	if key == nil {
		t.windowTarget.Clear(plan, nil)
		return
	}
	if k, err := t.keys.key(*key); err == nil {
		t.l.ClearKeyNumbers(context.Background(), k)
	}
}

// PlannedWindowTarget is a generated package's window limiter with plans as a
// Target: windows are its plans' windows (or tables) in plan order, costs
// their default costs, and stores, for a shared rule, its plans' bindings to
// the store (nil without one, or for a local rule: PlannedWindowTarget[StoreWindow]).
func PlannedWindowTarget[S StoreWindow](keyed bool, costs []int64, stores []S, windows ...WindowNumbers) Target {
	st := make([]StoreWindow, len(windows))
	for i := range min(len(stores), len(st)) {
		st[i] = storeOf(stores[i])
	}
	return windowTarget{w: windows, store: st, cost: costs, planned: true, keyed: keyed}
}

func (t windowTarget) Plans() int {
	if t.planned {
		return len(t.w)
	}
	return 0
}

func (t windowTarget) Keyed() bool { return t.keyed }

// at is plan's index (-1, without plans: the only one).
func (t windowTarget) at(plan int) int { return max(plan, 0) }

func (t windowTarget) Check(plan int, n atomicbucket.Numbers) error {
	i := t.at(plan)
	r, err := atomicwindow.RuleOf(n, t.cost[i])
	if err == nil && i < len(t.store) && t.store[i] != nil && !r.Exact() && r.Grain()%time.Microsecond != 0 {
		err = fmt.Errorf("%w: a shared counted window's sixteenths are whole microseconds: %v is not a multiple of 16µs", atomicwindow.ErrNumbers, r.Window())
	}
	return err
}

func (t windowTarget) CheckKey(string) error { return errKeyWindow }

func (t windowTarget) Set(plan int, key *string, n atomicbucket.Numbers) error {
	if key != nil {
		return errKeyWindow
	}
	i := t.at(plan)
	if i < len(t.store) && t.store[i] != nil {
		if err := t.store[i].SetNumbers(n, t.cost[i]); err != nil {
			return err
		}
	}
	return t.w[i].SetNumbers(n, t.cost[i])
}

func (t windowTarget) Clear(plan int, key *string) {
	if key != nil {
		return
	}
	i := t.at(plan)
	if i < len(t.store) && t.store[i] != nil {
		t.store[i].ClearNumbers()
	}
	t.w[i].ClearNumbers()
}

func (t windowTarget) Base(plan int) Base {
	i := t.at(plan)
	return Base{Numbers: atomicwindow.NumbersOf(t.w[i].PolicyRule()), Cost: t.cost[i], Window: true}
}

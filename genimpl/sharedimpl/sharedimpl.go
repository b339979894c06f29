// Package sharedimpl is what a generated package's shared rules call, as
// genimpl is for its process-local ones: the State of their binding to a
// store (SharedErr's answer), and Keyed and Global, the limiters a shared rule
// without plans embeds, which decide on the store and fall back to the rule's
// process-local limiter without one. Only generated code calls it; it carries
// no compatibility promise of its own (regenerate after upgrading limitgen).
// It lives apart from genimpl so that a package without shared rules links
// no store code.
package sharedimpl

import (
	"context"
	"fmt"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/genimpl"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// State is where a generated package's shared rules are checked: Bound on the
// store, with Windows bound to it one by one, or in this process when Why says
// why not.
type State struct {
	Bound   shared.Bound     // nil without a store
	Windows []*shared.Window // the shared window rules', by their index
	Slots   []*shared.Slots  // the shared in-flight rules', by their index (Slot)
	Why     error            // why the rules run in this process only; nil when bound
	pkg     string           // the generated package's name, which its errors start with
}

// Bind binds package pkg's shared bucket rules to store, with room for
// windows shared window rules, which the package binds one by one. Without a
// store (nil), or when the store refuses the rules, the State says why, and
// every shared rule runs in this process only.
func Bind(pkg string, store shared.Store, rules []shared.Rule, windows int) *State {
	s := &State{Windows: make([]*shared.Window, windows), pkg: pkg}
	if store == nil {
		s.Why = fmt.Errorf("%s: %w given to New (WithStore): the shared rules are decided in this process only, each instance enforcing the whole limit alone", pkg, shared.ErrNoStore)
		return s
	}
	if len(rules) > 0 {
		var err error
		if s.Bound, err = shared.Bind(store, rules); err != nil {
			return s.Refuse("the shared rules, which run in this process only", err)
		}
	}
	return s
}

// Refuse is s after the store refused what (a window rule, say) with err:
// every shared rule runs in this process only.
func (s *State) Refuse(what string, err error) *State {
	s.Bound = nil
	clear(s.Windows)
	clear(s.Slots)
	s.Why = fmt.Errorf("%s: the store refused %s: %w", s.pkg, what, err)
	return s
}

// Err is SharedErr's answer: Why, or the first of the store's bindings that
// is not answering now.
func (s *State) Err() error {
	if s.Why != nil {
		return s.Why
	}
	if err := shared.Health(s.Bound); err != nil {
		return err
	}
	for _, w := range s.Windows {
		if err := w.Health(); err != nil {
			return err
		}
	}
	for _, sl := range s.Slots {
		if sl != nil {
			if err := sl.Health(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Slot is the shared in-flight rule at index i bound to the store, or nil
// when its checks are this process's (no store, or the store refused).
func (s *State) Slot(i int) *shared.Slots {
	if i < len(s.Slots) {
		return s.Slots[i]
	}
	return nil
}

// Numbered is the store's binding, which changes the shared rules' numbers;
// nil without a store.
func (s *State) Numbered() (shared.Numbered, error) {
	if s.Bound == nil {
		return nil, nil
	}
	nb, ok := s.Bound.(shared.Numbered)
	if !ok {
		return nil, fmt.Errorf("the store's %T cannot change numbers (it is no shared.Numbered): nothing changed", s.Bound)
	}
	return nb, nil
}

// Keyed is a shared keyed rule without plans as a generated package gives it:
// checked on the store as rule Rule of the package's shared rules, its keys
// written for the store by Key (the key itself for a string key), and
// decided by Local (the rule's process-local limiter) without a store. Its
// methods are safe for concurrent use.
type Keyed[K comparable] struct {
	local genimpl.Keyed[K]
	s     *State
	rule  int
	key   func(K) string
}

// NewKeyed returns the limiter of rule (its index in the package's shared
// rules) over local and s; key writes a key for the store.
func NewKeyed[K comparable](local genimpl.Keyed[K], s *State, rule int, key func(K) string) Keyed[K] {
	return Keyed[K]{local, s, rule, key}
}

// Text is NewKeyed's key for a string key: the key itself.
func Text(key string) string { return key }

// Rule returns the runtime rule behind the process-local limiter (its units,
// exactness and limits).
func (l Keyed[K]) Rule() *atomicbucket.Rule { return l.local.Rule() }

// Allow reports whether a request of the rule's default cost is allowed,
// deciding on the store (see AllowN, whose Result says more).
func (l Keyed[K]) Allow(ctx context.Context, key K) bool {
	return l.AllowN(ctx, key, l.local.Cost()).Allowed
}

// AllowN decides a request of cost on the store, so that the rule holds
// across every instance that shares it. It never fails: when the store cannot
// decide, the rule's on_failure setting does, and the Result says so
// (Degraded, Err). Without a store the process-local limiter decides, and Err
// is SharedErr's error.
func (l Keyed[K]) AllowN(ctx context.Context, key K, cost int64) verdict.Result {
	if l.s.Bound == nil {
		return verdict.Result{Decision: l.local.AllowN(key, cost), Err: l.s.Why}
	}
	return l.s.Bound.CheckStep(ctx, shared.Step{Rule: l.rule, Key: l.key(key), Cost: cost})
}

// Wait blocks until a request of cost is allowed on the store, or ctx is
// done: it checks, and after a denial sleeps for its RetryAfter and checks
// again (shared.Wait), so a crowd of waiters is served in no fixed order. It
// returns at once when the wait would pass ctx's deadline or the cost exceeds
// the burst. Without a store it is the process-local limiter's Wait.
func (l Keyed[K]) Wait(ctx context.Context, key K, cost int64) error {
	if l.s.Bound == nil {
		return l.local.Wait(ctx, key, cost)
	}
	return shared.Wait(ctx, l.s.Bound, shared.Step{Rule: l.rule, Key: l.key(key), Cost: cost})
}

// SetNumbers makes n the rule's numbers for every key without numbers of its
// own, on the store and in this process (the process-local limiter, and the
// on_failure share). Numbers the rule or the store cannot hold are refused,
// and nothing changes. A store converts each bucket at its next check (tokens
// held carried as they are, never beyond the new burst); every instance
// sharing the store must be given the same numbers, or each converts the
// buckets to its own (never gaining tokens): give them from one source
// (shared.Numbered says more).
func (l Keyed[K]) SetNumbers(n atomicbucket.Numbers) error {
	return setNumbers(l.s, check(l.local.Rule(), l.local.CheckBurst(n), l.s, l.rule, n), func(nb shared.Numbered) error { return nb.SetNumbers(l.rule, n) },
		func() error { return l.local.SetNumbers(n, atomicbucket.CarryAsIs) })
}

// ClearNumbers returns the rule to the policy's numbers, on the store and in
// this process.
func (l Keyed[K]) ClearNumbers() error {
	return setNumbers(l.s, nil, func(nb shared.Numbered) error { nb.ClearNumbers(l.rule); return nil },
		func() error { l.local.ClearNumbers(atomicbucket.CarryAsIs); return nil })
}

// NumbersFor returns the numbers in force for key and where they come from:
// the store's binding's, or without a store the process-local limiter's.
func (l Keyed[K]) NumbersFor(key K) (atomicbucket.Numbers, atomicbucket.Origin) {
	if nb, _ := l.s.Numbered(); nb != nil {
		return nb.NumbersFor(l.rule, l.key(key))
	}
	return l.local.NumbersFor(key)
}

// SetKeyNumbers gives key numbers of its own (an enterprise customer's
// quota), whatever the rule's, on the store and in this process; refused as by
// SetNumbers, all or nothing.
func (l Keyed[K]) SetKeyNumbers(key K, n atomicbucket.Numbers) error {
	return setNumbers(l.s, check(l.local.Rule(), l.local.CheckBurst(n), l.s, l.rule, n), func(nb shared.Numbered) error {
		return nb.SetKeyNumbers([]int{l.rule}, l.key(key), n)
	}, func() error { return l.local.SetKeyNumbers(key, n, atomicbucket.CarryAsIs) })
}

// ClearKeyNumbers takes key's own numbers away, on the store and in this
// process.
func (l Keyed[K]) ClearKeyNumbers(key K) error {
	return setNumbers(l.s, nil, func(nb shared.Numbered) error { nb.ClearKeyNumbers([]int{l.rule}, l.key(key)); return nil },
		func() error { l.local.ClearKeyNumbers(key, atomicbucket.CarryAsIs); return nil })
}

// Settle settles a request of key admitted at cost estimate whose actual
// cost is actual, on the store (shared.Bound.Settle): the difference given
// back, or owed as debt; it returns the tokens forgiven beyond the debt
// bound. When the store cannot be reached nothing is settled and the error
// says so. Without a store the process-local limiter settles.
func (l Keyed[K]) Settle(ctx context.Context, key K, estimate, actual int64) (forgiven int64, err error) {
	if l.s.Bound == nil {
		return l.local.Settle(key, estimate, actual), nil
	}
	return l.s.Bound.Settle(ctx, shared.Step{Rule: l.rule, Key: l.key(key), Cost: estimate}, actual)
}

// Reset forgets key's bucket on the store ("unblock this user": its next
// check finds it full) and in this process. Other instances' leases keep what
// they were granted until it expires.
func (l Keyed[K]) Reset(ctx context.Context, key K) error {
	return setNumbers(l.s, nil, func(nb shared.Numbered) error { return nb.Reset(ctx, []int{l.rule}, l.key(key)) },
		func() error { l.local.Reset(key); return nil })
}

// Global is a shared global rule without plans as a generated package gives
// it: Keyed's methods without a key, its one bucket on the store under the
// empty key.
type Global struct {
	local genimpl.Global
	s     *State
	rule  int
}

// NewGlobal returns the limiter of rule (its index in the package's shared
// rules) over local and s.
func NewGlobal(local genimpl.Global, s *State, rule int) Global { return Global{local, s, rule} }

// Rule returns the runtime rule behind the process-local limiter.
func (l Global) Rule() *atomicbucket.Rule { return l.local.Rule() }

// Allow reports whether a request of the rule's default cost is allowed,
// deciding on the store (see AllowN).
func (l Global) Allow(ctx context.Context) bool { return l.AllowN(ctx, l.local.Cost()).Allowed }

// AllowN is Keyed.AllowN for the rule's one bucket.
func (l Global) AllowN(ctx context.Context, cost int64) verdict.Result {
	if l.s.Bound == nil {
		return verdict.Result{Decision: l.local.AllowN(cost), Err: l.s.Why}
	}
	return l.s.Bound.CheckStep(ctx, shared.Step{Rule: l.rule, Cost: cost})
}

// Wait is Keyed.Wait for the rule's one bucket.
func (l Global) Wait(ctx context.Context, cost int64) error {
	if l.s.Bound == nil {
		return l.local.Wait(ctx, cost)
	}
	return shared.Wait(ctx, l.s.Bound, shared.Step{Rule: l.rule, Cost: cost})
}

// SetNumbers is Keyed.SetNumbers for the rule's one bucket.
func (l Global) SetNumbers(n atomicbucket.Numbers) error {
	return setNumbers(l.s, check(l.local.Rule(), l.local.CheckBurst(n), l.s, l.rule, n), func(nb shared.Numbered) error { return nb.SetNumbers(l.rule, n) },
		func() error { return l.local.SetNumbers(n, atomicbucket.CarryAsIs) })
}

// ClearNumbers is Keyed.ClearNumbers for the rule's one bucket.
func (l Global) ClearNumbers() error {
	return setNumbers(l.s, nil, func(nb shared.Numbered) error { nb.ClearNumbers(l.rule); return nil },
		func() error { l.local.ClearNumbers(atomicbucket.CarryAsIs); return nil })
}

// NumbersFor is Keyed.NumbersFor for the rule's one bucket.
func (l Global) NumbersFor() (atomicbucket.Numbers, atomicbucket.Origin) {
	if nb, _ := l.s.Numbered(); nb != nil {
		return nb.NumbersFor(l.rule, "")
	}
	return l.local.NumbersFor()
}

// Settle is Keyed.Settle for the rule's one bucket.
func (l Global) Settle(ctx context.Context, estimate, actual int64) (forgiven int64, err error) {
	if l.s.Bound == nil {
		return l.local.Settle(estimate, actual), nil
	}
	return l.s.Bound.Settle(ctx, shared.Step{Rule: l.rule, Cost: estimate}, actual)
}

// Reset forgets the rule's bucket on the store (its next check finds it full)
// and in this process. Other instances' leases keep what they were granted
// until it expires.
func (l Global) Reset(ctx context.Context) error {
	return setNumbers(l.s, nil, func(nb shared.Numbered) error { return nb.Reset(ctx, []int{l.rule}, "") },
		func() error { l.local.Reset(); return nil })
}

// setNumbers makes one change on the store (when there is one) and then in
// this process: none when the change is refused first (refused: new numbers
// are checked against the process-local rule, its costs and the store before
// either is changed, so that neither takes numbers the other refuses), or
// the store cannot change numbers or refuses it.
func setNumbers(s *State, refused error, onStore func(shared.Numbered) error, here func() error) error {
	if refused != nil {
		return refused
	}
	nb, err := s.Numbered()
	if err != nil {
		return err
	}
	if nb != nil {
		if err := onStore(nb); err != nil {
			return err
		}
	}
	return here()
}

// KeyedTarget is l as an overlay Set changes it (overlay.Target): numbers are
// checked by the process-local limiter and the store, and a key given as text
// is read by parse (nil for string keys, as overlay.KeyedTarget's).
func KeyedTarget[K comparable](l Keyed[K], parse func(string) (K, error)) overlay.Target {
	return keyedTarget[K]{l, parse}
}

type keyedTarget[K comparable] struct {
	l     Keyed[K]
	parse func(string) (K, error)
}

func (t keyedTarget[K]) Plans() int  { return 0 }
func (t keyedTarget[K]) Keyed() bool { return true }
func (t keyedTarget[K]) Check(_ int, n atomicbucket.Numbers) error {
	return check(t.l.local.Rule(), t.l.local.CheckBurst(n), t.l.s, t.l.rule, n)
}
func (t keyedTarget[K]) Base(int) overlay.Base { return base(t.l.local.Rule(), t.l.local.MinBurst()) }

func (t keyedTarget[K]) CheckKey(key string) error {
	_, err := t.k(key)
	return err
}

// k is key's value: parsed, or for a string key (parse nil) key itself,
// which a store must be able to hold.
func (t keyedTarget[K]) k(key string) (K, error) {
	if t.parse != nil {
		return t.parse(key)
	}
	k, ok := any(key).(K)
	if !ok {
		return k, fmt.Errorf("sharedimpl: a KeyedTarget of %T keys needs a parse function to read %q", k, key)
	}
	if key == "" || len(key) > shared.MaxKeyLen {
		return k, fmt.Errorf("a shared rule's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(key))
	}
	return k, nil
}

func (t keyedTarget[K]) Set(_ int, key *string, n atomicbucket.Numbers) error {
	if key == nil {
		return t.l.SetNumbers(n)
	}
	k, err := t.k(*key)
	if err != nil {
		return err
	}
	return t.l.SetKeyNumbers(k, n)
}

func (t keyedTarget[K]) Clear(_ int, key *string) {
	if key == nil {
		_ = t.l.ClearNumbers() // fails only as Set failed before
		return
	}
	if k, err := t.k(*key); err == nil { // a key that does not parse has no numbers
		_ = t.l.ClearKeyNumbers(k)
	}
}

// GlobalTarget is l as an overlay Set changes it; it takes no keys.
func GlobalTarget(l Global) overlay.Target { return globalTarget{l} }

type globalTarget struct{ l Global }

func (t globalTarget) Plans() int            { return 0 }
func (t globalTarget) Keyed() bool           { return false }
func (t globalTarget) CheckKey(string) error { return nil }
func (t globalTarget) Check(_ int, n atomicbucket.Numbers) error {
	return check(t.l.local.Rule(), t.l.local.CheckBurst(n), t.l.s, t.l.rule, n)
}
func (t globalTarget) Base(int) overlay.Base                              { return base(t.l.local.Rule(), t.l.local.MinBurst()) }
func (t globalTarget) Set(_ int, _ *string, n atomicbucket.Numbers) error { return t.l.SetNumbers(n) }
func (t globalTarget) Clear(int, *string)                                 { _ = t.l.ClearNumbers() }

// check says why rule (the process-local one), its costs (burst) or the
// store would refuse n as rule i's numbers.
func check(rule *atomicbucket.Rule, burst error, s *State, i int, n atomicbucket.Numbers) error {
	if _, err := rule.WithNumbers(n); err != nil {
		return err
	}
	if burst != nil {
		return burst
	}
	nb, err := s.Numbered()
	if err != nil || nb == nil {
		return err
	}
	return nb.CheckNumbers(i, n)
}

// base is rule's overlay.Base: the policy's numbers, the least burst its
// requests take (a scaled burst stays at it), the refill.
func base(rule *atomicbucket.Rule, least int64) overlay.Base {
	r := rule.Limit()
	return overlay.Base{Numbers: atomicbucket.NumbersOf(r), Cost: least, Interval: r.Refill == atomicbucket.Interval}
}

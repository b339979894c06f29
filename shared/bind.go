package shared

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// ErrNoStore is Bind's error for a nil store, or a nil pointer (or map,
// slice, func, channel) in a Store interface: a store that was never made.
var ErrNoStore error = &classError{"no store", "no_store"}

// Bind binds rules to store as a generated package does when it is built: it
// refuses a nil store, a typed nil in the interface (WithStore((*redisstore.
// Store)(nil)), say: its Bind would panic) and a Bind that panics, each with
// an error instead, so that the package reports it through SharedErr.
func Bind(store Store, rules []Rule) (b Bound, err error) {
	if store == nil {
		return nil, ErrNoStore
	}
	switch v := reflect.ValueOf(store); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		if v.IsNil() {
			return nil, fmt.Errorf("%w: a nil %T", ErrNoStore, store)
		}
	}
	defer func() {
		if e := recover(); e != nil {
			b, err = nil, fmt.Errorf("the store's Bind panicked: %v", e)
		}
	}()
	b, err = store.Bind(rules)
	if err == nil && b == nil {
		err = fmt.Errorf("%T.Bind returned no Bound and no error", store)
	}
	return b, err
}

// Health is b's store's live state when it reports one (a Bound with a
// Health method, as an Engine's binding has): nil while the store answers.
// A generated package's SharedErr returns it.
func Health(b Bound) error {
	if h, ok := b.(interface{ Health() error }); ok {
		return h.Health()
	}
	return nil
}

// ErrInvalidRule is wrapped by the errors of Bind for a rule a store cannot
// hold.
var ErrInvalidRule = errors.New("invalid rule")

// Bind prepares a generated package's shared rules (Store): each rule's
// numbers, its failure setting and its lease. It refuses a rule the store
// cannot hold within the contract, saying why, and two rules with one name.
func (e *Engine) Bind(rules []Rule) (Bound, error) {
	bound := make([]*StoreRule, len(rules))
	seen := map[string]bool{}
	leased := make([]bool, len(rules))
	fallbacks := make([]*fallbackRule, len(rules))
	for i, sr := range rules {
		name := sr.Name
		if sr.Namespace != "" {
			if err := CheckNamespace(sr.Namespace); err != nil {
				return nil, fmt.Errorf("%s: %w: %s: %w", e.b.Name(), ErrInvalidRule, sr.Name, err)
			}
			name = sr.Namespace + "/" + sr.Name
		}
		if seen[name] {
			return nil, fmt.Errorf("%s: %w: two shared rules named %q", e.b.Name(), ErrInvalidRule, name)
		}
		seen[name] = true
		if _, err := integersOf(sr); err != nil { // the generated units are the ones this version computes
			return nil, fmt.Errorf("%s: %w: %s: %w", e.b.Name(), ErrInvalidRule, sr.Name, err)
		}
		r, err := NewStoreRule(name, sr.Limit)
		if err == nil {
			err = e.b.CheckRule(r)
		}
		if err == nil {
			r, err = r.WithFailure(sr.Failure)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", e.b.Name(), ErrInvalidRule, err)
		}
		if sr.Lease > 0 {
			r.lease = min(sr.Lease, r.n.Limit.Burst)
		}
		r.global = sr.Global
		bound[i], leased[i], fallbacks[i] = r, sr.Lease > 0, r.fallback
	}
	b := &Binding{e: e, rules: bound}
	b.leaseOf = make([]int64, len(rules))
	for i, sr := range rules {
		b.leaseOf[i] = sr.Lease
	}
	b.leases = newLeases(leased, fallbacks, e.guard, func(rule int, key string) *Lease {
		r := b.ruleFor(rule, key)
		return e.NewLease(r, key, r.lease)
	})
	e.mu.Lock()
	e.bounds = append(e.bounds, b)
	e.mu.Unlock()
	return b, nil
}

// Binding is the Bound an Engine's Bind returns: it checks the steps' rule
// indexes, decides from leases when every step's rule is leased, and
// otherwise checks the steps on the store.
type Binding struct {
	e      *Engine
	rules  []*StoreRule // as bound
	leases *Leases
	numbersState
}

// Leases are the binding's leases.
func (b *Binding) Leases() *Leases { return b.leases }

// Health is the store's live state (Engine.Health).
func (b *Binding) Health() error { return b.e.Health() }

// Check decides steps on the store, or, when every step's rule is leased,
// from each step's lease in order, all or nothing. A step naming no bound
// rule is denied, as a rule that cannot be checked.
func (b *Binding) Check(ctx context.Context, steps []Step) (verdict.Result, int) {
	for i, s := range steps {
		if s.Rule < 0 || s.Rule >= len(b.rules) {
			return verdict.Result{Err: classed(fmt.Errorf("%s: %w: step %d names rule %d of %d bound", b.e.b.Name(), ErrInvalidStep, i, s.Rule, len(b.rules)))}, i
		}
	}
	for i, s := range steps {
		if err := (Call{b.ruleFor(s.Rule, s.Key), s.Key, s.Cost}).checkKey(); err != nil {
			return verdict.Result{Decision: atomicbucket.Decision{RetryAfter: atomicbucket.Never}, Err: classed(fmt.Errorf("%s: %w", b.e.b.Name(), err))}, i
		}
	}
	if len(steps) > 0 {
		if res, i, ok := b.leases.Check(ctx, steps); ok {
			return res, i
		}
	}
	var buf [4]Call
	calls := buf[:0]
	for _, s := range steps {
		calls = append(calls, Call{b.ruleFor(s.Rule, s.Key), s.Key, s.Cost})
	}
	return b.e.CheckTier(ctx, calls)
}

// Refund gives back what an allowed Check of steps took (see Bound.Refund): a
// refund call a step, in reverse order, skipping leased rules. It returns the
// first error, after trying every step.
func (b *Binding) Refund(ctx context.Context, steps []Step) error {
	var first error
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		if s.Rule < 0 || s.Rule >= len(b.rules) || b.leases.Leased(s.Rule) || s.Cost <= 0 {
			continue
		}
		if err := b.e.RefundN(ctx, b.ruleFor(s.Rule, s.Key), s.Key, s.Cost); err != nil && first == nil {
			first = fmt.Errorf("%s: refund: %w", b.e.b.Name(), err)
		}
	}
	return first
}

// Settle settles step (see Bound.Settle) on the store, whether or not its
// rule is leased: a lease took its grant from the store's bucket, and the
// settlement corrects that bucket by the difference.
func (b *Binding) Settle(ctx context.Context, step Step, actual int64) (int64, error) {
	if step.Rule < 0 || step.Rule >= len(b.rules) {
		return 0, fmt.Errorf("%s: %w: a step names rule %d of %d bound", b.e.b.Name(), ErrInvalidStep, step.Rule, len(b.rules))
	}
	f, err := b.e.SettleN(ctx, b.ruleFor(step.Rule, step.Key), step.Key, step.Cost, actual)
	if err != nil {
		return 0, fmt.Errorf("%s: settle: %w", b.e.b.Name(), err)
	}
	return f, nil
}

// CheckStep is Check of one step; a leased rule's check allocates nothing.
func (b *Binding) CheckStep(ctx context.Context, step Step) verdict.Result {
	if step.Rule < 0 || step.Rule >= len(b.rules) {
		return verdict.Result{Err: classed(fmt.Errorf("%s: %w: a step names rule %d of %d bound", b.e.b.Name(), ErrInvalidStep, step.Rule, len(b.rules)))}
	}
	r := b.ruleFor(step.Rule, step.Key)
	if err := (Call{r, step.Key, step.Cost}).checkKey(); err != nil {
		return verdict.Result{Decision: atomicbucket.Decision{RetryAfter: atomicbucket.Never}, Err: classed(fmt.Errorf("%s: %w", b.e.b.Name(), err))}
	}
	if res, ok := b.leases.CheckStep(ctx, step); ok {
		return res
	}
	return b.e.Check(ctx, r, step.Key, step.Cost)
}

package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/limitgen/limitgen/shared"
)

// Bind prepares a generated package's shared rules (shared.Store): each
// rule's numbers, its failure setting and its lease. It refuses a rule the
// store cannot hold within the contract, saying why, and two rules with one
// name.
func (s *Store) Bind(rules []shared.Rule) (shared.Bound, error) {
	b := &bound{s: s, rules: make([]*Rule, len(rules))}
	seen := map[string]bool{}
	leased := make([]bool, len(rules))
	fallbacks := make([]*shared.Fallback, len(rules))
	for i, sr := range rules {
		if seen[sr.Name] {
			return nil, fmt.Errorf("%w: two shared rules named %q", ErrInvalidRule, sr.Name)
		}
		seen[sr.Name] = true
		r, err := NewRule(sr.Name, sr.Limit)
		if err != nil {
			return nil, err
		}
		if _, err := shared.NumbersOf(sr); err != nil { // the generated units are the ones NewRule computed
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRule, sr.Name, err)
		}
		if r, err = r.WithFailure(sr.Failure); err != nil {
			return nil, err
		}
		if sr.Lease > 0 {
			r.lease = min(sr.Lease, r.n.Limit.Burst)
		}
		b.rules[i], leased[i], fallbacks[i] = r, sr.Lease > 0, r.fallback
	}
	b.leases = shared.NewLeases(leased, fallbacks, &s.guard, func(rule int, key string) *Lease {
		r := b.rules[rule]
		return s.NewLease(r, key, r.lease)
	})
	s.mu.Lock()
	s.bounds = append(s.bounds, b)
	s.mu.Unlock()
	return b, nil
}

// ReleaseLeases gives back to the database the tokens that the leases of
// every package bound to the store hold (Lease.Release), so that a service
// shutting down leaves them to the other instances instead of holding them
// until their grants expire. The leases go on working: a later check takes a
// new grant. It returns the first error, having tried every lease.
func (s *Store) ReleaseLeases(ctx context.Context) error {
	s.mu.Lock()
	bounds := slices.Clone(s.bounds)
	s.mu.Unlock()
	var first error
	for _, b := range bounds {
		if err := b.leases.Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// bound is the rules a Store bound.
type bound struct {
	s      *Store
	rules  []*Rule
	leases *shared.Leases
}

// Check decides steps in one statement (CheckTier), or, when every step's
// rule is leased, from each step's lease in order, all or nothing. A step
// naming no bound rule is denied, as a rule that cannot be checked.
func (b *bound) Check(ctx context.Context, steps []shared.Step) (shared.Result, int) {
	for i, s := range steps {
		if s.Rule < 0 || s.Rule >= len(b.rules) {
			return shared.Result{Err: fmt.Errorf("pgstore: step %d names rule %d of %d bound", i, s.Rule, len(b.rules))}, i
		}
	}
	if len(steps) > 0 {
		if res, i, ok := b.leases.Check(ctx, steps); ok {
			return res, i
		}
	}
	st := make([]Step, len(steps))
	for i, s := range steps {
		st[i] = Step{b.rules[s.Rule], s.Key, s.Cost}
	}
	return b.s.CheckTier(ctx, st)
}

// CheckStep is Check of one step; a leased rule's check allocates nothing.
func (b *bound) CheckStep(ctx context.Context, step shared.Step) shared.Result {
	if step.Rule < 0 || step.Rule >= len(b.rules) {
		return shared.Result{Err: fmt.Errorf("pgstore: a step names rule %d of %d bound", step.Rule, len(b.rules))}
	}
	if res, ok := b.leases.CheckStep(ctx, step); ok {
		return res
	}
	res, _ := b.s.CheckTier(ctx, []Step{{b.rules[step.Rule], step.Key, step.Cost}})
	return res
}

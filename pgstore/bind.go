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
	bound := make([]*Rule, len(rules))
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
		bound[i], leased[i], fallbacks[i] = r, sr.Lease > 0, r.fallback
	}
	leases := shared.NewLeases(leased, fallbacks, &s.guard, func(rule int, key string) *Lease {
		r := bound[rule]
		return s.NewLease(r, key, r.lease)
	})
	b := shared.NewBinding("pgstore", len(bound), leases, func(ctx context.Context, steps []shared.Step) (shared.Result, int) {
		st := make([]Step, len(steps))
		for i, s := range steps {
			st[i] = Step{bound[s.Rule], s.Key, s.Cost}
		}
		return s.CheckTier(ctx, st)
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
		if err := b.Leases().Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

package pgstore

import (
	"context"
	"fmt"

	"github.com/limitgen/limitgen/shared"
)

// Bind prepares a generated package's shared rules (shared.Store): each
// rule's numbers and its failure setting. It refuses a rule the store cannot
// hold within the contract, saying why, and two rules with one name. A rule's
// lease is not used yet: every check of it is a statement.
func (s *Store) Bind(rules []shared.Rule) (shared.Bound, error) {
	b := &bound{s: s, rules: make([]*Rule, len(rules))}
	seen := map[string]bool{}
	for i, sr := range rules {
		if seen[sr.Name] {
			return nil, fmt.Errorf("%w: two shared rules named %q", ErrInvalidRule, sr.Name)
		}
		seen[sr.Name] = true
		r, err := NewRule(sr.Name, sr.Limit)
		if err != nil {
			return nil, err
		}
		if b.rules[i], err = r.WithFailure(sr.Failure); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// bound is the rules a Store bound.
type bound struct {
	s     *Store
	rules []*Rule
}

// Check decides steps in one statement (CheckTier). A step naming no bound
// rule is denied, as a rule that cannot be checked.
func (b *bound) Check(ctx context.Context, steps []shared.Step) (shared.Result, int) {
	st := make([]Step, len(steps))
	for i, s := range steps {
		if s.Rule < 0 || s.Rule >= len(b.rules) {
			return shared.Result{Err: fmt.Errorf("pgstore: step %d names rule %d of %d bound", i, s.Rule, len(b.rules))}, i
		}
		st[i] = Step{b.rules[s.Rule], s.Key, s.Cost}
	}
	return b.s.CheckTier(ctx, st)
}

// CheckStep is Check of one step.
func (b *bound) CheckStep(ctx context.Context, step shared.Step) shared.Result {
	res, _ := b.Check(ctx, []shared.Step{step})
	return res
}

package shared

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// Stores is a Store made of several: each rule is bound on the store its
// policy names (Rule.Store), Named[name], and a rule that names none on
// Default. One generated package can so hold a rule on Redis and another on
// PostgreSQL. A check whose steps are on one store is that store's check; one
// whose steps span stores (a tier) asks each store in the order its steps
// first name it, and when one denies, gives the stores before it back what
// they took (Bound.Refund: best effort, never more than they took), so the
// decision is all or nothing as on one store, except that a store that
// cannot be reached for the give-back keeps its tokens (stricter, never
// looser).
type Stores struct {
	Default Store
	Named   map[string]Store
}

// ErrStoreMissing is Bind's error for a rule that names a store Stores lacks.
var ErrStoreMissing = errors.New("no store of that name")

// For is the store a rule naming name is bound on.
func (s Stores) For(name string) (Store, error) {
	if name == "" {
		if s.Default == nil {
			return nil, ErrNoStore
		}
		return s.Default, nil
	}
	st, ok := s.Named[name]
	if !ok || st == nil {
		return nil, fmt.Errorf("%w: %q", ErrStoreMissing, name)
	}
	return st, nil
}

// Bind binds each rule on its store (Bind, for each store, of its rules in
// order). When every rule is on one store, the result is that store's Bound.
func (s Stores) Bind(rules []Rule) (Bound, error) {
	m := &multiBound{at: make([]ruleAt, len(rules))}
	var names []string
	var parts [][]Rule
	for i, r := range rules {
		g := slices.Index(names, r.Store)
		if g < 0 {
			g = len(names)
			names = append(names, r.Store)
			parts = append(parts, nil)
		}
		m.at[i] = ruleAt{g, len(parts[g])}
		parts[g] = append(parts[g], r)
	}
	for g, name := range names {
		st, err := s.For(name)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", parts[g][0].Name, err)
		}
		b, err := Bind(st, parts[g])
		if err != nil {
			if name != "" {
				err = fmt.Errorf("store %q: %w", name, err)
			}
			return nil, err
		}
		m.bounds = append(m.bounds, b)
	}
	if len(m.bounds) == 1 {
		return m.bounds[0], nil
	}
	return m, nil
}

// ruleAt is where a rule given to Stores.Bind is bound: its store's group
// and its index there.
type ruleAt struct{ g, i int }

// multiBound is the Bound of rules on several stores.
type multiBound struct {
	bounds []Bound
	at     []ruleAt // by rule index
}

func (m *multiBound) valid(rule int) bool { return rule >= 0 && rule < len(m.at) }

// split groups steps by store, each in order, the groups in the order steps
// first name them; orig maps a group's step back to its index in steps.
func (m *multiBound) split(steps []Step) (groups []int, sub [][]Step, orig [][]int) {
	for k, s := range steps {
		a := m.at[s.Rule]
		j := slices.Index(groups, a.g)
		if j < 0 {
			j = len(groups)
			groups, sub, orig = append(groups, a.g), append(sub, nil), append(orig, nil)
		}
		sub[j] = append(sub[j], Step{Rule: a.i, Key: s.Key, Cost: s.Cost})
		orig[j] = append(orig[j], k)
	}
	return groups, sub, orig
}

// Check decides steps on their stores, all or nothing (see Stores). When all
// allow, the result is that of the step left with the fewest whole tokens,
// the first on a tie, degraded (with the first error) when any store's was.
func (m *multiBound) Check(ctx context.Context, steps []Step) (verdict.Result, int) {
	for i, s := range steps {
		if !m.valid(s.Rule) {
			return verdict.Result{Err: classed(fmt.Errorf("%w: step %d names rule %d of %d bound", ErrInvalidStep, i, s.Rule, len(m.at)))}, i
		}
	}
	groups, sub, orig := m.split(steps)
	var res verdict.Result
	index := -1
	for j, g := range groups {
		r, i := m.bounds[g].Check(ctx, sub[j])
		if i < 0 || i >= len(orig[j]) {
			i = 0
		}
		if !r.Allowed {
			for k := j - 1; k >= 0; k-- {
				m.bounds[groups[k]].Refund(ctx, sub[k]) //nolint:errcheck // best effort: see Stores
			}
			if res.Degraded && !r.Degraded {
				r.Degraded, r.Err = true, res.Err
			}
			return r, orig[j][i]
		}
		if index < 0 || r.Remaining < res.Remaining || r.Remaining == res.Remaining && orig[j][i] < index {
			degraded, err := res.Degraded || r.Degraded, res.Err
			if err == nil {
				err = r.Err
			}
			res, index = r, orig[j][i]
			res.Degraded, res.Err = degraded, err
		} else if r.Degraded {
			res.Degraded = true
			if res.Err == nil {
				res.Err = r.Err
			}
		}
	}
	return res, index
}

// CheckStep is the step's store's CheckStep.
func (m *multiBound) CheckStep(ctx context.Context, step Step) verdict.Result {
	if !m.valid(step.Rule) {
		return verdict.Result{Err: classed(fmt.Errorf("%w: a step names rule %d of %d bound", ErrInvalidStep, step.Rule, len(m.at)))}
	}
	a := m.at[step.Rule]
	return m.bounds[a.g].CheckStep(ctx, Step{Rule: a.i, Key: step.Key, Cost: step.Cost})
}

// Refund gives steps back on their stores; the first error, after all.
func (m *multiBound) Refund(ctx context.Context, steps []Step) error {
	var ok []Step
	for _, s := range steps {
		if m.valid(s.Rule) {
			ok = append(ok, s)
		}
	}
	groups, sub, _ := m.split(ok)
	var first error
	for j, g := range groups {
		if err := m.bounds[g].Refund(ctx, sub[j]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Settle is the step's store's Settle.
func (m *multiBound) Settle(ctx context.Context, step Step, actual int64) (int64, error) {
	if !m.valid(step.Rule) {
		return 0, fmt.Errorf("%w: a step names rule %d of %d bound", ErrInvalidStep, step.Rule, len(m.at))
	}
	a := m.at[step.Rule]
	return m.bounds[a.g].Settle(ctx, Step{Rule: a.i, Key: step.Key, Cost: step.Cost}, actual)
}

// Health is the first store's that is not answering, or nil.
func (m *multiBound) Health() error {
	for _, b := range m.bounds {
		if err := Health(b); err != nil {
			return err
		}
	}
	return nil
}

// numbered is rule's store's binding as Numbered, and the rule's index there.
func (m *multiBound) numbered(rule int) (Numbered, int, error) {
	if !m.valid(rule) {
		return nil, 0, fmt.Errorf("%w: rule %d of %d bound", ErrInvalidStep, rule, len(m.at))
	}
	a := m.at[rule]
	n, ok := m.bounds[a.g].(Numbered)
	if !ok {
		return nil, 0, fmt.Errorf("the store's %T cannot change numbers (it is no shared.Numbered)", m.bounds[a.g])
	}
	return n, a.i, nil
}

// many maps rules (all on one store: a rule's plans) to their store.
func (m *multiBound) many(rules []int) (Numbered, []int, error) {
	var n Numbered
	var idx []int
	for _, r := range rules {
		b, i, err := m.numbered(r)
		if err != nil {
			return nil, nil, err
		}
		if n != nil && b != n {
			return nil, nil, fmt.Errorf("rules %v are on different stores", rules)
		}
		n, idx = b, append(idx, i)
	}
	return n, idx, nil
}

func (m *multiBound) SetNumbers(rule int, n atomicbucket.Numbers) error {
	b, i, err := m.numbered(rule)
	if err != nil {
		return err
	}
	return b.SetNumbers(i, n)
}

func (m *multiBound) CheckNumbers(rule int, n atomicbucket.Numbers) error {
	b, i, err := m.numbered(rule)
	if err != nil {
		return err
	}
	return b.CheckNumbers(i, n)
}

func (m *multiBound) ClearNumbers(rule int) {
	if b, i, err := m.numbered(rule); err == nil {
		b.ClearNumbers(i)
	}
}

func (m *multiBound) SetKeyNumbers(rules []int, key string, n atomicbucket.Numbers) error {
	b, idx, err := m.many(rules)
	if err != nil {
		return err
	}
	return b.SetKeyNumbers(idx, key, n)
}

func (m *multiBound) ClearKeyNumbers(rules []int, key string) {
	if b, idx, err := m.many(rules); err == nil {
		b.ClearKeyNumbers(idx, key)
	}
}

func (m *multiBound) NumbersFor(rule int, key string) (atomicbucket.Numbers, atomicbucket.Origin) {
	b, i, err := m.numbered(rule)
	if err != nil {
		return atomicbucket.Numbers{}, atomicbucket.FromPolicy
	}
	return b.NumbersFor(i, key)
}

func (m *multiBound) Reset(ctx context.Context, rules []int, key string) error {
	b, idx, err := m.many(rules)
	if err != nil {
		return err
	}
	return b.Reset(ctx, idx, key)
}

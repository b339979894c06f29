package shared

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/puzpuzpuz/xsync/v3"
)

// Numbered is a Bound whose rules' numbers change at run time (an Engine's
// Binding is one): a rule's numbers for every key without its own, a key's
// own numbers, and Reset. A generated package's shared limiters change their
// numbers through it.
//
// A store keeps each bucket in the numbers it was written with and converts
// it at its next check with other numbers (the conversion of a rolling
// deploy: the tokens it holds then carried as they are, rounded down, never
// beyond the new burst). So a change reaches a bucket at its next check, and
// until then the bucket refills by the numbers it was written with; a full
// bucket stays full. Every instance sharing the store must have the same
// numbers, or each check converts the bucket to its checker's numbers (never
// gaining tokens, but losing some to rounding at each conversion): give every
// instance its numbers from one source (pgstore's and redisstore's sources
// do), not from one instance's call.
type Numbered interface {
	Bound
	// SetNumbers makes n the numbers of rule (an index of the rules given to
	// Bind) for every key without its own, validated as the generator
	// validates a policy's numbers and as the store can hold them: an error
	// changes nothing.
	SetNumbers(rule int, n atomicbucket.Numbers) error
	// CheckNumbers says why SetNumbers would refuse n, changing nothing.
	CheckNumbers(rule int, n atomicbucket.Numbers) error
	// ClearNumbers gives rule back its bound numbers, for every key without
	// its own.
	ClearNumbers(rule int)
	// SetKeyNumbers gives key its own numbers n on each of rules (a rule's
	// plans), all or nothing: an error on one changes none.
	SetKeyNumbers(rules []int, key string, n atomicbucket.Numbers) error
	// ClearKeyNumbers drops key's own numbers on each of rules.
	ClearKeyNumbers(rules []int, key string)
	// NumbersFor is the numbers a check of rule for key is decided by, and
	// where they come from.
	NumbersFor(rule int, key string) (atomicbucket.Numbers, atomicbucket.Origin)
	// Reset forgets key's bucket on each of rules in the store (its next
	// check finds it full), and this process's lease and local share of it.
	Reset(ctx context.Context, rules []int, key string) error
}

// changes are a binding's numbers where they differ from the bound rules':
// by rule index, the rule in force for keys without their own (nil: the
// bound rule) and the keys with their own. A change of plan numbers copies
// plan and replaces the whole; a check reads it with one atomic load. A
// rule's keys are one concurrent map from its first key on, changed in place
// under b.mu (so that n keys given numbers cost O(n), not a copy per key).
type changes struct {
	plan []*StoreRule
	keys []*xsync.MapOf[string, *StoreRule]
}

// ErrInvalidNumbers is wrapped by the errors of a change of numbers a store
// cannot hold.
var ErrInvalidNumbers = errors.New("invalid numbers")

// ruleFor is the rule a check of rule i for key is decided by.
func (b *Binding) ruleFor(i int, key string) *StoreRule {
	ch := b.ch.Load()
	if ch == nil {
		return b.rules[i]
	}
	if m := ch.keys[i]; m != nil {
		if r, ok := m.Load(key); ok {
			return r
		}
	}
	if r := ch.plan[i]; r != nil {
		return r
	}
	return b.rules[i]
}

// variant is rule i's bound rule with numbers n: validated by
// atomicbucket.Rule.WithNumbers (the generator's checks and messages), then
// as a store on a microsecond clock holds it (NewIntegers), with its local
// share's numbers (for FailLocal) checked too.
func (b *Binding) variant(i int, n atomicbucket.Numbers) (*StoreRule, atomicbucket.Numbers, error) {
	if err := b.index(i); err != nil {
		return nil, atomicbucket.Numbers{}, err
	}
	base := b.rules[i]
	ar, err := atomicbucket.NewRule(base.n.Limit)
	if err != nil {
		return nil, atomicbucket.Numbers{}, err
	}
	nr, err := ar.WithNumbers(n)
	if err != nil {
		return nil, atomicbucket.Numbers{}, fmt.Errorf("%s: rule %s: %w", b.e.b.Name(), base.name, err)
	}
	nums, err := NewIntegers(nr.Limit())
	if err != nil {
		return nil, atomicbucket.Numbers{}, fmt.Errorf("%s: %w: rule %s with %v: %w", b.e.b.Name(), ErrInvalidNumbers, base.name, n, err)
	}
	var share atomicbucket.Numbers
	if f := base.fallback; f.local != nil {
		l, err := shareOf(nr.Limit(), f.failure.Share)
		if err == nil {
			_, err = f.local.Rule().WithNumbers(atomicbucket.NumbersOf(l))
		}
		if err != nil {
			return nil, atomicbucket.Numbers{}, fmt.Errorf("%s: %w: rule %s with %v: its local share %v: %w", b.e.b.Name(), ErrInvalidNumbers, base.name, n, f.failure.Share, err)
		}
		share = atomicbucket.NumbersOf(l)
	}
	c := *base
	c.n = nums
	if base.lease > 0 {
		c.lease = min(b.leaseOf[i], nums.Limit.Burst)
	}
	return &c, share, nil
}

func (b *Binding) index(i int) error {
	if i < 0 || i >= len(b.rules) {
		return fmt.Errorf("%s: %w: rule %d of %d bound", b.e.b.Name(), ErrInvalidStep, i, len(b.rules))
	}
	return nil
}

// load is the binding's changes, or none yet, for a change to copy.
func (b *Binding) load() *changes {
	if ch := b.ch.Load(); ch != nil {
		return ch
	}
	return &changes{plan: make([]*StoreRule, len(b.rules)), keys: make([]*xsync.MapOf[string, *StoreRule], len(b.rules))}
}

// SetNumbers makes n rule's numbers for every key without its own
// (Numbered).
func (b *Binding) SetNumbers(rule int, n atomicbucket.Numbers) error {
	v, share, err := b.variant(rule, n)
	if err != nil {
		return err
	}
	b.mu.Lock()
	old := b.load()
	ch := &changes{plan: append([]*StoreRule(nil), old.plan...), keys: old.keys}
	ch.plan[rule] = v
	b.ch.Store(ch)
	if f := b.rules[rule].fallback; f.local != nil {
		f.local.SetNumbersAt(atomicbucket.Now(), share, atomicbucket.CarryAsIs) //nolint:errcheck // validated by variant
	}
	b.leases.Changed(rule)
	b.mu.Unlock()
	b.releaseStale([]int{rule})
	return nil
}

// CheckNumbers says why SetNumbers would refuse n (Numbered).
func (b *Binding) CheckNumbers(rule int, n atomicbucket.Numbers) error {
	_, _, err := b.variant(rule, n)
	return err
}

// ClearNumbers gives rule back its bound numbers (Numbered).
func (b *Binding) ClearNumbers(rule int) {
	if b.index(rule) != nil {
		return
	}
	b.mu.Lock()
	old := b.ch.Load()
	if old == nil || old.plan[rule] == nil {
		b.mu.Unlock()
		return
	}
	ch := &changes{plan: append([]*StoreRule(nil), old.plan...), keys: old.keys}
	ch.plan[rule] = nil
	b.ch.Store(ch)
	if f := b.rules[rule].fallback; f.local != nil {
		f.local.ClearNumbersAt(atomicbucket.Now(), atomicbucket.CarryAsIs)
	}
	b.leases.Changed(rule)
	b.mu.Unlock()
	b.releaseStale([]int{rule})
}

// SetKeyNumbers gives key its own numbers on each of rules, all or nothing
// (Numbered).
func (b *Binding) SetKeyNumbers(rules []int, key string, n atomicbucket.Numbers) error {
	vs := make([]*StoreRule, len(rules))
	shares := make([]atomicbucket.Numbers, len(rules))
	for j, i := range rules {
		v, share, err := b.variant(i, n)
		if err == nil {
			err = (Call{v, key, 0}).checkKey()
		}
		if err != nil {
			return err
		}
		vs[j], shares[j] = v, share
	}
	b.mu.Lock()
	old := b.load()
	var fresh *changes // made when a rule gets its first key, or at the first change
	if b.ch.Load() == nil {
		fresh = old
	}
	for j, i := range rules {
		if m := old.keys[i]; m != nil {
			m.Store(key, vs[j])
			continue
		}
		if fresh == nil {
			fresh = &changes{plan: old.plan, keys: append([]*xsync.MapOf[string, *StoreRule](nil), old.keys...)}
		}
		m := xsync.NewMapOf[string, *StoreRule]()
		m.Store(key, vs[j])
		fresh.keys[i] = m
	}
	if fresh != nil {
		b.ch.Store(fresh)
	}
	now := atomicbucket.Now()
	for j, i := range rules {
		if f := b.rules[i].fallback; f.local != nil {
			f.local.SetKeyNumbersAt(now, key, shares[j], atomicbucket.CarryAsIs) //nolint:errcheck // validated by variant
		}
	}
	b.mu.Unlock()
	b.releaseStale(rules, key)
	return nil
}

// ClearKeyNumbers drops key's own numbers on each of rules (Numbered).
func (b *Binding) ClearKeyNumbers(rules []int, key string) {
	b.mu.Lock()
	old := b.ch.Load()
	if old == nil {
		b.mu.Unlock()
		return
	}
	now := atomicbucket.Now()
	for _, i := range rules {
		if b.index(i) != nil || old.keys[i] == nil {
			continue
		}
		if _, ok := old.keys[i].LoadAndDelete(key); !ok {
			continue
		}
		if f := b.rules[i].fallback; f.local != nil {
			f.local.ClearKeyNumbersAt(now, key, atomicbucket.CarryAsIs)
		}
	}
	b.mu.Unlock()
	b.releaseStale(rules, key)
}

// releaseStale gives back the grants this process's leases of rules (of
// key, if given) took in numbers no longer in force, waiting at most 2 s
// (the most a grant is held anyway).
func (b *Binding) releaseStale(rules []int, key ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, i := range rules {
		if b.index(i) == nil {
			b.leases.ReleaseStale(ctx, i, key...)
		}
	}
}

// NumbersFor is the numbers a check of rule for key is decided by, and where
// they come from (Numbered); a rule not bound has none.
func (b *Binding) NumbersFor(rule int, key string) (atomicbucket.Numbers, atomicbucket.Origin) {
	if b.index(rule) != nil {
		return atomicbucket.Numbers{}, atomicbucket.FromPolicy
	}
	r := b.ruleFor(rule, key)
	o := atomicbucket.FromPolicy
	if ch := b.ch.Load(); ch != nil {
		if m := ch.keys[rule]; m != nil && has(m, key) {
			o = atomicbucket.FromKeyOverride
		} else if ch.plan[rule] != nil {
			o = atomicbucket.FromOverride
		}
	}
	return atomicbucket.NumbersOf(r.n.Limit), o
}

func has(m *xsync.MapOf[string, *StoreRule], key string) bool {
	_, ok := m.Load(key)
	return ok
}

// RuleFor is the rule a check of rule for key is decided by on the store
// (its numbers in the store's units); nil for a rule not bound.
func (b *Binding) RuleFor(rule int, key string) *StoreRule {
	if b.index(rule) != nil {
		return nil
	}
	return b.ruleFor(rule, key)
}

// Reset forgets key's bucket on each of rules (Numbered): this process's
// lease of it gives back what it holds first, then the store deletes the
// bucket, and the local share forgets its own. Other instances' leases keep
// the grants they hold until those expire (at most a lease's batch each,
// for at most 2 s): those tokens were taken before the reset and are spent
// after it.
func (b *Binding) Reset(ctx context.Context, rules []int, key string) error {
	for _, i := range rules {
		if err := b.index(i); err != nil {
			return err
		}
		if err := (Call{b.rules[i], key, 0}).checkKey(); err != nil {
			return fmt.Errorf("%s: %w", b.e.b.Name(), err)
		}
	}
	for _, i := range rules {
		b.leases.Forget(ctx, i, key)
		err := b.e.Within(ctx, func() error { return b.e.b.Forget(ctx, Call{b.ruleFor(i, key), key, 0}) })
		if err != nil {
			return fmt.Errorf("%s: reset of rule %s for key %q: %w", b.e.b.Name(), b.rules[i].name, key, err)
		}
		if f := b.rules[i].fallback; f.local != nil {
			f.local.ResetAt(key, atomicbucket.Now())
		}
	}
	return nil
}

// shareOf is l's local share: its rate and burst times share, the period
// stretched (rounded up) and the burst rounded down, so that it never admits
// more than its share.
func shareOf(l atomicbucket.Limit, share float64) (atomicbucket.Limit, error) {
	if !(share > 0 && share <= 1) {
		return l, fmt.Errorf("%w, not %v", ErrLocalShare, share)
	}
	p := float64(l.Period)/share + 0.999999
	if p >= float64(1<<62) {
		return l, fmt.Errorf("the period %v stretched by a share of %v is too long", l.Period, share)
	}
	l.Period = time.Duration(p)
	l.Burst = max(int64(float64(l.Burst)*share), 1)
	if l.InitialSet {
		l.Initial = min(l.Initial, l.Burst)
	}
	return l, nil
}

// numbersState is the part of a Binding that changes of numbers use.
type numbersState struct {
	ch      atomic.Pointer[changes] // nil until the first change
	mu      sync.Mutex              // one change at a time
	leaseOf []int64                 // by rule: the policy's lease size (0: not leased)
}

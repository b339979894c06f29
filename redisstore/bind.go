package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
	"github.com/puzpuzpuz/xsync/v3"
)

// Bind prepares a generated package's shared rules (shared.Store): each
// rule's units, its failure setting and its lease. It refuses a rule Redis
// cannot hold within the contract, saying why, and two rules with one name.
func (s *Store) Bind(rules []shared.Rule) (shared.Bound, error) {
	b := &bound{s: s, rules: make([]*Rule, len(rules)), leases: make([]*xsync.MapOf[string, *Lease], len(rules)), maxLeases: MaxLeases}
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
		if r, err = r.WithFailure(sr.Failure); err != nil {
			return nil, err
		}
		if sr.Lease > 0 {
			r.lease = min(sr.Lease, r.n.Limit.Burst)
			b.leases[i] = xsync.NewMapOf[string, *Lease]()
		}
		b.rules[i] = r
	}
	s.mu.Lock()
	s.bounds = append(s.bounds, b)
	s.mu.Unlock()
	return b, nil
}

// ReleaseLeases gives back to Redis the tokens that the leases of every
// package bound to the store hold (Lease.Release), so that a service shutting
// down leaves them to the other instances instead of holding them until their
// grants expire. The leases go on working: a later check takes a new grant.
// It returns the first error, having tried every lease.
func (s *Store) ReleaseLeases(ctx context.Context) error {
	s.mu.Lock()
	bounds := slices.Clone(s.bounds)
	s.mu.Unlock()
	var first error
	for _, b := range bounds {
		for _, m := range b.leases {
			if m == nil {
				continue
			}
			m.Range(func(_ string, l *Lease) bool {
				if err := l.Release(ctx); err != nil && first == nil {
					first = err
				}
				return true
			})
		}
	}
	return first
}

// MaxLeases is how many leases (a leased rule and a key) a bound package
// keeps. A lease whose grant has expired is dropped when room is needed (its
// tokens are back in Redis's bucket by then); when every one is in use, the
// checks of further keys go to Redis one by one, as for a rule without a
// lease, until room is made.
const MaxLeases = 1 << 16

// bound is the rules a Store bound.
type bound struct {
	s      *Store
	rules  []*Rule
	leases []*xsync.MapOf[string, *Lease] // a leased rule's leases by key; nil for other rules
	count  atomic.Int64                   // leases in the maps
	swept  atomic.Int64                   // atomicbucket time of the last sweep

	maxLeases int64 // MaxLeases; tests lower it
}

// Check decides steps on Redis (CheckTier), or, when every step's rule is
// leased, from each step's lease in order, all or nothing. A step naming no
// bound rule is denied, as a rule that cannot be checked.
func (b *bound) Check(ctx context.Context, steps []shared.Step) (shared.Result, int) {
	leased := true
	for i, s := range steps {
		if s.Rule < 0 || s.Rule >= len(b.rules) {
			return shared.Result{Err: fmt.Errorf("redisstore: step %d names rule %d of %d bound", i, s.Rule, len(b.rules))}, i
		}
		leased = leased && b.rules[s.Rule].lease > 0
	}
	if leased && len(steps) > 0 {
		if res, i, ok := b.leased(ctx, steps); ok {
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
		return shared.Result{Err: fmt.Errorf("redisstore: a step names rule %d of %d bound", step.Rule, len(b.rules))}
	}
	r := b.rules[step.Rule]
	if r.lease > 0 {
		if l := b.lease(step.Rule, step.Key); l != nil {
			res, _, _ := b.s.checkLease(ctx, l, step.Cost, int64(atomicbucket.Now()))
			return res
		}
	}
	res, _ := b.s.CheckTier(ctx, []Step{{r, step.Key, step.Cost}})
	return res
}

// leased decides steps from their leases, in order: when a step denies, the
// steps before it get their tokens back (TierAt's rule); the decision is the
// denying step's, or that of the step left with the fewest tokens. ok is
// false, with nothing taken, when a step's lease cannot be kept (MaxLeases).
func (b *bound) leased(ctx context.Context, steps []shared.Step) (res shared.Result, index int, ok bool) {
	var ls [4]*Lease
	leases := ls[:0]
	for _, st := range steps {
		l := b.lease(st.Rule, st.Key)
		if l == nil {
			return shared.Result{}, 0, false
		}
		leases = append(leases, l)
	}
	type took struct {
		g     *grant
		local bool // decided by the failure setting: a local share gets it back
	}
	var tk [4]took
	taken := tk[:0]
	now := int64(atomicbucket.Now())
	index = -1
	for i, st := range steps {
		r, g, called := b.s.checkLease(ctx, leases[i], st.Cost, now)
		if called { // time passed waiting for Redis: the next lease's expiry is judged at the new now
			now = int64(atomicbucket.Now())
		}
		if !r.Allowed {
			for j := i - 1; j >= 0; j-- {
				if taken[j].local {
					b.rules[steps[j].Rule].fallback.Step(steps[j].Key, steps[j].Cost).RefundAt(atomicbucket.Time(now))
				} else {
					leases[j].giveBack(taken[j].g, steps[j].Cost)
				}
			}
			return r, i, true
		}
		taken = append(taken, took{g, r.Degraded})
		if index < 0 || r.Remaining < res.Remaining {
			res, index = r, i
		}
	}
	return res, index, true
}

// lease returns the lease of rule's bucket for key, or nil when MaxLeases
// are kept and none can be dropped.
func (b *bound) lease(rule int, key string) *Lease {
	m := b.leases[rule]
	if l, ok := m.Load(key); ok {
		return l
	}
	if b.count.Load() >= b.maxLeases && !b.sweep() {
		return nil
	}
	l, _ := m.LoadOrCompute(strings.Clone(key), func() *Lease {
		b.count.Add(1)
		r := b.rules[rule]
		return b.s.NewLease(r, key, r.lease)
	})
	return l
}

// sweep drops the leases whose grants have expired, at most once a second,
// and reports whether there is room for another.
func (b *bound) sweep() bool {
	now := int64(atomicbucket.Now())
	if last := b.swept.Load(); now-last < int64(time.Second) || !b.swept.CompareAndSwap(last, now) {
		return b.count.Load() < b.maxLeases
	}
	for _, m := range b.leases {
		if m == nil {
			continue
		}
		m.Range(func(k string, l *Lease) bool {
			if l.idle(now) {
				m.Delete(k)
				b.count.Add(-1)
			}
			return true
		})
	}
	return b.count.Load() < b.maxLeases
}

// checkLease decides cost from lease l at now, never failing: locally when
// the lease can, else by a refill from Redis behind the breaker and within
// the store's timeout; when Redis cannot, the rule's failure setting decides.
// The grant spent from is returned for a tier's giveBack, and whether the
// check waited for a refill (time passed).
func (s *Store) checkLease(ctx context.Context, l *Lease, cost, now int64) (Result, *grant, bool) {
	d, g, call := l.local(now, cost)
	if !call {
		return Result{Decision: d}, g, false
	}
	step := []Step{{l.rule, l.key, cost}}
	ok, probe := s.guard.Breaker.Allow(now)
	if !ok {
		s.guard.Count(0, true)
		d, _ := fallbackTier(step)
		return Result{Decision: d, Degraded: true, Err: ErrCircuitOpen}, nil, false
	}
	s.guard.Count(1, false)
	cctx, cancel := context.WithTimeout(ctx, s.guard.Timeout)
	d, g, err := l.refill(cctx, cost)
	cancel()
	if err != nil {
		if errors.Is(err, errLeaseWait) {
			// Redis was not asked: no failure of its, but a probe's turn ends.
			s.guard.Breaker.EndProbe(probe)
		} else {
			s.guard.Breaker.Failure(int64(atomicbucket.Now()), probe)
		}
		s.guard.Count(0, true)
		d, _ := fallbackTier(step)
		return Result{Decision: d, Degraded: true, Err: err}, nil, true
	}
	s.guard.Breaker.Success(probe)
	return Result{Decision: d}, g, true
}

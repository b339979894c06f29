package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Lease spends tokens of one shared bucket (a rule and a key) in this process:
// it takes a batch from Redis in one script call and admits requests from it
// locally, with one atomic operation and no round trip, until the batch runs
// out. Only tokens Redis granted are ever spent, so every instance's leases
// together never admit more than the shared bucket allows; what a lease still
// holds when it is released goes back (never beyond full).
//
// The batch adapts: twice what the lease spent since its last refill (at
// least the request's cost, at most the lease's maxBatch), and Redis grants at most half of what the
// bucket holds beyond the request's own cost, so a bucket running low is
// shared out in ever smaller pieces instead of drained by one instance.
type Lease struct {
	st   *Store
	rule *Rule
	key  string

	left        atomic.Int64 // tokens granted and not yet spent
	deniedUntil atomic.Int64 // atomicbucket time (ns) before which Redis said the cost is not there: denied locally
	spent       atomic.Int64 // tokens spent since the last refill
	mu          sync.Mutex   // one refill at a time
	maxBatch    int64
	calls       atomic.Int64 // script calls made
}

// NewLease returns a lease of key's bucket under r, asking for at most
// maxBatch tokens at a time (at least 1, at most the burst).
func (s *Store) NewLease(r *Rule, key string, maxBatch int64) *Lease {
	maxBatch = min(max(maxBatch, 1), r.limit.Burst)
	return &Lease{st: s, rule: r, key: key, maxBatch: maxBatch}
}

// AllowN admits a request of cost from the lease's tokens, refilling them
// from Redis when they run short. A denial comes from Redis (the bucket does
// not hold the cost beyond what other instances' leases took), with its
// RetryAfter; an error is Redis's, and the caller's failure setting decides.
func (l *Lease) AllowN(ctx context.Context, cost int64) (atomicbucket.Decision, error) {
	if cost < 0 || cost > l.rule.limit.Burst {
		return atomicbucket.Decision{RetryAfter: atomicbucket.Never}, nil
	}
	for {
		left := l.left.Load()
		if left < cost {
			break
		}
		if l.left.CompareAndSwap(left, left-cost) {
			l.spent.Add(cost)
			return atomicbucket.Decision{Allowed: true, Remaining: left - cost}, nil
		}
	}
	if until := l.deniedUntil.Load(); until != 0 {
		// Redis denied recently: until its wait is over, deny without asking
		// (stricter than asking, if another instance gives tokens back
		// meanwhile; never looser). A bucket over its limit then costs Redis
		// one call per wait, not one per request.
		if now := int64(atomicbucket.Now()); now < until {
			return atomicbucket.Decision{RetryAfter: time.Duration(until - now)}, nil
		}
	}
	return l.refill(ctx, cost)
}

// refill asks Redis for a batch that covers cost, under the lease's lock: one
// refill at a time, and a request that waited for another's refill tries the
// new tokens first.
func (l *Lease) refill(ctx context.Context, cost int64) (atomicbucket.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		left := l.left.Load()
		if left < cost {
			break
		}
		if l.left.CompareAndSwap(left, left-cost) {
			l.spent.Add(cost)
			return atomicbucket.Decision{Allowed: true, Remaining: left - cost}, nil
		}
	}
	// The batch: twice what was spent since the last refill (a lease spent
	// quickly grows, an idle one shrinks), at least the cost, at most maxBatch.
	want := min(max(2*l.spent.Swap(0), cost, 1), l.maxBatch)
	l.calls.Add(1)
	d, granted, err := l.st.lease(ctx, l.rule, l.key, cost, want)
	if err != nil {
		return d, err
	}
	if !d.Allowed {
		if d.RetryAfter != atomicbucket.Never {
			l.deniedUntil.Store(int64(atomicbucket.Now().Add(d.RetryAfter)))
		}
		return d, nil
	}
	l.deniedUntil.Store(0)
	l.spent.Add(cost)
	rem := l.left.Add(granted - cost)
	d.Remaining = rem
	return d, nil
}

// Release gives the lease's unspent tokens back to the shared bucket.
func (l *Lease) Release(ctx context.Context) error {
	n := l.left.Swap(0)
	if n <= 0 {
		return nil
	}
	l.calls.Add(1)
	return l.st.RefundN(ctx, l.rule, l.key, n)
}

// Held is the number of tokens the lease holds: granted by Redis, not yet spent.
func (l *Lease) Held() int64 { return l.left.Load() }

// Calls is the number of Redis script calls the lease has made.
func (l *Lease) Calls() int64 { return l.calls.Load() }

// lease runs the script's lease mode: at least cost, up to want tokens.
func (s *Store) lease(ctx context.Context, r *Rule, key string, cost, want int64) (atomicbucket.Decision, int64, error) {
	args := append(r.args([]any{1, "3"}), r.keyPhase(key), cost, want)
	res, err := s.check.Run(ctx, s.client, []string{s.Key(r, key)}, args...).Int64Slice()
	if err != nil {
		return atomicbucket.Decision{}, 0, err
	}
	if len(res) != 5 {
		return atomicbucket.Decision{}, 0, errScript(res)
	}
	allowed, ahead, x, since := res[0] == 1, res[2], res[3], res[4]
	d := atomicbucket.Decision{Allowed: allowed, Remaining: max((r.tau-ahead)/r.emit, 0), Reset: r.duration(ahead, since)}
	if !allowed {
		d.RetryAfter = r.duration(x, since)
		return d, 0, nil
	}
	return d, x, nil
}

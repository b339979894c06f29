package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Lease spends tokens of one shared bucket (a rule and a key) in this process:
// it takes a batch from Redis in one script call and admits requests from it
// locally, with one atomic operation and no round trip, until the batch runs
// out or expires. Only tokens Redis granted are ever spent, and while a grant
// is valid Redis counts its tokens as held: the bucket holds at most its
// burst minus what every lease holds, so all instances together never admit
// more than the shared bucket allows, in any window. A grant is valid until
// the start of Redis's second after next (one to two seconds); the lease stops
// spending it earlier by its own clock, from before it asked. What a lease
// did not spend goes back to the bucket with its next call (never beyond
// full), and on Release.
//
// The batch adapts: twice what the lease spent of its last grant (at least
// the request's cost, at most the lease's maxBatch), and Redis grants at most
// half of what the bucket holds beyond the request's own cost, so a bucket
// running low is shared out in ever smaller pieces instead of drained by one
// instance.
type Lease struct {
	st   *Store
	rule *Rule
	key  string

	cur         atomic.Pointer[grant] // the grant being spent; nil before the first
	deniedUntil atomic.Int64          // atomicbucket time (ns) before which Redis said the cost is not there: denied locally
	mu          sync.Mutex            // one refill at a time
	maxBatch    int64
	calls       atomic.Int64 // script calls made
}

// grant is one batch of tokens Redis granted a lease.
type grant struct {
	left    atomic.Int64 // tokens not yet spent
	expires int64        // atomicbucket time (ns) from which none may be spent
	second  int64        // Redis's second the grant is held under (to settle it)
	size    int64        // tokens granted
}

// NewLease returns a lease of key's bucket under r, asking for at most
// maxBatch tokens at a time (at least 1, at most the burst).
func (s *Store) NewLease(r *Rule, key string, maxBatch int64) *Lease {
	maxBatch = min(max(maxBatch, 1), r.n.Limit.Burst)
	return &Lease{st: s, rule: r, key: key, maxBatch: maxBatch}
}

// AllowN admits a request of cost from the lease's tokens, refilling them
// from Redis when they run short or expire. A denial comes from Redis (the
// bucket does not hold the cost beyond what leases hold), with its
// RetryAfter; an error is Redis's, and the caller's failure setting decides.
func (l *Lease) AllowN(ctx context.Context, cost int64) (atomicbucket.Decision, error) {
	d, _, call := l.local(int64(atomicbucket.Now()), cost)
	if !call {
		return d, nil
	}
	d, _, err := l.refill(ctx, cost)
	return d, err
}

// local decides cost without Redis when it can: from the current grant, or a
// denial while Redis's last one holds (call is false); otherwise the caller
// must refill. The grant spent from is returned for giveBack.
func (l *Lease) local(now, cost int64) (d atomicbucket.Decision, g *grant, call bool) {
	if cost < 0 || cost > l.rule.n.Limit.Burst {
		return atomicbucket.Decision{RetryAfter: atomicbucket.Never}, nil, false
	}
	if d, g, ok := l.spend(now, cost); ok {
		return d, g, false
	}
	if until := l.deniedUntil.Load(); until != 0 && now < until {
		// Redis denied recently: until its wait is over, deny without asking
		// (stricter than asking, if another instance gives tokens back
		// meanwhile; never looser). A bucket over its limit then costs Redis
		// one call per wait, not one per request.
		return atomicbucket.Decision{RetryAfter: time.Duration(until - now)}, nil, false
	}
	return atomicbucket.Decision{}, nil, true
}

// spend takes cost from the current grant if it is valid at now and holds it.
func (l *Lease) spend(now, cost int64) (atomicbucket.Decision, *grant, bool) {
	g := l.cur.Load()
	if g == nil || now >= g.expires {
		return atomicbucket.Decision{}, nil, false
	}
	for {
		left := g.left.Load()
		if left < cost {
			return atomicbucket.Decision{}, nil, false
		}
		if g.left.CompareAndSwap(left, left-cost) {
			return atomicbucket.Decision{Allowed: true, Remaining: left - cost}, g, true
		}
	}
}

// giveBack returns cost to grant g, which a tier took it from before another
// of its steps denied, if g is still the lease's grant (otherwise the tokens
// are dropped: stricter, never looser).
func (l *Lease) giveBack(g *grant, cost int64) {
	if g != nil && l.cur.Load() == g {
		g.left.Add(cost)
	}
}

// refill settles the current grant and asks Redis for a batch that covers
// cost, under the lease's lock: one refill at a time, and a request that
// waited for another's refill tries the new tokens first.
func (l *Lease) refill(ctx context.Context, cost int64) (atomicbucket.Decision, *grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent := int64(atomicbucket.Now())
	if d, g, ok := l.spend(sent, cost); ok {
		return d, g, nil
	}
	if err := ctx.Err(); err != nil {
		// The wait for another request's refill used up ctx: Redis was not
		// asked, so this is no failure of Redis's (see checkLease).
		return atomicbucket.Decision{}, nil, fmt.Errorf("%w: %w", errLeaseWait, err)
	}
	// The batch: twice what was spent from the last grant (a lease spent
	// quickly grows, an idle one shrinks), at least the cost, at most maxBatch.
	prev, spent := l.settle(sent)
	want := min(max(2*spent, cost, 1), l.maxBatch)
	l.calls.Add(1)
	d, g, err := l.st.lease(ctx, l.rule, l.key, cost, want, prev, sent)
	if err != nil || !d.Allowed {
		l.cur.Store(nil)
		if err == nil && d.RetryAfter != atomicbucket.Never {
			l.deniedUntil.Store(int64(atomicbucket.Now().Add(d.RetryAfter)))
		}
		return d, nil, err
	}
	l.deniedUntil.Store(0)
	g.left.Store(g.size - cost)
	l.cur.Store(g)
	d.Remaining = g.size - cost
	return d, g, nil
}

// idle reports whether the lease holds no valid grant and no refill is under
// way (a sweep may then drop it).
func (l *Lease) idle(now int64) bool {
	if !l.mu.TryLock() {
		return false
	}
	defer l.mu.Unlock()
	g := l.cur.Load()
	return g == nil || now >= g.expires
}

// errLeaseWait wraps the error of a check whose context ended while it
// waited for another check's refill of the same lease.
var errLeaseWait = errors.New("redisstore: waited for a lease's refill")

// settlement is what a lease call tells Redis of the lessee's previous grant:
// its second and size (0: none, or expired), and the tokens it did not spend.
type settlement struct{ second, size, unspent int64 }

// settle ends the current grant (nothing more is spent from it): what to
// tell Redis of it, and how many of its tokens were spent.
func (l *Lease) settle(now int64) (settlement, int64) {
	g := l.cur.Load()
	if g == nil {
		return settlement{}, 0
	}
	unspent := g.left.Swap(0)
	if now >= g.expires {
		return settlement{}, g.size - unspent // Redis no longer holds it either
	}
	return settlement{g.second, g.size, unspent}, g.size - unspent
}

// Release gives the lease's unspent tokens back to the shared bucket, and
// ends its grant.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := int64(atomicbucket.Now())
	s, _ := l.settle(now)
	l.cur.Store(nil)
	if s.size == 0 {
		return nil
	}
	l.calls.Add(1)
	_, _, err := l.st.lease(ctx, l.rule, l.key, 0, 0, s, now)
	return err
}

// Held is the number of tokens the lease holds: granted by Redis, valid, and
// not yet spent.
func (l *Lease) Held() int64 {
	g := l.cur.Load()
	if g == nil || int64(atomicbucket.Now()) >= g.expires {
		return 0
	}
	return g.left.Load()
}

// Calls is the number of Redis script calls the lease has made.
func (l *Lease) Calls() int64 { return l.calls.Load() }

// lease runs the script's lease mode: settle the previous grant, then grant
// at least cost and up to want tokens (none for want 0). sent is the
// atomicbucket time before the call: the grant expires by it. now is for the
// explicit-time script of the tests (seconds, microseconds).
func (s *Store) lease(ctx context.Context, r *Rule, key string, cost, want int64, prev settlement, sent int64, now ...any) (atomicbucket.Decision, *grant, error) {
	args := append(r.args([]any{1, "3"}), r.keyPhase(key), cost, want, prev.second, prev.size, prev.unspent)
	args = append(args, now...)
	res, err := s.check.Run(ctx, s.client, []string{s.Key(r, key)}, args...).Int64Slice()
	if err != nil {
		return atomicbucket.Decision{}, nil, err
	}
	if len(res) != 7 {
		return atomicbucket.Decision{}, nil, errScript(res)
	}
	allowed, ahead, x, since, second, usec := res[0] == 1, res[2], res[3], res[4], res[5], res[6]
	d := atomicbucket.Decision{Allowed: allowed, Remaining: max((r.n.Tau-ahead)/r.n.Emit, 0), Reset: r.n.Duration(ahead, since)}
	if !allowed {
		d.RetryAfter = r.n.Duration(x, since)
		return d, nil, nil
	}
	// Valid until Redis's second after next starts: 2 s − usec from Redis's
	// now, which is no earlier than sent.
	return d, &grant{expires: sent + (2_000_000-usec)*1000, second: second, size: x}, nil
}

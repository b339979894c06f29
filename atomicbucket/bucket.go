package atomicbucket

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"
)

// Bucket is a single token bucket, for a global limit. Its methods are safe for
// concurrent use and never block, except Wait. Build one with NewBucket; the zero
// Bucket has no rule and is not usable.
//
// Each check reads the clock once (Now) and its At form takes the Time instead. Costs at the limits: cost 0 is allowed while the
// bucket is not in debt from reservations and takes nothing; a negative cost, or
// one above the burst, is denied with RetryAfter Never and changes nothing.
type Bucket struct {
	_       cpu.CacheLinePad           // tat is written by every check: keep it off the line of whatever precedes the Bucket
	tat     atomic.Int64               // theoretical arrival time in the rule's units (token slots since anchor for interval rules); dead once the numbers change
	seen    atomic.Int64               // the latest time (ns) a check that may change the word was stamped with (see)
	over    atomic.Pointer[bucketWord] // nil until the numbers first change; then the word in force (bucket_numbers.go)
	anchor  int64                      // interval rules: the grid anchor in ns since epoch (the bucket's creation, or the rule's aligned anchor)
	rule    Rule
	changes sync.Mutex       // serialises changes of numbers; never taken by a check
	env     *envelope        // the envelope of every number the bucket has had (numbers.go); nil before the first change; under changes
	_       cpu.CacheLinePad // and off the line of whatever follows it
}

// NewBucketAt returns a bucket for rule r, created at now (atomicbucket.Now()
// for the present): it starts with the rule's initial tokens and, for an
// anchored interval rule, its grid starts then.
func NewBucketAt(r Rule, now Time) *Bucket {
	b := &Bucket{rule: r}
	n := clampNow(now)
	b.anchor = 0
	switch r.mode {
	case modeAligned:
		b.anchor = r.anchor
	case modeAnchored:
		b.anchor = n
	}
	b.tat.Store(r.fresh(n, b.anchor))
	return b
}

// fresh is the TAT of a bucket created at now (ns) on a grid anchored at anchor:
// its initial tokens.
func (r *Rule) fresh(now, anchor int64) int64 { return r.units(now, anchor) + r.debt }

// Rule returns the bucket's rule.
func (b *Bucket) Rule() *Rule { return &b.rule }

// Allow reports whether a request of cost 1 is allowed now, taking a token if so.
func (b *Bucket) Allow() bool { return b.AllowAt(Now()) }

// AllowAt is Allow at time now.
//
// Keep in step with Bucket.AllowGreedyAt (generated.go), which is this check
// with a greedy rule's units passed as constants.
func (b *Bucket) AllowAt(now Time) bool {
	if b.over.Load() != nil {
		return b.allowOver(clampNow(now), 1)
	}
	nowU := b.rule.units(clampNow(now), b.anchor)
	tat, ok := advance(&b.tat, &b.seen, clampNow(now), nowU, b.rule.emit, nowU+b.rule.tau)
	if tat < 0 {
		return b.allowOver(clampNow(now), 1) // the numbers changed meanwhile
	}
	return ok
}

// AllowNAt checks a request of the given cost now and takes its tokens if allowed.
func (b *Bucket) AllowNAt(now Time, cost int64) Decision {
	n := clampNow(now)
	if b.over.Load() != nil {
		return b.allowNOver(n, cost)
	}
	nowU := b.rule.units(n, b.anchor)
	if cost < 0 || cost > b.rule.burst {
		if tat := b.tat.Load(); tat >= 0 {
			return b.rule.outOfRange(tat, n, nowU, b.anchor)
		}
		return b.allowNOver(n, cost)
	}
	inc := cost * b.rule.emit
	tat, ok := advance(&b.tat, &b.seen, n, nowU, inc, nowU+b.rule.tau)
	if tat < 0 {
		return b.allowNOver(n, cost) // the numbers changed meanwhile
	}
	return b.rule.decide(ok, tat, inc, n, nowU, b.anchor)
}

// PeekAt is what AllowNAt would decide at now, without taking anything.
func (b *Bucket) PeekAt(now Time, cost int64) Decision {
	if tat := b.tat.Load(); tat >= 0 {
		return b.rule.peek(tat, clampNow(now), b.anchor, cost)
	}
	return b.peekOver(clampNow(now), cost)
}

// peek decides a request of cost against a bucket whose word holds tat, without
// changing it.
func (r *Rule) peek(tat, now, anchor, cost int64) Decision {
	nowU := r.units(now, anchor)
	if cost < 0 || cost > r.burst {
		return r.outOfRange(tat, now, nowU, anchor)
	}
	inc := cost * r.emit
	after := max(tat, nowU) + inc
	if after-nowU > r.tau {
		return r.decide(false, tat, inc, now, nowU, anchor)
	}
	return r.decide(true, after, inc, now, nowU, anchor)
}

// outOfRange is the decision for a cost that can never be allowed.
func (r *Rule) outOfRange(tat, now, nowU, anchor int64) Decision {
	d := r.decide(true, max(tat, 0), 0, now, nowU, anchor)
	d.Allowed, d.RetryAfter = false, Never
	return d
}

// RefundAt gives cost tokens back now, never filling the bucket beyond its burst.
// A tier that took tokens from this bucket and was then denied by a later rule
// uses it to undo the take. A cost outside [0, burst] gives nothing back.
func (b *Bucket) RefundAt(now Time, cost int64) {
	if b.over.Load() != nil {
		b.refundOver(clampNow(now), cost)
		return
	}
	if cost <= 0 || cost > b.rule.burst {
		return
	}
	if !giveBack(&b.tat, &b.seen, clampNow(now), b.rule.units(clampNow(now), b.anchor), cost*b.rule.emit) {
		b.refundOver(clampNow(now), cost) // the numbers changed meanwhile
	}
}

// ReserveAt takes cost tokens now if the request can be served within maxWait,
// possibly ahead of time: the returned Reservation says how long to wait before
// acting, and can be cancelled before then to give the tokens back. maxWait
// beyond MaxWait is treated as MaxWait. A refused reservation changes nothing.
func (b *Bucket) ReserveAt(now Time, cost int64, maxWait time.Duration) Reservation {
	if b.over.Load() == nil {
		if res, alive := b.rule.reserve(&b.tat, &b.seen, clampNow(now), b.anchor, cost, maxWait); alive {
			return res
		}
	}
	return b.reserveOver(clampNow(now), cost, maxWait)
}

// Wait blocks until a request of cost may proceed, taking its tokens, or until
// ctx is done. It fails at once, taking nothing, when the cost exceeds the burst
// or cannot be served before ctx's deadline; a context cancelled during the wait
// gives the tokens back. Every error it returns for a context wraps ctx's error
// or context.DeadlineExceeded.
func (b *Bucket) Wait(ctx context.Context, cost int64) error {
	return waitOn(ctx, cost, func(now Time, maxWait time.Duration) Reservation {
		return b.ReserveAt(now, cost, maxWait)
	})
}

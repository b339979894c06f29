package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// The failure settings are package shared's: a generated package passes them
// through Bind.
type (
	FailureMode = shared.FailureMode
	Failure     = shared.Failure
	// Result is a shared check's outcome (shared.Result): the decision, and
	// whether Redis made it.
	Result = shared.Result
)

const (
	FailDeny  = shared.FailDeny
	FailAllow = shared.FailAllow
	FailLocal = shared.FailLocal
)

// WithFailure returns a copy of r that decides by f when Redis cannot (the
// default is FailDeny). For FailLocal it builds the local fallback: a table
// with the rule's rate and burst times Share, the period stretched and the
// burst rounded down, so that the fallback never admits more than its share.
func (r *Rule) WithFailure(f Failure) (*Rule, error) {
	c := *r
	c.failure = f
	c.local = nil
	if f.Mode != FailLocal {
		return &c, nil
	}
	if !(f.Share > 0 && f.Share <= 1) {
		return nil, fmt.Errorf("%w: %s: a local share must be in (0, 1], not %v", ErrInvalidRule, r.name, f.Share)
	}
	l := r.limit
	l.Period = time.Duration(float64(l.Period)/f.Share + 0.999999) // rate × share, rounded down
	l.Burst = max(int64(float64(l.Burst)*f.Share), 1)
	if l.InitialSet {
		l.Initial = min(l.Initial, l.Burst)
	}
	rule, err := atomicbucket.NewRule(l)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: its local share %v: %w", ErrInvalidRule, r.name, f.Share, err)
	}
	c.local = atomicbucket.NewTable[string](rule, atomicbucket.TableOptions{MaxKeys: 1 << 20})
	return &c, nil
}

// ErrCircuitOpen is the Result.Err of a check the breaker answered without
// asking Redis.
var ErrCircuitOpen = fmt.Errorf("redisstore: circuit open: Redis failed %d checks in a row; retrying after a pause", breakerFailures)

// The breaker: after breakerFailures failed calls in a row, checks do not go
// to Redis for a pause (breakerPause, doubling up to breakerMaxPause while
// probes keep failing); then one check probes it, and a success closes the
// breaker. A dead Redis then costs a local decision, not a timeout per request.
const (
	breakerFailures = 5
	breakerPause    = 250 * time.Millisecond
	breakerMaxPause = 10 * time.Second
)

type breaker struct {
	failures  atomic.Int64 // failed calls in a row
	openUntil atomic.Int64 // atomicbucket time (ns) before which no check goes to Redis; 0 when closed
	pause     atomic.Int64 // the current pause, ns
	probing   atomic.Bool  // one check is probing a half-open breaker
}

// allow reports whether a check may go to Redis at now, and whether it is the
// probe of a half-open breaker.
func (b *breaker) allow(now int64) (ok, probe bool) {
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if now < until || !b.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

func (b *breaker) success(probe bool) {
	b.failures.Store(0)
	if probe || b.openUntil.Load() != 0 {
		b.openUntil.Store(0)
		b.pause.Store(0)
	}
	if probe {
		b.probing.Store(false)
	}
}

func (b *breaker) failure(now int64, probe bool) {
	n := b.failures.Add(1)
	if probe || n >= breakerFailures {
		p := b.pause.Load()
		switch {
		case p == 0:
			p = int64(breakerPause)
		case probe:
			p = min(2*p, int64(breakerMaxPause))
		}
		b.pause.Store(p)
		b.openUntil.Store(now + p)
	}
	if probe {
		b.probing.Store(false)
	}
}

// Check is AllowN for a service's hot path: it never fails. It asks Redis
// unless the breaker is open, within the store's Timeout (or the context's
// deadline, if sooner); when Redis cannot answer, the rule's failure setting
// decides, and the Result says so.
func (s *Store) Check(ctx context.Context, r *Rule, key string, cost int64) Result {
	res, _ := s.CheckTier(ctx, []Step{{r, key, cost}})
	return res
}

// CheckTier is AllowTier that never fails: when Redis cannot decide, the
// steps' failure settings do, in order and all or nothing (a step that denies
// gives back what the local shares of the steps before it took).
func (s *Store) CheckTier(ctx context.Context, steps []Step) (Result, int) {
	now := int64(atomicbucket.Now())
	ok, probe := s.breaker.allow(now)
	if !ok {
		s.degraded.Add(1)
		d, i := fallbackTier(steps)
		return Result{Decision: d, Degraded: true, Err: ErrCircuitOpen}, i
	}
	s.redisCalls.Add(1)
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	var d atomicbucket.Decision
	var i int
	var err error
	if len(steps) == 1 { // a single check: coalesced with others when the store coalesces
		d, err = s.AllowN(cctx, steps[0].Rule, steps[0].Key, steps[0].Cost)
	} else {
		d, i, err = s.AllowTier(cctx, steps)
	}
	cancel()
	if err != nil {
		s.breaker.failure(int64(atomicbucket.Now()), probe)
		s.degraded.Add(1)
		d, i := fallbackTier(steps)
		return Result{Decision: d, Degraded: true, Err: err}, i
	}
	s.breaker.success(probe)
	return Result{Decision: d}, i
}

// fallbackTier decides steps by their rules' failure settings, as
// atomicbucket.TierAt composes them.
func fallbackTier(steps []Step) (atomicbucket.Decision, int) {
	now := atomicbucket.Now()
	ts := make([]atomicbucket.TierStep, len(steps))
	for i, st := range steps {
		ts[i] = fallbackStep{st}
	}
	d, i, _ := atomicbucket.TierAt(now, ts...)
	return d, i
}

// fallbackStep is one step decided by its rule's failure setting.
type fallbackStep struct{ st Step }

func (f fallbackStep) AllowNAt(now atomicbucket.Time) atomicbucket.Decision {
	r := f.st.Rule
	switch r.failure.Mode {
	case FailAllow:
		return atomicbucket.Decision{Allowed: true, Remaining: r.limit.Burst}
	case FailLocal:
		if r.local != nil {
			return r.local.AllowNAt(f.st.Key, now, f.st.Cost)
		}
	}
	return atomicbucket.Decision{RetryAfter: time.Second} // FailDeny: try again once Redis may be back
}

func (f fallbackStep) RefundAt(now atomicbucket.Time) {
	if r := f.st.Rule; r.failure.Mode == FailLocal && r.local != nil {
		r.local.RefundAt(f.st.Key, now, f.st.Cost)
	}
}

// Stats counts what the store's checks did.
type Stats struct {
	RedisCalls int64 // checks that went to Redis
	Degraded   int64 // checks the failure setting decided (Redis failed, or the breaker was open)
}

// Stats returns the store's counts so far.
func (s *Store) Stats() Stats {
	return Stats{RedisCalls: s.redisCalls.Load(), Degraded: s.degraded.Load()}
}

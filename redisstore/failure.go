package redisstore

import (
	"context"
	"fmt"

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
	fb, err := shared.NewFallback(r.n.Limit, f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRule, r.name, err)
	}
	c := *r
	c.fallback = fb
	return &c, nil
}

// ErrCircuitOpen is the Result.Err of a check the breaker answered without
// asking Redis (shared.ErrCircuitOpen).
var ErrCircuitOpen = shared.ErrCircuitOpen

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
	if i := repeated(steps); i >= 0 { // the caller's mistake, not Redis's: denied, no failure counted
		_, _, err := s.AllowTier(ctx, steps)
		return Result{Err: err}, i
	}
	return s.guard.Run(ctx, func(ctx context.Context) (atomicbucket.Decision, int, error) {
		if len(steps) == 1 { // a single check: coalesced with others when the store coalesces
			d, err := s.AllowN(ctx, steps[0].Rule, steps[0].Key, steps[0].Cost)
			return d, 0, err
		}
		return s.AllowTier(ctx, steps)
	}, func() (atomicbucket.Decision, int) { return fallbackTier(steps) })
}

// fallbackTier decides steps by their rules' failure settings, as
// atomicbucket.TierAt composes them.
func fallbackTier(steps []Step) (atomicbucket.Decision, int) {
	var buf [4]shared.FallbackStep
	fs := buf[:0]
	for _, st := range steps {
		fs = append(fs, st.Rule.fallback.Step(st.Key, st.Cost))
	}
	return shared.FallbackTier(fs...)
}

// Stats counts what the store's checks did.
type Stats struct {
	RedisCalls int64 // checks that went to Redis
	Degraded   int64 // checks the failure setting decided (Redis failed, or the breaker was open)
}

// Stats returns the store's counts so far.
func (s *Store) Stats() Stats {
	calls, degraded := s.guard.Counts()
	return Stats{RedisCalls: calls, Degraded: degraded}
}

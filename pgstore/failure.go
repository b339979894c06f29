package pgstore

import (
	"context"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// Result is a shared check's outcome (shared.Result): the decision, and
// whether the database made it.
type Result = shared.Result

// ErrCircuitOpen is the Result.Err of a check the breaker answered without
// asking the database (shared.ErrCircuitOpen).
var ErrCircuitOpen = shared.ErrCircuitOpen

// Check is AllowN for a service's hot path: it never fails. It asks the
// database unless the breaker is open (shared.Breaker: after 5 failures in a
// row), within the store's timeout (or the context's deadline, if sooner);
// when the database cannot answer, the rule's failure setting decides, and
// the Result says so.
func (s *Store) Check(ctx context.Context, r *Rule, key string, cost int64) Result {
	res, _ := s.CheckTier(ctx, []Step{{r, key, cost}})
	return res
}

// CheckTier is AllowTier that never fails: when the database cannot decide,
// the steps' failure settings do, in order and all or nothing.
func (s *Store) CheckTier(ctx context.Context, steps []Step) (Result, int) {
	if len(steps) == 0 {
		return Result{Decision: atomicbucket.Decision{Allowed: true}}, -1
	}
	if i := repeated(steps); i >= 0 { // the caller's mistake, not the database's: denied, no failure counted
		_, _, err := s.AllowTier(ctx, steps)
		return Result{Err: err}, i
	}
	return s.guard.Run(ctx, func(ctx context.Context) (atomicbucket.Decision, int, error) {
		return s.AllowTier(ctx, steps)
	}, func() (atomicbucket.Decision, int) {
		var buf [4]shared.FallbackStep
		fs := buf[:0]
		for _, st := range steps {
			fs = append(fs, st.Rule.fallback.Step(st.Key, st.Cost))
		}
		return shared.FallbackTier(fs...)
	})
}

// Stats counts what the store's checks did.
type Stats struct {
	Calls    int64 // checks that went to the database
	Degraded int64 // checks the failure setting decided (the database failed, or the breaker was open)
	Batches  int64 // statements that carried coalesced checks (Coalesce)
}

// Stats returns the store's counts so far.
func (s *Store) Stats() Stats {
	calls, degraded := s.guard.Counts()
	return Stats{Calls: calls, Degraded: degraded, Batches: s.batches.Load()}
}

// Package shared is the seam between a generated package and the stores that
// enforce its shared rules across every instance of a service: Redis (module
// redisstore) now, PostgreSQL next, or a store of your own. It knows
// atomicbucket and the standard library only, so generated packages that
// share nothing, and services that never use a store, depend on no client.
//
// A generated package hands its shared rules to Store.Bind once, when its
// limiters are built, and then checks a rule, or a tier of them, with
// Bound.Check. A check never fails: when the store cannot decide, the rule's
// Failure decides, and the Result says so.
package shared

import (
	"context"

	"github.com/limitgen/limitgen/atomicbucket"
)

// FailureMode is what a shared rule decides when its store cannot.
type FailureMode uint8

const (
	// FailDeny denies while the store cannot decide (the zero value: a
	// limit that fails closed).
	FailDeny FailureMode = iota
	// FailAllow admits while the store cannot decide.
	FailAllow
	// FailLocal decides on a bucket in this process with Failure.Share of the
	// rule's rate and burst (with N instances, 1/N keeps the service near its
	// limit).
	FailLocal
)

// String returns the mode as the policy spells it.
func (m FailureMode) String() string {
	switch m {
	case FailDeny:
		return "deny"
	case FailAllow:
		return "allow"
	case FailLocal:
		return "local"
	}
	return "FailureMode(?)"
}

// Failure is a shared rule's failure setting.
type Failure struct {
	Mode  FailureMode
	Share float64 // FailLocal: the share of the rate and burst, in (0, 1]
}

// Rule is a shared rule as the policy writes it.
type Rule struct {
	Name    string // unique in the package; part of the store's keys
	Limit   atomicbucket.Limit
	Failure Failure
	// Lease, when above 0, has the rule checked from leases: each instance
	// takes batches of at most Lease tokens (and at most the burst) from the
	// store and spends them locally, so that most checks make no call. A
	// store without leases checks the rule per request.
	Lease int64
}

// Step is one rule's part in a check: the index of the rule in the slice
// given to Bind, the request's key (integer keys in decimal), and its cost.
type Step struct {
	Rule int
	Key  string
	Cost int64
}

// Result is a shared check's outcome: the decision, and whether the store
// made it. Degraded is set when the rules' failure settings decided instead,
// with the error that made them (the store's, or its circuit breaker's).
type Result struct {
	atomicbucket.Decision
	Degraded bool
	Err      error
}

// Store enforces shared rules.
type Store interface {
	// Bind prepares rules for checking (a store computes its units, and may
	// refuse a rule it cannot hold, saying why).
	Bind(rules []Rule) (Bound, error)
}

// Bound checks the rules a Store bound.
type Bound interface {
	// Check decides a request against its steps, all or nothing, in order:
	// when a step's bucket cannot take its cost, nothing is taken from any and
	// the result is that step's (index); when all can, each takes its cost and
	// the result is that of the step left with the fewest whole tokens, the
	// first on a tie (atomicbucket.TierAt's rule). It never fails (see Result)
	// and returns within the store's timeout or ctx's deadline.
	Check(ctx context.Context, steps []Step) (res Result, index int)
	// CheckStep is Check of one step: the same decision, without a slice
	// (a leased rule's check then allocates nothing).
	CheckStep(ctx context.Context, step Step) Result
}

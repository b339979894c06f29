package genimpl

import (
	"fmt"

	"github.com/limitgen/limitgen/atomicbucket"
)

// APIVersion5 is referenced by every package limitgen generates
// (`const _ = genimpl.APIVersion5`). A runtime that changes what generated
// code relies on renames it, so that an out-of-date generated package fails
// to build instead of misbehaving. (Version 5: the limiters generated code
// embeds, Keyed, Global, KeyedWindow and GlobalWindow, are this package's,
// with their costs in a Cost; windows are atomicwindow's.)
const APIVersion5 = true

// MustUnits returns r after checking that its units are the given ones: the
// generated constants and this runtime agree. It panics otherwise, when the
// package initialises — a generator and a runtime that disagree, which
// APIVersion5 exists to stop at build time.
func MustUnits(r atomicbucket.Rule, scale, emit, tau int64) atomicbucket.Rule {
	if s, e, t, ok := r.Units(); !ok || s != scale || e != emit || t != tau {
		panic(fmt.Sprintf("genimpl: generated units (%d, %d, %d) are not this runtime's for %v (%d, %d, %d, greedy=%v): regenerate",
			scale, emit, tau, r.String(), s, e, t, ok))
	}
	return r
}

// CheckCost says why burst cannot be the burst of a rule whose requests cost
// cost (its policy's, at least 1): a request that could never pass. The
// generator refuses such a policy with the same message, and a generated
// limiter refuses such numbers.
func CheckCost(burst, cost int64) error {
	if burst >= 1 && cost > burst {
		return invalid("burst %d is below the cost %d of one request, which could never pass; raise burst to at least %d", burst, cost, cost)
	}
	return nil
}

// CheckMaxCost says why burst cannot be the burst of a rule one of whose
// routes (what, such as route "POST /v1/upload") admits requests costing up
// to cost: within the route's documented most, they would be refused for
// good (a door answers a cost above the burst as too costly). A generated
// limiter refuses such numbers, as the generator refuses such a policy.
func CheckMaxCost(burst, cost int64, what string) error {
	if burst >= 1 && cost > burst {
		return invalid("burst %d is below %d, the most a request of %s may cost: such requests, which the policy admits, would be refused for good; give a burst of at least %d", burst, cost, what, cost)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{atomicbucket.ErrInvalidLimit}, args...)...)
}

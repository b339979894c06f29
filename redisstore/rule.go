package redisstore

import (
	"errors"
	"fmt"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// MaxRelativeError is the most a rule's admitted rate may fall below the
// written one when its numbers cannot be held exactly (the same bound as the
// local runtime's).
const MaxRelativeError = atomicbucket.MaxRelativeError

// Rule is a limit in the units the script computes in (shared.Numbers).
// Redis's clock, TIME, reads seconds and microseconds; a bucket's theoretical
// arrival time (TAT) is stored as whole seconds and units within the second,
// so that only the part of the TAT ahead of now, at most Burst tokens' worth,
// has to fit below 2^53, however far the Unix epoch is behind. The zero Rule
// is not usable; build one with NewRule.
type Rule struct {
	name     string
	n        shared.Numbers
	fallback *shared.Fallback // decides when Redis cannot
	lease    int64            // > 0: checked through Bind from leases of at most lease tokens
}

// ErrInvalidRule is wrapped by every error NewRule returns.
var ErrInvalidRule = errors.New("redisstore: invalid rule")

// NewRule computes the units of a shared rule named name
// (shared.MicroUnits, with which the generator checks a policy's shared
// rules): the least fraction of a microsecond in which one token's time is
// whole; when that would not keep every value below 2^53, the finest unit that
// does, with the token's time rounded up (never admitting more than the
// limit), if the admitted rate is then within MaxRelativeError of the written
// one. Interval rules count whole slots, so they are always exact.
func NewRule(name string, l atomicbucket.Limit) (*Rule, error) {
	n, err := shared.NewNumbers(l)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRule, name, err)
	}
	return &Rule{name: name, n: n, fallback: &shared.Fallback{}}, nil
}

// Name is the rule's name, part of its keys.
func (r *Rule) Name() string { return r.name }

// Limit is the limit the rule was built from.
func (r *Rule) Limit() atomicbucket.Limit { return r.n.Limit }

// Exact reports whether the units hold the written rate exactly: then every
// decision equals the exact reference's at the server's microsecond times.
func (r *Rule) Exact() bool { return r.n.Exact }

// RelativeError is how much lower than written the admitted rate is: 0 for an
// exact rule.
func (r *Rule) RelativeError() float64 { return r.n.RelativeError(r.n.Limit) }

// args appends the rule's eight values of a script argument list (mode, then
// greedy: emit, tau, debt, perSecond, perMicro, 0, 0; interval: tokens, tau,
// debt, period, p, b, g) and returns it; script.go reads them.
func (r *Rule) args(dst []any) []any {
	n := &r.n
	if n.Interval {
		return append(dst, 2, n.Tokens, n.Tau, n.Debt, n.Period, n.P, n.B, n.G)
	}
	return append(dst, 1, n.Emit, n.Tau, n.Debt, n.PerSecond, n.PerMicro, 0, 0)
}

// keyPhase is key's grid phase for an interval rule, 0 for a greedy one.
func (r *Rule) keyPhase(key string) int64 { return r.n.Phase(key) }

package redisstore

import (
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// MaxRelativeError is the most a rule's admitted rate may fall below the
// written one when its numbers cannot be held exactly (the same bound as the
// local runtime's).
const MaxRelativeError = atomicbucket.MaxRelativeError

// Rule is a limit in the units the script computes in. Redis's clock, TIME,
// reads seconds and microseconds; a bucket's theoretical arrival time (TAT) is
// stored as whole seconds and units within the second, PerSecond units to a
// second, so that only the part of the TAT ahead of now, at most Burst tokens'
// worth, has to fit below 2^53, however far the Unix epoch is behind. The zero
// Rule is not usable; build one with NewRule.
type Rule struct {
	name      string
	limit     atomicbucket.Limit
	perMicro  int64 // units in one microsecond
	perSecond int64 // units in one second: 1e6·perMicro
	emit      int64 // units one token is worth (GCRA's emission interval)
	tau       int64 // units the TAT may run ahead of now: Burst·emit
	debt      int64 // units a new bucket's TAT starts ahead of now: (Burst − Initial)·emit
	exact     bool

	// Interval refill: units are token slots (emit 1), now is quantised to
	// the key's grid, whose boundaries are the Unix times ≡ phase (mod period)
	// ns, as atomicbucket's tables place them (aligned: phase 0).
	failure Failure                     // what decides when Redis cannot
	local   *atomicbucket.Table[string] // FailLocal's buckets
	lease   int64                       // > 0: checked through Bind from leases of at most lease tokens

	interval bool
	aligned  bool
	period   int64 // ns: g·p
	tokens   int64 // slots added at each boundary
	g, p, b  int64 // gcd(period, 1e9), period/g, 1e9/g
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
	u, err := shared.MicroUnits(l)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRule, name, err)
	}
	r := &Rule{name: name, limit: l, exact: true}
	initial := l.Burst
	if l.InitialSet {
		initial = l.Initial
	}
	if l.Refill == atomicbucket.Interval {
		p := int64(l.Period)
		g := new(big.Int).GCD(nil, nil, big.NewInt(p), big.NewInt(1e9)).Int64()
		r.interval, r.aligned, r.period, r.tokens = true, l.Aligned, p, l.Tokens
		r.g, r.p, r.b, r.emit, r.tau = g, p/g, 1e9/g, 1, l.Burst
		r.debt = l.Burst - initial
		return r, nil
	}
	r.perMicro, r.emit, r.exact = u.PerMicro, u.Emit, u.Exact
	r.perSecond = 1_000_000 * r.perMicro
	r.tau = l.Burst * r.emit
	r.debt = (l.Burst - initial) * r.emit
	return r, nil
}

// phase is where key's grid is placed: the Unix times ≡ phase (mod period) ns
// are its boundaries, placed by atomicbucket.KeyHash as atomicbucket's tables
// place it (atomicbucket.Rule.KeyAnchor), or 0 for an aligned rule.
func (r *Rule) phase(key string) int64 {
	if r.aligned {
		return 0
	}
	return int64(atomicbucket.KeyHash(key) % uint64(r.period))
}

// Name is the rule's name, part of its keys.
func (r *Rule) Name() string { return r.name }

// Limit is the limit the rule was built from.
func (r *Rule) Limit() atomicbucket.Limit { return r.limit }

// Exact reports whether the units hold the written rate exactly: then every
// decision equals the exact reference's at the server's microsecond times.
func (r *Rule) Exact() bool { return r.exact }

// RelativeError is how much lower than written the admitted rate is: 0 for an
// exact rule.
func (r *Rule) RelativeError() float64 {
	return shared.Units{PerMicro: r.perMicro, Emit: r.emit, Exact: r.exact}.RelativeError(r.limit)
}

// duration converts units to a Duration, rounded up: one unit is 1000/perMicro
// ns. For an interval rule it is the wait until units slots have been added:
// ⌈units/Tokens⌉ boundaries, the first of them period − since ns away.
func (r *Rule) duration(units, since int64) time.Duration {
	if units <= 0 {
		return 0
	}
	if r.interval {
		return time.Duration(((units+r.tokens-1)/r.tokens)*r.period - since)
	}
	ns := new(big.Int).Mul(big.NewInt(units), big.NewInt(1000))
	ns.Add(ns, big.NewInt(r.perMicro-1))
	ns.Quo(ns, big.NewInt(r.perMicro))
	if !ns.IsInt64() {
		return atomicbucket.Never
	}
	return time.Duration(ns.Int64())
}

// args appends the rule's eight values of a script argument list (mode, then
// greedy: emit, tau, debt, perSecond, perMicro, 0, 0; interval: tokens, tau,
// debt, period, p, b, g) and returns it; script.go reads them.
func (r *Rule) args(dst []any) []any {
	if r.interval {
		return append(dst, 2, r.tokens, r.tau, r.debt, r.period, r.p, r.b, r.g)
	}
	return append(dst, 1, r.emit, r.tau, r.debt, r.perSecond, r.perMicro, 0, 0)
}

// keyPhase is key's grid phase for an interval rule, 0 for a greedy one.
func (r *Rule) keyPhase(key string) int64 {
	if r.interval {
		return r.phase(key)
	}
	return 0
}

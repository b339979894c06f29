package redisstore

import (
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// maxExact is 2^53: every integer a Lua number (a double) holds exactly is
// below it, and so must be every value the script computes.
const maxExact = 1 << 53

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

// NewRule computes the units of a shared rule named name. Units are the least
// fraction of a microsecond in which one token's time is whole; when that
// would not keep every value below 2^53, the finest unit that does is taken
// and the token's time rounded up (never admitting more than the limit), if
// the admitted rate is then within MaxRelativeError of the written one.
// Interval refill is not supported yet.
func NewRule(name string, l atomicbucket.Limit) (*Rule, error) {
	if _, err := atomicbucket.NewRule(l); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRule, name, err)
	}
	if l.Refill == atomicbucket.Interval {
		return newIntervalRule(name, l)
	}
	if int64(l.Period) < 1000 {
		return nil, fmt.Errorf("%w: %s: a period below 1µs is finer than Redis's clock", ErrInvalidRule, name)
	}
	initial := l.Burst
	if l.InitialSet {
		initial = l.Initial
	}
	per := new(big.Int).Mul(big.NewInt(1000), big.NewInt(l.Tokens)) // ns per µs × tokens
	g := new(big.Int).GCD(nil, nil, big.NewInt(int64(l.Period)), per)
	exactScale := new(big.Int).Quo(per, g) // least units per µs making a token's time whole
	r := &Rule{name: name, limit: l}
	if exactScale.IsInt64() {
		if emit, ok := fitsScale(l, exactScale.Int64()); ok {
			r.perMicro, r.emit, r.exact = exactScale.Int64(), emit, true
		}
	}
	if !r.exact {
		hi := int64(maxExact / 1_000_000)
		if exactScale.IsInt64() {
			hi = min(hi, exactScale.Int64()-1)
		}
		lo := int64(0)
		for lo < hi { // the largest fitting scale: fitting is monotone in the scale
			mid := lo + (hi-lo+1)/2
			if _, ok := fitsScale(l, mid); ok {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if lo < 1 {
			return nil, fmt.Errorf("%w: %s: rate %d per %v with burst %d needs values beyond 2^53 on Redis; use a smaller burst",
				ErrInvalidRule, name, l.Tokens, l.Period, l.Burst)
		}
		r.perMicro = lo
		r.emit, _ = fitsScale(l, lo)
		if e := r.RelativeError(); e > MaxRelativeError {
			return nil, fmt.Errorf("%w: %s: rate %d per %v cannot be held on Redis within %g (the closest is off by %.2g)",
				ErrInvalidRule, name, l.Tokens, l.Period, MaxRelativeError, e)
		}
	}
	r.perSecond = 1_000_000 * r.perMicro
	r.tau = l.Burst * r.emit
	r.debt = (l.Burst - initial) * r.emit
	return r, nil
}

// newIntervalRule checks that an interval rule's arithmetic stays below 2^53:
// the ns since a second's start within a period's count (b·period + 1e9 +
// period), and the time until full (at most ⌈Burst/Tokens⌉ + 1 periods).
// Interval rules count whole slots, so they are always exact.
func newIntervalRule(name string, l atomicbucket.Limit) (*Rule, error) {
	p := int64(l.Period)
	g := new(big.Int).GCD(nil, nil, big.NewInt(p), big.NewInt(1e9)).Int64()
	r := &Rule{name: name, limit: l, interval: true, aligned: l.Aligned, period: p, tokens: l.Tokens,
		g: g, p: p / g, b: 1e9 / g, emit: 1, tau: l.Burst, exact: true}
	if l.InitialSet {
		r.debt = l.Burst - l.Initial
	}
	y := new(big.Int).Mul(big.NewInt(r.b), big.NewInt(p))
	y.Add(y, big.NewInt(1e9+p))
	full := new(big.Int).Mul(big.NewInt(l.Burst/l.Tokens+2), big.NewInt(p))
	if y.Cmp(big.NewInt(maxExact)) >= 0 || full.Cmp(big.NewInt(maxExact)) >= 0 {
		return nil, fmt.Errorf("%w: %s: interval rate %d per %v with burst %d needs values beyond 2^53 on Redis; use a period of whole milliseconds, or a smaller burst",
			ErrInvalidRule, name, l.Tokens, l.Period, l.Burst)
	}
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

// fitsScale returns the emission interval at scale units per µs, rounded up,
// and whether every value the script computes stays below 2^53: the
// sub-second part of now (< perSecond) plus a TAT up to tau ahead plus one
// more request of up to tau.
func fitsScale(l atomicbucket.Limit, scale int64) (int64, bool) {
	e := new(big.Int).Mul(big.NewInt(int64(l.Period)), big.NewInt(scale))
	den := big.NewInt(1000 * l.Tokens)
	e.Add(e, new(big.Int).Sub(den, big.NewInt(1)))
	e.Quo(e, den)
	if !e.IsInt64() || e.Sign() <= 0 {
		return 0, false
	}
	sum := new(big.Int).Mul(big.NewInt(1_000_000), big.NewInt(scale))
	tau := new(big.Int).Mul(big.NewInt(l.Burst), e)
	sum.Add(sum, tau).Add(sum, tau)
	return e.Int64(), sum.Cmp(big.NewInt(maxExact)) < 0
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
	if r.exact {
		return 0
	}
	// written time per token: Period/Tokens ns; held: emit/perMicro µs.
	num := new(big.Int).Mul(big.NewInt(r.emit*1000), big.NewInt(r.limit.Tokens))
	den := new(big.Int).Mul(big.NewInt(int64(r.limit.Period)), big.NewInt(r.perMicro))
	num.Sub(num, den)
	f, _ := new(big.Rat).SetFrac(num, den).Float64()
	return f
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

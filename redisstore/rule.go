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
	if l.Refill != atomicbucket.Greedy {
		return nil, fmt.Errorf("%w: %s: interval refill is not supported on Redis yet", ErrInvalidRule, name)
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

// duration converts units to a Duration, rounded up: one unit is 1000/perMicro ns.
func (r *Rule) duration(units int64) time.Duration {
	if units <= 0 {
		return 0
	}
	ns := new(big.Int).Mul(big.NewInt(units), big.NewInt(1000))
	ns.Add(ns, big.NewInt(r.perMicro-1))
	ns.Quo(ns, big.NewInt(r.perMicro))
	if !ns.IsInt64() {
		return atomicbucket.Never
	}
	return time.Duration(ns.Int64())
}

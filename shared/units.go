package shared

import (
	"errors"
	"fmt"
	"math/big"

	"github.com/limitgen/limitgen/atomicbucket"
)

// maxExact is 2^53: a store that computes in doubles (Redis's Lua) holds every
// integer below it exactly, and every value a check computes must stay below.
const maxExact = 1 << 53

// Units is how a store on a microsecond clock (Redis's TIME) counts a greedy
// rule: PerMicro units to a microsecond and Emit units to a token, Exact when
// that is the written rate. An interval rule counts whole token slots and has
// no units (zero Units).
type Units struct {
	PerMicro int64
	Emit     int64
	Exact    bool
}

// ErrMicroUnits is wrapped by the errors of MicroUnits.
var ErrMicroUnits = errors.New("no store on a microsecond clock can hold it in integers below 2^53")

// MicroUnits computes a rule's units for a store on a microsecond clock, or
// says why it cannot hold the rule: the least fraction of a microsecond in
// which one token's time is whole; when that would not keep every value below
// 2^53 (the sub-second part of now, a TAT a burst ahead, and one more request
// of up to a burst), the finest unit that does, with the token's time rounded
// up (never admitting more), if the admitted rate is then within
// atomicbucket.MaxRelativeError of the written one. The generator checks a
// shared rule with it, and stores compute their units with it.
func MicroUnits(l atomicbucket.Limit) (Units, error) {
	if _, err := atomicbucket.NewRule(l); err != nil {
		return Units{}, err
	}
	if l.Refill == atomicbucket.Interval {
		return Units{}, intervalFits(l)
	}
	if int64(l.Period) < 1000 {
		return Units{}, fmt.Errorf("%w: a period below 1µs is finer than the store's clock", ErrMicroUnits)
	}
	per := new(big.Int).Mul(big.NewInt(1000), big.NewInt(l.Tokens)) // ns per µs × tokens
	g := new(big.Int).GCD(nil, nil, big.NewInt(int64(l.Period)), per)
	exactScale := new(big.Int).Quo(per, g) // least units per µs making a token's time whole
	if exactScale.IsInt64() {
		if emit, ok := fitsScale(l, exactScale.Int64()); ok {
			return Units{PerMicro: exactScale.Int64(), Emit: emit, Exact: true}, nil
		}
	}
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
		return Units{}, fmt.Errorf("%w: rate %d per %v with burst %d needs values beyond 2^53; use a smaller burst",
			ErrMicroUnits, l.Tokens, l.Period, l.Burst)
	}
	u := Units{PerMicro: lo}
	u.Emit, _ = fitsScale(l, lo)
	if e := u.RelativeError(l); e > atomicbucket.MaxRelativeError {
		return Units{}, fmt.Errorf("%w: rate %d per %v cannot be held within %g (the closest is off by %.2g)",
			ErrMicroUnits, l.Tokens, l.Period, atomicbucket.MaxRelativeError, e)
	}
	return u, nil
}

// RelativeError is how much lower than l's the rate held in u is: 0 when exact.
func (u Units) RelativeError(l atomicbucket.Limit) float64 {
	if u.Exact || u.PerMicro == 0 {
		return 0
	}
	// written time per token: Period/Tokens ns; held: Emit/PerMicro µs.
	num := new(big.Int).Mul(big.NewInt(u.Emit*1000), big.NewInt(l.Tokens))
	den := new(big.Int).Mul(big.NewInt(int64(l.Period)), big.NewInt(u.PerMicro))
	num.Sub(num, den)
	f, _ := new(big.Rat).SetFrac(num, den).Float64()
	return f
}

// fitsScale returns the emission interval at scale units per µs, rounded up,
// and whether every value a check computes stays below 2^53: the sub-second
// part of now (< 1e6·scale) plus a TAT up to tau ahead plus one more request
// of up to tau.
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

// intervalFits checks that an interval rule's arithmetic stays below 2^53:
// the ns since a second's start within a period's count (b·period + 1e9 +
// period, b = 1e9/gcd(period, 1e9)), and the time until full (at most
// ⌊Burst/Tokens⌋ + 2 periods).
func intervalFits(l atomicbucket.Limit) error {
	p := int64(l.Period)
	g := new(big.Int).GCD(nil, nil, big.NewInt(p), big.NewInt(1e9)).Int64()
	y := new(big.Int).Mul(big.NewInt(1e9/g), big.NewInt(p))
	y.Add(y, big.NewInt(1e9+p))
	full := new(big.Int).Mul(big.NewInt(l.Burst/l.Tokens+2), big.NewInt(p))
	if y.Cmp(big.NewInt(maxExact)) >= 0 || full.Cmp(big.NewInt(maxExact)) >= 0 {
		return fmt.Errorf("%w: interval rate %d per %v with burst %d needs values beyond 2^53; use a period of whole milliseconds, or a smaller burst",
			ErrMicroUnits, l.Tokens, l.Period, l.Burst)
	}
	return nil
}

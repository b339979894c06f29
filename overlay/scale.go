package overlay

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Scaling: a rule's numbers multiplied by a factor (package adaptive's
// controller sets one from a service's health). The factor applies to
// whatever is in force from a source — the last Set's entries for the rule,
// its plans' and its keys' alike, and the policy's numbers for the plans the
// Set leaves alone — so a source and a factor compose: a later Set is scaled
// by the factor in force, and a factor back at 1 leaves the Set's numbers.

// Base is what a rule's policy says of its numbers on one plan, as scaling
// needs it.
type Base struct {
	Numbers atomicbucket.Numbers
	// Cost is one request's default cost: a scaled burst stays at least this.
	Cost int64
	// Interval is true for interval refill: the period is the rule's grid
	// and cannot change, so scaling changes the tokens per period.
	Interval bool
	// Window is true for a window rule (Tokens in any Period, Burst
	// Tokens): scaling multiplies its limit by the rate factor, keeps its
	// window, and takes no burst factor of its own.
	Window bool
}

// Factor is a scaling factor in thousandths, the resolution numbers are
// scaled in: One (1000) leaves numbers as they are, 537 is 0.537. It crosses
// from a controller to the numbers as this integer, never a float re-rounded.
type Factor int64

// One is the factor that leaves numbers as they are.
const One Factor = 1000

// maxFactor bounds a factor (a thousandfold rise).
const maxFactor = 1000 * One

// FactorOf is f in thousandths, rounded to the nearest, or an error (wrapping
// ErrInvalid) for a factor outside (0, 1000] or one below the resolution,
// 0.001.
func FactorOf(f float64) (Factor, error) {
	if !(f > 0 && f <= float64(maxFactor/One)) { // also NaN
		return 0, fmt.Errorf("%w: factor %v: a factor is above 0 and at most %d", ErrInvalid, f, maxFactor/One)
	}
	q := Factor(math.Round(f * float64(One)))
	if q < 1 {
		return 0, fmt.Errorf("%w: factor %v is below the resolution of factors, 0.001 (they are applied in thousandths): use 0.001 or more", ErrInvalid, f)
	}
	return q, nil
}

// Float is f as a number (0.537).
func (f Factor) Float() float64 { return float64(f) / float64(One) }

func (f Factor) String() string { return strconv.FormatFloat(f.Float(), 'f', -1, 64) }

// check says why f cannot scale numbers.
func (f Factor) check(what string) error {
	if f < 1 || f > maxFactor {
		return fmt.Errorf("%w: %s factor %d thousandths: a factor is at least 1 thousandth (0.001) and at most %d (%d)", ErrInvalid, what, int64(f), int64(maxFactor), maxFactor/One)
	}
	return nil
}

// Scaled is Applier.Scale's factors for a rule.
type Scaled struct {
	Rate, Burst Factor
}

// scaleNumbers is n with its rate multiplied by rate/1000 and its burst by
// burst/1000 (thousandths). A greedy rule's rate keeps its exact ratio: q
// tokens per period becomes q·rate tokens per period·1000, in lowest terms;
// an interval rule's period stays, its tokens rounded to a whole number, at
// least 1. A burst is rounded to a whole number, at least the cost of one
// request and at least 1.
func scaleNumbers(b Base, rate, burst Factor) (atomicbucket.Numbers, error) {
	n := b.Numbers
	if b.Window {
		if rate != One {
			n.Tokens = max(roundDiv(big.NewInt(n.Tokens), int64(rate)), b.Cost, 1)
			n.Burst = n.Tokens
		}
		return n, nil
	}
	if rate != One {
		if b.Interval {
			n.Tokens = max(roundDiv(big.NewInt(n.Tokens), int64(rate)), 1)
		} else {
			// The period is kept when it can be, else lengthened by the
			// least factor that makes the tokens whole (100/s by 0.537 is
			// 537 per 10s, not 1 per 18.6ms).
			num := new(big.Int).Mul(big.NewInt(n.Tokens), big.NewInt(int64(rate)))
			k := new(big.Int).Quo(big.NewInt(int64(One)), new(big.Int).GCD(nil, nil, num, big.NewInt(int64(One))))
			num.Quo(num.Mul(num, k), big.NewInt(int64(One)))
			den := new(big.Int).Mul(big.NewInt(int64(n.Period)), k)
			if !num.IsInt64() || !den.IsInt64() {
				return n, fmt.Errorf("%v scaled by %v: the rate is too large to hold", n, rate)
			}
			n.Tokens, n.Period = num.Int64(), time.Duration(den.Int64())
		}
	}
	if burst != One {
		n.Burst = max(roundDiv(big.NewInt(n.Burst), int64(burst)), b.Cost, 1)
	}
	return n, nil
}

// roundDiv is v·f/1000 rounded to the nearest whole number (at most MaxInt64).
func roundDiv(v *big.Int, f int64) int64 {
	x := new(big.Rat).SetFrac(new(big.Int).Mul(v, big.NewInt(f)), big.NewInt(int64(One)))
	x.Add(x, big.NewRat(1, 2))
	q := new(big.Int).Quo(x.Num(), x.Denom())
	if !q.IsInt64() {
		return math.MaxInt64
	}
	return q.Int64()
}

// ScaleNumbers is b's numbers scaled as Applier.Scale scales them: the rate
// by rate and the burst by burst (a greedy rule's rate kept exact, an
// interval rule's tokens per period rounded, at least 1; the burst rounded,
// at least b.Cost). For a target of one's own.
func ScaleNumbers(b Base, rate, burst Factor) (atomicbucket.Numbers, error) {
	if err := rate.check("rate"); err != nil {
		return atomicbucket.Numbers{}, err
	}
	if err := burst.check("burst"); err != nil {
		return atomicbucket.Numbers{}, err
	}
	return scaleNumbers(b, rate, burst)
}

// scaling is a rule's factors.
type scaling struct{ rate, burst Factor }

// effective is what is in force for base (a resolved Set) with the rules'
// factors: base's numbers scaled, and each scaled rule's plans that base
// leaves alone given their policy's numbers scaled. Every scaled number is
// checked as a Set's are; an error names each that a rule refuses.
func (a *Applier) effective(base map[at]atomicbucket.Numbers, scales map[string]scaling) (map[at]atomicbucket.Numbers, error) {
	if len(scales) == 0 {
		return base, nil
	}
	out := make(map[at]atomicbucket.Numbers, len(base))
	var errs []error
	put := func(k at, from atomicbucket.Numbers) {
		r := a.p.Rules[k.rule]
		s := scales[k.rule]
		plans := []int{k.plan}
		if k.hasKey && r.Plans() > 0 {
			plans = plans[:0]
			for i := range r.Plans() {
				plans = append(plans, i)
			}
		}
		// A key's numbers are on every plan: the largest cost binds.
		b := r.Base(plans[0])
		for _, pl := range plans[1:] {
			b.Cost = max(b.Cost, r.Base(pl).Cost)
		}
		b.Numbers = from
		n, err := scaleNumbers(b, s.rate, s.burst)
		for _, pl := range plans {
			if err != nil {
				break
			}
			err = r.Check(pl, n)
		}
		if err != nil {
			what := "rule " + k.rule + planWords(a.p, k.plan)
			if k.hasKey {
				what += fmt.Sprintf(", key %q", k.key)
			}
			errs = append(errs, fmt.Errorf("%s: %v scaled by %v (rate) and %v (burst): %w", what, from, s.rate, s.burst, err))
			return
		}
		out[k] = n
	}
	for k, n := range base {
		if _, ok := scales[k.rule]; ok {
			put(k, n)
		} else {
			out[k] = n
		}
	}
	for rule := range scales {
		r := a.p.Rules[rule]
		plans := []int{-1}
		if r.Plans() > 0 {
			plans = plans[:0]
			for i := range r.Plans() {
				plans = append(plans, i)
			}
		}
		for _, pl := range plans {
			k := at{rule: rule, plan: pl}
			if _, ok := base[k]; !ok {
				put(k, r.Base(pl).Numbers)
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return out, nil
}

// Scale multiplies rule's numbers in force by rate (its rate) and burst
// (its burst; One leaves it), on every plan and for every key with numbers of
// its own, until the next Scale of the rule: factors do not compound, and
// One and One take the scaling away. Factors are in thousandths; a
// scaled burst is at least one request's cost. A factor whose numbers a rule
// refuses (checked as a Set's are) changes nothing and is an error wrapping
// ErrInvalid that names them.
func (a *Applier) Scale(rule string, rate, burst Factor) error {
	if _, ok := a.p.Rules[rule]; !ok {
		return fmt.Errorf("%w: %s", ErrInvalid, a.p.missing(rule))
	}
	if err := rate.check("rate"); err != nil {
		return err
	}
	if err := burst.check("burst"); err != nil {
		return err
	}
	qr, qb := rate, burst
	a.mu.Lock()
	defer a.mu.Unlock()
	scales := make(map[string]scaling, len(a.scales)+1)
	for k, v := range a.scales {
		scales[k] = v
	}
	if qr == One && qb == One {
		delete(scales, rule)
	} else {
		scales[rule] = scaling{qr, qb}
	}
	eff, err := a.effective(a.base, scales)
	if err != nil {
		return err
	}
	a.scales = scales
	return a.commit(eff)
}

// Scaled is rule's factors in force (One and One when it is not scaled).
func (a *Applier) Scaled(rule string) Scaled {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.scales[rule]
	if !ok {
		return Scaled{One, One}
	}
	return Scaled{s.rate, s.burst}
}

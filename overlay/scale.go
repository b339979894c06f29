package overlay

import (
	"errors"
	"fmt"
	"math"
	"math/big"
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
}

// Scaled is Applier.Scale's factor for a rule.
type Scaled struct {
	Rate, Burst float64
}

// factorUnit is the factor's resolution: factors are applied in thousandths.
const factorUnit = 1000

// maxFactor bounds a factor (a thousandfold rise).
const maxFactor = 1000

// permille is f in thousandths (rounded to the nearest), or an error for a
// factor outside (0, maxFactor] or one that rounds to 0 thousandths.
func permille(what string, f float64) (int64, error) {
	if !(f > 0 && f <= maxFactor) { // also NaN
		return 0, fmt.Errorf("%w: %s factor %v: a factor is above 0 and at most %d", ErrInvalid, what, f, maxFactor)
	}
	q := int64(math.Round(f * factorUnit))
	if q < 1 {
		return 0, fmt.Errorf("%w: %s factor %v is below the resolution of factors, 0.001 (they are applied in thousandths): use 0.001 or more", ErrInvalid, what, f)
	}
	return q, nil
}

// scaleNumbers is n with its rate multiplied by rate/1000 and its burst by
// burst/1000 (thousandths). A greedy rule's rate keeps its exact ratio: q
// tokens per period becomes q·rate tokens per period·1000, in lowest terms;
// an interval rule's period stays, its tokens rounded to a whole number, at
// least 1. A burst is rounded to a whole number, at least the cost of one
// request and at least 1.
func scaleNumbers(b Base, rate, burst int64) (atomicbucket.Numbers, error) {
	n := b.Numbers
	if rate != factorUnit {
		if b.Interval {
			n.Tokens = max(roundDiv(big.NewInt(n.Tokens), rate), 1)
		} else {
			// The period is kept when it can be, else lengthened by the
			// least factor that makes the tokens whole (100/s by 0.537 is
			// 537 per 10s, not 1 per 18.6ms).
			num := new(big.Int).Mul(big.NewInt(n.Tokens), big.NewInt(rate))
			k := new(big.Int).Quo(big.NewInt(factorUnit), new(big.Int).GCD(nil, nil, num, big.NewInt(factorUnit)))
			num.Quo(num.Mul(num, k), big.NewInt(factorUnit))
			den := new(big.Int).Mul(big.NewInt(int64(n.Period)), k)
			if !num.IsInt64() || !den.IsInt64() {
				return n, fmt.Errorf("%v scaled by %v: the rate is too large to hold", n, float64(rate)/factorUnit)
			}
			n.Tokens, n.Period = num.Int64(), time.Duration(den.Int64())
		}
	}
	if burst != factorUnit {
		n.Burst = max(roundDiv(big.NewInt(n.Burst), burst), b.Cost, 1)
	}
	return n, nil
}

// roundDiv is v·f/1000 rounded to the nearest whole number (at most MaxInt64).
func roundDiv(v *big.Int, f int64) int64 {
	x := new(big.Rat).SetFrac(new(big.Int).Mul(v, big.NewInt(f)), big.NewInt(factorUnit))
	x.Add(x, big.NewRat(1, 2))
	q := new(big.Int).Quo(x.Num(), x.Denom())
	if !q.IsInt64() {
		return math.MaxInt64
	}
	return q.Int64()
}

// ScaleNumbers is b's numbers scaled as Applier.Scale scales them: the rate
// by rate and the burst by burst, in thousandths (a greedy rule's rate kept
// exact, an interval rule's tokens per period rounded, at least 1; the burst
// rounded, at least b.Cost). For a target of one's own.
func ScaleNumbers(b Base, rate, burst float64) (atomicbucket.Numbers, error) {
	qr, err := permille("rate", rate)
	if err != nil {
		return atomicbucket.Numbers{}, err
	}
	qb, err := permille("burst", burst)
	if err != nil {
		return atomicbucket.Numbers{}, err
	}
	return scaleNumbers(b, qr, qb)
}

// scaling is a rule's factor in thousandths.
type scaling struct{ rate, burst int64 }

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
			errs = append(errs, fmt.Errorf("%s: %v scaled by %v (rate) and %v (burst): %w", what, from,
				float64(s.rate)/factorUnit, float64(s.burst)/factorUnit, err))
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
// (its burst; 1 leaves it), on every plan and for every key with numbers of
// its own, until the next Scale of the rule: factors do not compound, and
// 1 and 1 take the scaling away. Factors are applied in thousandths; a
// scaled burst is at least one request's cost. A factor whose numbers a rule
// refuses (checked as a Set's are) changes nothing and is an error wrapping
// ErrInvalid that names them.
func (a *Applier) Scale(rule string, rate, burst float64) error {
	if _, ok := a.p.Rules[rule]; !ok {
		return fmt.Errorf("%w: no rule %q in the policy (its rules: %s)", ErrInvalid, rule, joinKeys(a.p.Rules))
	}
	qr, err := permille("rate", rate)
	if err != nil {
		return err
	}
	qb, err := permille("burst", burst)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	scales := make(map[string]scaling, len(a.scales)+1)
	for k, v := range a.scales {
		scales[k] = v
	}
	if qr == factorUnit && qb == factorUnit {
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

// Scaled is rule's factor in force (1 and 1 when it is not scaled).
func (a *Applier) Scaled(rule string) Scaled {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.scales[rule]
	if !ok {
		return Scaled{1, 1}
	}
	return Scaled{float64(s.rate) / factorUnit, float64(s.burst) / factorUnit}
}

package atomicbucket

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"time"
)

// Refill says how a bucket regains tokens.
type Refill uint8

const (
	// Greedy refill adds tokens continuously: tokens(t) = min(b, tokens(last) + r·(t − last)).
	Greedy Refill = iota
	// Interval refill adds Limit.Tokens at each boundary of a grid of period
	// Limit.Period. A Table places each key's grid by the key (phase.go), a
	// Bucket starts its grid at its creation, and with Limit.Aligned every grid
	// is at wall-clock multiples of the period. A request in mid-period does
	// not restart the period.
	Interval
)

// String returns "greedy" or "interval".
func (r Refill) String() string {
	switch r {
	case Greedy:
		return "greedy"
	case Interval:
		return "interval"
	}
	return fmt.Sprintf("Refill(%d)", uint8(r))
}

// Limit is a rate limit as a person writes it: Tokens per Period, bursts of up to
// Burst. NewRule turns it into a Rule, the form buckets use. The zero Limit is
// invalid (a rate of 0 never refills): NewRule says so.
type Limit struct {
	Tokens  int64         // tokens added per Period; at least 1
	Period  time.Duration // at least 1ns
	Burst   int64         // bucket capacity; at least 1
	Refill  Refill        // Greedy (the zero value) or Interval
	Aligned bool          // Interval only: boundaries at wall-clock multiples of Period since the Unix epoch

	// Initial is the number of tokens a new bucket holds, 0 ≤ Initial ≤ Burst,
	// used only when InitialSet is true; by default a new bucket is full.
	Initial    int64
	InitialSet bool
}

// MaxWait bounds how far ahead a reservation may take tokens (Reserve, Wait).
// A longer maximum wait is treated as MaxWait. It is part of every Rule's
// overflow budget: a bucket's state never runs more than Burst + MaxWait ahead.
const MaxWait = 24 * time.Hour

// MaxRelativeError is the largest relative error of the admitted rate NewRule
// accepts for a greedy rate that the fixed-point units cannot hold exactly.
const MaxRelativeError = 1e-6

type mode uint8

const (
	modeGreedy   mode = iota // TAT in 1/scale ns
	modeAnchored             // interval grid placed by the key (tables) or at creation (buckets); TAT in token slots
	modeAligned              // interval grid at wall-clock multiples of the period; TAT in token slots
)

// Rule is a validated Limit with every number converted into the fixed-point
// units its buckets use. The zero Rule is not usable; build one with NewRule.
//
// Buckets hold one int64, the theoretical arrival time (TAT) in the rule's units:
//   - greedy refill: units of 1/scale ns, where scale is the least integer that
//     makes one token's worth of time (Period/Tokens) a whole number of units;
//   - interval refill: token slots of the grid, Tokens slots per period, counted
//     from the grid's anchor; now is quantised to the last boundary.
//
// A request of cost c is allowed iff max(TAT, now) + c·emit − now ≤ tau.
type Rule struct {
	emit     int64 // T: the time one token is worth, in units (1 for interval rules)
	tau      int64 // τ = Burst·emit: how far the TAT may run ahead of now, in units
	debt     int64 // (Burst − Initial)·emit: how far ahead of now a new bucket's TAT starts
	scale    int64 // greedy: units per nanosecond
	period   int64 // interval: the period in ns
	tokens   int64 // interval: tokens (units) per period
	anchor   int64 // aligned: a grid boundary in ns since epoch, in (−period, 0]
	burst    int64
	maxAhead int64 // MaxWait in units, rounded up: the furthest a reservation may run past tau
	mode     mode
	exact    bool
	limit    Limit
}

// ErrInvalidLimit is wrapped by every error NewRule returns.
var ErrInvalidLimit = errors.New("atomicbucket: invalid limit")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidLimit}, args...)...)
}

// NewRule validates l and computes its fixed-point constants. It rejects, with an
// error that wraps ErrInvalidLimit and says what would be right:
//   - Tokens < 1 (rate 0 would never refill), Period < 1ns, Burst < 1 (admits
//     nothing), Initial outside [0, Burst], Aligned without Interval refill;
//   - numbers whose fixed-point form could overflow an int64 within MaxUptime of
//     process uptime with reservations MaxWait ahead (tiny rates with huge
//     bursts, huge rates);
//   - greedy rates that the units cannot hold exactly and whose rounded form would
//     be off by more than MaxRelativeError.
//
// Greedy rates that cannot be held exactly are rounded down (each token costs
// slightly more time), so a rule never admits more than Burst + r·Δ in any window Δ.
func NewRule(l Limit) (Rule, error) {
	switch {
	case l.Tokens < 1:
		return Rule{}, invalid("rate %d per %v: tokens per period must be at least 1 (a rate of 0 never refills)", l.Tokens, l.Period)
	case l.Period < 1:
		return Rule{}, invalid("period %v: must be at least 1ns", l.Period)
	case l.Burst < 1:
		return Rule{}, invalid("burst %d admits nothing; burst must be at least 1", l.Burst)
	case l.InitialSet && (l.Initial < 0 || l.Initial > l.Burst):
		return Rule{}, invalid("initial %d: must be between 0 and the burst %d", l.Initial, l.Burst)
	case l.Aligned && l.Refill != Interval:
		return Rule{}, invalid("aligned applies to interval refill only")
	case l.Refill != Greedy && l.Refill != Interval:
		return Rule{}, invalid("unknown refill %v", l.Refill)
	}
	initial := l.Burst
	if l.InitialSet {
		initial = l.Initial
	}
	if l.Refill == Interval {
		return newIntervalRule(l, initial)
	}
	return newGreedyRule(l, initial)
}

// MustRule is NewRule for limits known to be valid; it panics on an error. It is
// meant for package-level variables and tests.
func MustRule(l Limit) Rule {
	r, err := NewRule(l)
	if err != nil {
		panic(err)
	}
	return r
}

var maxInt64 = big.NewInt(math.MaxInt64)

func bi(v int64) *big.Int { return big.NewInt(v) }

// fits reports whether the sum of the products fits in an int64.
func fits(terms ...[2]int64) bool {
	sum := new(big.Int)
	for _, t := range terms {
		sum.Add(sum, new(big.Int).Mul(bi(t[0]), bi(t[1])))
	}
	return sum.Cmp(maxInt64) <= 0
}

// greedyFits reports whether scale units per ns keep every intermediate value of
// a greedy bucket inside an int64: now (≤ MaxUptime), a TAT up to tau + MaxWait
// ahead of it, plus one more increment of at most tau, and the emission interval.
func greedyFits(l Limit, scale int64) (emit int64, ok bool) {
	// emit = ceil(Period·scale / Tokens)
	e := new(big.Int).Mul(bi(int64(l.Period)), bi(scale))
	e.Add(e, bi(l.Tokens-1))
	e.Quo(e, bi(l.Tokens))
	if !e.IsInt64() {
		return 0, false
	}
	emit = e.Int64()
	// Terms are multiplied in math/big: 2·Burst alone can overflow an int64.
	return emit, fits(
		[2]int64{int64(MaxUptime), scale},
		[2]int64{int64(MaxWait), scale},
		[2]int64{l.Burst, emit}, [2]int64{l.Burst, emit}, [2]int64{1, emit},
	)
}

func newGreedyRule(l Limit, initial int64) (Rule, error) {
	g := new(big.Int).GCD(nil, nil, bi(int64(l.Period)), bi(l.Tokens)).Int64()
	scale := l.Tokens / g // least scale with Period·scale divisible by Tokens
	emit, ok := greedyFits(l, scale)
	exact := ok
	if !ok {
		// No exact unit fits: take the finest unit that does, rounding emit up.
		hi := scale - 1
		lo := int64(0)
		for lo < hi { // largest fitting scale in [1, hi]; fitting is monotone in scale
			mid := lo + (hi-lo+1)/2
			if _, ok := greedyFits(l, mid); ok {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if lo < 1 {
			return Rule{}, invalid("rate %d per %v with burst %d does not fit 64-bit fixed point for ten years of uptime; use a smaller burst or a faster rate",
				l.Tokens, l.Period, l.Burst)
		}
		scale = lo
		emit, _ = greedyFits(l, scale)
		if e := relativeError(l, scale, emit); e > MaxRelativeError {
			return Rule{}, invalid("rate %d per %v cannot be held in 64-bit fixed point within %g (the closest is off by %.2g); use a rate whose time per token is a whole number of nanoseconds, such as %d per %v, or a slower one",
				l.Tokens, l.Period, MaxRelativeError, e, nearestExact(l), l.Period)
		}
	}
	return Rule{
		emit:     emit,
		tau:      l.Burst * emit,
		debt:     (l.Burst - initial) * emit,
		scale:    scale,
		burst:    l.Burst,
		maxAhead: int64(MaxWait) * scale,
		mode:     modeGreedy,
		exact:    exact,
		limit:    l,
	}, nil
}

// nearestExact is the token count closest to l.Tokens (not above it) whose time
// per token over l.Period is a whole number of nanoseconds: a divisor of the
// period. It is only a suggestion for error messages.
func nearestExact(l Limit) int64 {
	p := int64(l.Period)
	for n := min(l.Tokens, p); n > 1; n-- {
		if p%n == 0 {
			return n
		}
	}
	return 1
}

// relativeError is how much lower the admitted rate is than the written one:
// (emit·Tokens − Period·scale) / (Period·scale).
func relativeError(l Limit, scale, emit int64) float64 {
	num := new(big.Int).Mul(bi(emit), bi(l.Tokens))
	den := new(big.Int).Mul(bi(int64(l.Period)), bi(scale))
	num.Sub(num, den)
	f, _ := new(big.Rat).SetFrac(num, den).Float64()
	return f
}

func newIntervalRule(l Limit, initial int64) (Rule, error) {
	p := int64(l.Period)
	periodsUp := int64(MaxUptime)/p + 1
	periodsAhead := int64(MaxWait)/p + 1
	// Token slots: now ≤ periodsUp·Tokens; the TAT runs at most Burst + MaxWait ahead,
	// plus one more increment ≤ Burst. Converting a slot back to ns multiplies
	// (TAT + Burst)/Tokens + 1 periods by the period.
	// (2·Burst)/Tokens + 1 ≤ 2·(Burst/Tokens) + 2, kept as separate terms so that
	// nothing is multiplied outside math/big.
	slotsOK := fits([2]int64{periodsUp + periodsAhead, l.Tokens}, [2]int64{3, l.Burst})
	nsOK := fits([2]int64{periodsUp + periodsAhead + 5, p}, [2]int64{l.Burst / l.Tokens, p}, [2]int64{l.Burst / l.Tokens, p})
	if !slotsOK || !nsOK {
		return Rule{}, invalid("interval rate %d per %v with burst %d does not fit 64-bit fixed point for ten years of uptime; use fewer tokens per period or a smaller burst",
			l.Tokens, l.Period, l.Burst)
	}
	r := Rule{
		emit:     1,
		tau:      l.Burst,
		debt:     l.Burst - initial,
		period:   p,
		tokens:   l.Tokens,
		burst:    l.Burst,
		maxAhead: periodsAhead * l.Tokens,
		mode:     modeAnchored,
		exact:    true,
		limit:    l,
	}
	// The boundary at or before epoch of the wall-clock grid (wall-clock time ≡ 0
	// mod period): aligned buckets use it, and keyed anchored buckets place their
	// grids relative to it (phase.go).
	phase := wallAtEpoch % p
	if phase < 0 {
		phase += p
	}
	r.anchor = -phase
	if l.Aligned {
		r.mode = modeAligned
	}
	return r, nil
}

// Limit returns the limit the rule was built from.
func (r *Rule) Limit() Limit { return r.limit }

// Exact reports whether the rule's fixed-point numbers equal the written rate
// exactly, in which case every decision equals the exact rational one.
func (r *Rule) Exact() bool { return r.exact }

// RelativeError is how much lower than written the admitted long-run rate is:
// 0 for an exact rule, at most MaxRelativeError otherwise.
func (r *Rule) RelativeError() float64 {
	if r.exact {
		return 0
	}
	return relativeError(r.limit, r.scale, r.emit)
}

// GridAnchor is, for an aligned interval rule, the grid boundary at or before the
// package epoch, in ns since the epoch (≤ 0); 0 for other rules.
func (r *Rule) GridAnchor() int64 {
	if r.mode != modeAligned {
		return 0
	}
	return r.anchor
}

// String describes the rule in plain words.
func (r *Rule) String() string {
	s := fmt.Sprintf("%d per %v, burst %d, %v refill", r.limit.Tokens, r.limit.Period, r.burst, r.limit.Refill)
	if r.mode == modeAligned {
		s += " aligned to the wall clock"
	}
	if r.limit.InitialSet {
		s += fmt.Sprintf(", new buckets start with %d", r.limit.Initial)
	}
	return s
}

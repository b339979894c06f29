package shared

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/keyhash"
)

// Integers are a shared rule's integers in a store on a microsecond clock
// (Redis's TIME, PostgreSQL's clock_timestamp()), computed once, when the rule
// is bound. A bucket's theoretical arrival time (TAT) is kept as whole Unix
// seconds and units within the second, so that only the part of the TAT ahead
// of now, at most a burst's worth, is ever multiplied.
//
// Greedy rules count in Units (PerMicro units to a microsecond, Emit units to
// a token). Interval rules count whole token slots (Emit 1), with now
// quantised to the last boundary of the key's grid, whose boundaries are the
// Unix times ≡ Phase(key) (mod Period) ns, as atomicbucket's tables place them.
type Integers struct {
	Limit atomicbucket.Limit
	Units
	PerSecond int64 // greedy: units in a second, 1e6·PerMicro
	Tau       int64 // units the TAT may run ahead of now: Burst·Emit
	Debt      int64 // units a new bucket's TAT starts ahead of now: (Burst − Initial)·Emit
	// MaxDebt is the most tokens a bucket may owe after settlements
	// (ModeOwe): atomicbucket.Rule.MaxDebt, or less where the store's
	// integers below 2^53 could not hold a TAT that far ahead (maxDebt).
	MaxDebt int64

	Interval bool
	Aligned  bool  // interval: every key's grid starts on the Unix epoch
	Period   int64 // interval: ns, G·P
	Tokens   int64 // interval: slots added at each boundary
	G, P, B  int64 // interval: gcd(Period, 1e9), Period/G, 1e9/G

	args *Args // the same integers as interface values (Args)
}

// Args are a rule's integers as interface values, made once, with the
// numbers (NewIntegers): a store's client takes a call's arguments as `any`,
// and an integer above 255 made one at every call was an allocation a value.
type Args struct {
	Emit, Tau, Debt, PerSecond, PerMicro any
	Tokens, Period, G, P, B              any
}

// Args are n's integers as interface values; nil for Integers not made by
// NewIntegers.
func (n *Integers) Args() *Args { return n.args }

func (n *Integers) box() {
	n.args = &Args{Emit: n.Emit, Tau: n.Tau, Debt: n.Debt, PerSecond: n.PerSecond, PerMicro: n.PerMicro,
		Tokens: n.Tokens, Period: n.Period, G: n.G, P: n.P, B: n.B}
}

// NewIntegers computes l's numbers (MicroUnits), or says why a store on a
// microsecond clock cannot hold it.
func NewIntegers(l atomicbucket.Limit) (Integers, error) {
	u, err := MicroUnits(l)
	if err != nil {
		return Integers{}, err
	}
	n := Integers{Limit: l, Units: Units{Exact: true}}
	initial := l.Burst
	if l.InitialSet {
		initial = l.Initial
	}
	if l.Refill == atomicbucket.Interval {
		p := int64(l.Period)
		g := new(big.Int).GCD(nil, nil, big.NewInt(p), big.NewInt(1e9)).Int64()
		n.Interval, n.Aligned, n.Period, n.Tokens = true, l.Aligned, p, l.Tokens
		n.G, n.P, n.B = g, p/g, 1e9/g
		n.Emit, n.Tau, n.Debt = 1, l.Burst, l.Burst-initial
		n.MaxDebt = maxDebt(l, n)
		n.box()
		return n, nil
	}
	n.Units = u
	n.PerSecond = 1_000_000 * u.PerMicro
	n.Tau = l.Burst * u.Emit
	n.Debt = (l.Burst - initial) * u.Emit
	n.MaxDebt = maxDebt(l, n)
	n.box()
	return n, nil
}

// maxDebt is the most tokens a bucket of l may owe on a store: the local
// rule's bound (atomicbucket.Rule.MaxDebt: the burst, or a day's refill),
// or less where the store's arithmetic would leave 2^53. A greedy check
// computes the sub-second part of now, a TAT tau + debt ahead, and one
// more request of up to tau; an interval bucket's time until full,
// ((Burst + debt)/Tokens + 2) periods in ns, must stay below it too.
func maxDebt(l atomicbucket.Limit, n Integers) int64 {
	r, err := atomicbucket.NewRule(l)
	if err != nil {
		return 0
	}
	d := r.MaxDebt()
	if n.Interval {
		periods := new(big.Int).Quo(big.NewInt(maxExact-1), big.NewInt(n.Period))
		periods.Sub(periods, big.NewInt(2))
		room := periods.Mul(periods, big.NewInt(n.Tokens)).Sub(periods, big.NewInt(l.Burst))
		if room.Sign() <= 0 {
			return 0
		}
		if room.IsInt64() {
			d = min(d, room.Int64())
		}
		return d
	}
	room := (maxExact - 1 - n.PerSecond - 2*n.Tau) / n.Emit // MicroUnits kept PerSecond + 2·Tau below 2^53
	return max(min(d, room), 0)
}

// OweBound is how far ahead of now a settlement may put a bucket's TAT, in
// its units: tau plus MaxDebt tokens.
func (n *Integers) OweBound() int64 { return n.Tau + n.MaxDebt*n.Emit }

// ErrStaleUnits is wrapped by NumbersOf's error for a rule generated with
// other units than this version of limitgen computes.
var ErrStaleUnits = errors.New("the rule's generated units are not this version's")

// NumbersOf computes r's numbers (NewIntegers), refusing a rule whose
// generated Units differ from what this version computes.
func integersOf(r Rule) (Integers, error) {
	n, err := NewIntegers(r.Limit)
	if err != nil {
		return Integers{}, err
	}
	if r.Units != (Units{}) {
		if u, _ := MicroUnits(r.Limit); u != r.Units {
			return Integers{}, fmt.Errorf("%w: generated with %+v, but this version computes %+v: regenerate the package", ErrStaleUnits, r.Units, u)
		}
	}
	return n, nil
}

// Phase is where key's grid is placed for an interval rule (the Unix times ≡
// Phase (mod Period) ns are its boundaries), by keyhash.Of as
// atomicbucket's tables place it; 0 for an aligned or a greedy rule.
func (n *Integers) Phase(key string) int64 {
	if !n.Interval || n.Aligned {
		return 0
	}
	return int64(keyhash.Of(key) % uint64(n.Period))
}

// Duration converts units to a Duration, rounded up: one unit is
// 1000/PerMicro ns. For an interval rule it is the wait until units slots have
// been added: ⌈units/Tokens⌉ boundaries, the first of them Period − since ns
// away.
func (n *Integers) Duration(units, since int64) time.Duration {
	if units <= 0 {
		return 0
	}
	if n.Interval {
		return time.Duration(((units+n.Tokens-1)/n.Tokens)*n.Period - since)
	}
	// ⌈units·1000 / PerMicro⌉ in 128 bits, without allocating.
	hi, lo := bits.Mul64(uint64(units), 1000)
	lo, carry := bits.Add64(lo, uint64(n.PerMicro-1), 0)
	hi += carry
	if hi >= uint64(n.PerMicro) {
		return atomicbucket.Never // the quotient would not fit 64 bits
	}
	q, _ := bits.Div64(hi, lo, uint64(n.PerMicro))
	if q > math.MaxInt64 {
		return atomicbucket.Never
	}
	return time.Duration(q)
}

// Decision is the decision a store's reply describes for a request of cost:
// allowed or not, the TAT ahead of now after the check (ahead, in units),
// for a denial how far the request would have put it beyond Tau (excess), and
// for an interval rule the ns since the grid's last boundary (since). A cost
// below 0 or above the burst is never allowed (RetryAfter Never).
func (n *Integers) Decision(allowed bool, ahead, excess, since, cost int64) atomicbucket.Decision {
	d := atomicbucket.Decision{
		Allowed:   allowed,
		Remaining: max((n.Tau-ahead)/n.Emit, 0),
		Reset:     n.Duration(ahead, since),
	}
	switch {
	case allowed:
	case cost < 0 || cost > n.Limit.Burst:
		d.RetryAfter = atomicbucket.Never
	default:
		d.RetryAfter = n.Duration(excess, since)
	}
	return d
}

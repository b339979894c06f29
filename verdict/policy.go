package verdict

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/wire"
)

// The parameter names of draft-ietf-httpapi-ratelimit-headers-11. They are
// kept here, and only here, because the draft's authors have floated renaming
// them; the package doc's table says what each one holds.
const (
	paramQuota     = "q" // RateLimit-Policy: the quota
	paramWindow    = "w" // RateLimit-Policy: the window, in seconds
	paramRemaining = "r" // RateLimit: what is left
	paramReset     = "t" // RateLimit: seconds until it resets
)

// maxPolicyName is the longest policy name NewPolicy accepts, in bytes.
const maxPolicyName = 64

// Policy is one rule (on one plan) as the rate-limit fields describe it. Its
// strings are computed once, by NewPolicy or by the generator (which emits a
// Policy literal with the same values); a response only appends numbers to
// them. The zero Policy is not usable. The doors keep what they made of a
// Policy by its address (Memo): do not change a Policy once a door has used
// it; make a new one.
type Policy struct {
	Name   string // the rule's name, printable ASCII
	Quota  int64  // q: the burst, in tokens
	Window int64  // w: seconds an empty bucket takes to refill, at least 1

	Limit atomicbucket.Limit // the rule's numbers: r/t is capped by its rate, waits are derived from its refill

	// Item is the rule's member of a RateLimit-Policy list:
	// "Name";q=Quota;w=Window.
	Item string
	// Prefix is the start of its RateLimit member, up to the value of r:
	// "Name";r=
	Prefix string
	// Sliding marks a window rule: at most Quota in any interval of Limit's
	// period, sliding (Limit is the interval bucket its fields are computed
	// from, not how it decides). Describe says which.
	Sliding bool
}

// Describe is the rule's numbers in words, as a denial's details give them:
// "at most 40 in any 24h0m0s, sliding" for a window rule; "30/min, burst
// 10" or "5 per 10s, burst 5" for a token bucket.
func (p *Policy) Describe() string {
	if p.Sliding {
		return "at most " + strconv.FormatInt(p.Limit.Tokens, 10) + " in any " + p.Limit.Period.String() + ", sliding"
	}
	return describe(p.Limit)
}

// MustPolicy is NewPolicy for values known to be valid; it panics otherwise.
func MustPolicy(name string, l atomicbucket.Limit) Policy {
	p, err := NewPolicy(name, l)
	if err != nil {
		panic(err)
	}
	return p
}

// errPolicy is wrapped by every error NewPolicy returns.
var errPolicy = errors.New("verdict: invalid policy")

// NewPolicy describes the rule named name with limit l. name must be 1 to
// maxPolicyName bytes of printable ASCII (a Structured Fields string); l must
// be a limit atomicbucket.NewRule accepts.
func NewPolicy(name string, l atomicbucket.Limit) (Policy, error) {
	if err := checkName(name); err != nil {
		return Policy{}, err
	}
	if _, err := atomicbucket.NewRule(l); err != nil {
		return Policy{}, fmt.Errorf("%w: %q: %w", errPolicy, name, err)
	}
	p := Policy{Name: name, Quota: l.Burst, Window: window(l), Limit: l}
	q := sfString(name)
	p.Item = q + ";" + paramQuota + "=" + strconv.FormatInt(p.Quota, 10) + ";" + paramWindow + "=" + strconv.FormatInt(p.Window, 10)
	p.Prefix = q + ";" + paramRemaining + "="
	return p, nil
}

// checkName reports whether name can be a policy name: 1 to maxPolicyName
// bytes in %x20-7E, the characters a Structured Fields string may hold.
func checkName(name string) error {
	if name == "" || len(name) > maxPolicyName {
		return fmt.Errorf("%w: name %.80q: must be 1 to %d bytes", errPolicy, name, maxPolicyName)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: name %q: byte %#x at %d is not printable ASCII (a Structured Fields string holds only %%x20-7E)", errPolicy, name, c, i)
		}
	}
	return nil
}

// sfString quotes s as a Structured Fields string: DQUOTE and backslash are
// escaped with a backslash. s is printable ASCII (checkName).
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}

// window is the time an empty bucket takes to refill, in seconds rounded up,
// at least 1, so that a client sending q per w never outruns the refill.
// Greedy refill: Burst·Period/Tokens. Interval refill adds Tokens at each
// boundary, and any ⌈Burst/Tokens⌉ periods hold that many boundaries.
func window(l atomicbucket.Limit) int64 {
	num := new(big.Int).Mul(big.NewInt(l.Burst), big.NewInt(int64(l.Period)))
	den := new(big.Int).Mul(big.NewInt(l.Tokens), big.NewInt(int64(time.Second)))
	if l.Refill == atomicbucket.Interval {
		// Tokens arrive Tokens at a time, so a full refill takes ⌈Burst/Tokens⌉
		// whole periods.
		periods := (l.Burst + l.Tokens - 1) / l.Tokens
		num = new(big.Int).Mul(big.NewInt(periods), big.NewInt(int64(l.Period)))
		den = big.NewInt(int64(time.Second))
	}
	w := new(big.Int).Add(num, new(big.Int).Sub(den, big.NewInt(1)))
	w.Quo(w, den)
	switch {
	case w.Sign() <= 0:
		return 1
	case !w.IsInt64() || w.Int64() > maxSFInteger:
		return maxSFInteger
	}
	return w.Int64()
}

// maxSFInteger is the largest Structured Fields integer (15 digits).
const maxSFInteger = 999_999_999_999_999

// fields returns the RateLimit parameters r and t for decision d of a request
// of the given cost, by the rules of the package doc.
func (p *Policy) fields(d atomicbucket.Decision, cost int64) (r, t int64) {
	r = shown(d.Remaining)
	var base time.Duration
	switch {
	case !d.Allowed && d.RetryAfter != atomicbucket.Never && d.RetryAfter >= 0:
		base = d.RetryAfter
	case !d.Allowed, r > 0:
		base = d.Reset
	default:
		base = p.waitAfter(d.Reset, cost)
	}
	if r > 0 {
		base = max(base, p.paced(r))
	}
	return r, ceilSeconds(base)
}

// shown is a count of whole tokens left as the RateLimit field shows it (r):
// exact below 1000; from 1000 up, rounded down to three significant digits
// (1,234,567 shows as 1,230,000). It is never more than is left, and less by
// under 1%, so a client that believes it is never denied for it; and a
// bucket that drains one token a request shows the same r for many requests
// in a row, so that the doors give them the field values they made before
// (Memo) instead of a string each. Negative counts show as 0.
func shown(r int64) int64 {
	if r < 1000 {
		return max(r, 0)
	}
	n := (bits.Len64(uint64(r))*1233)>>12 + 1 // the digit count, or one more (wire.AppendDecimal)
	if uint64(r) < wire.Pow10[n-1] {
		n--
	}
	unit := int64(wire.Pow10[n-3])
	return r / unit * unit
}

// waitAfter is, for a bucket that is reset away from full, the wait until it
// holds cost tokens. Greedy refill: it holds Burst − rate·reset now, so it needs
// reset − (Burst − cost)/rate more. Interval refill: tokens arrive Tokens at a
// time at boundaries, the last of which is reset away; cost tokens are there
// ⌈Burst/Tokens⌉ − ⌈cost/Tokens⌉ periods earlier than that.
func (p *Policy) waitAfter(reset time.Duration, cost int64) time.Duration {
	l := &p.Limit
	if cost <= 0 || cost > l.Burst {
		return reset
	}
	var early time.Duration
	if l.Refill == atomicbucket.Interval {
		early = mulDiv(int64((l.Burst+l.Tokens-1)/l.Tokens-(cost+l.Tokens-1)/l.Tokens), int64(l.Period), 1)
	} else {
		early = mulDiv(l.Burst-cost, int64(l.Period), l.Tokens)
	}
	return max(reset-early, 0)
}

// paced is the time the rule's rate takes to add r tokens: r·Period/Tokens.
func (p *Policy) paced(r int64) time.Duration {
	return mulDiv(r, int64(p.Limit.Period), p.Limit.Tokens)
}

// mulDiv is a·b/c rounded down, for non-negative a, b and positive c, as a
// Duration; math.MaxInt64 when it does not fit.
func mulDiv(a, b, c int64) time.Duration {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi == 0 { // the common case: a 64-bit division, a third of a 128-bit one's cost
		return time.Duration(min(lo/uint64(c), math.MaxInt64))
	}
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(q)
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// AppendRateLimit appends p's member of a RateLimit field for r and t to b:
// "Name";r=R;t=T.
func AppendRateLimit(b []byte, p *Policy, r, t int64) []byte {
	b = append(b, p.Prefix...)
	b = wire.AppendDecimal(b, r)
	b = append(b, ";"+paramReset+"="...)
	return wire.AppendDecimal(b, t)
}

// describe is a limit's numbers as a policy writes them: "30/min, burst 10",
// "5 per 10s, burst 5".
func describe(l atomicbucket.Limit) string {
	rate := strconv.FormatInt(l.Tokens, 10) + " per " + l.Period.String()
	switch l.Period {
	case time.Second:
		rate = strconv.FormatInt(l.Tokens, 10) + "/s"
	case time.Minute:
		rate = strconv.FormatInt(l.Tokens, 10) + "/min"
	case time.Hour:
		rate = strconv.FormatInt(l.Tokens, 10) + "/h"
	case 24 * time.Hour:
		rate = strconv.FormatInt(l.Tokens, 10) + "/d"
	}
	return rate + ", burst " + strconv.FormatInt(l.Burst, 10)
}

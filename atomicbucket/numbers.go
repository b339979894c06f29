package atomicbucket

import (
	"fmt"
	"math/big"
	"sync/atomic"
	"time"
)

// Numbers are the part of a rule that may change at run time: a rate of Tokens
// per Period and a Burst. The rest of the rule (its refill, its alignment, its
// keys) is the policy's shape and does not change; an interval rule keeps its
// Period too, since its grid is the shape its buckets are placed on.
//
// A table or a bucket judges every check by the numbers in force for it: the
// policy's, the numbers set for the whole table (SetNumbersAt), or a key's own
// (Table.SetKeyNumbersAt). A change moves every existing bucket to the new
// numbers by an exact conversion at the moment of the change (see Carry):
// never reset to full, never judged by the numbers it replaced.
type Numbers struct {
	Tokens int64         // tokens added per Period; at least 1
	Period time.Duration // at least 1ns; an interval rule's must be its policy's
	Burst  int64         // bucket capacity; at least 1
}

// String is the numbers as a person writes them: "100 per 1s, burst 500".
func (n Numbers) String() string {
	return fmt.Sprintf("%d per %v, burst %d", n.Tokens, n.Period, n.Burst)
}

// NumbersOf returns a limit's numbers.
func NumbersOf(l Limit) Numbers { return Numbers{Tokens: l.Tokens, Period: l.Period, Burst: l.Burst} }

// Carry says how a change of numbers carries the tokens a bucket holds at
// the moment of the change into the new numbers. Whatever the choice, the
// result is clamped to the new burst, the fraction of a token that the new
// units cannot hold is dropped (a change never adds tokens), a bucket in debt
// (reservations ahead of time) carries its debt, and a full bucket stays full:
// a full bucket is the same as none (tables reclaim them), and a key without
// a bucket gets the new burst.
type Carry uint8

const (
	// CarryAsIs keeps the tokens held: a bucket with 30 tokens has 30 under the
	// new numbers (at most the new burst). The default, and the conversion a
	// shared rule's store makes during a rolling deploy.
	CarryAsIs Carry = iota
	// CarryProportional keeps the fraction of the burst held: 30 of 50 becomes
	// 300 of 500. A bucket that was full stays full, an empty one stays empty.
	CarryProportional
	// CarryAdditive adds what the burst grew by: 30 of 50 becomes 480 of 500;
	// a burst that shrinks adds nothing (30 of 50 becomes 20 of 20).
	CarryAdditive
)

// String returns "as-is", "proportional" or "additive".
func (c Carry) String() string {
	switch c {
	case CarryAsIs:
		return "as-is"
	case CarryProportional:
		return "proportional"
	case CarryAdditive:
		return "additive"
	}
	return fmt.Sprintf("Carry(%d)", uint8(c))
}

// ParseCarry is the Carry a person names: "as-is" (or ""), "proportional",
// "additive".
func ParseCarry(s string) (Carry, error) {
	switch s {
	case "", "as-is":
		return CarryAsIs, nil
	case "proportional":
		return CarryProportional, nil
	case "additive":
		return CarryAdditive, nil
	}
	return 0, fmt.Errorf("atomicbucket: carry %q: want as-is, proportional or additive", s)
}

// Origin says where the numbers in force for a check come from.
type Origin uint8

const (
	// FromPolicy: the policy's own numbers, folded into the generated code.
	FromPolicy Origin = iota
	// FromOverride: numbers set for the whole rule (or plan) at run time.
	FromOverride
	// FromKeyOverride: numbers set for this one key at run time.
	FromKeyOverride
)

// String returns "policy", "override" or "key override".
func (o Origin) String() string {
	switch o {
	case FromPolicy:
		return "policy"
	case FromOverride:
		return "override"
	case FromKeyOverride:
		return "key override"
	}
	return fmt.Sprintf("Origin(%d)", uint8(o))
}

// WithNumbers is the rule with n in place of its numbers, validated by NewRule
// (same checks, same messages): an override is refused exactly as a policy
// with those numbers would be. A new bucket's initial tokens stay the
// policy's, at most the new burst. An interval rule's period cannot change.
func (r *Rule) WithNumbers(n Numbers) (Rule, error) {
	l := r.limit
	if l.Refill == Interval && n.Period != l.Period {
		return Rule{}, invalid("interval rule's period %v cannot change to %v: its grid is the policy's (change the tokens per period instead)", l.Period, n.Period)
	}
	l.Tokens, l.Period, l.Burst = n.Tokens, n.Period, n.Burst
	if l.InitialSet && l.Initial > l.Burst && l.Burst >= 1 {
		l.Initial = l.Burst
	}
	return NewRule(l)
}

// CheckCost says why burst cannot be the burst of a rule whose requests cost
// cost (its policy's, at least 1): a request that could never pass. The
// generator refuses such a policy with the same message, and a generated
// limiter refuses such numbers.
func CheckCost(burst, cost int64) error {
	if burst >= 1 && cost > burst {
		return invalid("burst %d is below the cost %d of one request, which could never pass; raise burst to at least %d", burst, cost, cost)
	}
	return nil
}

// numbers is one installation of numbers in a table or a bucket: the policy's
// (a table's own rule), a change for the whole table, or one key's own. A
// bucket records the installation it is written in (slot.nums); when the
// installation is replaced, succ says by what, when, and how tokens carry,
// and a bucket still written in it converts before it is used again, as of
// that moment (convertWord), so that a bucket untouched since a change is
// judged as if it had been converted at the change.
type numbers struct {
	rule   Rule
	since  int64 // ns: when it was installed
	origin Origin
	// carryIn is how a bucket of the key's former numbers carries into a
	// key's own (FromKeyOverride).
	carryIn Carry
	succ    atomic.Pointer[succession]
}

// succession is what replaced an installation: to, from at (ns), carrying tokens by carry.
type succession struct {
	to    *numbers
	at    int64
	carry Carry
}

// supersede records that n was replaced by to at at; an installation is
// replaced once.
func (n *numbers) supersede(to *numbers, at int64, carry Carry) {
	n.succ.Store(&succession{to: to, at: at, carry: carry})
}

// Numbers is the installation's numbers.
func (n *numbers) Numbers() Numbers { return NumbersOf(n.rule.limit) }

var bigOne = big.NewInt(1)

func ratOf(v int64) *big.Rat { return new(big.Rat).SetInt64(v) }

// convertWord carries a bucket written in rule a (word tat, grid anchor) into
// rule b at time at (ns, clamped): the tokens held at at by a's numbers,
// carried by carry and clamped to b's burst, become b's word at at. Whole
// units only: the part of a token b's units cannot hold is dropped (rounded
// towards fewer tokens), and a debt beyond b's reservation horizon is held at
// it. Both rules have the same refill and, for interval rules, the same
// period, hence the same anchor.
func convertWord(a, b *Rule, tat, anchor, at int64, carry Carry) int64 {
	at = min(max(at, 0), int64(MaxUptime))
	nowA, nowB := a.units(at, anchor), b.units(at, anchor)
	owedA := max(tat-nowA, 0)
	if owedA == 0 {
		return nowB // full stays full, as a key without a bucket is
	}
	// held = (tauA − owedA) / emitA tokens: exact as a rational.
	held := new(big.Rat).SetFrac(big.NewInt(a.tau-owedA), big.NewInt(a.emit))
	switch carry {
	case CarryProportional:
		held.Mul(held, big.NewRat(b.burst, a.burst))
	case CarryAdditive:
		if grow := b.burst - a.burst; grow > 0 {
			held.Add(held, ratOf(grow))
		}
	}
	if held.Cmp(ratOf(b.burst)) > 0 {
		held.SetInt64(b.burst)
	}
	// owedB = tauB − held·emitB, rounded up to a whole unit (fewer tokens).
	x := new(big.Rat).Mul(held, ratOf(b.emit))
	fl := new(big.Int).Quo(x.Num(), x.Denom()) // truncated towards zero
	if x.Sign() < 0 && !x.IsInt() {
		fl.Sub(fl, bigOne) // floor of a negative held (debt)
	}
	owed := new(big.Int).Sub(big.NewInt(b.tau), fl)
	limit := big.NewInt(b.tau + b.maxAhead)
	if owed.Cmp(limit) > 0 {
		owed = limit
	}
	return nowB + owed.Int64()
}

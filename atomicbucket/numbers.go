package atomicbucket

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
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
// never reset to full, never judged by the numbers it replaced, never given
// tokens by a cut and a restore.
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
// units cannot hold is dropped, and a bucket in debt (reservations taken
// ahead of time) holds no tokens to carry: it keeps its debt, in tokens, under
// every choice (proportional does not scale it, additive does not pay it).
// A key without a bucket gets the new numbers' initial tokens (the burst,
// unless the policy gives the rule an initial count, then at most that).
//
// Full stays full only when it is safe: a bucket full by its numbers is full
// by the new ones once it has been full long enough that a bucket with the
// largest burst and the fastest rate the rule has had (for every key: the
// policy's and the rule- and plan-level changes', not keys' own) would be
// full too: after a cut, once idle long enough to refill the burst the cut
// took off. Until then it holds its burst, carried like any other count, and
// a table does not reclaim it. So with CarryAsIs a cut and a restore never
// leave a bucket fuller than no change would have, and in general a bucket
// never holds more than one that had those largest numbers all along and
// took the same requests, except where a change raises the numbers above
// them: a raise gives a key without a bucket (or one full long enough to
// count as none) the new numbers' initial tokens (their burst unless the
// rule sets an initial count, then at most that), as it gives a new key.
// CarryProportional and CarryAdditive give tokens when a burst grows, by their
// definition, including when it grows back after a cut: choose them only
// where that is meant.
type Carry uint8

const (
	// CarryAsIs keeps the tokens held: a bucket with 30 tokens has 30 under the
	// new numbers (at most the new burst). The default, the one ApplyNumbers,
	// ScaleNumbers and the adaptive controller use, and the conversion a
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
// (same checks, same messages) and refused, as the generator refuses such a
// policy, when its rate is more than one token a nanosecond or less than one
// in MaxUptime: an override is refused exactly as a policy with those numbers
// would be. A new bucket's initial tokens stay the
// policy's, at most the new burst. An interval rule's period cannot change.
func (r *Rule) WithNumbers(n Numbers) (Rule, error) {
	l := r.limit
	if l.Refill == Interval && n.Period != l.Period {
		return Rule{}, invalid("interval rule's period %v cannot change to %v: its grid is the policy's (change the tokens per period instead)", l.Period, n.Period)
	}
	l.Tokens, l.Period, l.Burst = n.Tokens, n.Period, n.Burst
	// What a policy's rate may be (the generator refuses the rest), beyond
	// what NewRule can hold.
	switch {
	case n.Tokens >= 1 && n.Period >= 1 && n.Tokens > int64(n.Period):
		return Rule{}, invalid("rate %d per %v is more than one token a nanosecond, finer than the clock the buckets count in; limit a cost instead (with a smaller rate)", n.Tokens, n.Period)
	case n.Tokens >= 1 && n.Period >= 1 && int64(n.Period)/n.Tokens > int64(MaxUptime):
		return Rule{}, invalid("rate %d per %v is less than one token in ten years (the longest a process's clock is planned for); no bucket would refill: give a larger rate", n.Tokens, n.Period)
	}
	if l.InitialSet && l.Initial > l.Burst && l.Burst >= 1 {
		l.Initial = l.Burst
	}
	return NewRule(l)
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
	// key's own (FromKeyOverride); env is the rule's envelope as of then.
	carryIn Carry
	env     *envelope
	succ    atomic.Pointer[succession]
	// hi is the fastest rate of any numbers the table (or bucket) had when
	// n was installed, keys' own included: what a check stamped before since
	// is judged short of (late).
	hi rate
	// follows, for the numbers a key returns to when its own are cleared
	// (a copy of the plan's, installed then), is the plan whose successions
	// are its own.
	follows *numbers
}

// next is what replaced n, if anything has.
func (n *numbers) next() *succession {
	if s := n.succ.Load(); s != nil || n.follows == nil {
		return s
	}
	return n.follows.succ.Load()
}

// rate is a rate of tokens per period (ns).
type rate struct{ tokens, period int64 }

func rateOf(l Limit) rate { return rate{l.Tokens, int64(l.Period)} }

// faster reports whether r adds tokens faster than o.
func (r rate) faster(o rate) bool {
	ah, al := bits.Mul64(uint64(r.tokens), uint64(o.period))
	bh, bl := bits.Mul64(uint64(o.tokens), uint64(r.period))
	return ah > bh || ah == bh && al > bl
}

// late is how a check stamped now (ns) is judged on a word written in n. A
// word is exact from the moment its numbers came in force (since) on; before
// that the bucket was under other numbers, and a check stamped then (it read
// the clock before a change and landed after it, or an explicit time older
// than the change) is judged as at since (at), short of pen tokens: the most
// the fastest numbers the rule has had (hi) could have added between its
// stamp and since. So it never sees tokens that came after its stamp, as a
// check is never judged more leniently than at the latest time seen.
func (n *numbers) late(now int64, interval bool) (at, pen int64) {
	if now >= n.since {
		return now, 0
	}
	d := uint64(n.since - now)
	if interval { // a boundary can add a whole period's tokens at once
		hi, p := bits.Mul64(d/uint64(n.hi.period)+1, uint64(n.hi.tokens))
		if hi != 0 || p > math.MaxInt64 {
			return n.since, math.MaxInt64
		}
		return n.since, int64(p)
	}
	hi, lo := bits.Mul64(d, uint64(n.hi.tokens))
	if hi >= uint64(n.hi.period) {
		return n.since, math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, uint64(n.hi.period))
	if rem != 0 {
		q++
	}
	return n.since, int64(min(q, math.MaxInt64))
}

// judgeLate judges a check of cost stamped now on the word w written in r,
// late (numbers.late): as at at, short of pen tokens; take: an admission
// takes its tokens (they are taken at at). Its waits are from now. alive is
// false when w is dead.
func (r *Rule) judgeLate(w, seen *atomic.Int64, now, at, pen, anchor, cost int64, take bool) (d Decision, alive bool) {
	atU := r.units(at, anchor)
	tat := w.Load()
	if tat < 0 {
		return Decision{}, false
	}
	if cost < 0 || cost > r.burst {
		return r.outOfRange(tat, at, atU, anchor), true
	}
	inc := cost * r.emit
	ok := false
	if pen <= r.burst-cost { // else not even a full bucket would do
		bound := atU + r.tau - pen*r.emit
		switch {
		case !take:
			ok = max(tat, atU)+inc <= bound
		default:
			if tat, ok = advance(w, seen, at, atU, inc, bound); tat < 0 {
				return Decision{}, false
			}
		}
	}
	if ok && !take {
		tat = max(tat, atU) + inc
	}
	d = r.decide(ok, tat, inc, at, atU, anchor)
	lag := time.Duration(at - now)
	if !ok {
		d.RetryAfter += lag // a check made at at or later is not late
	}
	d.Reset += lag
	d.Remaining = max(d.Remaining-pen, 0)
	return d, true
}

// convertAt is the time as of which a bucket written in a, whose latest check
// was stamped seen (ns), is converted into b by a change at at. A word holds
// the checks made on it judged by a; converting it as of a time before one of
// them and refilling from there at b's faster rate would add tokens no numbers
// gave (the bucket was never under b then), so a change to a faster rate is
// made, for that bucket, as of its latest check when that is later; to a rate
// no faster, as of the change (the earlier time only takes tokens away).
func convertAt(a, b *Rule, at, seen int64) int64 {
	if rateOf(b.limit).faster(rateOf(a.limit)) {
		return max(at, seen)
	}
	return at
}

// succession is what replaced an installation: to, from at (ns), carrying
// tokens by carry, with env the envelope as of then (a bucket converted later
// is converted as it would have been at the change).
type succession struct {
	to    *numbers
	at    int64
	carry Carry
	env   *envelope
}

// supersede records that n was replaced by to at at; an installation is
// replaced once.
func (n *numbers) supersede(to *numbers, at int64, carry Carry, env *envelope) {
	n.succ.Store(&succession{to: to, at: at, carry: carry, env: env})
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
// it. A bucket in debt (reservations ahead of time) holds no tokens to carry:
// it keeps its debt, in tokens, under every carry. A bucket full by a's
// numbers is full by b's when it is full for the envelope e (fullFor), and
// made to count as full at the next change too (settled for b's burst, as a
// key reclaimed meanwhile would); otherwise it holds a's burst, carried like
// any other count. Both rules have
// the same refill and, for interval rules, the same period, hence the same
// anchor.
func convertWord(a, b *Rule, e *envelope, tat, anchor, at int64, carry Carry) int64 {
	at = min(max(at, 0), int64(MaxUptime))
	nowA, nowB := a.units(at, anchor), b.units(at, anchor)
	owedA := max(tat-nowA, 0)
	if owedA == 0 && a.fullFor(e, tat, anchor, at) {
		// Full stays full, as a key without a bucket is, and still counts as
		// full at the next change until it is used, whatever its new burst
		// (as a key the table had reclaimed would): full since early enough
		// for b's burst to be settled by e.
		since := min(a.fullAt(tat, anchor), at-e.wait(b.burst, b.mode != modeGreedy))
		return min(b.units(max(since, 0), anchor), nowB)
	}
	// held = (tauA − owedA) / emitA tokens: exact as a rational.
	held := new(big.Rat).SetFrac(big.NewInt(a.tau-owedA), big.NewInt(a.emit))
	switch {
	case held.Sign() < 0: // debt is carried as it is
	case carry == CarryProportional:
		held.Mul(held, big.NewRat(b.burst, a.burst))
	case carry == CarryAdditive:
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

// envelope is the largest numbers a table's rule (or a bucket) has had in
// force, for every key without numbers of its own, since its numbers first
// changed: the largest burst and the fastest rate, each taken from whichever
// installation had it; from when (from, ns), and the envelope before (prev).
// A bucket under changing numbers never holds more than a bucket that had
// the envelope's numbers all along and took the same requests (the
// no-minting invariant, TestChangesNeverMint): a change never adds tokens,
// and a bucket that is full by its numbers counts as full by any (full stays
// full across a change, and a table may reclaim it) only once it has been
// full, at some moment, long enough that a bucket with the envelope's
// numbers of that moment would be full too (settled). Keys' own numbers do
// not widen it: numbers above every rule-level number that a key is given
// are a raise, under which a key without a bucket gets the new burst anyway.
type envelope struct {
	burst  int64 // the largest burst
	tokens int64 // with period: the fastest rate, tokens per period
	period int64 // ns
	from   int64 // ns: since when
	prev   *envelope
}

// envelopeOf is the envelope of one limit's numbers, from the start.
func envelopeOf(l Limit) *envelope {
	return &envelope{burst: l.Burst, tokens: l.Tokens, period: int64(l.Period)}
}

// widen is e with l's numbers taken in from at (ns): e itself when they
// add nothing.
func (e *envelope) widen(l Limit, at int64) *envelope {
	w := *e
	w.burst = max(w.burst, l.Burst)
	if rateOf(l).faster(rate{w.tokens, w.period}) {
		w.tokens, w.period = l.Tokens, int64(l.Period)
	}
	if w.burst == e.burst && w.tokens == e.tokens && w.period == e.period {
		return e
	}
	w.from, w.prev = at, e
	return &w
}

// wait is how long (ns) after a bucket of burst b became full a bucket of
// the envelope's numbers that took the same requests is surely full too: the
// time the envelope's rate takes to add the burst b lacks of the envelope's
// (whole periods for an interval rule, whose envelope keeps the period). Why
// that suffices: from the bucket's last take to the moment it became full,
// the envelope bucket gained at least what it did (a faster rate, a higher
// cap), so it held at least b then; after that it gains at the envelope's
// rate. 0 when b is the envelope's burst; MaxUptime when it does not fit.
func (e *envelope) wait(b int64, interval bool) int64 {
	if b >= e.burst {
		return 0
	}
	lack := uint64(e.burst - b)
	if interval {
		periods := (lack + uint64(e.tokens) - 1) / uint64(e.tokens)
		hi, lo := bits.Mul64(periods, uint64(e.period))
		if hi != 0 || lo > uint64(MaxUptime) {
			return int64(MaxUptime)
		}
		return int64(lo)
	}
	hi, lo := bits.Mul64(lack, uint64(e.period))
	if hi >= uint64(e.tokens) {
		return int64(MaxUptime)
	}
	q, rem := bits.Div64(hi, lo, uint64(e.tokens))
	if rem != 0 {
		q++
	}
	return int64(min(q, uint64(MaxUptime)))
}

// settled reports whether a bucket of burst b, full since full (ns) and still
// full at at, counts as full: while one of the envelopes was in force (e and
// the ones before it), the bucket had been full for that envelope's wait.
//
// A bucket full since the epoch (or before: the clamp) has taken nothing in
// the package's time, as a key without a bucket: it counts as full, however
// young the process.
func (e *envelope) settled(b int64, interval bool, full, at int64) bool {
	if full <= 0 {
		return true
	}
	end := at
	for v := e; v != nil; v = v.prev {
		if full+v.wait(b, interval) <= end {
			return true
		}
		if v.from <= full {
			return false
		}
		end = min(end, v.from)
	}
	return false
}

// freshChanged is fresh for a table whose numbers have changed (e, not nil):
// a new bucket that starts full counts as full at a change (fullFor) until a
// check takes from it, as a key without a bucket does: full since early
// enough for r's burst to be settled by e. (A check makes a bucket and takes
// from it at once; a change can come between the two.)
func (r *Rule) freshChanged(e *envelope, now, anchor int64) int64 {
	tat := r.fresh(now, anchor)
	if r.debt != 0 {
		return tat // starts with fewer tokens than the burst: not full
	}
	return min(r.units(max(now-e.wait(r.burst, r.mode != modeGreedy), 0), anchor), tat)
}

// fullFor reports whether a bucket of rule r holding tat is full at time at
// (ns) for the purposes of a change and of reclaiming: full by r, and, once
// the numbers have changed (e not nil), settled by the envelopes.
func (r *Rule) fullFor(e *envelope, tat, anchor, at int64) bool {
	if tat > r.units(at, anchor) {
		return false
	}
	return e == nil || e.settled(r.burst, r.mode != modeGreedy, r.fullAt(tat, anchor), at)
}

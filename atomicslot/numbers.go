package atomicslot

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// ErrNumbers is wrapped by the errors of numbers an in-flight rule cannot take.
var ErrNumbers = errors.New("atomicslot: invalid numbers")

// RuleOf is the rule of numbers n as an in-flight rule reads them: a limit
// of n.Tokens slots held at once, each for at most n.Period, with the limit
// as burst (as a window's numbers are a limit per window).
func RuleOf(n atomicbucket.Numbers) (Rule, error) {
	if n.Burst != n.Tokens {
		return Rule{}, fmt.Errorf("%w: an in-flight rule's numbers are its slots and their maximum hold (%d per %v), with the slots as burst, not %d", ErrNumbers, n.Tokens, n.Period, n.Burst)
	}
	r, err := NewRule(n.Tokens, n.Period)
	if err != nil {
		return Rule{}, fmt.Errorf("%w: %w", ErrNumbers, err)
	}
	return r, nil
}

// NumbersOf is r as numbers: its limit per maximum hold, the limit as burst.
func NumbersOf(r *Rule) atomicbucket.Numbers {
	return atomicbucket.Numbers{Tokens: r.limit, Period: time.Duration(r.hold), Burst: r.limit}
}

// numbers is a gate's or a table's rule: the policy's, and the one in force.
type numbers struct {
	policy Rule
	rule   atomic.Pointer[Rule]
}

func (n *numbers) init(r Rule) {
	n.policy = r
	n.rule.Store(&n.policy)
}

func (n *numbers) set(x atomicbucket.Numbers) error {
	r, err := RuleOf(x)
	if err != nil {
		return err
	}
	n.rule.Store(&r)
	return nil
}

func (n *numbers) numbersFor() (atomicbucket.Numbers, atomicbucket.Origin) {
	r := n.rule.Load()
	if r == &n.policy {
		return NumbersOf(r), atomicbucket.FromPolicy
	}
	return NumbersOf(r), atomicbucket.FromOverride
}

// Rule is the gate's rule in force.
func (g *Gate) Rule() *Rule { return g.nums.rule.Load() }

// PolicyRule is the gate's rule as the policy gives it.
func (g *Gate) PolicyRule() *Rule { return &g.nums.policy }

// SetNumbers makes n (RuleOf) the gate's numbers from now: acquisitions
// after it is done decide by them, counting every slot still held,
// whichever numbers it was taken by. A cut below the slots held admits none
// until enough of them are released or expire; a slot keeps the expiry its
// acquisition gave it.
func (g *Gate) SetNumbers(n atomicbucket.Numbers) error { return g.nums.set(n) }

// ClearNumbers puts the policy's numbers back in force, as SetNumbers does.
func (g *Gate) ClearNumbers() { g.nums.rule.Store(&g.nums.policy) }

// NumbersFor is the gate's numbers in force, and where they come from.
func (g *Gate) NumbersFor() (atomicbucket.Numbers, atomicbucket.Origin) { return g.nums.numbersFor() }

// Rule is the table's rule in force.
func (t *Table[K]) Rule() *Rule { return t.nums.rule.Load() }

// PolicyRule is the table's rule as the policy gives it.
func (t *Table[K]) PolicyRule() *Rule { return &t.nums.policy }

// SetNumbers makes n (RuleOf) every key's numbers from now, as
// Gate.SetNumbers does. A key moves to them at its first acquisition after
// it (which allocates the key's new words).
func (t *Table[K]) SetNumbers(n atomicbucket.Numbers) error { return t.nums.set(n) }

// ClearNumbers puts the policy's numbers back in force, as SetNumbers does.
func (t *Table[K]) ClearNumbers() { t.nums.rule.Store(&t.nums.policy) }

// NumbersFor is the table's numbers in force, and where they come from.
func (t *Table[K]) NumbersFor() (atomicbucket.Numbers, atomicbucket.Origin) {
	return t.nums.numbersFor()
}

// keySlots is a key's (or a gate's) slots under one rule: a word a slot.
// When the numbers change, the key's next acquisition replaces them by slots
// of the new rule (successor), which count the slots still held here, in
// prev: a replaced keySlots is sealed, its free words marked dying so that
// nothing takes them, and an acquisition that takes a word of it anyway (one
// released after the sealing, by an acquisition that read it before) gives
// the word back and looks again.
type keySlots struct {
	rule   *Rule
	sealed atomic.Bool
	prev   atomic.Pointer[keySlots]
	next   atomic.Pointer[keySlots] // what replaced it
	w      []atomic.Int64
}

func newKeySlots(r *Rule, prev *keySlots) *keySlots {
	e := &keySlots{rule: r, w: make([]atomic.Int64, r.limit)}
	if prev != nil {
		e.prev.Store(prev)
	}
	return e
}

// successor seals e and returns slots under r that count e's held slots:
// those it holds at now, and, within atomicbucket.SweepGrace, those held
// for an acquisition whose clock reading precedes now.
func (e *keySlots) successor(r *Rule, now int64, c *counters) *keySlots {
	e.sealed.Store(true)
	for i := range e.w {
		if v := e.w[i].Load(); v >= 0 && v>>genBits == 0 { // free: no acquisition may take it now
			e.w[i].CompareAndSwap(v, dying|v&genMask)
		}
	}
	if e.lastAll()+int64(atomicbucket.SweepGrace) <= now {
		e.forget(now, c)
		return newKeySlots(r, nil)
	}
	return newKeySlots(r, e)
}

// older is what the slots of older numbers hold at a time.
type older struct {
	held, first, last int64 // slots held; the first and the last expiry among them
}

// older counts the slots held at now in e's older slots, and unlinks those
// none of whose slots has been held for atomicbucket.SweepGrace (counting
// in c, when not nil, the slots they find expired unreleased).
func (e *keySlots) older(now int64, c *counters) older {
	o := older{first: math.MaxInt64}
	link := &e.prev
	for p := link.Load(); p != nil; p = link.Load() {
		quiet := true
		for i := range p.w {
			v := p.w[i].Load()
			if v < 0 {
				continue
			}
			x := expiry(v)
			if x > now {
				o.held++
				o.first, o.last = min(o.first, x), max(o.last, x)
			}
			quiet = quiet && x+int64(atomicbucket.SweepGrace) <= now
		}
		if quiet && link.CompareAndSwap(p, p.prev.Load()) {
			p.forget(now, c)
			continue
		}
		link = &p.prev
	}
	return o
}

// forget marks dying the words of e, unlinked, that expired unreleased,
// counting them in c when c is not nil (a release that comes after finds
// another value).
func (e *keySlots) forget(now int64, c *counters) {
	for i := range e.w {
		if v := e.w[i].Load(); v >= 0 && e.w[i].CompareAndSwap(v, dying|v&genMask) && c != nil {
			c.leaked(v, now)
		}
	}
}

// heldAll is the slots e and its older slots hold at now.
func (e *keySlots) heldAll(now int64) int64 {
	n := int64(0)
	for p := e; p != nil; p = p.prev.Load() {
		for i := range p.w {
			if v := p.w[i].Load(); v >= 0 && expiry(v) > now {
				n++
			}
		}
	}
	return n
}

// lastAll is the latest expiry among e's words and its older slots'.
func (e *keySlots) lastAll() int64 {
	last := int64(0)
	for p := e; p != nil; p = p.prev.Load() {
		for i := range p.w {
			if v := p.w[i].Load(); v >= 0 {
				last = max(last, expiry(v))
			}
		}
	}
	return last
}

// nthExpiry is the k-th earliest expiry after now among the slots e and its
// older slots hold: when the held count falls below the limit after a cut
// left k−1 more held than it. A rare path (only after a cut), k passes.
func (e *keySlots) nthExpiry(now, k int64) int64 {
	after := now
	for {
		next, n := int64(math.MaxInt64), int64(0)
		for p := e; p != nil; p = p.prev.Load() {
			for i := range p.w {
				v := p.w[i].Load()
				if v < 0 {
					continue
				}
				switch x := expiry(v); {
				case x <= after:
				case x < next:
					next, n = x, 1
				case x == next:
					n++
				}
			}
		}
		if k -= n; k <= 0 || next == math.MaxInt64 {
			return next
		}
		after = next
	}
}

// owns reports whether w is one of e's words.
func (e *keySlots) owns(w *atomic.Int64) bool {
	for i := range e.w {
		if &e.w[i] == w {
			return true
		}
	}
	return false
}

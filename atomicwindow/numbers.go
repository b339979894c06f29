package atomicwindow

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// A window's numbers can change at run time (SetNumbers): every key's window
// is carried into the new numbers on its next check, holding what it held:
// each unit still in the old window counts in the new one as admitted when
// it was (at the end of its grain, or now if that is later), an exact window
// keeping its newest units. So in any interval of the shorter of the two
// windows, at most the larger of the two limits is admitted: a check after
// the change counts every unit of that interval; one before it, the old
// window did.

// windowState is one window (a key's, or a global window's): its words and
// the rule they are written in.
type windowState struct {
	rule *Rule
	w    []atomic.Uint64
	// excess is, for an exact window that held more than its limit (carried
	// from other numbers, or charged by a settlement beyond it), the older
	// units its ring could not keep, oldest first. They leave before any
	// unit the ring kept, so while one is in the window the window is full.
	excess []windowUnits
	// heldUntil is, for a window rebuilt by a give-back (settle.go), when
	// the window it was rebuilt from was empty for good: a give-back makes
	// no key forgettable sooner.
	heldUntil int64
}

// emptyAt is Rule.emptyAt for st, whose head word is h.
func (st *windowState) emptyAt(h uint64) (int64, bool) {
	at, alive := st.rule.emptyAt(h)
	return max(at, st.heldUntil), alive
}

// blocked reports whether st's window is full for its excess at now, and
// when (ns) the excess leaves.
func (st *windowState) blocked(now int64) (leave int64, full bool) {
	if len(st.excess) == 0 {
		return 0, false
	}
	leave = st.excess[len(st.excess)-1].end + st.rule.window
	return leave, leave > now
}

// deny is decision d of a request of cost at now made by a full window
// (blocked): a cost the window could take is denied until the excess has
// left and the ring has room.
func (st *windowState) deny(d atomicbucket.Decision, now, cost, leave int64) atomicbucket.Decision {
	if cost < 1 || cost > st.rule.limit {
		return d
	}
	retry := d.RetryAfter
	if d.Allowed {
		retry = 0
	}
	return atomicbucket.Decision{Remaining: 0, Reset: d.Reset, RetryAfter: max(retry, time.Duration(leave-now))}
}

// units is what st holds at now (head word h), oldest first: its excess
// still in the window, then its words'.
func (st *windowState) units(h uint64, now int64) []windowUnits {
	u := st.rule.units(st.w, h, now)
	if _, full := st.blocked(now); full {
		var in []windowUnits
		for _, e := range st.excess {
			if e.end+st.rule.window > now {
				in = append(in, e)
			}
		}
		u = append(in, u...)
	}
	return u
}

// windowUnits is a group of units of a window: n of them, counting as made
// at end (ns).
type windowUnits struct {
	end, n int64
}

// units returns what the window in w (head word h, written in r) holds at
// now, oldest first.
func (r *Rule) units(w []atomic.Uint64, h uint64, now int64) []windowUnits {
	out := make([]windowUnits, 0, min(r.limit, RingMax))
	add := func(end, n int64) {
		if k := len(out); k > 0 && out[k-1].end == end {
			out[k-1].n += n
			return
		}
		out = append(out, windowUnits{end, n})
	}
	if r.exact {
		n := uint64(r.limit)
		count, headQ := h>>ringTimeBits, h&ringTimeMask
		for i := range n {
			if q := r.ringTime(w, r.back(count, n-i), headQ); !r.left(q, now) {
				add(r.end(int64(q)), 1)
			}
		}
		return out
	}
	hk, hc := h>>countBits, int64(h&countMask)
	for j := hk - min(hk, Slices+1); j <= hk; j++ {
		end := int64(j+1)*r.grain - 1
		if c := sliceIn(w, j, hk, hc); c != 0 && end+r.window > now {
			add(end, c)
		}
	}
	return out
}

// fill returns the window in r holding units (oldest first) at now: each
// group as admitted at its end (the last nanosecond of its grain), or at
// now + SweepGrace if that is sooner: a unit was admitted by a check whose
// clock reading is at most SweepGrace past now (the carrier's), and a
// counted window's grain may end far past it. An exact window keeps the newest limit units in its
// ring, and the others as its excess; a counted one counts each group in
// the sub-window of its time, or in the oldest its words keep.
func (r *Rule) fill(units []windowUnits, now int64) *windowState {
	st := &windowState{rule: r, w: r.fresh()}
	now += int64(atomicbucket.SweepGrace)
	w := st.w
	if r.exact {
		keep := r.limit
		times := make([]uint64, 0, r.limit) // newest first
		for i := len(units) - 1; i >= 0; i-- {
			q := uint64(min(units[i].end, now)/r.grain) + 1
			take := min(units[i].n, keep)
			for range take {
				times = append(times, q)
			}
			keep -= take
			if rest := units[i].n - take; rest > 0 {
				st.excess = append(st.excess, windowUnits{r.end(int64(q)), rest})
			}
		}
		slices.Reverse(st.excess) // gathered newest first
		k := uint64(len(times))
		for p := range k { // positions 0..k−1, oldest first
			w[1+p%uint64(r.limit)].Store(p<<ringTimeBits | times[k-1-p])
		}
		if k > 0 {
			w[0].Store((k%r.modulus)<<ringTimeBits | times[0])
		}
		return st
	}
	if len(units) == 0 {
		return st
	}
	newest := uint64(min(units[len(units)-1].end, now) / r.grain)
	oldest := newest - min(newest, Slices)
	var counts [Slices + 1]uint64
	for _, u := range units {
		j := max(uint64(min(u.end, now)/r.grain), oldest)
		counts[j-oldest] += uint64(u.n)
	}
	for j := oldest; j < newest; j++ {
		if c := counts[j-oldest]; c > 0 {
			w[1+j%(Slices+1)].Store(j<<countBits | min(c, countMask))
		}
	}
	w[0].Store(newest<<countBits | min(counts[newest-oldest], countMask))
	return st
}

// carry is st's window carried into r at now; nil when st is dead (its
// holder swept or carried it meanwhile). It kills st: checks still holding
// it look again.
func (st *windowState) carry(r *Rule, now int64) *windowState { return st.rebuild(r, now, nil) }

// rebuild kills st and returns its window made anew in r at now, holding
// what st held, changed by edit (given st's head word as killed) when edit
// is not nil; nil when st is dead (its holder swept, carried or rebuilt it
// meanwhile). Checks still holding st look again.
func (st *windowState) rebuild(r *Rule, now int64, edit func([]windowUnits, uint64) []windowUnits) *windowState {
	for {
		h := st.w[0].Load()
		if h&deadWindow != 0 {
			return nil
		}
		if st.w[0].CompareAndSwap(h, h|deadWindow) {
			// A check whose clock reading precedes now by up to
			// SweepGrace must find what it would have: keep what left
			// since then too (it counts by its time, as before).
			u := st.units(h, now-int64(atomicbucket.SweepGrace))
			if edit != nil {
				u = edit(u, h)
			}
			next := r.fill(u, now)
			if e, _ := st.emptyAt(h); r == st.rule && e > next.heldUntil {
				next.heldUntil = e
			}
			return next
		}
	}
}

// kill kills st for a reset at now and returns what it held in grains that
// begin after now (admitted at a later explicit time), oldest first; nil
// when st was dead already. A grain that begins at or before now is
// forgotten whole: a window knows no time finer than its grain.
func (st *windowState) kill(now int64) *[]windowUnits {
	for {
		h := st.w[0].Load()
		if h&deadWindow != 0 {
			return nil
		}
		if st.w[0].CompareAndSwap(h, h|deadWindow) {
			later := []windowUnits{}
			for _, u := range st.units(h, now) {
				if u.end+1-st.rule.grain > now {
					later = append(later, u)
				}
			}
			return &later
		}
	}
}

// ErrNumbers is wrapped by the error of numbers a window rule cannot
// take.
var ErrNumbers = errors.New("invalid window numbers")

// RuleOf is the window rule numbers n describe: at most n.Tokens in
// any n.Period; n.Burst must be n.Tokens (a window has no burst of its own:
// its limit is the most one request may cost), and at least cost.
func RuleOf(n atomicbucket.Numbers, cost int64) (Rule, error) {
	if n.Burst != n.Tokens {
		return Rule{}, fmt.Errorf("%w: a window rule's numbers are a limit per window (%d per %v), with the limit as burst, not %d", ErrNumbers, n.Tokens, n.Period, n.Burst)
	}
	r, err := NewRule(n.Tokens, n.Period)
	if err != nil {
		return Rule{}, fmt.Errorf("%w: %w", ErrNumbers, err)
	}
	if cost > n.Tokens {
		return Rule{}, fmt.Errorf("%w: a limit of %d is below a request's default cost, %d", ErrNumbers, n.Tokens, cost)
	}
	return r, nil
}

// NumbersOf is a window rule's numbers: its limit per window, the
// limit as burst.
func NumbersOf(r *Rule) atomicbucket.Numbers {
	return atomicbucket.Numbers{Tokens: r.limit, Period: time.Duration(r.window), Burst: r.limit}
}

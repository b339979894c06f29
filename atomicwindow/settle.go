package atomicwindow

import (
	"runtime"
	"sync/atomic"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Settled costs on a window (atomicbucket's SettleAt on a bucket): a request
// admitted at an estimate by a check at time admitted is settled at its
// actual cost.
//
//   - A higher actual counts the excess at settlement time, even beyond the
//     limit: the window then holds more than it admits, and denies until
//     enough of it has left. One settlement counts at most Limit units (the
//     rest is forgiven and returned), and a counted window's sub-window at
//     most LimitMax.
//   - A lower actual gives the difference back from what the window counted
//     at the admission's grain (its microsecond, or its sub-window): the
//     request's own units, while they are still in the window. The request
//     then counts its actual cost from its admission, as if it had been
//     admitted at it. Nothing is given back once they have left, nor from
//     another grain: the units of a window carried into other numbers since
//     (SetNumbers) count at their new grain's end, and a check whose clock
//     read behind the window's newest admission counted in that admission's
//     grain; their settlements keep the estimate, or give back from another
//     admission of the grain (its units, never more than the grain holds).
//
// A counted window gives back in place, by compare-and-swap on the word of
// the admission's sub-window. An exact window keeps its units in admission
// order in a ring, and units cannot be taken out of its middle by one
// compare-and-swap: its ring is rewritten in place while its head is dead
// (giveBackInPlace; checks of the key wait for it as for a carry), or, when
// it holds an excess, rebuilt without them (windowState.rebuild, a copy). An
// exact window's charge that would push units still in the window out of
// its ring is a rebuild too: they are kept as its excess.

// settleCounted gives back up to back units counted in the sub-window of
// the time admitted (ns) to the words w of a counted window, at now. It
// reports false when w is dead (nothing done).
//
// A give-back racing a check that moves the head on from the same
// sub-window may be lost (the mover's frozen copy of the sub-window's count,
// read before the give-back, is kept): the window then keeps more than the
// request's actual, never less.
func (r *Rule) settleCounted(w []atomic.Uint64, now, admitted, back int64) (alive bool) {
	k := r.sliceAt(admitted)
	if int64(k+1)*r.grain-1+r.window <= now {
		return w[0].Load()&deadWindow == 0 // left the window: nothing to give back
	}
	for {
		h := w[0].Load()
		if h&deadWindow != 0 {
			return false
		}
		hk := h >> countBits
		if k == hk {
			take := min(back, int64(h&countMask))
			if take == 0 || w[0].CompareAndSwap(h, h-uint64(take)) {
				return true
			}
			continue
		}
		if k > hk || hk-k > Slices {
			return true // nothing was counted there, or it is no longer kept
		}
		s := &w[1+k%(Slices+1)]
		v := s.Load()
		if v>>countBits != k {
			return true
		}
		take := min(back, int64(v&countMask))
		if take == 0 || s.CompareAndSwap(v, v-uint64(take)) {
			return true
		}
	}
}

// ringBack is the edit of an exact window's units that gives back up to
// back units of the groups counted as made at end (the admission's
// microsecond: its excess's and its ring's), newest first, if it is still
// in the window at now; ok is false when there is nothing to give back.
//
// The ring keeps its newest Limit units only: a unit it wrote over had left
// the window at the check that wrote over it, but a check whose clock
// reading is behind may still find it in. So the units given back are
// replaced by as many that count as made at the latest time a unit written
// over can have, at the window's grain (a window before the newest
// admission's microsecond: they left at every check since), or at the
// oldest unit kept if that is sooner: a check in or after the newest
// admission's microsecond finds them gone, one behind it finds the window no
// emptier than before.
func (r *Rule) ringBack(u []windowUnits, h uint64, now, end, back int64) (_ []windowUnits, ok bool) {
	if end+r.window <= now {
		return nil, false
	}
	took := int64(0)
	for i := len(u) - 1; i >= 0 && took < back; i-- { // in place: u is units' own
		if u[i].end == end && u[i].n > 0 {
			ok = true
			take := min(back-took, u[i].n)
			u[i].n -= take
			took += take
		}
	}
	k := 0
	for _, g := range u {
		if g.n > 0 {
			u[k], k = g, k+1
		}
	}
	u = u[:k]
	if q := int64(h&ringTimeMask) - 1 - r.window/r.grain; took > 0 && q > 0 {
		left := r.end(q)
		if k > 0 {
			left = min(left, u[0].end)
		}
		u = append(u, windowUnits{})
		copy(u[1:], u)
		u[0] = windowUnits{left, took}
	}
	return u, ok
}

// giveBackInPlace gives back up to back units of the exact window w
// counted in the microsecond of admitted, newest first, if still in the
// window at now, rewriting its ring where it is (ringBack's edit, without
// the copy): the units below them move up, and the places they leave at
// the bottom count as made at ringBack's time for units written over. It
// reports false when w was dead (nothing done).
//
// The window is dead while it is rewritten: checks of it wait, as for a
// carry. A check that claimed its positions before the kill is waited for
// until it has written them. The rewrite only moves units earlier (each
// position's time at most what it was), and the head comes back as it
// was: a check that read the head before and commits after decided
// against a window that held no less.
func (r *Rule) giveBackInPlace(w []atomic.Uint64, now, admitted, back int64) (alive bool) {
	n := uint64(r.limit)
	qAdm := uint64(admitted/r.grain) + 1
	for {
		h := w[0].Load()
		if h&deadWindow != 0 {
			return false
		}
		if !w[0].CompareAndSwap(h, h|deadWindow) {
			continue
		}
		count := h >> ringTimeBits
		var t [RingMax]uint64 // position count−N+i's time
		for i := range n {
			pos := r.back(count, n-i)
			for {
				if v := w[1+pos%n].Load(); v>>ringTimeBits == pos {
					t[i] = v & ringTimeMask
					break
				}
				runtime.Gosched() // its claimer is writing it
			}
		}
		a, b := n, n // the admission's units: positions a to b−1 (times sorted)
		for i := range n {
			if t[i] == qAdm {
				a, b = min(a, i), i+1
			}
		}
		if k := uint64(min(back, int64(b-a))); a < b && r.end(int64(qAdm))+r.window > now {
			nt := t
			for i := b - 1; i >= k && i < b; i-- {
				nt[i] = t[i-k]
			}
			ph := uint64(max(int64(h&ringTimeMask)-1-r.window/r.grain, 0)) // ringBack's
			if k < n {
				ph = min(ph, nt[k])
			}
			for i := range k {
				nt[i] = ph
			}
			for i := range b {
				if nt[i] != t[i] {
					pos := r.back(count, n-i)
					w[1+pos%n].Store(pos<<ringTimeBits | nt[i])
				}
			}
		}
		w[0].Store(h)
		return true
	}
}

// holdsAt reports whether the exact window st holds a unit counted in the
// microsecond of at (in its ring, or its excess), reading its words without
// a lock or a copy.
func (st *windowState) holdsAt(at int64) bool {
	r := st.rule
	q := uint64(at/r.grain) + 1
	for _, e := range st.excess {
		if e.end == r.end(int64(q)) {
			return true
		}
	}
	for i := range st.w[1:] {
		if st.w[1+i].Load()&ringTimeMask == q {
			return true
		}
	}
	return st.w[0].Load()&ringTimeMask == q // a unit claimed, not yet written
}

// ringEnd is the end (ns) of the microsecond grain of an exact window's
// admission at admitted.
func (r *Rule) ringEnd(admitted int64) int64 { return r.end(admitted/r.grain + 1) }

// overflows reports whether counting c more units at now in the exact
// window w would push units still in the window out of its ring.
func (r *Rule) overflows(w []atomic.Uint64, now, c int64) bool {
	v, _ := r.view(w, now, 0)
	return v.in+c > r.limit
}

// charge counts excess units at now (ns) on the words w, beyond what a check
// may admit: at most the limit, and in a counted window at most what its
// sub-window's count can hold. It returns the units not counted, and alive
// false when w is dead (nothing done). An exact window whose ring would
// overflow is not charged here: settle rebuilds it (chargeUnits).
func (r *Rule) charge(w []atomic.Uint64, now, excess int64) (forgiven int64, alive bool) {
	for {
		v, ok := r.view(w, now, 0)
		if !ok {
			return 0, false
		}
		c := min(excess, r.limit)
		if !r.exact && v.nextK == v.head>>countBits {
			c = min(c, int64(countMask-v.head&countMask))
		}
		if c <= 0 {
			return excess, true
		}
		if r.commit(w, &v, c) {
			return excess - c, true
		}
	}
}

// chargeUnits is the edit of an exact window's units that counts c units at
// now, after its newest.
func (r *Rule) chargeUnits(u []windowUnits, now, c int64) []windowUnits {
	end := r.ringEnd(now)
	if k := len(u); k > 0 && u[k-1].end >= end {
		u[k-1].n += c
		return u
	}
	return append(u, windowUnits{end, c})
}

// SettleAt settles, at now, a request of key admitted by a check at time
// admitted at cost estimate, whose actual cost is actual. A higher actual
// counts the excess in key's window at now (making the key's window if it
// has none; a new key at the cap gets none, and all of it is forgiven), at
// most Limit units; a lower one gives the difference back from the units
// counted at the admission's grain that are still in the window. It returns
// the units of the excess forgiven. A negative estimate or actual settles
// nothing.
func (t *Table[K]) SettleAt(key K, now, admitted atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	if estimate < 0 || actual < 0 || actual == estimate {
		return 0
	}
	n, at := clampNow(now), clampNow(admitted)
	for {
		r := t.ruleFor(key)
		st, ok := t.m.Load(key)
		if !ok {
			if actual < estimate {
				return 0 // nothing counted: nothing to give back
			}
			if st = t.create(key, r, n); st == nil {
				return actual - estimate
			}
		}
		if st.rule != r {
			t.carry(key, st, r, n)
			continue
		}
		f, done := st.settle(n, at, estimate, actual, func(next *windowState) bool { return t.replace(key, st, next) })
		if !done {
			retry()
			continue
		}
		return f
	}
}

// settle settles on st at now a request admitted at at (see
// Table.SettleAt), swapping in its rebuilt state with swap when it must be
// rebuilt; done is false when st was dead or replaced (look again).
func (st *windowState) settle(now, at, estimate, actual int64, swap func(*windowState) bool) (forgiven int64, done bool) {
	r := st.rule
	if actual < estimate {
		if !r.exact {
			return 0, r.settleCounted(st.w, now, at, estimate-actual)
		}
		end := r.ringEnd(at)
		if end+r.window <= now || !st.holdsAt(at) {
			return 0, st.w[0].Load()&deadWindow == 0 // nothing of the admission's grain is in the window
		}
		if _, full := st.blocked(now); !full { // the ring holds every unit in the window
			return 0, r.giveBackInPlace(st.w, now, at, estimate-actual)
		}
		next := st.rebuild(r, now, func(u []windowUnits, h uint64) []windowUnits {
			if v, ok := r.ringBack(u, h, now, end, estimate-actual); ok {
				return v
			}
			return u
		})
		return 0, next != nil && swap(next)
	}
	excess := actual - estimate
	if !r.exact || !r.overflows(st.w, now, min(excess, r.limit)) {
		if _, full := st.blocked(now); !full {
			f, alive := r.charge(st.w, now, excess)
			return f, alive
		}
	}
	c := min(excess, r.limit)
	next := st.rebuild(r, now, func(u []windowUnits, _ uint64) []windowUnits { return r.chargeUnits(u, now, c) })
	return excess - c, next != nil && swap(next)
}

// replace puts next in place of key's window st (killed by its rebuild),
// under the map's lock for the key; false when st was replaced or removed
// meanwhile (its rebuild is dropped: the caller looks again).
func (t *Table[K]) replace(key K, st, next *windowState) bool {
	done := false
	t.m.Compute(key, func(cur *windowState, loaded bool) (*windowState, bool) {
		if !loaded || cur != st {
			return cur, !loaded
		}
		done = true
		return next, false
	})
	return done
}

// SettleAt is Table.SettleAt for the one window.
func (g *Window) SettleAt(now, admitted atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	if estimate < 0 || actual < 0 || actual == estimate {
		return 0
	}
	n, at := clampNow(now), clampNow(admitted)
	for {
		st := g.state(n)
		f, done := st.settle(n, at, estimate, actual, func(next *windowState) bool { return g.st.CompareAndSwap(st, next) })
		if done {
			return f
		}
		retry()
	}
}

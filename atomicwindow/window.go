package atomicwindow

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// RingMax is the largest limit a window keeps exactly (a ring of one
// time per unit).
const RingMax = 64

// Slices is the number of sub-windows a counted window (a limit above
// RingMax) splits its length into.
const Slices = 16

// LimitMax is the largest limit a window rule can hold (a count per
// sub-window is 26 bits).
const LimitMax = 1<<26 - 1

// SliceMin is the shortest sub-window of a counted window: sub-window
// numbers are 37 bits, and must not wrap within MaxUptime.
const SliceMin = 2500 * time.Microsecond

// ringGrain is the grain of an exact window: times are kept in microseconds.
const ringGrain = int64(time.Microsecond)

// Word layouts. Bit 63 of a head word marks a window removed from its table
// (dead): no operation changes a dead word.
const (
	deadWindow = uint64(1) << 63

	// exact: head and ring words are tag<<51 | q, where q is the grain number
	// of the time plus one (0: never) and tag the position mod the ring's
	// modulus (a multiple of the limit).
	ringTimeBits = 51
	ringTimeMask = uint64(1)<<ringTimeBits - 1
	ringTagMask  = uint64(1)<<12 - 1

	// counted: head and sub-window words are slice<<26 | count.
	countBits = 26
	countMask = uint64(1)<<countBits - 1
	sliceMask = uint64(1)<<37 - 1
)

// Rule is a window rule's numbers, checked and prepared. Build one with
// NewRule.
type Rule struct {
	limit   int64 // N
	window  int64 // W, ns
	grain   int64 // ns: ringGrain (exact) or W/Slices (counted)
	exact   bool
	modulus uint64 // exact: positions are kept mod this multiple of the limit
	words   int    // state words a key needs: 1 + ring or sub-window words
}

// NewRule checks a window rule's numbers: a limit from 1 to
// LimitMax units in a window from a microsecond to MaxUptime, whole
// microseconds; a counted window (limit above RingMax) needs a window
// that Slices divides, at least Slices × SliceMin long.
// Its errors wrap ErrInvalidLimit.
func NewRule(limit int64, window time.Duration) (Rule, error) {
	switch {
	case limit < 1 || limit > LimitMax:
		return Rule{}, fmt.Errorf("%w: a window's limit must be from 1 to %d, not %d", atomicbucket.ErrInvalidLimit, LimitMax, limit)
	case window < time.Microsecond || window > atomicbucket.MaxUptime:
		return Rule{}, fmt.Errorf("%w: a window must be from 1µs to %v, not %v", atomicbucket.ErrInvalidLimit, atomicbucket.MaxUptime, window)
	case window%time.Microsecond != 0:
		return Rule{}, fmt.Errorf("%w: a window must be whole microseconds, not %v", atomicbucket.ErrInvalidLimit, window)
	}
	r := Rule{limit: limit, window: int64(window)}
	if limit <= RingMax {
		r.exact, r.grain = true, ringGrain
		r.modulus = uint64(limit) * uint64((ringTagMask+1)/uint64(limit))
		r.words = 1 + int(limit)
		return r, nil
	}
	if window%Slices != 0 || window/Slices < SliceMin {
		return Rule{}, fmt.Errorf("%w: a window over more than %d units is counted in %d sub-windows: it must be a multiple of %v, at least %v, not %v",
			atomicbucket.ErrInvalidLimit, RingMax, Slices, Slices*time.Nanosecond, Slices*SliceMin, window)
	}
	r.grain = int64(window / Slices)
	r.words = 1 + Slices + 1
	return r, nil
}

// MustRule is NewRule for numbers known to be valid (a generated
// package's): it panics on an error.
func MustRule(limit int64, window time.Duration) Rule {
	r, err := NewRule(limit, window)
	if err != nil {
		panic(err)
	}
	return r
}

// Limit is N: the most cost units admitted in any interval of length Window.
func (r *Rule) Limit() int64 { return r.limit }

// Window is W, the window's length.
func (r *Rule) Window() time.Duration { return time.Duration(r.window) }

// Exact reports whether the window keeps a time per unit (to the
// microsecond) rather than counts per sub-window.
func (r *Rule) Exact() bool { return r.exact }

// Grain is the grain at which the window is exact: each admission counts as
// made at the last nanosecond of its grain (a microsecond, or a sub-window
// of Window/Slices), so it leaves the window up to a grain late.
func (r *Rule) Grain() time.Duration { return time.Duration(r.grain) }

// StateBytes is the memory of one key's window state (its words), not
// counting the table's map entry.
func (r *Rule) StateBytes() int { return 8 * r.words }

// end is the last nanosecond of grain q−1 (q as words keep it: grain number
// plus one), the time an admission in it is held as made at.
func (r *Rule) end(q int64) int64 { return q*r.grain - 1 }

// fresh returns a new key's state: an empty window.
func (r *Rule) fresh() []atomic.Uint64 {
	w := make([]atomic.Uint64, r.words)
	if r.exact {
		// Head at position 0; the ring holds positions −N..−1, never admitted.
		n := uint64(r.limit)
		for i := range r.limit {
			pos := r.modulus - n + uint64(i) // −N+i mod modulus
			w[1+pos%n].Store((pos % r.modulus) << ringTimeBits)
		}
	}
	return w
}

// windowView is what a window's words said at one time, for a request of
// one cost: the head word read (a commit is a CAS from it), what is in the
// window, and what an admission would write.
type windowView struct {
	head  uint64
	in    int64  // units in the window at now
	retry int64  // ns: for a cost that does not fit, the wait until it does
	reset int64  // ns: the wait until the window is empty (after the request, if it fits)
	fits  bool   // the cost fits in the window
	nextQ uint64 // exact: the time an admission writes (≥ the head's)
	nextK uint64 // counted: the sub-window an admission counts in
}

// view reads the words w at now (ns, clamped) for a request of cost
// (0 ≤ cost ≤ N). The words are read one at a time; a check acts on them only
// through its CAS on the head, which fails if anything was admitted meanwhile.
// ok is false when w is dead.
func (r *Rule) view(w []atomic.Uint64, now, cost int64) (v windowView, ok bool) {
	h := w[0].Load()
	if h&deadWindow != 0 {
		return v, false
	}
	v.head = h
	if r.exact {
		r.viewRing(w, h, now, cost, &v)
	} else {
		r.viewCounted(w, h, now, cost, &v)
	}
	return v, true
}

// ringTime is the time word of the unit at position pos (mod the modulus):
// its slot's when the slot was written for pos, else the head's newest time
// (the slot's writer has claimed it and not written it yet, and its time is
// at most the head's: using the head's is conservative).
func (r *Rule) ringTime(w []atomic.Uint64, pos, headQ uint64) uint64 {
	s := w[1+pos%uint64(r.limit)].Load()
	if s>>ringTimeBits != pos {
		return headQ
	}
	return s & ringTimeMask
}

// left reports whether an admission at time word q has left the window at now.
func (r *Rule) left(q uint64, now int64) bool {
	return q == 0 || r.end(int64(q))+r.window <= now
}

// back is the position k units before count, mod the modulus.
func (r *Rule) back(count, k uint64) uint64 { return (count + r.modulus - k) % r.modulus }

func (r *Rule) viewRing(w []atomic.Uint64, h uint64, now, cost int64, v *windowView) {
	n := uint64(r.limit)
	count, headQ := h>>ringTimeBits, h&ringTimeMask
	// Units in the window: of the positions count−N..count−1, those whose
	// times have not left; times grow with positions, so a binary search finds
	// the first.
	lo, hi := uint64(0), n
	for lo < hi {
		mid := (lo + hi) / 2
		if r.left(r.ringTime(w, r.back(count, n-mid), headQ), now) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	v.in = int64(n - lo)
	if v.in > 0 { // by the newest unit: a give-back may have taken the head's (giveBackInPlace)
		v.reset = r.end(int64(r.ringTime(w, r.back(count, 1), headQ))) + r.window - now
	}
	v.nextQ = max(uint64(now/r.grain)+1, headQ)
	if cost == 0 {
		v.fits = true
		return
	}
	// The decision is the unit cost−1 positions after the oldest: when it has
	// left, so has every older one, and the window then holds at most N − cost.
	q := r.ringTime(w, r.back(count, n-uint64(cost)+1), headQ)
	if !r.left(q, now) {
		v.retry = r.end(int64(q)) + r.window - now
		return
	}
	v.fits = true
	v.reset = r.end(int64(v.nextQ)) + r.window - now
}

// sliceCount is what sub-window word s holds for sub-window k: its count if
// it was written for k, else 0 (it holds an older sub-window's).
func sliceCount(s, k uint64) int64 {
	if s>>countBits != k {
		return 0
	}
	return int64(s & countMask)
}

// sliceAt is the sub-window a time (ns) falls in.
func (r *Rule) sliceAt(now int64) uint64 { return uint64(now / r.grain) }

// sliceIn is how much sub-window j holds, as the head h (for sub-window hk,
// holding hc) and the words w say.
func sliceIn(w []atomic.Uint64, j, hk uint64, hc int64) int64 {
	switch {
	case j == hk:
		return hc
	case j > hk:
		return 0
	}
	return sliceCount(w[1+j%(Slices+1)].Load(), j)
}

func (r *Rule) viewCounted(w []atomic.Uint64, h uint64, now, cost int64, v *windowView) {
	hk, hc := h>>countBits, int64(h&countMask)
	kNow := r.sliceAt(now)
	kc := max(kNow, hk) // a stale clock counts in the head's sub-window
	v.nextK = kc
	first := kc - min(kc, Slices)
	// unsure is, for a clock behind the head's sub-window, when (ns) it
	// could be decided: a sub-window older than the ones the words keep
	// may still count at now. Behind by one, the oldest still kept (in the
	// word the head's sub-window takes when frozen) is read unless a goroutine
	// moving the head on is writing that word.
	unsure := int64(-1)
	if kNow < hk {
		switch j := hk - min(hk, Slices+1); {
		case kNow+1 < hk:
			unsure = int64(hk-1) * r.grain
		case w[1+j%(Slices+1)].Load()>>countBits > j:
			unsure = int64(hk) * r.grain
		default:
			first = j
		}
	}
	var counts [Slices + 2]int64
	newest := -1
	for j := first; j <= kc; j++ {
		c := sliceIn(w, j, hk, hc)
		if c != 0 && int64(j+1)*r.grain-1+r.window > now {
			counts[j-first] = c
			v.in += c
			newest = int(j - first)
		}
	}
	if newest >= 0 {
		v.reset = int64(first+uint64(newest)+1)*r.grain - 1 + r.window - now
	}
	if cost == 0 {
		v.fits = true // takes nothing: admitted, however full the window (a cut left it over its limit)
		return
	}
	if v.in+cost <= r.limit {
		if unsure >= 0 {
			// What the words keep fits, but a sub-window older than they
			// keep may count at now: denied until the clock is within
			// one sub-window of the head's, when it is decided (a check
			// that far behind the newest admission, or a window carried
			// into numbers whose newest sub-window is ahead of now).
			v.retry = unsure - now
			return
		}
		v.fits = true
		v.reset = int64(kc+1)*r.grain - 1 + r.window - now
		return
	}
	// Denied by what the words keep: the wait is until enough of it
	// leaves, oldest first (a sub-window older than they keep has left by
	// then too, being older).
	in := v.in
	for i, c := range counts[:kc-first+1] {
		if in -= c; in+cost <= r.limit {
			v.retry = int64(first+uint64(i)+1)*r.grain - 1 + r.window - now
			return
		}
	}
}

// commit writes an admission of cost (≥ 1) the view v allowed, if the head
// is still the one v read; false means it changed (look again).
func (r *Rule) commit(w []atomic.Uint64, v *windowView, cost int64) bool {
	if r.exact {
		count := v.head >> ringTimeBits
		next := (count + uint64(cost)) % r.modulus
		if !w[0].CompareAndSwap(v.head, next<<ringTimeBits|v.nextQ) {
			return false
		}
		for i := range uint64(cost) {
			pos := (count + i) % r.modulus
			w[1+pos%uint64(r.limit)].Store(pos<<ringTimeBits | v.nextQ)
		}
		return true
	}
	hk, hc := v.head>>countBits, v.head&countMask
	if v.nextK == hk {
		return w[0].CompareAndSwap(v.head, v.head+uint64(cost))
	}
	if hc > 0 {
		freeze(&w[1+hk%(Slices+1)], hk, hc)
	}
	return w[0].CompareAndSwap(v.head, v.nextK<<countBits|uint64(cost))
}

// freeze records that sub-window k holds c, in the word its index gives it,
// before the head moves on from k: the word only ever rises to a later
// sub-window or a larger count for k (a goroutine that read an earlier count
// and lost its race to move the head must not lower it).
func freeze(s *atomic.Uint64, k, c uint64) {
	for {
		old := s.Load()
		if ok := old >> countBits; ok > k || ok == k && old&countMask >= c {
			return
		}
		if s.CompareAndSwap(old, k<<countBits|c) {
			return
		}
	}
}

// allowN decides a request of cost at now (ns, clamped) on the words w,
// admitting it if it fits; alive is false when w is dead (nothing done).
func (r *Rule) allowN(w []atomic.Uint64, now, cost int64) (d atomicbucket.Decision, alive bool) {
	if cost < 0 || cost > r.limit {
		v, ok := r.view(w, now, 0)
		return atomicbucket.Decision{Remaining: max(r.limit-v.in, 0), Reset: time.Duration(v.reset), RetryAfter: atomicbucket.Never}, ok
	}
	for {
		v, ok := r.view(w, now, cost)
		switch {
		case !ok:
			return atomicbucket.Decision{}, false
		case !v.fits:
			return atomicbucket.Decision{Remaining: max(r.limit-v.in, 0), Reset: time.Duration(v.reset), RetryAfter: time.Duration(v.retry)}, true
		case cost == 0 || r.commit(w, &v, cost):
			// At least 0: a slot claimed and not yet written counts in the
			// window, by the head's time, while the decision found it left.
			return atomicbucket.Decision{Allowed: true, Remaining: max(r.limit-v.in-cost, 0), Reset: time.Duration(v.reset)}, true
		}
	}
}

// peek is allowN taking nothing; alive is false when w is dead (removed, or
// being rewritten or replaced: what it would say then is nothing to go by).
func (r *Rule) peek(w []atomic.Uint64, now, cost int64) (d atomicbucket.Decision, alive bool) {
	if cost < 0 || cost > r.limit {
		v, ok := r.view(w, now, 0)
		return atomicbucket.Decision{Remaining: max(r.limit-v.in, 0), Reset: time.Duration(v.reset), RetryAfter: atomicbucket.Never}, ok
	}
	v, ok := r.view(w, now, cost)
	if !v.fits {
		return atomicbucket.Decision{Remaining: max(r.limit-v.in, 0), Reset: time.Duration(v.reset), RetryAfter: time.Duration(v.retry)}, ok
	}
	return atomicbucket.Decision{Allowed: true, Remaining: max(r.limit-v.in-cost, 0), Reset: time.Duration(v.reset)}, ok
}

// peekFresh is peek on an empty window of r.
func (r *Rule) peekFresh(now, cost int64) atomicbucket.Decision {
	d, _ := r.peek(r.fresh(), now, cost)
	return d
}

// allow is allowN's yes or no, for a cost from 1 to N, without the
// decision's numbers: the exact window reads one ring word, not a search.
func (r *Rule) allow(w []atomic.Uint64, now, cost int64) (ok, alive bool) {
	if !r.exact {
		d, alive := r.allowN(w, now, cost)
		return d.Allowed, alive
	}
	for {
		h := w[0].Load()
		if h&deadWindow != 0 {
			return false, false
		}
		count, headQ := h>>ringTimeBits, h&ringTimeMask
		if !r.left(r.ringTime(w, r.back(count, uint64(r.limit-cost)+1), headQ), now) {
			return false, true
		}
		v := windowView{head: h, nextQ: max(uint64(now/r.grain)+1, headQ)}
		if r.commit(w, &v, cost) {
			return true, true
		}
	}
}

// emptyAt is when (ns) the window whose head word is h is empty for good if
// nothing more is admitted, and whether h is alive: by its newest
// admission, even if a settlement gave it back (a counted window's head
// sub-window may then count nothing).
func (r *Rule) emptyAt(h uint64) (at int64, alive bool) {
	switch {
	case h&deadWindow != 0:
		return 0, false
	case h == 0:
		return 0, true
	case r.exact:
		if q := h & ringTimeMask; q != 0 {
			return r.end(int64(q)) + r.window, true
		}
		return 0, true
	}
	return int64(h>>countBits+1)*r.grain - 1 + r.window, true
}

// Window is a global (unkeyed) window: one state for every request. Its
// methods are safe for concurrent use and take no lock.
type Window struct {
	r   Rule                        // the policy's numbers
	cur atomic.Pointer[Rule]        // the numbers in force (&r until SetNumbers)
	st  atomic.Pointer[windowState] // the window, in the numbers it was written in
}

// NewWindow returns an empty window for rule r.
func NewWindow(r Rule) *Window {
	g := &Window{r: r}
	g.cur.Store(&g.r)
	g.st.Store(&windowState{rule: &g.r, w: r.fresh()})
	return g
}

// PolicyRule returns the window's rule as the policy gives it, whatever the
// numbers in force.
func (g *Window) PolicyRule() *Rule { return &g.r }

// Rule returns the window's rule in force: the policy's, or SetNumbers'.
func (g *Window) Rule() *Rule { return g.cur.Load() }

// state is the window in the numbers in force at now, carried into them
// first if they changed.
func (g *Window) state(now int64) *windowState {
	for {
		st, r := g.st.Load(), g.cur.Load()
		if st.rule == r {
			return st
		}
		if next := st.carry(r, now); next != nil {
			g.st.CompareAndSwap(st, next)
		} else {
			retry() // another goroutine is carrying it: its new state comes next
		}
	}
}

// Allow reports whether a request of cost 1 is admitted now, counting it if so.
func (g *Window) Allow() bool { return g.AllowCost(atomicbucket.Now(), 1) }

// AllowAt is Allow at time now.
func (g *Window) AllowAt(now atomicbucket.Time) bool { return g.AllowCost(now, 1) }

// AllowN decides a request of cost now, counting it if admitted. A cost
// above the limit, or negative, is denied with RetryAfter Never; a cost of 0
// is admitted and counts nothing.
func (g *Window) AllowN(cost int64) atomicbucket.Decision {
	return g.AllowNAt(atomicbucket.Now(), cost)
}

// AllowNAt is AllowN at time now.
func (g *Window) AllowNAt(now atomicbucket.Time, cost int64) atomicbucket.Decision {
	n := clampNow(now)
	for {
		st := g.state(n)
		if leave, full := st.blocked(n); full {
			if d, alive := st.rule.peek(st.w, n, cost); alive {
				return st.deny(d, n, cost, leave)
			}
			retry()
			continue
		}
		if d, alive := st.rule.allowN(st.w, n, cost); alive {
			return d
		}
	}
}

// AllowCost is AllowNAt's yes or no, without the decision's numbers: a cost
// of 0 is admitted, one outside [0, limit] denied.
func (g *Window) AllowCost(now atomicbucket.Time, cost int64) bool {
	n := clampNow(now)
	for {
		st := g.state(n)
		if cost < 1 || cost > st.rule.limit {
			return cost == 0
		}
		if _, full := st.blocked(n); full {
			return false
		}
		if ok, alive := st.rule.allow(st.w, n, cost); alive {
			return ok
		}
	}
}

// Peek is what AllowN would decide now, counting nothing.
func (g *Window) Peek(cost int64) atomicbucket.Decision { return g.PeekAt(atomicbucket.Now(), cost) }

// PeekAt is Peek at time now.
func (g *Window) PeekAt(now atomicbucket.Time, cost int64) atomicbucket.Decision {
	n := clampNow(now)
	for {
		st := g.state(n)
		d, alive := st.rule.peek(st.w, n, cost)
		if !alive { // being carried, reset or given back: its next state comes next
			retry()
			continue
		}
		if leave, full := st.blocked(n); full {
			return st.deny(d, n, cost, leave)
		}
		return d
	}
}

// Reset empties the window now (ResetAt).
func (g *Window) Reset() { g.ResetAt(atomicbucket.Now()) }

// ResetAt empties the window as of now: what was admitted at or before now
// (in a grain that begins by then) no longer counts; what a check at a
// later explicit time admitted stays.
// The window is killed (a check that holds it looks again) and replaced.
func (g *Window) ResetAt(now atomicbucket.Time) {
	n := clampNow(now)
	for {
		st := g.st.Load()
		later := st.kill(n)
		if later == nil { // another is carrying it: its new state comes next
			retry()
			continue
		}
		g.st.Store(g.cur.Load().fill(*later, n))
		return
	}
}

// SetNumbers makes n the window's numbers from now on (RuleOf); the
// window is carried into them on its next check. Numbers a window cannot
// take are refused (an error wrapping ErrNumbers), and nothing
// changes.
func (g *Window) SetNumbers(n atomicbucket.Numbers, cost int64) error {
	r, err := RuleOf(n, cost)
	if err != nil {
		return err
	}
	if r == g.r {
		g.cur.Store(&g.r)
		return nil
	}
	g.cur.Store(&r)
	return nil
}

// ClearNumbers returns the window to the policy's numbers.
func (g *Window) ClearNumbers() { g.cur.Store(&g.r) }

// NumbersFor returns the numbers in force and where they come from.
func (g *Window) NumbersFor() (atomicbucket.Numbers, atomicbucket.Origin) {
	r := g.cur.Load()
	if r == &g.r {
		return NumbersOf(r), atomicbucket.FromPolicy
	}
	return NumbersOf(r), atomicbucket.FromOverride
}

// clampNow maps a time into [0, MaxUptime], as the buckets do: times before
// the epoch are the epoch, and time stops at MaxUptime.
func clampNow(now atomicbucket.Time) int64 {
	return min(max(int64(now), 0), int64(atomicbucket.MaxUptime))
}

// retry yields after a check found a dead slot: the sweep that killed it is
// deleting it, and the next lookup will not find it.
func retry() { runtime.Gosched() }

package atomicslot

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/keycap"
	"github.com/puzpuzpuz/xsync/v3"
)

// MaxLimit is the most slots a rule may hold per key: an acquisition reads
// every one of its key's words.
const MaxLimit = 4096

// MaxHold is the longest maximum hold a rule may have.
const MaxHold = 366 * 24 * time.Hour

// Rule is an in-flight rule's numbers: at most Limit slots of a key held at
// once, each for at most Hold.
type Rule struct {
	limit int64
	hold  int64 // ns
}

// NewRule checks and returns a rule of limit slots held at most hold each.
func NewRule(limit int64, hold time.Duration) (Rule, error) {
	switch {
	case limit < 1 || limit > MaxLimit:
		return Rule{}, fmt.Errorf("atomicslot: limit %d outside [1, %d]", limit, MaxLimit)
	case hold < time.Microsecond || hold > MaxHold:
		return Rule{}, fmt.Errorf("atomicslot: maximum hold %v outside [1µs, %v]", hold, MaxHold)
	}
	return Rule{limit: limit, hold: int64(hold)}, nil
}

// Limit is the slots a key may hold at once.
func (r *Rule) Limit() int64 { return r.limit }

// Hold is the longest a slot is held without a release.
func (r *Rule) Hold() time.Duration { return time.Duration(r.hold) }

// A word is a slot's state: its expiry in microseconds since the epoch above
// genBits bits counting the word's acquisitions (0 for a free word, whose
// count stays), or, negative, a word a sweep is removing (its count below).
// A slot's release compares against the whole value its acquisition wrote:
// an expiry alone could repeat (two acquisitions in one microsecond), the
// count makes the value one acquisition's until 2^14 more of the same word
// in the same microsecond. Expiries fit in 49 bits for MaxUptime + MaxHold.
const (
	genBits = 14
	genMask = 1<<genBits - 1
	dying   = math.MinInt64
)

// expiry is when the slot of word v expires (ns); 0 for a free word.
func expiry(v int64) int64 { return v >> genBits * 1000 }

// taken is the word an acquisition at now writes over v.
func (r *Rule) taken(v, now int64) int64 {
	us := (now + r.hold + 999) / 1000
	return us<<genBits | (v+1)&genMask
}

// clampNow is now within the times a rule handles.
func clampNow(now atomicbucket.Time) int64 {
	return min(max(int64(now), 0), int64(atomicbucket.MaxUptime))
}

// counters are what a set of slots counts for Stats.
type counters struct {
	expired   atomic.Int64 // slots that expired unreleased
	keys      atomic.Int64
	atCapHits atomic.Int64
	waits     atomic.Pointer[waitRoom] // the waiters for a slot (AcquireWait), once one has waited
}

// leaked counts the end of word v's slot at now when it ended by expiry.
func (c *counters) leaked(v, now int64) {
	if e := expiry(v); e != 0 && e <= now {
		c.expired.Add(1)
	}
}

// Slot is an admitted acquisition's hold on a slot; the zero Slot holds none.
// Pass it by value: every copy releases the same slot, once in effect.
type Slot struct {
	w *atomic.Int64
	v int64
	c *counters
	r *Releaser // a slot held elsewhere (Remote): a pointer, so that a Slot, a Decision and a bool return in registers
}

// Releaser is a slot held elsewhere than in this package's words: a
// store's (shared.Slots), which a Slot carries so that a door releases
// every kind of slot alike. Release must be once in effect, and report
// whether it returned a held slot.
type Releaser interface {
	Release() bool
}

// Remote is the Slot of r, a slot held elsewhere: its Release and
// ReleaseAt call r's Release (at the time r keeps). A nil r holds none.
func Remote(r Releaser) Slot {
	if r == nil {
		return Slot{}
	}
	return Slot{r: &r}
}

// Held reports whether s came from an admitted acquisition (it may since
// have been released or expired).
func (s Slot) Held() bool { return s.w != nil || s.r != nil }

// Release returns the slot now (ReleaseAt).
func (s Slot) Release() bool { return s.ReleaseAt(atomicbucket.Now()) }

// ReleaseAt returns the slot at now, and reports whether this call returned
// it: false for the zero Slot, a second release, or a release at or after
// the slot's expiry (the slot came back then, and may be held again).
func (s Slot) ReleaseAt(now atomicbucket.Time) bool {
	if s.w == nil || s.c.waits.Load() != nil {
		return s.releaseRare(now) // a slot held elsewhere, none, or a table some acquisition waited on
	}
	if !s.w.CompareAndSwap(s.v, s.v&genMask) {
		return false
	}
	n := clampNow(now)
	if expiry(s.v) <= n {
		s.c.leaked(s.v, n)
		return false
	}
	return true
}

// releaseRare is ReleaseAt off its fast path: a Remote slot, the zero Slot,
// or a slot of a gate or table that has wait room, whose release hands the
// slot to its key's longest waiter when there is one.
func (s Slot) releaseRare(now atomicbucket.Time) bool {
	if s.r != nil {
		return (*s.r).Release()
	}
	if s.w == nil {
		return false
	}
	n := clampNow(now)
	if room := s.c.waits.Load(); room.n.Load() > 0 && expiry(s.v) > n {
		if handed, queued := room.handoff(s, n); queued {
			return handed // to the key's longest waiter, or not in effect
		}
	}
	if !s.w.CompareAndSwap(s.v, s.v&genMask) {
		return false
	}
	if expiry(s.v) <= n {
		s.c.leaked(s.v, n)
		return false
	}
	return true
}

// acquire takes a free slot of key slots e at now, or reports what denies
// it; alive is false when e is being removed or replaced (look the key up
// again). While slots of older numbers are still held (e.prev), it takes only
// among e's first limit − (those held) words: those counts only fall, so
// no two acquisitions that read different counts hold more than the limit
// between them.
func (c *counters) acquire(e *keySlots, now int64) (s Slot, d atomicbucket.Decision, alive bool) {
	r, w := e.rule, e.w
	usable := int64(len(w))
	old := older{first: math.MaxInt64}
	if e.prev.Load() != nil {
		old = e.older(now, c)
		usable -= old.held
	}
	held, first, last := old.held, old.first, old.last
	for i := 0; i < len(w); i++ {
		v := w[i].Load()
		if v < 0 {
			return Slot{}, d, false
		}
		if e := expiry(v); e > now {
			held++
			first, last = min(first, e), max(last, e)
			continue
		}
		if int64(i) >= usable {
			continue // free, but beyond what older slots leave
		}
		nv := r.taken(v, now)
		if !w[i].CompareAndSwap(v, nv) {
			i-- // taken or released meanwhile: read it again
			continue
		}
		if e.sealed.Load() { // replaced meanwhile by newer numbers: give it back
			w[i].CompareAndSwap(nv, dying|nv&genMask)
			return Slot{}, d, false
		}
		c.leaked(v, now)
		held++
		last = max(last, expiry(nv))
		for j := i + 1; j < len(w); j++ {
			if e := expiry(w[j].Load()); e > now {
				held++
				last = max(last, e)
			}
		}
		d = atomicbucket.Decision{Allowed: true, Remaining: max(r.limit-held, 0), Reset: time.Duration(last - now)}
		return Slot{w: &w[i], v: nv, c: c}, d, true
	}
	if held > r.limit { // more held than a cut of the numbers left
		first = e.nthExpiry(now, held-r.limit+1)
	}
	return Slot{}, r.denial(first, last, now), true
}

// denial is the decision when every slot is held, the first expiring at
// first and the last at last.
func (r *Rule) denial(first, last, now int64) atomicbucket.Decision {
	return atomicbucket.Decision{RetryAfter: time.Duration(first - now), Reset: time.Duration(last - now)}
}

// peek is what acquire would decide on e (nil: a key with none), taking
// nothing.
func (r *Rule) peek(e *keySlots, now int64) (d atomicbucket.Decision, alive bool) {
	if e == nil {
		return atomicbucket.Decision{Allowed: true, Remaining: r.limit - 1, Reset: time.Duration(expiry(r.taken(0, now)) - now)}, true
	}
	r = e.rule
	old := older{first: math.MaxInt64}
	if e.prev.Load() != nil {
		old = e.older(now, nil)
	}
	held, first, last := old.held, old.first, old.last
	for i := range e.w {
		v := e.w[i].Load()
		if v < 0 {
			return d, false
		}
		if e := expiry(v); e > now {
			held++
			first, last = min(first, e), max(last, e)
		}
	}
	if held >= r.limit {
		if held > r.limit {
			first = e.nthExpiry(now, held-r.limit+1)
		}
		return r.denial(first, last, now), true
	}
	last = max(last, expiry(r.taken(0, now)))
	return atomicbucket.Decision{Allowed: true, Remaining: r.limit - held - 1, Reset: time.Duration(last - now)}, true
}

// kill marks every word of w dying when no slot has been held for
// atomicbucket.SweepGrace at now, and reports whether it did; on a word held,
// or taken meanwhile, it puts back the words it marked (as free, keeping
// their counts). The grace covers an acquisition whose clock reading precedes
// the sweep's: it would have found the slots free too.
func kill(w []atomic.Int64, now int64, c *counters) bool {
	for i := range w {
		v := w[i].Load()
		if v < 0 || expiry(v)+int64(atomicbucket.SweepGrace) > now || !w[i].CompareAndSwap(v, dying|v&genMask) {
			for j := range i {
				w[j].Store(w[j].Load() & genMask)
			}
			return false
		}
		c.leaked(v, now)
	}
	return true
}

// retry yields after an acquisition found its key's words being removed: the
// sweep is deleting them, and the next lookup will not find them.
func retry() { runtime.Gosched() }

// Gate is one set of slots for the whole process. Its methods are safe for
// concurrent use, take no lock and never allocate (but the first acquisition
// after a numbers change, which makes the slots of the new numbers).
type Gate struct {
	nums numbers
	e    atomic.Pointer[keySlots]
	c    counters
}

// NewGate returns a gate of r's slots, none held.
func NewGate(r Rule) *Gate {
	g := &Gate{}
	g.nums.init(r)
	g.e.Store(newKeySlots(g.nums.rule.Load(), nil))
	return g
}

// slots is the gate's slots under the numbers in force, made now when the
// numbers changed since the last acquisition.
func (g *Gate) slots(now int64) *keySlots {
	for {
		r, e := g.nums.rule.Load(), g.e.Load()
		if e.rule == r {
			return e
		}
		if n := e.successor(r, now, &g.c); g.e.CompareAndSwap(e, n) {
			g.c.replaced(e, n)
			return n
		}
	}
}

// Acquire takes a slot now, when fewer than the limit are held.
func (g *Gate) Acquire() (Slot, atomicbucket.Decision) { return g.AcquireAt(atomicbucket.Now()) }

// AcquireAt is Acquire at time now.
func (g *Gate) AcquireAt(now atomicbucket.Time) (Slot, atomicbucket.Decision) {
	n := clampNow(now)
	for {
		if s, d, alive := g.c.acquire(g.slots(n), n); alive {
			return s, d
		}
		retry()
	}
}

// PeekAt is what AcquireAt would decide, holding nothing.
func (g *Gate) PeekAt(now atomicbucket.Time) atomicbucket.Decision {
	n := clampNow(now)
	for {
		if d, alive := g.nums.rule.Load().peek(g.slots(n), n); alive {
			return d
		}
		retry()
	}
}

// Stats are a gate's or a table's counters.
type Stats struct {
	// Held is the slots held when Stats was called: every word of every
	// key read once, at one reading of the clock (not one instant across
	// keys: acquisitions and releases go on meanwhile).
	Held      int64
	Keys      int64 // keys tracked (a Gate: 0)
	Expired   int64 // slots that expired unreleased: each a release that never came in time
	AtCapHits int64 // acquisitions for a new key denied or untracked at the key cap
}

// Stats returns the gate's counters and the slots it holds now.
func (g *Gate) Stats() Stats {
	return Stats{Held: g.e.Load().heldAll(clampNow(atomicbucket.Now())), Expired: g.c.expired.Load()}
}

// Table is a set of slots per key, made on a key's first acquisition. Its
// methods are safe for concurrent use; acquisitions and releases on existing
// keys take no lock and never allocate (a new key takes the map's lock for it
// once, and allocates its words; so does a key's first acquisition after a
// numbers change).
//
// A key none of whose slots has been held for atomicbucket.SweepGrace holds
// nothing: it is reclaimed when a new key meets the key cap, and by a sweep
// the table runs by itself when new keys have doubled it (beyond 4,096 keys);
// Sweep and RunSweeper only return memory sooner.
type Table[K comparable] struct {
	m          *xsync.MapOf[K, *keySlots]
	nums       numbers
	maxKeys    int64
	allowAtCap bool
	c          counters

	// sweeps' earliest reclaim is the earliest time (ns) a key can be
	// reclaimed if no slot is released (a release may free one sooner):
	// exact after a sweep; acquisitions only make it later.
	sweeps keycap.Sweeps
}

// NewTable returns an empty table of r's slots per key (o.KeyHash is not
// used).
func NewTable[K comparable](r Rule, o atomicbucket.TableOptions) *Table[K] {
	var opts []func(*xsync.MapConfig)
	if o.Presize > 0 {
		opts = append(opts, xsync.WithPresize(o.Presize))
	}
	t := &Table[K]{m: xsync.NewMapOf[K, *keySlots](opts...), maxKeys: o.MaxKeys, allowAtCap: o.AllowAtCap}
	t.nums.init(r)
	t.sweeps.Init(o.MaxKeys, int64(atomicbucket.MaxUptime))
	return t
}

// Len is the number of keys tracked (some may hold nothing, not yet
// reclaimed).
func (t *Table[K]) Len() int64 { return t.c.keys.Load() }

// Stats returns the table's counters and the slots its keys hold now, by a
// scan of every key's words: meant for metrics, once a scrape, not a check.
func (t *Table[K]) Stats() Stats {
	s := Stats{Keys: t.c.keys.Load(), Expired: t.c.expired.Load(), AtCapHits: t.c.atCapHits.Load()}
	now := clampNow(atomicbucket.Now())
	t.m.Range(func(_ K, e *keySlots) bool {
		s.Held += e.heldAll(now)
		return true
	})
	return s
}

// Acquire takes a slot of key now, when fewer than the limit are held.
func (t *Table[K]) Acquire(key K) (Slot, atomicbucket.Decision) {
	return t.AcquireAt(key, atomicbucket.Now())
}

// AcquireAt is Acquire at time now. A new key at the key cap with nothing to
// reclaim is denied until a key can be (its RetryAfter says when), or, under
// TableOptions.AllowAtCap, admitted untracked: the Slot is the zero Slot.
func (t *Table[K]) AcquireAt(key K, now atomicbucket.Time) (Slot, atomicbucket.Decision) {
	s, d, _ := t.acquire(key, clampNow(now))
	return s, d
}

// acquire is AcquireAt at now (ns), and returns the key's slots too (nil
// when it has none: at the key cap).
func (t *Table[K]) acquire(key K, now int64) (Slot, atomicbucket.Decision, *keySlots) {
	for {
		r := t.nums.rule.Load()
		e, ok := t.m.Load(key)
		if !ok {
			if e = t.create(key, now, r); e == nil {
				return Slot{}, t.capDecision(now), nil
			}
		}
		if e.rule != r {
			if e = t.renumber(key, e, now); e == nil {
				continue // swept meanwhile
			}
		}
		if s, d, alive := t.c.acquire(e, now); alive {
			return s, d, e
		}
		retry()
	}
}

// PeekAt is what AcquireAt would decide for key at now (if the key cap
// allowed it), holding nothing.
func (t *Table[K]) PeekAt(key K, now atomicbucket.Time) atomicbucket.Decision {
	n := clampNow(now)
	for {
		r := t.nums.rule.Load()
		e, _ := t.m.Load(key) // none: nil, every slot free
		if e != nil && e.rule != r {
			if e = t.renumber(key, e, n); e == nil {
				continue
			}
		}
		if d, alive := r.peek(e, n); alive {
			return d
		}
		retry()
	}
}

// capDecision decides an acquisition for a new key at the cap with nothing
// to reclaim.
func (t *Table[K]) capDecision(now int64) atomicbucket.Decision {
	if t.allowAtCap {
		d, _ := t.nums.rule.Load().peek(nil, now)
		return d
	}
	return atomicbucket.Decision{RetryAfter: t.sweeps.CapWait(now)}
}

// create makes key's slots under r, or returns those another goroutine just
// made; nil when the key is new and the table is at its cap with nothing to
// reclaim.
func (t *Table[K]) create(key K, now int64, r *Rule) *keySlots {
	for !keycap.Claim(&t.c.keys, t.maxKeys) {
		if e, ok := t.m.Load(key); ok {
			return e
		}
		if !t.sweeps.AtCap(now, func() (int, int64) { return t.sweepHeld(now) }) {
			t.c.atCapHits.Add(1)
			return nil
		}
	}
	got, loaded := t.m.LoadOrStore(key, newKeySlots(r, nil))
	if loaded {
		t.c.keys.Add(-1)
		return got
	}
	t.sweeps.LowerNext(now + r.hold + int64(atomicbucket.SweepGrace))
	t.sweeps.Grown(t.c.keys.Load(), func() (int, int64) { return t.sweepHeld(now) })
	return got
}

// renumber replaces key's slots e, made under numbers no longer in force, by
// slots under the numbers in force that count e's held ones, and returns
// them (or what replaced e meanwhile; nil when the key was removed
// meanwhile).
func (t *Table[K]) renumber(key K, e *keySlots, now int64) *keySlots {
	var out *keySlots
	t.m.Compute(key, func(cur *keySlots, loaded bool) (*keySlots, bool) {
		if !loaded {
			return nil, true
		}
		r := t.nums.rule.Load()
		if cur != e || cur.rule == r {
			out = cur
			return cur, false
		}
		out = e.successor(r, now, &t.c)
		t.c.replaced(e, out)
		return out, false
	})
	return out
}

// Sweep removes the keys none of whose slots has been held for
// atomicbucket.SweepGrace, and returns how many it removed.
func (t *Table[K]) Sweep() int { return t.SweepAt(atomicbucket.Now()) }

// RunSweeper calls Sweep every interval (a minute when interval is not
// positive) until ctx is done.
func (t *Table[K]) RunSweeper(ctx context.Context, interval time.Duration) {
	keycap.RunEvery(ctx, interval, func() { t.Sweep() })
}

// SweepAt is Sweep at time now.
func (t *Table[K]) SweepAt(now atomicbucket.Time) int {
	n := clampNow(now)
	return t.sweeps.Sweep(func() (int, int64) { return t.sweepHeld(n) })
}

// sweepHeld sweeps at now (ns), as t.sweeps runs it, and returns the keys it
// removed and the keys left. A key's words are marked dying (kill) and the key
// deleted under the map's lock for it: an acquisition that finds a dying word
// looks the key up again.
func (t *Table[K]) sweepHeld(now int64) (int, int64) {
	removed := 0
	t.m.Range(func(key K, e *keySlots) bool {
		t.m.Compute(key, func(cur *keySlots, loaded bool) (*keySlots, bool) {
			if !loaded || cur != e {
				return cur, !loaded
			}
			if last := e.lastAll(); last+int64(atomicbucket.SweepGrace) > now || !kill(e.w, now, &t.c) {
				t.sweeps.LowerNext(e.lastAll() + int64(atomicbucket.SweepGrace))
				return cur, false
			}
			removed++
			return nil, true
		})
		return true
	})
	if removed > 0 {
		t.c.keys.Add(int64(-removed))
	}
	return removed, t.c.keys.Load()
}

// MustRule is NewRule for numbers known to be valid (a generated package's):
// it panics on an error.
func MustRule(limit int64, hold time.Duration) Rule {
	r, err := NewRule(limit, hold)
	if err != nil {
		panic(err)
	}
	return r
}

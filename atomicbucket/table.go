package atomicbucket

import (
	"context"
	"hash/maphash"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/limitgen/limitgen/internal/keycap"
	"golang.org/x/sys/cpu"
)

// SweepGrace is how long a bucket must have been full before a sweep removes it.
// A check that read the clock before a sweep but lands after it acts on a fresh
// full bucket; the grace makes that equal to what it would have found, unless
// its clock reading is more than SweepGrace stale when it lands.
const SweepGrace = time.Second

// TableOptions configures a Table. The zero value is a table without a key cap.
type TableOptions struct {
	MaxKeys int64 // the most keys tracked at once; 0 or less means no cap
	// AllowAtCap says what happens to a new key at the cap when nothing can
	// be reclaimed. False (the default, fail closed): its request is denied,
	// with a RetryAfter of the wait until the table can reclaim a bucket (one
	// has been full for SweepGrace) and may sweep at the cap again (sweeps at
	// the cap start at least 256 ns a key apart), plus, when the rule's new
	// buckets hold fewer tokens than the cost, the wait for a new bucket to
	// gather them. True (fail open): its request is decided against a fresh
	// bucket that is not stored: a key beyond the cap is limited per request
	// only, to its initial tokens, and is not tracked.
	AllowAtCap bool
	Presize    int // the number of keys to size the map for at creation
	// KeyHash, a func(K) uint64 for the table's key type K, places a key's
	// interval grid (its phase of the period) for a key type that is neither
	// a string nor an integer, the same in every process (a generated
	// composite key's: genimpl.TextHash of its text form). Nil, or a func of another
	// type: such keys' grids are placed by the table's own random seed.
	KeyHash any
}

// slot is one key's bucket, at the front of its node (keymap.go), which also
// holds its key and, for a rule whose interval grid is placed by the key, the
// grid's anchor. It is not padded: keyed buckets are many and mostly cold, so
// bytes per key matter more than false sharing.
//
// A node also holds the installation of numbers the word is written in when
// it is not the table's own rule (the policy's numbers): keyMap.numsOf, nil
// for those. It never changes: a bucket moved to other numbers is a new slot
// (numbers.go).
type slot struct {
	tat  atomic.Int64 // theoretical arrival time in the rule's units; dead (−1) once swept or converted
	seen atomic.Int64 // the latest time (ns) a check that may change tat was stamped with (see)
}

// reclaimer is what a table knows about reclaiming its buckets; reservations
// of its keys hold a pointer to it, to report cancellations that fill a bucket.
type reclaimer struct {
	// next is a lower bound on the earliest time (ns since the epoch) at which
	// one of the table's buckets can be reclaimed (has been full for
	// SweepGrace); math.MaxInt64 when the table is empty. Checks that take
	// tokens only move that time later, so they leave it alone (the hot path
	// never writes it); creation, refunds and cancellations, which can make it
	// earlier, lower it; a sweep sets it exactly.
	next atomic.Int64
	// sweeping is held by the one goroutine sweeping the table.
	sweeping atomic.Bool
	// sweepAt is the number of keys above which a new key sweeps the table.
	sweepAt atomic.Int64
	// capSwept is the time (ns) of the last sweep at the key cap; capSpacing
	// is how long after it the next may start (MaxKeys × keycap.CapSweepSpacing).
	capSwept   atomic.Int64
	capSpacing int64
	// env is nil until the table's numbers first change (its own or a key's);
	// then the envelope of the numbers its rule has had (numbers.go): a
	// bucket counts as full, to be reclaimed, once it is full for it
	// (Rule.fullFor). Changed under the table's change lock.
	env atomic.Pointer[envelope]
}

// changing readies the envelope for a change at at (ns) that installs l for
// the rule (l nil: a key's own numbers, which do not widen it), and returns
// it; base is the table's own numbers. Callers hold the table's change lock.
func (c *reclaimer) changing(base Limit, l *Limit, at int64) *envelope {
	e := c.env.Load()
	if e == nil {
		e = envelopeOf(base)
	}
	if l != nil {
		e = e.widen(*l, at)
	}
	c.env.Store(e)
	return e
}

// filled lowers next to the time a bucket holding tat becomes reclaimable.
func (c *reclaimer) filled(r *Rule, tat, anchor int64) {
	if tat < 0 {
		return // dead: swept meanwhile
	}
	at := r.fullAt(tat, anchor) + int64(SweepGrace) // a lower bound: the envelope may ask for more
	for {
		old := c.next.Load()
		if at >= old || c.next.CompareAndSwap(old, at) {
			return
		}
	}
}

// Table is a set of token buckets, one per key, created on a key's first
// check that takes tokens. Its methods are safe for concurrent use; checks on
// existing keys take no lock and never allocate (a new key takes the lock of
// its shard of the map once). A table never keeps the key string a caller
// passes (a new key is copied into its bucket's allocation), so a key may be
// read from a buffer the caller reuses once the call returns. A key costs its
// node (the bucket's word and the key: 24 bytes for a 13-byte string key) and
// about 13 bytes of the map (keymap.go).
//
// A table keeps itself: a bucket full for SweepGrace is reclaimed when a new
// key meets the key cap, and by a sweep the table runs by itself when new keys
// have doubled it (beyond 4,096 keys); Sweep and RunSweeper only return
// memory sooner. Reclaiming loses nothing: a full bucket holds nothing a fresh
// one would not (interval grids are placed by the key, not by its first use),
// so a key that comes back gets exactly the bucket it would have had — except
// under a rule whose new buckets start with fewer tokens than the burst
// (Limit.Initial), where a reclaimed key is a new key again and starts with
// those (stricter, never looser).
//
// Build one with NewTable; the zero Table is not usable.
type Table[K comparable] struct {
	m *keyMap[K]
	// ov is nil until the table's numbers first change (table_numbers.go);
	// every check loads it once, and takes the general path when it is set.
	ov         atomic.Pointer[overlay[K]]
	rule       Rule
	base       numbers // the installation of rule: what a slot with nil nums is written in
	maxKeys    int64
	allowAtCap bool
	seed       maphash.Seed   // places the grids of keys that are neither strings nor integers, without hashFn
	hashFn     func(K) uint64 // TableOptions.KeyHash
	_          cpu.CacheLinePad
	// The counters below change on key creation and removal only.
	keys      atomic.Int64 // keys held (or being created), ≤ maxKeys when capped
	evictions atomic.Int64 // buckets removed by sweeps
	atCapHits atomic.Int64 // new-key requests that met the cap with nothing to reclaim
	reclaim   reclaimer
	changes   sync.Mutex // serialises changes of numbers; never taken by a check
	fastest   rate       // the fastest numbers the table has had, keys' own included; under changes
}

// NewTable returns an empty table of buckets for rule r.
func NewTable[K comparable](r Rule, o TableOptions) *Table[K] {
	t := &Table[K]{m: newKeyMap[K](r.mode == modeAnchored, r.anchorFor(0), o.Presize), rule: r, maxKeys: o.MaxKeys, allowAtCap: o.AllowAtCap, seed: maphash.MakeSeed()}
	t.hashFn, _ = o.KeyHash.(func(K) uint64)
	t.base.rule, t.base.origin = r, FromPolicy
	t.base.hi = rateOf(r.limit)
	t.fastest = t.base.hi
	t.reclaim.next.Store(math.MaxInt64)
	t.reclaim.sweepAt.Store(keycap.AutoSweepMin)
	t.reclaim.capSwept.Store(math.MinInt64 / 2) // no cap sweep yet: the first may run at once
	if o.MaxKeys > 0 {
		t.reclaim.capSpacing = int64(min(o.MaxKeys, int64(MaxUptime/keycap.CapSweepSpacing))) * int64(keycap.CapSweepSpacing)
	}
	return t
}

// Rule returns the table's rule.
func (t *Table[K]) Rule() *Rule { return &t.rule }

// Len is the number of keys tracked.
func (t *Table[K]) Len() int64 { return t.keys.Load() }

// TableStats are a table's counters, read together (each is read atomically,
// the set is not a snapshot).
type TableStats struct {
	Keys      int64 // keys tracked now (Len)
	Evictions int64 // buckets reclaimed so far, by the cap, by the table's own sweeps, or by Sweep
	AtCapHits int64 // new keys that met the key cap with nothing to reclaim
}

// Stats returns the table's counters.
func (t *Table[K]) Stats() TableStats {
	return TableStats{Keys: t.keys.Load(), Evictions: t.evictions.Load(), AtCapHits: t.atCapHits.Load()}
}

// create makes key's bucket at now (ns), or returns the one another goroutine
// just made; nil when the key is new and the table is at its cap with nothing
// to reclaim, with the time (ns) from which one can be. It is the slow path of
// every check that takes tokens, which looks the key up with the map's load
// inline (a helper doing both would be a call
// frame more: two calls exceed the inliner's budget). A slot a check gets may
// be dead by the time it is used: checks retry then.
func (t *Table[K]) create(key K, now int64) (*slot, int64) {
	for !t.claimKey() {
		if s := t.m.load(key); s != nil { // created meanwhile by another goroutine
			return s, 0
		}
		freed, next := t.reclaimAt(now)
		switch {
		case freed:
		case next == math.MaxInt64:
			// At the cap with no bucket noted: the keys counted are being
			// created (or removed) right now; look again once they are.
			runtime.Gosched()
		default:
			t.atCapHits.Add(1)
			return nil, next
		}
	}
	var anchor int64 // the same under any numbers: an interval rule's period never changes
	if t.m.anchored {
		anchor = t.rule.anchorFor(t.gridHash(key))
	}
	s := t.m.newNode(key, anchor, nil)
	r := &t.rule
	// The bucket is made in the numbers in force for the key, read under the
	// map's lock for it, which a change of the key's own numbers takes after
	// installing them (settle): a bucket made before the change's turn is
	// converted by it, one made after reads the new numbers.
	got := t.m.compute(key, func(cur *slot, found bool) (*slot, bool) {
		if found {
			return cur, false // made meanwhile by another goroutine
		}
		if ov := t.ov.Load(); ov != nil {
			if n := ov.forKey(key); n != &t.base {
				s = t.m.again(s, n) // a node with numbers: made under the lock, once they are known
			}
			r = &t.numsOf(s).rule
			s.tat.Store(r.freshChanged(t.reclaim.env.Load(), now, t.m.anchorOf(s)))
			return s, false
		}
		s.tat.Store(r.fresh(now, t.m.anchorOf(s)))
		return s, false
	})
	loaded := got != s
	if loaded {
		t.keys.Add(-1)
		return got, 0
	}
	t.reclaim.filled(r, s.tat.Load(), t.m.anchorOf(s))
	if n := t.keys.Load(); n > t.reclaim.sweepAt.Load() && t.reclaim.sweeping.CompareAndSwap(false, true) {
		t.sweepHeld(now)
	}
	return got, 0
}

// reclaimAt sweeps the table at now (ns), at its key cap, unless the last
// sweep at the cap is less than keycap.CapSweepSpacing per key behind, and reports
// whether the sweep freed a key; when it did not, next is the time (ns, after
// now) from which the next sweep at the cap could free one: exact when this
// call swept (the sweep learns every bucket's reclaim time), otherwise what the
// last sweep and the buckets made or refunded since told the table (taking
// tokens only makes the true time later). A sweep under way in another
// goroutine is waited for: it is what would free one, and while it runs
// reclaim.next is not yet known.
func (t *Table[K]) reclaimAt(now int64) (freed bool, next int64) {
	for {
		if t.reclaim.sweeping.Load() {
			runtime.Gosched()
			continue
		}
		next = t.reclaim.next.Load()
		if t.reclaim.sweeping.Load() {
			continue // a sweep began before the load: next may be its "never"
		}
		if after := t.reclaim.capSwept.Load() + t.reclaim.capSpacing; now < after {
			return false, max(next, after)
		}
		if t.reclaim.sweeping.CompareAndSwap(false, true) {
			t.reclaim.capSwept.Store(now)
			if t.sweepHeld(now) > 0 {
				return true, 0
			}
		}
	}
}

// slotSize is the bytes a slot takes at the front of its node.
const slotSize = unsafe.Sizeof(slot{})

// claimKey counts one more key, unless that would pass the cap. The count never
// exceeds the cap, even for a moment, so Len is a true bound on the map's size.
func (t *Table[K]) claimKey() bool { return keycap.Claim(&t.keys, t.maxKeys) }

// retry yields after a check found a dead slot: the sweep that killed it is
// deleting it under the map's lock, and the next lookup will not find it.
func retry() { runtime.Gosched() }

// Allow reports whether a request of cost 1 for key is allowed now, taking a
// token if so.
func (t *Table[K]) Allow(key K) bool { return t.AllowAt(key, Now()) }

// AllowAt is Allow at time now.
//
// Keep in step with Table.AllowGreedyAt (generated.go), which is this loop with
// a greedy rule's units passed as constants.
func (t *Table[K]) AllowAt(key K, now Time) bool {
	n := clampNow(now)
	for {
		if ov := t.ov.Load(); ov != nil {
			return t.allowOver(ov, key, n, 1)
		}
		s := t.m.load(key)
		if s == nil {
			if s, _ = t.create(key, n); s == nil {
				return t.allowAtCap && t.rule.debt+t.rule.emit <= t.rule.tau
			}
		}
		if t.m.hasNums(s) {
			continue // written in other numbers: the table's have changed since ov was loaded
		}
		nowU := t.rule.units(n, t.m.anchorOf(s))
		tat, ok := advance(&s.tat, &s.seen, n, nowU, t.rule.emit, nowU+t.rule.tau)
		if tat >= 0 {
			return ok
		}
		retry()
	}
}

// AllowNAt checks a request of the given cost for key now, taking its tokens if
// allowed. Costs at the limits behave as for Bucket.AllowN; a check on a key
// without a bucket that can take nothing (cost 0, or a cost outside [0, burst])
// is answered as Peek would and creates no bucket.
func (t *Table[K]) AllowNAt(key K, now Time, cost int64) Decision {
	n := clampNow(now)
	for {
		if ov := t.ov.Load(); ov != nil {
			return t.allowNOver(ov, key, n, cost)
		}
		s := t.m.load(key)
		if s == nil {
			if cost <= 0 || cost > t.rule.burst {
				return t.absent(key, n, cost)
			}
			var next int64
			if s, next = t.create(key, n); s == nil {
				return t.capDecision(key, n, next, cost)
			}
		}
		if t.m.hasNums(s) {
			continue
		}
		nowU := t.rule.units(n, t.m.anchorOf(s))
		if cost < 0 || cost > t.rule.burst {
			return t.rule.outOfRange(s.tat.Load(), n, nowU, t.m.anchorOf(s))
		}
		inc := cost * t.rule.emit
		tat, ok := advance(&s.tat, &s.seen, n, nowU, inc, nowU+t.rule.tau)
		if tat >= 0 {
			return t.rule.decide(ok, tat, inc, n, nowU, t.m.anchorOf(s))
		}
		retry()
	}
}

// absent decides a request of cost against the fresh bucket key would get at
// now (ns), without making it.
func (t *Table[K]) absent(key K, now, cost int64) Decision {
	anchor := t.rule.anchorFor(t.gridHash(key))
	return t.rule.peek(t.rule.fresh(now, anchor), now, anchor, cost)
}

// capDecision decides a request for a new key at the cap with nothing to
// reclaim before next (ns): against an untracked fresh bucket (TableOptions.AllowAtCap), or
// denied with the wait until a bucket can be reclaimed for it. The key gets no
// bucket now, so a new bucket that starts below the cost starts when that
// wait is over: the request that makes it is told the bucket's own wait, as
// any key's first request is (a wait promised now for both would be a second
// short, the bucket's clock starting only then).
func (t *Table[K]) capDecision(key K, now, next, cost int64) Decision {
	if t.allowAtCap {
		return t.absent(key, now, cost)
	}
	return Decision{RetryAfter: time.Duration(next - now)} // > 0: nothing was reclaimable at now
}

// PeekAt is what AllowNAt would decide at now, without taking anything or
// creating the key.
func (t *Table[K]) PeekAt(key K, now Time, cost int64) Decision {
	n := clampNow(now)
	if ov := t.ov.Load(); ov != nil {
		return t.peekOver(ov, key, n, cost)
	}
	if s := t.m.load(key); s != nil {
		if t.m.hasNums(s) {
			return t.PeekAt(key, now, cost) // the numbers changed since ov was loaded
		}
		if tat := s.tat.Load(); tat >= 0 {
			return t.rule.peek(tat, n, t.m.anchorOf(s), cost)
		}
	}
	// A key with no bucket (or a swept one) would get a new bucket.
	return t.absent(key, n, cost)
}

// RefundAt gives cost tokens back to key's bucket now, never filling it beyond its
// burst. A key without a bucket is full: nothing to give back.
func (t *Table[K]) RefundAt(key K, now Time, cost int64) {
	n := clampNow(now)
	for {
		if ov := t.ov.Load(); ov != nil {
			t.refundOver(ov, key, n, cost)
			return
		}
		if cost <= 0 || cost > t.rule.burst {
			return
		}
		s := t.m.load(key)
		if s == nil {
			return
		}
		if !t.m.hasNums(s) && giveBack(&s.tat, &s.seen, n, t.rule.units(n, t.m.anchorOf(s)), cost*t.rule.emit) {
			t.reclaim.filled(&t.rule, s.tat.Load(), t.m.anchorOf(s))
			return
		}
		retry() // swept (it was full: nothing to give back, as the next look finds) or converted
	}
}

// ReserveAt takes cost tokens from key's bucket now if the request can be served
// within maxWait; see Bucket.Reserve. A new key at the cap of a table that does not allow at its cap is refused.
func (t *Table[K]) ReserveAt(key K, now Time, cost int64, maxWait time.Duration) Reservation {
	n := clampNow(now)
	for {
		if ov := t.ov.Load(); ov != nil {
			return t.reserveOver(ov, key, now, cost, maxWait)
		}
		s := t.m.load(key)
		if s == nil {
			if cost <= 0 || cost > t.rule.burst {
				return immediate(t.absent(key, n, cost), now) // takes nothing: no bucket made
			}
			var next int64
			if s, next = t.create(key, n); s == nil {
				// Untracked keys cannot hold tokens for later: only an immediate admission.
				return immediate(t.capDecision(key, n, next, cost), now)
			}
		}
		if t.m.hasNums(s) {
			continue
		}
		if res, alive := t.rule.reserve(&s.tat, &s.seen, n, t.m.anchorOf(s), cost, maxWait); alive {
			res.owner, res.nums = &t.reclaim, &t.base
			return res
		}
		retry()
	}
}

// Wait blocks until a request of cost for key may proceed, or ctx is done; see
// Bucket.Wait.
func (t *Table[K]) Wait(ctx context.Context, key K, cost int64) error {
	return waitOn(ctx, cost, func(now Time, maxWait time.Duration) Reservation {
		return t.ReserveAt(key, now, cost, maxWait)
	})
}

// SweepAt removes the buckets that have been full for at least SweepGrace at
// now and returns how many it removed. A table sweeps itself when it needs to
// (see Table); calling SweepAt, or RunSweeper, returns the memory of idle keys
// sooner. Sweeps of one table run one at a time.
func (t *Table[K]) SweepAt(now Time) int {
	for !t.reclaim.sweeping.CompareAndSwap(false, true) {
		runtime.Gosched()
	}
	return t.sweepHeld(clampNow(now))
}

// sweepHeld is a sweep at now (ns) by the goroutine holding reclaim.sweeping,
// which it releases.
//
// Why no consumption is lost: a bucket is removed only by compare-and-swapping
// the full TAT the sweep read into the dead word, under the map's lock for that
// key, and then deleting the key in the same critical section. A check that
// consumed in between changed the word, so the sweep's CAS fails and the bucket
// stays. A check that loads the word after the CAS sees dead, does nothing to
// it, and looks the key up again, finding the key gone (or a new bucket). Since
// the word is the bucket's whole state, a value that returns to the one the
// sweep read (consume, then refund) is the same state, and removing it is right.
//
// The sweep also sets reclaim.next: it starts from "never" and lowers it to each
// surviving bucket's reclaim time; a bucket created or filled by a refund while
// the sweep runs lowers it itself.
func (t *Table[K]) sweepHeld(now int64) int {
	defer t.reclaim.sweeping.Store(false)
	graced := max(now-int64(SweepGrace), 0)
	env := t.reclaim.env.Load()
	removed := 0
	t.reclaim.next.Store(math.MaxInt64)
	t.m.rangeNodes(func(key K, s *slot) bool {
		tat := s.tat.Load()
		if tat < 0 {
			return true
		}
		n := t.numsOf(s)
		if n.next() != nil {
			// Written in numbers since replaced: whether it is full is a
			// question for the numbers in force. Convert it; the next sweep
			// judges it.
			t.settle(key)
			return true
		}
		r := &n.rule
		if !r.fullFor(env, tat, t.m.anchorOf(s), graced) {
			t.reclaim.filled(r, tat, t.m.anchorOf(s))
			return true
		}
		t.m.compute(key, func(cur *slot, loaded bool) (*slot, bool) {
			if !loaded || cur != s {
				return cur, !loaded // gone, or replaced by a new bucket: leave it
			}
			tat := s.tat.Load()
			if !r.fullFor(env, tat, t.m.anchorOf(s), graced) || !s.tat.CompareAndSwap(tat, dead) {
				t.reclaim.filled(r, s.tat.Load(), t.m.anchorOf(s)) // in use again
				return cur, false
			}
			removed++
			return nil, true
		})
		return true
	})
	if removed > 0 {
		t.keys.Add(int64(-removed))
		t.evictions.Add(int64(removed))
	}
	t.reclaim.sweepAt.Store(max(2*t.keys.Load(), keycap.AutoSweepMin))
	return removed
}

// RunSweeper calls Sweep every interval (a minute when interval is
// not positive) until ctx is done. Run it in its own goroutine. It is not
// needed to bound memory or free capped keys (a table does that itself); it
// returns the memory of idle keys during quiet periods, when no new keys come.
func (t *Table[K]) RunSweeper(ctx context.Context, interval time.Duration) {
	keycap.RunEvery(ctx, interval, func() { t.SweepAt(Now()) })
}

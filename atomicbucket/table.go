package atomicbucket

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/puzpuzpuz/xsync/v3"
	"golang.org/x/sys/cpu"
)

// AtCap is what a table does with a request for a new key when it already holds
// its maximum number of keys.
type AtCap uint8

const (
	// DenyAtCap denies requests for new keys at the cap (fail closed). The
	// Decision's RetryAfter is SweepGrace, a hint: a sweep may free room.
	DenyAtCap AtCap = iota
	// AllowAtCap decides a request for a new key against a fresh bucket that is
	// not stored (fail open): a key beyond the cap is limited per request only,
	// to its initial tokens, and is not tracked.
	AllowAtCap
)

// SweepGrace is how long a bucket must have been full before a sweep removes it.
// A check that read the clock before a sweep but lands after it acts on a fresh
// full bucket; the grace makes that equal to what it would have found, unless
// its clock reading is more than SweepGrace stale when it lands.
const SweepGrace = time.Second

// TableOptions configures a Table. The zero value is a table without a key cap.
type TableOptions struct {
	MaxKeys int64 // the most keys tracked at once; 0 or less means no cap
	AtCap   AtCap // what happens to a new key at the cap
	Presize int   // the number of keys to size the map for at creation
}

// slot is one key's bucket. It is not padded: keyed buckets are many and mostly
// cold, so bytes per key matter more than false sharing.
type slot struct {
	tat    atomic.Int64 // theoretical arrival time in the rule's units; dead (−1) once swept
	anchor int64        // interval rules: the grid anchor in ns since epoch (the key's first use, or the rule's aligned anchor)
}

// Table is a set of token buckets, one per key, created on a key's first use
// and removed by Sweep once full for SweepGrace. Its methods are safe for
// concurrent use; checks on existing keys take no lock (a new key takes the
// map's bucket lock once). Build one with NewTable; the zero Table is not usable.
//
// Removing a full bucket loses nothing: a key that comes back gets a fresh
// bucket, which is full, or holds the rule's initial tokens when those are
// fewer (a swept key is then a new key, which never admits more).
type Table[K comparable] struct {
	m         *xsync.MapOf[K, *slot]
	rule      Rule
	maxKeys   int64
	atCap     AtCap
	_         cpu.CacheLinePad // the counters below change on key creation and removal only
	keys      atomic.Int64     // keys held (or being created), ≤ maxKeys when capped
	evictions atomic.Int64     // buckets removed by sweeps
	atCapHits atomic.Int64     // new-key requests that met the cap
}

// NewTable returns an empty table of buckets for rule r.
func NewTable[K comparable](r Rule, o TableOptions) *Table[K] {
	var opts []func(*xsync.MapConfig)
	if o.Presize > 0 {
		opts = append(opts, xsync.WithPresize(o.Presize))
	}
	return &Table[K]{m: xsync.NewMapOf[K, *slot](opts...), rule: r, maxKeys: o.MaxKeys, atCap: o.AtCap}
}

// Rule returns the table's rule.
func (t *Table[K]) Rule() *Rule { return &t.rule }

// Len is the number of keys tracked.
func (t *Table[K]) Len() int64 { return t.keys.Load() }

// Evictions is the number of buckets removed by sweeps so far.
func (t *Table[K]) Evictions() int64 { return t.evictions.Load() }

// AtCapHits is the number of requests for new keys that met the key cap.
func (t *Table[K]) AtCapHits() int64 { return t.atCapHits.Load() }

// create makes key's bucket at now, or returns the one another goroutine just
// made; nil when the key is new and the table is at its cap. It is the slow path
// of every check, which looks the key up with the map's Load inline (a helper
// doing both would be a call frame more: two calls exceed the inliner's budget).
// A slot a check gets may be dead by the time it is used: checks retry then.
func (t *Table[K]) create(key K, now int64) *slot {
	if !t.claimKey() {
		if s, ok := t.m.Load(key); ok { // created meanwhile by another goroutine
			return s
		}
		t.atCapHits.Add(1)
		return nil
	}
	s, k := newSlot(key)
	s.anchor = t.rule.newAnchor(now)
	s.tat.Store(t.rule.fresh(now))
	got, loaded := t.m.LoadOrStore(k, s)
	if loaded {
		t.keys.Add(-1)
	}
	return got
}

// slotSize is the bytes a slot takes at the front of a co-allocated block.
const slotSize = int(unsafe.Sizeof(slot{}))

// newSlot allocates a bucket for key. For a non-empty string key it copies the
// key's bytes into the same allocation, right after the slot, and returns the
// key pointing at that copy: the map's key comparison on a lookup then brings
// the bucket's cache line in with it (one memory miss fewer per check on large
// tables), and the table never keeps a caller's larger buffer alive through a
// substring key. The block holds no pointers, so the collector does not scan it.
func newSlot[K comparable](key K) (*slot, K) {
	ks, ok := any(key).(string)
	if !ok || len(ks) == 0 {
		return new(slot), key
	}
	buf := make([]byte, slotSize+len(ks)) // 8-byte aligned: it is at least 16 bytes
	copy(buf[slotSize:], ks)
	return (*slot)(unsafe.Pointer(&buf[0])), any(unsafe.String(&buf[slotSize], len(ks))).(K)
}

// claimKey counts one more key, unless that would pass the cap. The count never
// exceeds the cap, even for a moment, so Len is a true bound on the map's size.
func (t *Table[K]) claimKey() bool {
	if t.maxKeys <= 0 {
		t.keys.Add(1)
		return true
	}
	for {
		n := t.keys.Load()
		if n >= t.maxKeys {
			return false
		}
		if t.keys.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// retry yields after a check found a dead slot: the sweep that killed it is
// deleting it under the map's lock, and the next lookup will not find it.
func retry() { runtime.Gosched() }

// Allow reports whether a request of cost 1 for key is allowed now, taking a
// token if so.
func (t *Table[K]) Allow(key K) bool { return t.AllowAt(key, Now()) }

// AllowAt is Allow at time now (ns since the epoch).
func (t *Table[K]) AllowAt(key K, now int64) bool {
	now = clampNow(now)
	for {
		s, ok := t.m.Load(key)
		if !ok {
			if s = t.create(key, now); s == nil {
				return t.atCap == AllowAtCap && t.rule.debt+t.rule.emit <= t.rule.tau
			}
		}
		nowU := t.rule.units(now, s.anchor)
		tat, ok := advance(&s.tat, nowU, t.rule.emit, nowU+t.rule.tau)
		if tat >= 0 {
			return ok
		}
		retry()
	}
}

// AllowN checks a request of the given cost for key now, taking its tokens if
// allowed. Costs at the limits behave as for Bucket.AllowN.
func (t *Table[K]) AllowN(key K, cost int64) Decision { return t.AllowNAt(key, Now(), cost) }

// AllowNAt is AllowN at time now.
func (t *Table[K]) AllowNAt(key K, now, cost int64) Decision {
	now = clampNow(now)
	for {
		s, ok := t.m.Load(key)
		if !ok {
			if s = t.create(key, now); s == nil {
				return t.capDecision(now, cost)
			}
		}
		nowU := t.rule.units(now, s.anchor)
		if cost < 0 || cost > t.rule.burst {
			return t.rule.outOfRange(s.tat.Load(), now, nowU, s.anchor)
		}
		inc := cost * t.rule.emit
		tat, ok := advance(&s.tat, nowU, inc, nowU+t.rule.tau)
		if tat >= 0 {
			return t.rule.decide(ok, tat, inc, now, nowU, s.anchor)
		}
		retry()
	}
}

// capDecision decides a request for a new key at the cap.
func (t *Table[K]) capDecision(now, cost int64) Decision {
	if t.atCap == AllowAtCap {
		return t.rule.peek(t.rule.fresh(now), now, t.rule.newAnchor(now), cost)
	}
	return Decision{RetryAfter: SweepGrace}
}

// Peek is what AllowN(key, cost) would decide now, without taking anything or
// creating the key.
func (t *Table[K]) Peek(key K, cost int64) Decision { return t.PeekAt(key, Now(), cost) }

// PeekAt is Peek at time now.
func (t *Table[K]) PeekAt(key K, now, cost int64) Decision {
	now = clampNow(now)
	if s, ok := t.m.Load(key); ok {
		if tat := s.tat.Load(); tat >= 0 {
			return t.rule.peek(tat, now, s.anchor, cost)
		}
	}
	// A key with no bucket (or a swept one) would get a new bucket.
	return t.rule.peek(t.rule.fresh(now), now, t.rule.newAnchor(now), cost)
}

// Refund gives cost tokens back to key's bucket now, never filling it beyond its
// burst. A key without a bucket is full: nothing to give back.
func (t *Table[K]) Refund(key K, cost int64) { t.RefundAt(key, Now(), cost) }

// RefundAt is Refund at time now.
func (t *Table[K]) RefundAt(key K, now, cost int64) {
	if cost <= 0 || cost > t.rule.burst {
		return
	}
	if s, ok := t.m.Load(key); ok {
		giveBack(&s.tat, t.rule.units(clampNow(now), s.anchor), cost*t.rule.emit)
	}
}

// Reserve takes cost tokens from key's bucket now if the request can be served
// within maxWait; see Bucket.Reserve. A new key at a DenyAtCap cap is refused.
func (t *Table[K]) Reserve(key K, cost int64, maxWait time.Duration) Reservation {
	return t.ReserveAt(key, Now(), cost, maxWait)
}

// ReserveAt is Reserve at time now.
func (t *Table[K]) ReserveAt(key K, now, cost int64, maxWait time.Duration) Reservation {
	now = clampNow(now)
	for {
		s, ok := t.m.Load(key)
		if !ok {
			s = t.create(key, now)
		}
		if s == nil {
			d := t.capDecision(now, cost)
			// Untracked keys cannot hold tokens for later: only an immediate admission.
			return Reservation{OK: d.Allowed, RetryAfter: d.RetryAfter, at: now}
		}
		if res, alive := t.rule.reserve(&s.tat, now, s.anchor, cost, maxWait); alive {
			return res
		}
		retry()
	}
}

// Wait blocks until a request of cost for key may proceed, or ctx is done; see
// Bucket.Wait.
func (t *Table[K]) Wait(ctx context.Context, key K, cost int64) error {
	return waitOn(ctx, cost, func(now int64, maxWait time.Duration) Reservation {
		return t.ReserveAt(key, now, cost, maxWait)
	})
}

// Sweep removes the buckets that have been full for at least SweepGrace and
// returns how many it removed. Run it periodically (RunSweeper) to bound memory.
func (t *Table[K]) Sweep() int { return t.SweepAt(Now()) }

// SweepAt is Sweep at time now.
//
// Why no consumption is lost: a bucket is removed only by compare-and-swapping
// the full TAT the sweep read into the dead word, under the map's lock for that
// key, and then deleting the key in the same critical section. A check that
// consumed in between changed the word, so the sweep's CAS fails and the bucket
// stays. A check that loads the word after the CAS sees dead, does nothing to
// it, and looks the key up again, finding the key gone (or a new bucket). Since
// the word is the bucket's whole state, a value that returns to the one the
// sweep read (consume, then refund) is the same state, and removing it is right.
func (t *Table[K]) SweepAt(now int64) int {
	now = clampNow(now)
	graced := max(now-int64(SweepGrace), 0)
	removed := 0
	t.m.Range(func(key K, s *slot) bool {
		if tat := s.tat.Load(); tat < 0 || !t.rule.fullBy(tat, graced, s.anchor) {
			return true
		}
		t.m.Compute(key, func(cur *slot, loaded bool) (*slot, bool) {
			if !loaded || cur != s {
				return cur, !loaded // gone, or replaced by a new bucket: leave it
			}
			tat := s.tat.Load()
			if !t.rule.fullBy(tat, graced, s.anchor) || !s.tat.CompareAndSwap(tat, dead) {
				return cur, false // in use again
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
	return removed
}

// fullBy reports whether a bucket holding tat was full at time t (ns). Before an
// interval bucket's anchor it did not exist, so it was not full then.
func (r *Rule) fullBy(tat, t, anchor int64) bool {
	return t >= anchor && tat <= r.units(t, anchor)
}

// RunSweeper calls Sweep every interval until ctx is done. Run it in its own
// goroutine.
func (t *Table[K]) RunSweeper(ctx context.Context, interval time.Duration) {
	RunEvery(ctx, interval, func() { t.Sweep() })
}

// RunEvery calls f every interval until ctx is done; generated limiters use it
// to sweep the tables of every plan together. Run it in its own goroutine.
func RunEvery(ctx context.Context, interval time.Duration, f func()) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			f()
		}
	}
}

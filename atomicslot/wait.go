package atomicslot

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// waitRoom holds the acquisitions waiting for a slot of a gate's or a
// table's keys (AcquireWait), each key's in the order they came: a release
// hands its slot to its key's longest waiter instead of freeing it. Only
// waits lock it, and a release while some acquisition waits: an acquisition
// or a release with nobody waiting reads one atomic word of it.
type waitRoom struct {
	n  atomic.Int64 // acquisitions queued, all keys
	mu sync.Mutex
	q  map[*atomic.Int64]*keyQueue // by each of the key's words, while it has waiters
}

// keyQueue is a key's waiters, in the order they came, its slots in force
// (e), and every slots of it whose words map to it (e, and those e
// replaced since a waiter came).
type keyQueue struct {
	list []chan Slot
	e    *keySlots
	all  []*keySlots
}

// room is c's wait room, made on the first wait.
func (c *counters) room() *waitRoom {
	if w := c.waits.Load(); w != nil {
		return w
	}
	c.waits.CompareAndSwap(nil, &waitRoom{q: map[*atomic.Int64]*keyQueue{}})
	return c.waits.Load()
}

// replaced moves the waiters of e's key, if any, to n, which replaced e.
func (c *counters) replaced(e, n *keySlots) {
	e.next.Store(n)
	w := c.waits.Load()
	if w == nil || w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if kq := w.q[&e.w[0]]; kq != nil {
		kq.e = n
		kq.all = append(kq.all, n)
		for j := range n.w {
			w.q[&n.w[j]] = kq
		}
	}
}

// handoff gives s, released at now before its expiry, to the longest waiter
// of its key: the word is taken again for it, from now, in one
// compare-and-swap from the value s's acquisition wrote. queued is false
// when the key has no waiter (the release frees the word as usual); handed
// is false when s's release was not in effect (a second one, or the word
// taken again after s expired). A slot of numbers no longer in force, or of
// a key holding more than the numbers in force let it (after a cut), is
// freed instead, and the longest waiter told to try again.
func (w *waitRoom) handoff(s Slot, now int64) (handed, queued bool) {
	w.mu.Lock()
	kq := w.q[s.w]
	if kq == nil {
		w.mu.Unlock()
		return false, false
	}
	e := kq.e
	nv := s.v & genMask // freed
	if e.owns(s.w) && !e.sealed.Load() && (e.prev.Load() == nil || e.heldAll(now) <= e.rule.limit) {
		nv = e.rule.taken(s.v, now)
	}
	if !s.w.CompareAndSwap(s.v, nv) {
		w.mu.Unlock()
		return false, true
	}
	ch := kq.list[0]
	w.drop(kq, 0)
	w.mu.Unlock()
	if nv == s.v&genMask {
		ch <- Slot{} // try again: buffered, never blocks
	} else {
		ch <- Slot{w: s.w, v: nv, c: s.c}
	}
	return true, true
}

// drop takes waiter i out of kq, and kq out of the room when it empties.
// The room's lock is held.
func (w *waitRoom) drop(kq *keyQueue, i int) {
	kq.list = append(kq.list[:i:i], kq.list[i+1:]...)
	w.n.Add(-1)
	if len(kq.list) == 0 {
		for _, e := range kq.all {
			for j := range e.w {
				delete(w.q, &e.w[j])
			}
		}
	}
}

// enqueue puts a waiter at the end of the queue of the key whose slots are
// e (at its start when first: a waiter told to try again keeps its place).
func (w *waitRoom) enqueue(e *keySlots, ch chan Slot, first bool) {
	w.mu.Lock()
	kq := w.q[&e.w[0]]
	if kq == nil {
		kq = &keyQueue{e: e, all: []*keySlots{e}}
		for j := range e.w {
			w.q[&e.w[j]] = kq
		}
	}
	if first {
		kq.list = append([]chan Slot{ch}, kq.list...)
	} else {
		kq.list = append(kq.list, ch)
	}
	w.n.Add(1)
	w.mu.Unlock()
}

// leave takes ch out of its key's queue (the key's slots e), and reports
// whether it was there: if not, a release has handed it a slot (or told it
// to try again), which ch holds or will.
func (w *waitRoom) leave(e *keySlots, ch chan Slot) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	kq := w.q[&e.w[0]]
	if kq == nil {
		return false
	}
	for i, c := range kq.list {
		if c == ch {
			w.drop(kq, i)
			return true
		}
	}
	return false
}

// holding is the decision for a slot of e's key just had at now (under the
// numbers e was replaced by, if it was): the slots free after it, and the
// wait until every held one has expired.
func holding(e *keySlots, now int64) atomicbucket.Decision {
	for n := e.next.Load(); n != nil; n = e.next.Load() {
		e = n
	}
	n, last := e.heldAll(now), max(e.lastAll(), now)
	return atomicbucket.Decision{Allowed: true, Remaining: max(e.rule.limit-n, 0), Reset: time.Duration(last - now)}
}

// acquireWait is AcquireWait: try takes a slot at now, or returns the
// denial and its key's slots (nil when the key has none: at the key cap);
// a denied acquisition queues behind its key's other waiters until a
// release hands it a slot, a slot expires (every waiter then tries again,
// first come first served), ctx is done, or maxWait has passed since it
// began, when it is denied as AcquireAt would deny it then.
func acquireWait(ctx context.Context, c *counters, maxWait time.Duration,
	try func(now int64) (Slot, atomicbucket.Decision, *keySlots)) (Slot, atomicbucket.Decision) {
	start := clampNow(atomicbucket.Now())
	s, d, e := try(start)
	if d.Allowed || e == nil || maxWait <= 0 || d.RetryAfter < 0 || ctx.Err() != nil {
		return s, d
	}
	room := c.room()
	ch := make(chan Slot, 1)
	room.enqueue(e, ch, false)
	// took keeps s, which this waiter also acquired by itself: when a
	// release handed it one meanwhile, that one goes back (to the next
	// waiter, or free).
	took := func(s Slot, d atomicbucket.Decision) (Slot, atomicbucket.Decision) {
		if !room.leave(e, ch) {
			(<-ch).ReleaseAt(atomicbucket.Now())
		}
		return s, d
	}
	// A release between the first try and the queueing handed nobody its
	// slot: try again, queued.
	if s, d2, _ := try(clampNow(atomicbucket.Now())); d2.Allowed {
		return took(s, d2)
	}
	deadline := start + int64(maxWait)
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for {
		now := clampNow(atomicbucket.Now())
		left := deadline - now
		if left <= 0 {
			break
		}
		wake := time.Duration(left)
		if d.RetryAfter > 0 && d.RetryAfter < wake {
			wake = d.RetryAfter // the first held slot's expiry
		}
		timer.Reset(wake)
		select {
		case got := <-ch:
			if got.Held() {
				return got, holding(e, clampNow(atomicbucket.Now()))
			}
			// Told to try again (a slot of older numbers freed): out of
			// the queue, so a slot taken now is this waiter's alone.
			var s Slot
			var next *keySlots
			if s, d, next = try(clampNow(atomicbucket.Now())); d.Allowed || next == nil {
				return s, d
			}
			e = next
			room.enqueue(e, ch, true)
		case <-ctx.Done():
			deadline = 0
		case <-timer.C:
			var s Slot
			if s, d, _ = try(clampNow(atomicbucket.Now())); d.Allowed {
				return took(s, d)
			}
		}
	}
	// Out of time: denied as an acquisition now is, unless a slot came.
	s, d, _ = try(clampNow(atomicbucket.Now()))
	if d.Allowed {
		return took(s, d)
	}
	if !room.leave(e, ch) {
		if got := <-ch; got.Held() {
			return got, holding(e, clampNow(atomicbucket.Now()))
		}
	}
	return Slot{}, d
}

// AcquireWait is Acquire, waiting up to maxWait (and while ctx is not done)
// for a slot when every one is held: a release hands its slot to the
// longest waiter (first in, first out), and a slot that comes back by its
// expiry goes to the first waiter to try for it. Past maxWait, or when ctx
// is done, it is denied as Acquire would deny it then. maxWait 0 is
// Acquire. A wait allocates (a channel, a timer); an acquisition that need
// not wait does not.
func (g *Gate) AcquireWait(ctx context.Context, maxWait time.Duration) (Slot, atomicbucket.Decision) {
	return acquireWait(ctx, &g.c, maxWait, func(now int64) (Slot, atomicbucket.Decision, *keySlots) {
		for {
			e := g.slots(now)
			if s, d, alive := g.c.acquire(e, now); alive {
				return s, d, e
			}
			retry()
		}
	})
}

// AcquireWait is Acquire for key, waiting up to maxWait (and while ctx is
// not done) for a slot when every one is held, as Gate.AcquireWait does. A
// new key at the key cap is not waited for: it is decided as Acquire
// decides it.
func (t *Table[K]) AcquireWait(ctx context.Context, key K, maxWait time.Duration) (Slot, atomicbucket.Decision) {
	return acquireWait(ctx, &t.c, maxWait, func(now int64) (Slot, atomicbucket.Decision, *keySlots) {
		return t.acquire(key, now)
	})
}

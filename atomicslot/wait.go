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
	r  *Rule
	n  atomic.Int64 // acquisitions queued, all keys
	mu sync.Mutex
	q  map[*atomic.Int64]*keyQueue // by each of the key's words, while it has waiters
}

// keyQueue is a key's waiters, in the order they came, and its words.
type keyQueue struct {
	list  []chan Slot
	words []atomic.Int64
}

// room is c's wait room for rule r's slots, made on the first wait.
func (c *counters) room(r *Rule) *waitRoom {
	if w := c.waits.Load(); w != nil {
		return w
	}
	c.waits.CompareAndSwap(nil, &waitRoom{r: r, q: map[*atomic.Int64]*keyQueue{}})
	return c.waits.Load()
}

// handoff gives s, released at now before its expiry, to the longest waiter
// of its key: the word is taken again for it, from now, in one
// compare-and-swap from the value s's acquisition wrote. queued is false
// when the key has no waiter (the release frees the word as usual); handed
// is false when s's release was not in effect (a second one, or the word
// taken again after s expired).
func (w *waitRoom) handoff(s Slot, now int64) (handed, queued bool) {
	w.mu.Lock()
	kq := w.q[s.w]
	if kq == nil {
		w.mu.Unlock()
		return false, false
	}
	nv := w.r.taken(s.v, now)
	if !s.w.CompareAndSwap(s.v, nv) {
		w.mu.Unlock()
		return false, true
	}
	ch := kq.list[0]
	w.drop(kq, 0)
	w.mu.Unlock()
	ch <- Slot{w: s.w, v: nv, c: s.c} // buffered: never blocks
	return true, true
}

// drop takes waiter i out of kq, and kq out of the room when it empties.
// The room's lock is held.
func (w *waitRoom) drop(kq *keyQueue, i int) {
	kq.list = append(kq.list[:i:i], kq.list[i+1:]...)
	w.n.Add(-1)
	if len(kq.list) == 0 {
		for j := range kq.words {
			delete(w.q, &kq.words[j])
		}
	}
}

// enqueue puts a waiter at the end of the queue of the key whose words are
// words.
func (w *waitRoom) enqueue(words []atomic.Int64) chan Slot {
	ch := make(chan Slot, 1)
	w.mu.Lock()
	kq := w.q[&words[0]]
	if kq == nil {
		kq = &keyQueue{words: words}
		for j := range words {
			w.q[&words[j]] = kq
		}
	}
	kq.list = append(kq.list, ch)
	w.n.Add(1)
	w.mu.Unlock()
	return ch
}

// leave takes ch out of its key's queue, and reports whether it was there:
// if not, a release has handed it a slot, which ch holds or will.
func (w *waitRoom) leave(words []atomic.Int64, ch chan Slot) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	kq := w.q[&words[0]]
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

// holding is the decision for a slot of words w just had at now: the slots
// free after it, and the wait until every held one has expired.
func (r *Rule) holding(w []atomic.Int64, now int64) atomicbucket.Decision {
	n, last := int64(0), now
	for i := range w {
		if v := w[i].Load(); v >= 0 && expiry(v) > now {
			n++
			last = max(last, expiry(v))
		}
	}
	return atomicbucket.Decision{Allowed: true, Remaining: max(r.limit-n, 0), Reset: time.Duration(last - now)}
}

// acquireWait is AcquireWait: try takes a slot at now, or returns the
// denial and its key's words (nil when the key has none: at the key cap);
// a denied acquisition queues behind its key's other waiters until a
// release hands it a slot, a slot expires (every waiter then tries again,
// first come first served), ctx is done, or maxWait has passed since it
// began, when it is denied as AcquireAt would deny it then.
func acquireWait(ctx context.Context, c *counters, r *Rule, maxWait time.Duration,
	try func(now int64) (Slot, atomicbucket.Decision, []atomic.Int64)) (Slot, atomicbucket.Decision) {
	start := clampNow(atomicbucket.Now())
	s, d, w := try(start)
	if d.Allowed || w == nil || maxWait <= 0 || d.RetryAfter < 0 || ctx.Err() != nil {
		return s, d
	}
	room := c.room(r)
	ch := room.enqueue(w)
	// took keeps s, which this waiter also acquired by itself: when a
	// release handed it one meanwhile, that one goes back (to the next
	// waiter, or free).
	took := func(s Slot, d atomicbucket.Decision) (Slot, atomicbucket.Decision) {
		if !room.leave(w, ch) {
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
			return got, r.holding(w, clampNow(atomicbucket.Now()))
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
	if !room.leave(w, ch) {
		return <-ch, r.holding(w, clampNow(atomicbucket.Now()))
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
	return acquireWait(ctx, &g.c, &g.r, maxWait, func(now int64) (Slot, atomicbucket.Decision, []atomic.Int64) {
		s, d, _ := g.r.acquire(g.w, now, &g.c)
		return s, d, g.w
	})
}

// AcquireWait is Acquire for key, waiting up to maxWait (and while ctx is
// not done) for a slot when every one is held, as Gate.AcquireWait does. A
// new key at the key cap is not waited for: it is decided as Acquire
// decides it.
func (t *Table[K]) AcquireWait(ctx context.Context, key K, maxWait time.Duration) (Slot, atomicbucket.Decision) {
	return acquireWait(ctx, &t.c, &t.r, maxWait, func(now int64) (Slot, atomicbucket.Decision, []atomic.Int64) {
		for {
			w, ok := t.m.Load(key)
			if !ok {
				if w = t.create(key, now); w == nil {
					return Slot{}, t.capDecision(now), nil
				}
			}
			if s, d, alive := t.r.acquire(w, now, &t.c); alive {
				return s, d, w
			}
			retry()
		}
	})
}

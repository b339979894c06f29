package shared

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/verdict"
)

// A wait for a shared slot asks the store again: at the first held slot's
// expiry when that comes first, or on a back-off from firstPoll doubling to
// lastPoll, and at once when a slot of the same key is released in this
// instance (to this instance's longest waiter for the key). The store has no
// queue: instances' waiters are not served in the order they came, only
// this instance's among themselves as far as its releases go.
const (
	firstPoll = 5 * time.Millisecond
	lastPoll  = 200 * time.Millisecond
)

// slotWaiters are an instance's waits for a shared rule's slots, by key,
// each key's in the order they came.
type slotWaiters struct {
	n  atomic.Int64 // waits, all keys
	mu sync.Mutex
	q  map[string][]chan struct{}
}

// wake tells key's longest waiter that one of key's slots was released.
func (w *slotWaiters) wake(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l := w.q[key]; len(l) > 0 {
		select {
		case l[0] <- struct{}{}:
		default: // told already, not yet asked the store again
		}
	}
}

func (w *slotWaiters) join(key string) chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.q == nil {
		w.q = map[string][]chan struct{}{}
	}
	w.q[key] = append(w.q[key], ch)
	w.n.Add(1)
	w.mu.Unlock()
	return ch
}

func (w *slotWaiters) leave(key string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.q[key]
	for i, c := range l {
		if c == ch {
			l = append(l[:i:i], l[i+1:]...)
			w.n.Add(-1)
			break
		}
	}
	if len(l) == 0 {
		delete(w.q, key)
	} else {
		w.q[key] = l
	}
}

// AcquireWait is Acquire, waiting up to maxWait (and while ctx is not done)
// for a slot when every one of key's is held, on every instance: it asks the
// store again when the first held slot expires, on a back-off (5 ms doubling
// to 200 ms: slots released by other instances are seen at the next
// asking), and at once when this instance releases one of key's slots. Past
// maxWait, or when ctx is done, it is denied as Acquire would deny it then.
// A store that cannot answer ends the wait: the failure setting decides,
// as for Acquire. maxWait 0 is Acquire. Waiters are served in the order they
// came only among this instance's, and only as far as its own releases go:
// the store keeps no queue.
func (s *Slots) AcquireWait(ctx context.Context, key string, maxWait time.Duration) (atomicslot.Slot, verdict.Result) {
	slot, res := s.Acquire(ctx, key)
	if res.Allowed || res.Degraded || res.Err != nil || maxWait <= 0 || res.RetryAfter < 0 || ctx.Err() != nil {
		return slot, res
	}
	deadline := time.Now().Add(maxWait)
	ch := s.waits.join(key)
	defer s.waits.leave(key, ch)
	poll := firstPoll
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		wake := min(poll, left)
		if res.RetryAfter > 0 && res.RetryAfter < wake {
			wake = res.RetryAfter // the first held slot's expiry
		}
		poll = min(2*poll, lastPoll)
		timer.Reset(wake)
		select {
		case <-ch:
			timer.Stop()
		case <-timer.C:
		case <-ctx.Done():
			return atomicslot.Slot{}, res // the caller is gone: its last denial, no more calls
		}
		if slot, res = s.Acquire(ctx, key); res.Allowed || res.Degraded || res.Err != nil {
			return slot, res
		}
	}
	return s.Acquire(ctx, key)
}

// released tells key's waiters in this instance that one of its slots is free.
func (s *Slots) released(key string) {
	if s.waits.n.Load() > 0 {
		s.waits.wake(key)
	}
}

package shared

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/verdict"
)

// SlotLeaser is a SlotChecker that takes several of a key's slots in one
// call (redisstore.Slots, pgstore.Slots): what slot leases are made of.
type SlotLeaser interface {
	// AcquireN takes one of key's slots for each of tokens, in order, each
	// held until the store's now + hold, while fewer than the rule's limit
	// are held, and answers five numbers a token (SlotReplyOf's) and the
	// limit it went by.
	AcquireN(ctx context.Context, key string, tokens []uint64, hold time.Duration) (res []int64, limit int64, err error)
}

// DefaultLeaseWindow is how long after it is asked for a slot lease hands
// its slots out (Slots.Lease).
const DefaultLeaseWindow = time.Second

// slotLeases are a shared in-flight rule's leases in this instance.
type slotLeases struct {
	k      int           // slots leased a key at most
	window time.Duration // how long a lease hands its slots out
	mu     sync.Mutex
	keys   map[string]*keyLease
	leased atomic.Int64 // slots this instance holds on the store as leases
	busy   atomic.Int64 // of them, handed out now
}

// keyLease is one key's leased slots.
type keyLease struct {
	mu     sync.Mutex
	slots  []*leasedSlot
	flight chan struct{} // closed when the store call under way ends; nil: none
}

// leasedSlot is a slot held on the store for this instance, handed out to
// one request at a time.
type leasedSlot struct {
	token   uint64
	until   int64  // local time (atomicbucket.Time) by which the store frees it, at the earliest
	gen     uint64 // the hand-outs so far; the holder's Slot carries its own
	busy    bool
	expires int64 // the holder's expiry (local time)
}

// Lease makes the rule's acquisitions lease up to k of a key's slots from
// the store at once and hand them out in this process: a slot leased is
// held on the store until the store's time at the call plus the rule's hold
// plus window (DefaultLeaseWindow when not positive), and handed out, to one
// request at a time, only while what a request may hold ends before that,
// so that the store never frees a slot a request holds, and a dead
// instance's leased slots come back after the hold and the window, never
// before. A release gives a leased slot back to the lease; the lease gives
// it back to the store once its window has passed and no request holds it.
// While this instance's k are all held, an acquisition asks the store for a
// slot of its own, as without a lease. Every slot a request holds is one
// the store holds: at no instant do more than the limit run, across every
// instance. What leases cost: a slot leased and not handed out is held on
// the store all the same (SlotStats.Leased counts them), so another
// instance may be refused for up to window while this one has slots idle.
// New numbers (SetNumbers) end every lease. Lease must be called before
// the rule's first acquisition; k is at least 1 and at most the limit.
func (s *Slots) Lease(k int, window time.Duration) error {
	if _, ok := s.c.(SlotLeaser); !ok {
		return fmt.Errorf("%w: %T cannot lease slots", ErrNoSlots, s.c)
	}
	if k < 1 || int64(k) > s.rule.Limit() {
		return fmt.Errorf("a slot lease of %d: at least 1 and at most the limit, %d", k, s.rule.Limit())
	}
	if window <= 0 {
		window = DefaultLeaseWindow
	}
	s.leases = &slotLeases{k: k, window: window, keys: map[string]*keyLease{}}
	return nil
}

// keyLease is key's leases, made on its first use.
func (l *slotLeases) key(key string) *keyLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[key]
	if kl == nil {
		kl = &keyLease{}
		l.keys[key] = kl
	}
	return kl
}

// acquireLeased is Acquire through the rule's leases.
func (s *Slots) acquireLeased(ctx context.Context, key string) (atomicslot.Slot, verdict.Result) {
	l := s.leases
	kl := l.key(key)
	rule := s.cur.Load()
	for {
		now := int64(atomicbucket.Now())
		kl.mu.Lock()
		if slot, res, ok := s.handOut(kl, key, rule, now); ok {
			kl.mu.Unlock()
			return slot, res
		}
		if kl.flight != nil { // another acquisition is asking the store: its slots may serve this one
			ch := kl.flight
			kl.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return atomicslot.Slot{}, verdict.Result{Decision: atomicbucket.Decision{RetryAfter: time.Second}, Err: ctx.Err()}
			}
		}
		want := l.k - len(kl.slots)
		if want <= 0 {
			kl.mu.Unlock()
			return s.acquireOne(ctx, key) // the lease's k are all held: a slot of its own
		}
		ch := make(chan struct{})
		kl.flight = ch
		kl.mu.Unlock()
		slot, res := s.lease(ctx, kl, key, rule, want, now)
		kl.mu.Lock()
		kl.flight = nil
		close(ch)
		kl.mu.Unlock()
		if !slot.Held() {
			l.forget(key, kl) // the store granted nothing: nothing to keep for the key
		}
		return slot, res
	}
}

// handOut gives a request at now one of kl's idle leased slots, when one
// outlives the request's hold on the store, or denies when this instance's
// requests hold the whole limit (so the store has none); ok is false when
// the store must be asked. kl is locked.
func (s *Slots) handOut(kl *keyLease, key string, rule *atomicslot.Rule, now int64) (atomicslot.Slot, verdict.Result, bool) {
	hold := int64(rule.Hold())
	busy, first := int64(0), int64(math.MaxInt64)
	var idle *leasedSlot
	for _, ls := range kl.slots {
		if ls.busy && ls.expires <= now { // its request ran past the hold: the slot is the lease's again
			ls.busy = false
			s.leases.busy.Add(-1)
			s.expired.Add(1)
		}
		switch {
		case ls.busy:
			busy++
			first = min(first, ls.expires)
		case idle == nil && now+hold <= ls.until:
			idle = ls
		}
	}
	if busy >= rule.Limit() { // the whole limit is this instance's, in use: none on the store
		return atomicslot.Slot{}, verdict.Result{Decision: atomicbucket.Decision{RetryAfter: time.Duration(first - now), Reset: time.Duration(first - now)}}, true
	}
	if idle == nil {
		return atomicslot.Slot{}, verdict.Result{}, false
	}
	idle.busy, idle.expires = true, now+hold
	idle.gen++
	s.leases.busy.Add(1)
	free := int64(0)
	for _, ls := range kl.slots {
		if !ls.busy && now+hold <= ls.until {
			free++
		}
	}
	d := atomicbucket.Decision{Allowed: true, Remaining: free, Reset: time.Duration(hold)}
	return atomicslot.Remote(&leaseHold{s: s, kl: kl, key: key, ls: idle, gen: idle.gen}), verdict.Result{Decision: d}, true
}

// lease asks the store for want of key's slots (the first for the request
// at hand), each held for the hold and the lease's window.
func (s *Slots) lease(ctx context.Context, kl *keyLease, key string, rule *atomicslot.Rule, want int, sent int64) (atomicslot.Slot, verdict.Result) {
	l := s.leases
	tokens := make([]uint64, want)
	for i := range tokens {
		tokens[i] = rand.Uint64() | 1
	}
	var res []int64
	var limit int64
	err := s.g.Guarded(ctx, s.node(key), func(ctx context.Context) error {
		var err error
		res, limit, err = s.c.(SlotLeaser).AcquireN(ctx, key, tokens, rule.Hold()+l.window)
		if err == nil && len(res) != 5*want {
			err = fmt.Errorf("the store answered %d numbers for %d leased slots, want 5 a slot", len(res), want)
		}
		return err
	})
	if err != nil {
		return s.fallback(key, err)
	}
	// Every slot granted is held on the store: the lease keeps them all. The
	// decision is the first granted one's, or the first denial's.
	var got []*leasedSlot
	first := 0
	for i := range want {
		s.expired.Add(max(res[5*i+4], 0)) // what each acquisition found expired unreleased, and freed
		if res[5*i] == 1 {
			if len(got) == 0 {
				first = i
			}
			got = append(got, &leasedSlot{token: tokens[i], until: sent + int64(rule.Hold()+l.window)})
		}
	}
	d, _, err := SlotReplyOf(limit, res[5*first:5*first+5])
	if err != nil {
		return s.fallback(key, err)
	}
	if len(got) == 0 {
		return atomicslot.Slot{}, verdict.Result{Decision: d} // acquireLeased forgets kl once its flight ends
	}
	now := int64(atomicbucket.Now())
	got[0].busy, got[0].expires, got[0].gen = true, now+int64(rule.Hold()), 1
	l.leased.Add(int64(len(got)))
	l.busy.Add(1)
	kl.mu.Lock()
	kl.slots = append(kl.slots, got...)
	kl.mu.Unlock()
	time.AfterFunc(time.Duration(sent+int64(l.window)-now), func() { s.endWindow(kl, key, got) })
	d.Remaining = int64(len(got) - 1)
	return atomicslot.Remote(&leaseHold{s: s, kl: kl, key: key, ls: got[0], gen: 1}), verdict.Result{Decision: d}
}

// endWindow ends the hand-outs of slots, leased together: those no request
// holds go back to the store now, the others at their release.
func (s *Slots) endWindow(kl *keyLease, key string, slots []*leasedSlot) {
	now := int64(atomicbucket.Now())
	var back []*leasedSlot
	kl.mu.Lock()
	for _, ls := range slots {
		if ls.busy && ls.expires <= now {
			ls.busy = false
			s.leases.busy.Add(-1)
			s.expired.Add(1)
		}
		if !ls.busy && kl.drop(ls) {
			back = append(back, ls)
		}
	}
	kl.mu.Unlock()
	for _, ls := range back {
		s.giveBack(key, ls)
	}
	s.leases.forget(key, kl)
}

// forget takes key's leases out of the map once they hold nothing and no
// store call is under way, so that a flood of keys leaves no memory behind.
// An acquisition that found kl before goes on with it, unshared: its
// slots are given back as any lease's are.
func (l *slotLeases) forget(key string, kl *keyLease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if len(kl.slots) == 0 && kl.flight == nil && l.keys[key] == kl {
		delete(l.keys, key)
	}
}

// drop takes ls out of kl's slots, and reports whether it was there. kl is
// locked.
func (kl *keyLease) drop(ls *leasedSlot) bool {
	for i, x := range kl.slots {
		if x == ls {
			kl.slots = append(kl.slots[:i:i], kl.slots[i+1:]...)
			return true
		}
	}
	return false
}

// giveBack releases a leased slot on the store.
func (s *Slots) giveBack(key string, ls *leasedSlot) {
	s.leases.leased.Add(-1)
	var got SlotRelease
	err := s.g.Guarded(context.Background(), s.node(key), func(ctx context.Context) error {
		var err error
		got, err = s.c.Release(ctx, key, ls.token)
		return err
	})
	switch {
	case err != nil:
		s.failed.Add(1)
	case got == SlotExpired:
		s.expired.Add(1)
	case got == SlotReleased:
		s.released(key)
	}
}

// endLeases gives every lease's idle slots back to the store, and makes the
// others go back at their release (new numbers).
func (s *Slots) endLeases() {
	l := s.leases
	if l == nil {
		return
	}
	l.mu.Lock()
	keys := make(map[string]*keyLease, len(l.keys))
	for k, kl := range l.keys {
		keys[k] = kl
	}
	l.mu.Unlock()
	for key, kl := range keys {
		kl.mu.Lock()
		slots := append([]*leasedSlot(nil), kl.slots...)
		for _, ls := range slots {
			ls.until = math.MinInt64 // no more hand-outs
		}
		kl.mu.Unlock()
		s.endWindow(kl, key, slots)
	}
}

// leaseHold is a request's hold on a leased slot: released once, back to
// the lease, or to the store once the lease's window has passed.
type leaseHold struct {
	s   *Slots
	kl  *keyLease
	key string
	ls  *leasedSlot
	gen uint64
}

// Release gives the slot back (atomicslot.Releaser), and reports whether
// the request held it until now (not past its hold, not released before).
func (h *leaseHold) Release() bool {
	s, ls := h.s, h.ls
	now := int64(atomicbucket.Now())
	h.kl.mu.Lock()
	if !ls.busy || ls.gen != h.gen {
		h.kl.mu.Unlock()
		return false // released before, or ran past its hold and handed out again
	}
	ls.busy = false
	s.leases.busy.Add(-1)
	inTime := now < ls.expires
	if !inTime {
		s.expired.Add(1)
	}
	over := now+int64(s.cur.Load().Hold()) > ls.until // no hand-out fits in what the store holds any more
	back := over && h.kl.drop(ls)
	h.kl.mu.Unlock()
	if back {
		s.giveBack(h.key, ls)
		s.leases.forget(h.key, h.kl)
	} else {
		s.released(h.key)
	}
	return inTime
}

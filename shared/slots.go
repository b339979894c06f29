package shared

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/verdict"
)

// SlotChecker holds in-flight slots on a store (redisstore.Slots,
// pgstore.Slots): at most the rule's limit of a key's slots held at once,
// across every instance, each held from its acquisition until its release
// or its expiry, the acquisition's time on the store's clock plus the
// rule's hold, rounded up to the microsecond. An error comes with a denial
// that says nothing of the slots.
type SlotChecker interface {
	// Acquire takes one of key's slots for token (a number the caller
	// chose, unique among key's slots held), or denies as atomicslot does:
	// Remaining the slots free after it, Reset the wait until every held
	// slot has expired, a denial's RetryAfter the wait until the first held
	// slot expires. expired is how many of key's slots it found past their
	// expiry, never released, and freed (a leak's count).
	Acquire(ctx context.Context, key string, token uint64) (d atomicbucket.Decision, expired int64, err error)
	// Release gives token's slot of key back: SlotReleased while it was
	// held, SlotExpired when its expiry had passed (it came back by
	// itself; the call removes what is left of it), SlotGone when the store
	// has no such slot (another call freed it).
	Release(ctx context.Context, key string, token uint64) (SlotRelease, error)
}

// SlotRuler is a SlotChecker whose rule's numbers change at run time
// (redisstore.Slots and pgstore.Slots are): from SetRule on, its
// acquisitions go by rule, counting every slot held, whichever numbers took
// it; a held slot keeps its expiry. Slots.SetNumbers needs it.
type SlotRuler interface {
	SetRule(rule atomicslot.Rule)
}

// SlotNumbers are an in-flight rule's numbers as a store's calls send them:
// the limit and the hold in whole microseconds, rounded up.
type SlotNumbers struct {
	Limit, HoldUs int64
}

// SlotNumbersOf is rule's SlotNumbers.
func SlotNumbersOf(rule atomicslot.Rule) *SlotNumbers {
	return &SlotNumbers{Limit: rule.Limit(), HoldUs: int64((rule.Hold() + time.Microsecond - 1) / time.Microsecond)}
}

// SlotRelease is a store's answer to a release.
type SlotRelease int8

const (
	SlotGone     SlotRelease = iota // no such slot held
	SlotReleased                    // released while held
	SlotExpired                     // found past its expiry, never released
)

// SlotReleaseOf reads a store's answer to a release, as its server code
// writes it: 1 released, 2 found expired, anything else none.
func SlotReleaseOf(code int64) SlotRelease {
	switch code {
	case 1:
		return SlotReleased
	case 2:
		return SlotExpired
	}
	return SlotGone
}

// SlotStore is a Store that holds in-flight rules too: its Slots returns the
// checker of the in-flight rule named name (the policy's namespace and the
// rule's name) with rule's numbers.
type SlotStore interface {
	Store
	Slots(name string, rule atomicslot.Rule) (SlotChecker, error)
}

// ErrNoSlots is wrapped by the error of a store that holds no in-flight
// rules.
var ErrNoSlots = errors.New("the store holds no in-flight rules")

// Slots is a shared in-flight rule bound to a store, with its failure
// setting: what a generated package's shared in-flight limiter acquires
// from. Its acquisitions and releases go through the store's breakers and
// counts (its Engine), as its buckets' checks do. While the store cannot
// answer, the rule's failure setting decides an acquisition: FailDeny
// denies (an outage, RetryAfter a second), FailAllow admits with no slot
// to release, FailLocal acquires from slots of this process, the share of
// the limit (rounded down, at least 1) with the rule's hold. A release the
// store cannot take leaves the slot held there until its expiry (never
// longer: the rule's hold bounds what an outage, or a dead instance,
// keeps), and is counted (SlotStats.ReleaseFailed). Its methods are safe for
// concurrent use.
type Slots struct {
	c     SlotChecker
	g     guardedStore
	rule  atomicslot.Rule // the policy's
	cur   atomic.Pointer[atomicslot.Rule]
	share float64 // FailLocal's
	mode  FailureMode
	local *atomicslot.Table[string] // FailLocal's share
	// out counts this instance's slots on the store not yet released;
	// expired and failed the store's slots found expired unreleased by this
	// instance's calls, and its releases the store did not take.
	out, expired, failed atomic.Int64
	waits                slotWaiters // this instance's AcquireWait calls
	leases               *slotLeases // nil: each acquisition a slot of its own (Lease)
}

// SlotStats are what a shared in-flight rule's instance knows of its slots:
// Held, its slots on the store not yet released (each gone by its expiry at
// the latest: a count that grows and stays is a leak of releases), and, in
// its local share, those held now; Expired, the slots this instance's calls
// found on the store past their expiry, never released (whichever instance
// took them), and its local share's; ReleaseFailed, the releases the store
// did not take (down, or its breaker open).
type SlotStats struct {
	atomicslot.Stats
	ReleaseFailed int64
	// Leased is the slots this instance holds on the store as leases
	// (Slots.Lease), handed out now or idle: each counts on the store as
	// held, whether a request holds it or not.
	Leased int64
}

// BindSlots binds the in-flight rule named name (namespace, when not empty,
// before it with a /) with rule's numbers and failure setting f to store,
// which must hold in-flight rules (a SlotStore) and be built on an Engine
// (redisstore, pgstore).
func BindSlots(store Store, namespace, name string, rule atomicslot.Rule, f Failure) (s *Slots, err error) {
	ss, ok := store.(SlotStore)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNoSlots, store)
	}
	g, ok := store.(guardedStore)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not built on a shared.Engine", ErrNoSlots, store)
	}
	if namespace != "" {
		name = namespace + "/" + name
	}
	defer func() { // a store's Slots that panics is a refusal, as Bind treats its Bind
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("the store's Slots panicked: %v", p)
		}
	}()
	c, err := ss.Slots(name, rule)
	if err != nil {
		return nil, err
	}
	s = &Slots{c: c, g: g, rule: rule, mode: f.Mode, share: f.Share}
	s.cur.Store(&s.rule)
	if f.Mode == FailLocal {
		if !(f.Share > 0 && f.Share <= 1) {
			return nil, fmt.Errorf("%w, not %v", ErrLocalShare, f.Share)
		}
		share, err := s.localShare(rule)
		if err != nil {
			return nil, fmt.Errorf("its local share %v: %w", f.Share, err)
		}
		s.local = atomicslot.NewTable[string](share, atomicbucket.TableOptions{MaxKeys: 1 << 20})
	}
	return s, nil
}

// localShare is FailLocal's share of rule: its limit times the share,
// rounded down, at least 1, with its hold.
func (s *Slots) localShare(rule atomicslot.Rule) (atomicslot.Rule, error) {
	return atomicslot.NewRule(max(int64(math.Floor(float64(rule.Limit())*s.share)), 1), rule.Hold())
}

// Rule is the rule's numbers in force.
func (s *Slots) Rule() *atomicslot.Rule { return s.cur.Load() }

// PolicyRule is the rule's numbers as the policy gives them.
func (s *Slots) PolicyRule() *atomicslot.Rule { return &s.rule }

// SetNumbers makes n (atomicslot.RuleOf) the rule's numbers in this
// instance from now: its acquisitions on the store go by them (the store's
// SlotRuler), counting every slot held there, whichever numbers (or
// instance) took it, and so does its FailLocal share. Every instance that
// shares the rule must be given the same numbers: the store decides each
// call by the numbers its caller sends. A store whose slots cannot change
// numbers refuses, and nothing changes.
func (s *Slots) SetNumbers(n atomicbucket.Numbers) error {
	r, err := atomicslot.RuleOf(n)
	if err != nil {
		return err
	}
	return s.setRule(&r)
}

// ClearNumbers puts the policy's numbers back in force, as SetNumbers does.
func (s *Slots) ClearNumbers() { _ = s.setRule(&s.rule) } // a store that took SetNumbers takes them

// NumbersFor is the rule's numbers in force in this instance, and where
// they come from.
func (s *Slots) NumbersFor() (atomicbucket.Numbers, atomicbucket.Origin) {
	r := s.cur.Load()
	if r == &s.rule {
		return atomicslot.NumbersOf(r), atomicbucket.FromPolicy
	}
	return atomicslot.NumbersOf(r), atomicbucket.FromOverride
}

func (s *Slots) setRule(r *atomicslot.Rule) error {
	sr, ok := s.c.(SlotRuler)
	if !ok {
		return fmt.Errorf("%w: %T cannot change an in-flight rule's numbers", atomicslot.ErrNumbers, s.c)
	}
	if s.local != nil {
		share, err := s.localShare(*r)
		if err != nil {
			return fmt.Errorf("its local share %v: %w", s.share, err)
		}
		if err := s.local.SetNumbers(atomicslot.NumbersOf(&share)); err != nil {
			return err
		}
	}
	sr.SetRule(*r)
	s.cur.Store(r)
	s.endLeases() // slots leased by the old numbers hand out no more
	return nil
}

// Acquire takes one of key's slots on the store, or, when the store cannot
// answer, decides by the failure setting (verdict.Result.Degraded, Err;
// Outage for a denial the outage itself makes). A key of no bytes or more
// than MaxKeyLen is denied with an error (RetryAfter Never), no call made. The Slot releases it,
// once in effect (a second Release reports false and makes no call); a
// zero Slot (denied, or admitted by FailAllow) holds nothing.
func (s *Slots) Acquire(ctx context.Context, key string) (atomicslot.Slot, verdict.Result) {
	if key == "" || len(key) > MaxKeyLen { // the caller's, not the store's: no call, and no breaker's count
		return atomicslot.Slot{}, verdict.Result{Decision: atomicbucket.Decision{RetryAfter: atomicbucket.Never},
			Err: fmt.Errorf("an in-flight rule's key on a store has 1 to %d bytes, not %d", MaxKeyLen, len(key))}
	}
	if s.leases != nil {
		return s.acquireLeased(ctx, key)
	}
	return s.acquireOne(ctx, key)
}

// acquireOne is Acquire of one slot on the store, for the request at hand.
func (s *Slots) acquireOne(ctx context.Context, key string) (atomicslot.Slot, verdict.Result) {
	token := rand.Uint64() | 1 // never 0, which no store reads as a slot
	var d atomicbucket.Decision
	err := s.g.Guarded(ctx, s.node(key), func(ctx context.Context) error {
		var expired int64
		var err error
		d, expired, err = s.c.Acquire(ctx, key, token)
		s.expired.Add(expired)
		return err
	})
	if err != nil {
		return s.fallback(key, err)
	}
	if !d.Allowed {
		return atomicslot.Slot{}, verdict.Result{Decision: d}
	}
	s.out.Add(1)
	return atomicslot.Remote(&remoteSlot{s: s, key: strings.Clone(key), token: token}), verdict.Result{Decision: d}
}

// node is the server that holds key's slots, for its breaker.
func (s *Slots) node(key string) string {
	if p, ok := s.c.(WindowPlacer); ok {
		return p.Node(key)
	}
	return ""
}

// fallback is the failure setting's acquisition while the store cannot
// decide.
func (s *Slots) fallback(key string, err error) (atomicslot.Slot, verdict.Result) {
	switch {
	case s.mode == FailAllow:
		return atomicslot.Slot{}, verdict.Result{Decision: atomicbucket.Decision{Allowed: true, Remaining: s.cur.Load().Limit() - 1}, Degraded: true, Err: classed(err)}
	case s.mode == FailLocal && s.local != nil:
		slot, d := s.local.Acquire(key)
		return slot, verdict.Result{Decision: d, Degraded: true, Err: classed(err)}
	}
	return atomicslot.Slot{}, verdict.Result{Decision: atomicbucket.Decision{RetryAfter: time.Second}, Degraded: true, Outage: true, Err: classed(err)}
}

// Health is the store's: nil while it answers.
func (s *Slots) Health() error { return s.g.Health() }

// Stats are the rule's counts in this instance (SlotStats).
func (s *Slots) Stats() SlotStats {
	st := SlotStats{ReleaseFailed: s.failed.Load()}
	if s.local != nil {
		st.Stats = s.local.Stats()
	}
	st.Held += s.out.Load()
	st.Expired += s.expired.Load()
	if s.leases != nil {
		st.Held += s.leases.busy.Load()
		st.Leased = s.leases.leased.Load()
		s.leases.mu.Lock()
		st.Keys += int64(len(s.leases.keys)) // keys whose leases are tracked
		s.leases.mu.Unlock()
	}
	return st
}

// remoteSlot is a slot held on the store: released once, by the first of
// its releases.
type remoteSlot struct {
	s     *Slots
	key   string
	token uint64
	done  atomic.Bool
}

// Release gives the slot back on the store (atomicslot.Remote's), within
// the store's timeout, and reports whether it was held until then.
func (r *remoteSlot) Release() bool {
	if !r.done.CompareAndSwap(false, true) {
		return false
	}
	s := r.s
	s.out.Add(-1)
	var got SlotRelease
	err := s.g.Guarded(context.Background(), s.node(r.key), func(ctx context.Context) error {
		var err error
		got, err = s.c.Release(ctx, r.key, r.token)
		return err
	})
	switch {
	case err != nil:
		s.failed.Add(1)
		return false
	case got == SlotExpired:
		s.expired.Add(1)
	case got == SlotReleased:
		s.released(r.key)
	}
	return got == SlotReleased
}

// SlotReplyOf reads a store's answer to an acquisition for a rule of limit
// slots: five numbers, 1 acquired or 0 denied; the slots held before it; the
// first and the last held slot's expiry − now (µs, 0 when none is held); the
// slots found expired and freed.
func SlotReplyOf(limit int64, res []int64) (atomicbucket.Decision, int64, error) {
	if len(res) != 5 || res[1] < 0 || res[4] < 0 || res[0] != 0 && res[0] != 1 {
		return atomicbucket.Decision{}, 0, fmt.Errorf("the store replied %v to an acquisition, want {acquired, held, first, last, expired}", res)
	}
	us := func(v int64) time.Duration { return time.Duration(max(v, 0)) * time.Microsecond }
	d := atomicbucket.Decision{Reset: us(res[3])}
	if res[0] == 1 {
		d.Allowed, d.Remaining = true, max(limit-res[1]-1, 0)
	} else {
		d.RetryAfter = us(res[2])
	}
	return d, res[4], nil
}

// SlotOp is an in-flight call of a coalesced batch: an acquisition, or a
// release, of key's slot for token.
type SlotOp struct {
	Key     string
	Token   uint64
	Release bool
}

// SlotBatch sends a coalescing store's in-flight calls together
// (redisstore.Slots, pgstore.Slots): Acquire and Release queue a call and
// wait for its batch's answer, as a coalesced check does. Its methods are
// safe for concurrent use.
type SlotBatch struct {
	co      *Coalescer[SlotOp]
	expired atomic.Int64 // what batches found expired, handed to the next acquisitions
}

// NewSlotBatch starts the goroutines that send batches of at most max calls,
// each batch through send: the store's one call for ops, answering five
// numbers a call, an acquisition's (SlotReplyOf) or a release's SlotRelease
// and four zeros, and the limit it sent (the rule's numbers when the batch
// went: SlotRuler). A call waits at most timeout.
func NewSlotBatch(max int, timeout time.Duration, send func(ctx context.Context, ops []SlotOp) (res []int64, limit int64, err error)) *SlotBatch {
	b := &SlotBatch{}
	b.co = NewCoalescer(max, timeout, func(ctx context.Context, batch []*Waiting[SlotOp]) {
		ops := make([]SlotOp, len(batch))
		for i, p := range batch {
			ops[i] = p.Check
		}
		res, limit, err := send(ctx, ops)
		if err == nil && len(res) != 5*len(batch) {
			err = fmt.Errorf("the store answered %d numbers for %d in-flight calls, want 5 a call", len(res), len(batch))
		}
		for i, p := range batch {
			if err != nil {
				p.Done(atomicbucket.Decision{}, err)
				continue
			}
			r := res[5*i : 5*i+5]
			if p.Check.Release { // its answer travels as the Decision's Remaining
				p.Done(atomicbucket.Decision{Remaining: int64(SlotReleaseOf(r[0]))}, nil)
				continue
			}
			d, expired, err := SlotReplyOf(limit, r)
			b.expired.Add(expired)
			p.Done(d, err)
		}
	})
	return b
}

// Acquire queues an acquisition of key's slot for token and returns its
// answer (SlotChecker.Acquire).
func (b *SlotBatch) Acquire(ctx context.Context, key string, token uint64) (atomicbucket.Decision, int64, error) {
	d, err := b.co.Do(ctx, SlotOp{Key: key, Token: token})
	if err != nil {
		return atomicbucket.Decision{}, 0, err
	}
	return d, b.expired.Swap(0), nil
}

// Release queues the release of token's slot of key and returns its answer
// (SlotChecker.Release).
func (b *SlotBatch) Release(ctx context.Context, key string, token uint64) (SlotRelease, error) {
	d, err := b.co.Do(ctx, SlotOp{Key: key, Token: token, Release: true})
	if err != nil {
		return SlotGone, err
	}
	return SlotRelease(d.Remaining), nil
}

// Close sends what is queued and stops the batches' goroutines.
func (b *SlotBatch) Close() { b.co.Close() }

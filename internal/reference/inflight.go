package reference

import (
	"slices"
	"sync"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// InFlight is the exact reference of an in-flight rule: at most Limit slots of
// a key held at any instant. It is written from the contract, not from an
// implementation: a mutex, a map of each key's slots, no cleverness.
//
// The contract, for a key at time t (times before 0 count as 0):
//   - a slot acquired at a expires at e, a + Hold rounded up to the
//     microsecond; it is held at t when it was acquired, has not been released,
//     and t < e;
//   - an acquisition at t is admitted when fewer than Limit slots are held at
//     t; it then holds a new slot;
//   - Remaining is Limit less the slots held (after the acquisition); Reset is
//     the wait until every held slot has expired (0 when none is held);
//     RetryAfter, for a denial, is the wait until the first held slot expires:
//     the latest a slot can come back if none is released;
//   - a release at t returns the slot, and reports so, when the slot is held
//     at t; any other release (a second one, or one at or after e) changes
//     nothing and reports false;
//   - new numbers (SetNumbers) decide every acquisition after them, counting
//     every slot held, whichever numbers took it; a held slot keeps its
//     expiry. After a cut below the slots held, Remaining is 0 and a
//     denial's RetryAfter is the wait until fewer than Limit are held: the
//     (held − Limit + 1)-th expiry.
type InFlight struct {
	mu    sync.Mutex
	limit int64
	hold  int64 // ns
	held  map[string][]refSlot
	ids   uint64
}

type refSlot struct {
	id      uint64
	expires int64
}

// NewInFlight returns an empty reference for limit slots held at most hold each.
func NewInFlight(limit int64, hold time.Duration) *InFlight {
	return &InFlight{limit: limit, hold: int64(hold), held: map[string][]refSlot{}}
}

// Expiry is when a slot acquired at t expires.
func (f *InFlight) Expiry(t int64) int64 {
	e := max(t, 0) + f.hold
	return (e + 999) / 1000 * 1000
}

// live keeps key's slots held at t and returns them.
func (f *InFlight) live(key string, t int64) []refSlot {
	var keep []refSlot
	for _, s := range f.held[key] {
		if t < s.expires {
			keep = append(keep, s)
		}
	}
	return keep
}

// SetNumbers makes limit and hold the numbers of every acquisition from now.
func (f *InFlight) SetNumbers(limit int64, hold time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit, f.hold = limit, int64(hold)
}

func (f *InFlight) decision(slots []refSlot, t int64, ok bool) atomicbucket.Decision {
	d := atomicbucket.Decision{Allowed: ok, Remaining: max(f.limit-int64(len(slots)), 0)}
	var exp []int64
	for _, s := range slots {
		d.Reset = max(d.Reset, time.Duration(s.expires-t))
		exp = append(exp, s.expires)
	}
	if !ok {
		slices.Sort(exp)
		d.RetryAfter = time.Duration(exp[int64(len(exp))-f.limit] - t)
	}
	return d
}

// Acquire decides an acquisition for key at t; id names the slot when it is
// admitted (0 when not).
func (f *InFlight) Acquire(key string, t int64) (id uint64, d atomicbucket.Decision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t = max(t, 0)
	slots := f.live(key, t)
	if int64(len(slots)) >= f.limit {
		return 0, f.decision(slots, t, false)
	}
	f.ids++
	slots = append(slots, refSlot{f.ids, f.Expiry(t)})
	f.held[key] = slots
	return f.ids, f.decision(slots, t, true)
}

// Peek is the decision Acquire would give at t, holding nothing.
func (f *InFlight) Peek(key string, t int64) atomicbucket.Decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	t = max(t, 0)
	slots := f.live(key, t)
	if int64(len(slots)) >= f.limit {
		return f.decision(slots, t, false)
	}
	d := f.decision(slots, t, true)
	d.Remaining-- // what an acquisition would leave
	d.Reset = max(d.Reset, time.Duration(f.Expiry(t)-t))
	return d
}

// Release returns slot id of key at t, and reports whether it was held then.
func (f *InFlight) Release(key string, id uint64, t int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t = max(t, 0)
	slots := f.held[key]
	for i, s := range slots {
		if s.id == id {
			f.held[key] = append(slots[:i:i], slots[i+1:]...)
			return t < s.expires
		}
	}
	return false
}

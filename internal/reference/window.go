package reference

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/tier"
)

// WindowParams are a window rule's numbers as written: at most Limit cost
// units admitted in any interval of length Window.
type WindowParams struct {
	Limit    int64 // N
	Window   int64 // W, ns
	MaxKeys  int64 // key cap; 0 means none
	AllowCap bool  // at the cap: allow untracked (else deny)
	// Grain, when above 1 ns, makes each admission count as made at the last
	// nanosecond of its grain ((a/Grain+1)·Grain − 1): the runtime's windows
	// are exact at theirs (a microsecond, or a sub-window).
	Grain int64
	// Grace is how long a key's window must have been empty before the key
	// is forgotten (the runtime's SweepGrace); a held key keeps its place
	// under the cap until then.
	Grace int64
	// CapSpacing is how long after forgetting at the cap a new key at the cap
	// may forget again (the runtime's MaxKeys × CapSweepSpacing); the wait
	// it is told is at least until then.
	CapSpacing int64
}

// Window is the exact reference of a sliding window: each key's log of the
// admissions that still count, in the order they came. It is written from the
// contract, not from an implementation: a mutex, a plain map, a slice per
// key, and no cleverness.
//
// The contract, for a key at time t:
//   - in the window: what was admitted at times a with t − W < a ≤ t;
//   - a request of cost c (0 ≤ c ≤ N) is admitted when what is in the window
//     plus c is at most N, and is then logged at t;
//   - Remaining is N less what is in the window (after the request);
//   - RetryAfter, for a denial, is the least wait after which the same
//     request would be admitted if nothing more were: the time when enough of
//     the oldest admissions have left the window (an admission at a leaves it
//     at a + W), less t; Never for a cost above N or below 0;
//   - Reset is the wait until the window is empty (0 when it is);
//   - a key whose window is empty holds nothing: forgetting it loses nothing
//     (lossless reclaim). A key is held from its first admission until it is
//     forgotten, which Forget, or a new key at the cap, does once its window
//     has been empty for Grace; a key cap counts the keys held.
type Window struct {
	mu      sync.Mutex
	p       WindowParams
	logs    map[string][]Admission
	lastCap int64 // when a new key at the cap last forgot
}

// NewWindow returns an empty window reference.
func NewWindow(p WindowParams) *Window {
	return &Window{p: p, logs: map[string][]Admission{}, lastCap: math.MinInt64 / 2}
}

// inWindow is what of log is in the window at t.
func (w *Window) inWindow(log []Admission, t int64) []Admission {
	i := 0
	for i < len(log) && log[i].At+w.p.Window <= t {
		i++
	}
	return log[i:]
}

// live returns what of key's log is in the window at t, and whether the key
// is held. It keeps the newest admission, which says when the key may be
// forgotten.
//
// It keeps too what left the window within Grace before t: a window given
// back to nothing (giveBack) is forgotten a Grace after its last unit
// left, as the runtime's is (a check whose clock reading was up to Grace
// behind found that unit in the window).
func (w *Window) live(key string, t int64) ([]Admission, bool) {
	log, held := w.logs[key]
	if !held {
		return nil, false
	}
	kept := w.inWindow(log, t-w.p.Grace)
	if len(kept) == 0 && len(log) > 0 {
		w.logs[key] = log[len(log)-1:]
	} else {
		w.logs[key] = kept
	}
	return w.inWindow(kept, t), true
}

// held is the time as made of an admission at t: the last nanosecond of its
// grain.
func (w *Window) held(t int64) int64 {
	if w.p.Grain <= 1 {
		return t
	}
	return (t/w.p.Grain+1)*w.p.Grain - 1
}

func sumCost(log []Admission) int64 {
	n := int64(0)
	for _, a := range log {
		n += a.Cost
	}
	return n
}

// waitFor is, for a log live at t, the least wait after which at most room
// is in the window, nothing more being admitted.
func (w *Window) waitFor(log []Admission, t, room int64) time.Duration {
	in := sumCost(log)
	for _, a := range log {
		if in <= room {
			break
		}
		in -= a.Cost
		if in <= room {
			return time.Duration(a.At + w.p.Window - t)
		}
	}
	return 0
}

// decide is the decision for cost at t against log (live at t), and whether
// it admits.
func (w *Window) decide(log []Admission, t, cost int64) Decision {
	in := sumCost(log)
	reset := func(log []Admission) time.Duration {
		for i := len(log) - 1; i >= 0; i-- {
			if log[i].Cost > 0 { // not a give-back's mark (giveBack)
				return time.Duration(log[i].At + w.p.Window - t)
			}
		}
		return 0
	}
	// What is left is never below 0: a settlement's excess may have put
	// more than the limit in the window.
	if cost < 0 || cost > w.p.Limit {
		return Decision{Remaining: max(w.p.Limit-in, 0), Reset: reset(log), RetryAfter: atomicbucket.Never}
	}
	if cost > 0 && in+cost > w.p.Limit { // a cost of 0 takes nothing: admitted, however full
		return Decision{Remaining: max(w.p.Limit-in, 0), Reset: reset(log), RetryAfter: w.waitFor(log, t, w.p.Limit-cost)}
	}
	after := log
	if cost > 0 {
		after = append(slices.Clip(log), Admission{At: w.held(t), Cost: cost})
	}
	return Decision{Allowed: true, Remaining: max(w.p.Limit-in-cost, 0), Reset: reset(after)}
}

// AllowN decides a request of cost for key at t, logging it if admitted.
// Times for one key must not go back (the runtime's clock is monotonic).
func (w *Window) AllowN(key string, t, cost int64) Decision {
	w.mu.Lock()
	defer w.mu.Unlock()
	log, held := w.live(key, t)
	if !held && cost > 0 && cost <= w.p.Limit && w.p.MaxKeys > 0 && int64(len(w.logs)) >= w.p.MaxKeys {
		if t >= w.lastCap+w.p.CapSpacing {
			w.lastCap = t
			w.forget(t)
		}
		if int64(len(w.logs)) >= w.p.MaxKeys {
			if w.p.AllowCap {
				return w.decide(nil, t, cost) // untracked: admitted, logged nowhere
			}
			return Decision{RetryAfter: w.capFree(t)}
		}
	}
	d := w.decide(log, t, cost)
	if d.Allowed && cost > 0 {
		w.logs[key] = append(w.logs[key], Admission{Key: key, At: w.held(t), Cost: cost})
	}
	return d
}

// Settle settles a request of key admitted (by a check at time at) at
// estimate whose actual cost is actual, at t, and returns the units
// forgiven: a higher actual logs the excess at t, at most Limit of it,
// whatever the window holds (a key without a log gets one, as an admission
// would; a new key at the cap none, and all of it is forgiven); a lower
// one gives the difference back from what the window logged at the
// admission's time (held(at): the request's own units, and any other
// admission's of the same grain), as far as they are still in the window:
// the request then counts its actual cost from when it was admitted.
func (w *Window) Settle(key string, t, at, estimate, actual int64) (forgiven int64) {
	if estimate < 0 || actual < 0 || actual == estimate {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if actual < estimate {
		w.giveBack(key, t, w.held(at), estimate-actual)
		return 0
	}
	excess := actual - estimate
	_, held := w.live(key, t)
	if !held && w.p.MaxKeys > 0 && int64(len(w.logs)) >= w.p.MaxKeys {
		if t >= w.lastCap+w.p.CapSpacing {
			w.lastCap = t
			w.forget(t)
		}
		if int64(len(w.logs)) >= w.p.MaxKeys {
			return excess
		}
	}
	c := min(excess, w.p.Limit)
	w.logs[key] = append(w.logs[key], Admission{Key: key, At: w.held(t), Cost: c})
	return excess - c
}

// giveBack takes up to back units out of key's log at t from the
// admissions logged at the time at, if still in the window, newest first.
func (w *Window) giveBack(key string, t, at, back int64) {
	if _, held := w.live(key, t); !held || at+w.p.Window <= t {
		return
	}
	log := w.logs[key]
	out := log[:0:0]
	for i := len(log) - 1; i >= 0; i-- {
		a := log[i]
		if a.At == at && back > 0 {
			take := min(back, a.Cost)
			a.Cost -= take
			back -= take
		}
		if a.Cost > 0 {
			out = append(out, a)
		}
	}
	slices.Reverse(out)
	if newest := log[len(log)-1].At; len(out) == 0 || out[len(out)-1].At < newest {
		// A give-back forgets no sooner: the key is held as long as its
		// newest admission would have held it (emptyAt).
		out = append(out, Admission{Key: key, At: newest})
	}
	w.logs[key] = out
}

// emptyAt is when a held key's window, whose log (or newest admission) is
// log, is empty.
func (w *Window) emptyAt(log []Admission) int64 {
	if len(log) == 0 {
		return math.MinInt64 / 2 // refunded to nothing
	}
	return log[len(log)-1].At + w.p.Window
}

// forget drops the keys whose windows have been empty for Grace at t.
func (w *Window) forget(t int64) int {
	n := 0
	for key, log := range w.logs {
		if w.emptyAt(log)+w.p.Grace <= t {
			delete(w.logs, key)
			n++
		}
	}
	return n
}

// Forget drops the keys whose windows have been empty for Grace at t, as
// the runtime's sweep does, and returns how many.
func (w *Window) Forget(t int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.forget(t)
}

// Holds reports whether the reference holds key.
func (w *Window) Holds(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.logs[key]
	return ok
}

// Held is how many keys the reference holds.
func (w *Window) Held() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int64(len(w.logs))
}

// capFree is, at the cap, the wait until some key can be forgotten.
func (w *Window) capFree(t int64) time.Duration {
	first := int64(math.MaxInt64)
	for _, log := range w.logs {
		first = min(first, w.emptyAt(log)+w.p.Grace)
	}
	return time.Duration(max(first, w.lastCap+w.p.CapSpacing) - t)
}

// Peek is what AllowN would decide for a key with room in the table (the cap
// aside), changing nothing: t may be later than the next request's.
func (w *Window) Peek(key string, t, cost int64) Decision {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.decide(w.inWindow(w.logs[key], t), t, cost)
}

// Refund takes cost back from key's newest admissions (a tier's later rule
// denied the request that made them): they no longer count, as if never
// admitted. It never takes back more than the window holds.
func (w *Window) Refund(key string, t, cost int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in, _ := w.live(key, t); len(in) == 0 {
		return
	}
	log := w.logs[key]
	for len(log) > 0 && cost > 0 {
		last := &log[len(log)-1]
		take := min(cost, last.Cost)
		last.Cost -= take
		cost -= take
		if last.Cost == 0 {
			log = log[:len(log)-1]
		}
	}
	w.logs[key] = log
}

// In is what key has in the window at t.
func (w *Window) In(key string, t int64) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	log, _ := w.live(key, t)
	return sumCost(log)
}

// Len is how many keys hold something at t.
func (w *Window) Len(t int64) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := int64(0)
	for key := range w.logs {
		if log, _ := w.live(key, t); len(log) > 0 {
			n++
		}
	}
	return n
}

// CheckWindow checks, key by key, that no interval of length window holds
// more than limit of the admitted cost: every window (a − W, a] ending at an
// admission a, which is where a window's count is largest. It returns the
// first excess found.
func CheckWindow(limit, window int64, adm []Admission) error {
	byKey := map[string][]Admission{}
	for _, a := range adm {
		byKey[a.Key] = append(byKey[a.Key], a)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		list := byKey[key]
		slices.SortStableFunc(list, func(a, b Admission) int { return cmp.Compare(a.At, b.At) })
		in, first := int64(0), 0
		for _, a := range list {
			in += a.Cost
			for list[first].At+window <= a.At {
				in -= list[first].Cost
				first++
			}
			if in > limit {
				return fmt.Errorf("key %q: %d admitted in the %v ending at %d, more than %d", key, in, time.Duration(window), a.At, limit)
			}
		}
	}
	return nil
}

// Step is key's part in a tier request of the given cost, for
// tier.At: a window, which TierAt looks at first and takes from
// last (tier.Look); its RefundAt does nothing. gen's random-policy
// harness (run_test.go) calls it from the code it generates.
func (w *Window) Step(key string, cost int64) tier.Step { return windowStep{w, key, cost} }

type windowStep struct {
	w    *Window
	key  string
	cost int64
}

func (s windowStep) AllowNAt(now atomicbucket.Time) Decision {
	return s.w.AllowN(s.key, int64(now), s.cost)
}
func (s windowStep) PeekAt(now atomicbucket.Time) Decision {
	return s.w.Peek(s.key, int64(now), s.cost)
}
func (s windowStep) RefundAt(atomicbucket.Time) {}

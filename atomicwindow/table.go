package atomicwindow

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/keycap"

	"github.com/puzpuzpuz/xsync/v3"
)

// Table is a set of windows, one per key, made on a key's first
// admission. Its methods are safe for concurrent use; checks on existing keys
// take no lock and never allocate (a new key takes the map's lock for it
// once).
//
// A table keeps itself as a Table does: a key whose window has been empty for
// SweepGrace is reclaimed when a new key meets the key cap, and by a sweep the
// table runs by itself when new keys have doubled it (beyond 4,096
// keys); Sweep and RunSweeper only return memory sooner. An empty window
// holds nothing, so reclaiming loses nothing: a key that comes back gets the
// window it would have had.
type Table[K comparable] struct {
	m   *xsync.MapOf[K, *windowState]
	r   Rule                 // the policy's numbers
	cur atomic.Pointer[Rule] // the numbers in force (&r until SetNumbers)
	// own is the keys with numbers of their own (SetKeyNumbersAt); nil until
	// the first, so that a table without them pays one load of nil.
	own        atomic.Pointer[xsync.MapOf[K, *Rule]]
	changes    sync.Mutex // serialises the changes of keys' own numbers
	maxKeys    int64
	allowAtCap bool

	keys      atomic.Int64
	evictions atomic.Int64
	atCapHits atomic.Int64
	// sweeps' earliest reclaim is a lower bound on the earliest time (ns) a
	// key's window is empty for SweepGrace: admissions only make it later.
	sweeps keycap.Sweeps
}

// NewTable returns an empty table of windows for rule r (o.KeyHash is
// not used: windows have no grid to place).
func NewTable[K comparable](r Rule, o atomicbucket.TableOptions) *Table[K] {
	var opts []func(*xsync.MapConfig)
	if o.Presize > 0 {
		opts = append(opts, xsync.WithPresize(o.Presize))
	}
	t := &Table[K]{m: xsync.NewMapOf[K, *windowState](opts...), r: r, maxKeys: o.MaxKeys, allowAtCap: o.AllowAtCap}
	t.cur.Store(&t.r)
	t.sweeps.Init(o.MaxKeys, int64(atomicbucket.MaxUptime))
	return t
}

// PolicyRule returns the table's rule as the policy gives it, whatever the
// numbers in force.
func (t *Table[K]) PolicyRule() *Rule { return &t.r }

// Rule returns the table's rule in force: the policy's, or SetNumbers'.
func (t *Table[K]) Rule() *Rule { return t.cur.Load() }

// Len is the number of keys tracked (some of whose windows may be empty, not
// yet reclaimed).
func (t *Table[K]) Len() int64 { return t.keys.Load() }

// Stats returns the table's counters.
func (t *Table[K]) Stats() atomicbucket.TableStats {
	return atomicbucket.TableStats{Keys: t.keys.Load(), Evictions: t.evictions.Load(), AtCapHits: t.atCapHits.Load()}
}

// Allow reports whether a request of cost 1 for key is admitted now,
// counting it if so.
func (t *Table[K]) Allow(key K) bool { return t.allowCost(key, clampNow(atomicbucket.Now()), 1) }

// AllowAt is Allow at time now.
func (t *Table[K]) AllowAt(key K, now atomicbucket.Time) bool {
	return t.allowCost(key, clampNow(now), 1)
}

// AllowCost is AllowNAt's yes or no, without the decision's numbers: a cost
// of 0 is admitted, one outside [0, limit] denied.
func (t *Table[K]) AllowCost(key K, now atomicbucket.Time, cost int64) bool {
	return t.allowCost(key, clampNow(now), cost)
}

// ruleFor is the rule in force for key: its own numbers', or the table's.
func (t *Table[K]) ruleFor(key K) *Rule {
	if own := t.own.Load(); own != nil {
		if r, ok := own.Load(key); ok {
			return r
		}
	}
	return t.cur.Load()
}

func (t *Table[K]) allowCost(key K, now, cost int64) bool {
	for {
		r := t.ruleFor(key)
		if cost < 1 || cost > r.limit {
			return cost == 0
		}
		st, ok := t.m.Load(key)
		if !ok {
			if st = t.create(key, r, now); st == nil {
				return t.allowAtCap
			}
		}
		if st.rule != r {
			t.carry(key, st, r, now)
			continue
		}
		if _, full := st.blocked(now); full {
			return false
		}
		if ok, alive := r.allow(st.w, now, cost); alive {
			return ok
		}
		retry()
	}
}

// AllowN decides a request of cost for key now, counting it if admitted.
// Costs at the limits behave as for Window.AllowN; a key without a window is
// given one only by a request that counts something.
func (t *Table[K]) AllowN(key K, cost int64) atomicbucket.Decision {
	return t.AllowNAt(key, atomicbucket.Now(), cost)
}

// AllowNAt is AllowN at time now.
func (t *Table[K]) AllowNAt(key K, now atomicbucket.Time, cost int64) atomicbucket.Decision {
	n := clampNow(now)
	for {
		r := t.ruleFor(key)
		st, ok := t.m.Load(key)
		if !ok {
			if cost <= 0 || cost > r.limit {
				return r.peekFresh(n, cost)
			}
			if st = t.create(key, r, n); st == nil {
				return t.capDecision(r, n, cost)
			}
		}
		if st.rule != r {
			t.carry(key, st, r, n)
			continue
		}
		if leave, full := st.blocked(n); full {
			if d, alive := r.peek(st.w, n, cost); alive {
				return st.deny(d, n, cost, leave)
			}
			retry()
			continue
		}
		if d, alive := r.allowN(st.w, n, cost); alive {
			return d
		}
		retry()
	}
}

// Peek is what AllowN would decide for key now (if the key cap allowed it),
// counting nothing.
func (t *Table[K]) Peek(key K, cost int64) atomicbucket.Decision {
	return t.PeekAt(key, atomicbucket.Now(), cost)
}

// PeekAt is Peek at time now. A key's window written in numbers no longer
// in force is carried into them first, as a check carries it (a peek is a
// use): so a peek's wait is the one later checks and peeks find, not one
// of a carry at another time.
func (t *Table[K]) PeekAt(key K, now atomicbucket.Time, cost int64) atomicbucket.Decision {
	n := clampNow(now)
	for {
		r := t.ruleFor(key)
		st, ok := t.m.Load(key)
		if !ok {
			return r.peekFresh(n, cost)
		}
		if st.rule != r {
			t.carry(key, st, r, n)
			continue
		}
		d, alive := r.peek(st.w, n, cost)
		if !alive { // removed, or being rewritten: look again
			retry()
			continue
		}
		if leave, full := st.blocked(n); full {
			return st.deny(d, n, cost, leave)
		}
		return d
	}
}

// Reset empties key's window now (ResetAt): what it admitted no longer
// counts, as after a refund of everything. It reports whether the key had a
// window.
func (t *Table[K]) Reset(key K) bool { return t.ResetAt(key, atomicbucket.Now()) }

// ResetAt empties key's window as of now: what was admitted at or before now
// (in a grain that begins by then) no longer counts; what a check at a
// later explicit time admitted stays.
// Under the map's lock for the key its window is killed (a check that
// holds it looks the key up again, so none is lost or counted in the
// emptied window after the reset) and replaced by what stays, or removed
// when nothing does. It reports whether the key had a window.
func (t *Table[K]) ResetAt(key K, now atomicbucket.Time) bool {
	n := clampNow(now)
	for {
		had, removed, busy := false, false, false
		t.m.Compute(key, func(cur *windowState, loaded bool) (*windowState, bool) {
			if !loaded {
				return cur, true
			}
			had = true
			later := cur.kill(n)
			if later == nil {
				busy = true // a give-back is rewriting it in place (settle.go): look again
				return cur, false
			}
			if len(*later) == 0 {
				removed = true
				return nil, true
			}
			return t.ruleFor(key).fill(*later, n), false
		})
		if busy {
			retry()
			continue
		}
		if removed {
			t.keys.Add(-1)
		}
		return had
	}
}

// capDecision decides a request for a new key at the cap with nothing to
// reclaim: against an empty window that is not kept (TableOptions.AllowAtCap), or denied
// until a key can be reclaimed.
func (t *Table[K]) capDecision(r *Rule, now, cost int64) atomicbucket.Decision {
	if t.allowAtCap {
		return r.peekFresh(now, cost)
	}
	return atomicbucket.Decision{RetryAfter: t.sweeps.CapWait(now)}
}

// create makes key's window in r, or returns the one another goroutine just
// made; nil when the key is new and the table is at its cap with nothing to
// reclaim.
func (t *Table[K]) create(key K, r *Rule, now int64) *windowState {
	for !keycap.Claim(&t.keys, t.maxKeys) {
		if st, ok := t.m.Load(key); ok {
			return st
		}
		if !t.sweeps.AtCap(now, func() (int, int64) { return t.sweepHeld(now) }) {
			t.atCapHits.Add(1)
			return nil
		}
	}
	got, loaded := t.m.LoadOrStore(key, &windowState{rule: r, w: r.fresh()})
	if loaded {
		t.keys.Add(-1)
		return got
	}
	// The new window empties no sooner than a window from now: the bound on
	// the earliest reclaim stays a lower bound.
	t.sweeps.LowerNext(r.end(now/r.grain+1) + r.window + int64(atomicbucket.SweepGrace))
	t.sweeps.Grown(t.keys.Load(), func() (int, int64) { return t.sweepHeld(now) })
	return got
}

// Sweep removes the keys whose windows have been empty for SweepGrace, and
// returns how many it removed.
func (t *Table[K]) Sweep() int { return t.SweepAt(atomicbucket.Now()) }

// SweepAt is Sweep at time now.
func (t *Table[K]) SweepAt(now atomicbucket.Time) int {
	n := clampNow(now)
	return t.sweeps.Sweep(func() (int, int64) { return t.sweepHeld(n) })
}

// sweepHeld sweeps at now (ns), as t.sweeps runs it, and returns the keys
// it removed and the keys left. A
// window is removed by compare-and-swapping its head word, as read empty,
// into a dead one under the map's lock for the key, and deleting the key in
// the same critical section: an admission in between changed the head, so the
// CAS fails; one after it finds the head dead and looks the key up again. The
// grace covers a check whose clock reading precedes the sweep's: it would
// have found the window empty too.
func (t *Table[K]) sweepHeld(now int64) (int, int64) {
	removed := 0
	t.m.Range(func(key K, st *windowState) bool {
		w := st.w
		at, alive := st.emptyAt(w[0].Load())
		if !alive {
			return true
		}
		if at+int64(atomicbucket.SweepGrace) > now {
			t.sweeps.LowerNext(at + int64(atomicbucket.SweepGrace))
			return true
		}
		t.m.Compute(key, func(cur *windowState, loaded bool) (*windowState, bool) {
			if !loaded || cur != st {
				return cur, !loaded
			}
			h := w[0].Load()
			if at, alive := st.emptyAt(h); !alive || at+int64(atomicbucket.SweepGrace) > now || !w[0].CompareAndSwap(h, h|deadWindow) {
				t.sweeps.LowerNext(at + int64(atomicbucket.SweepGrace))
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
	return removed, t.keys.Load()
}

// RunSweeper calls Sweep every interval (a minute when interval
// is not positive) until ctx is done.
func (t *Table[K]) RunSweeper(ctx context.Context, interval time.Duration) {
	keycap.RunEvery(ctx, interval, func() { t.Sweep() })
}

// carry replaces key's window st, written in other numbers, by itself
// carried into r at now (windowState.carry), under the map's lock for the
// key; a state another goroutine replaced or removed meanwhile is left to
// the next look.
func (t *Table[K]) carry(key K, st *windowState, r *Rule, now int64) {
	t.m.Compute(key, func(cur *windowState, loaded bool) (*windowState, bool) {
		if !loaded || cur != st {
			return cur, !loaded
		}
		if next := st.carry(r, now); next != nil {
			return next, false
		}
		return cur, false // dead: a sweep is deleting it
	})
}

// SetNumbers makes n the table's numbers from now on (RuleOf: n.Tokens
// in any n.Period, n.Burst n.Tokens), for every key: each key's window is
// carried into them on its next check. Numbers a window cannot take are
// refused (an error wrapping ErrNumbers), and nothing changes.
func (t *Table[K]) SetNumbers(n atomicbucket.Numbers, cost int64) error {
	r, err := RuleOf(n, cost)
	if err != nil {
		return err
	}
	if r == t.r {
		t.cur.Store(&t.r)
		return nil
	}
	t.cur.Store(&r)
	return nil
}

// ClearNumbers returns the table to the policy's numbers.
func (t *Table[K]) ClearNumbers() { t.cur.Store(&t.r) }

// SetKeyNumbersAt gives key numbers of its own from now on (RuleOf:
// n.Tokens in any n.Period, the limit as n.Burst, at least cost), whatever
// the table's: a customer's quota raised, or cut, for that customer alone.
// Its window is carried into them as of now, holding what it held, as
// SetNumbers carries every key's. Numbers a window cannot take are refused
// (ErrNumbers), and so is the empty key (ErrEmptyKey); nothing
// changes then.
func (t *Table[K]) SetKeyNumbersAt(now atomicbucket.Time, key K, n atomicbucket.Numbers, cost int64) error {
	if s, ok := any(key).(string); ok && s == "" {
		return atomicbucket.ErrEmptyKey
	}
	r, err := RuleOf(n, cost)
	if err != nil {
		return err
	}
	t.changes.Lock()
	defer t.changes.Unlock()
	own := t.own.Load()
	if own == nil {
		own = xsync.NewMapOf[K, *Rule]()
		t.own.Store(own)
	}
	own.Store(key, &r)
	t.carryKey(key, clampNow(now))
	return nil
}

// ClearKeyNumbersAt takes key's own numbers away: from now on it has the
// table's, its window carried into them as of now. A key without numbers
// of its own is left alone.
func (t *Table[K]) ClearKeyNumbersAt(now atomicbucket.Time, key K) {
	t.changes.Lock()
	defer t.changes.Unlock()
	own := t.own.Load()
	if own == nil {
		return
	}
	if _, ok := own.LoadAndDelete(key); ok {
		t.carryKey(key, clampNow(now))
	}
}

// carryKey carries key's window, if it has one, into the numbers in force
// for it, as of now (ns).
func (t *Table[K]) carryKey(key K, now int64) {
	for {
		st, ok := t.m.Load(key)
		r := t.ruleFor(key)
		if !ok || st.rule == r {
			return
		}
		t.carry(key, st, r, now)
	}
}

// KeyNumbersFor returns the numbers in force for key and where they come
// from.
func (t *Table[K]) KeyNumbersFor(key K) (atomicbucket.Numbers, atomicbucket.Origin) {
	if own := t.own.Load(); own != nil {
		if r, ok := own.Load(key); ok {
			return NumbersOf(r), atomicbucket.FromKeyOverride
		}
	}
	return t.NumbersFor()
}

// KeysWithNumbers is the number of keys with numbers of their own.
func (t *Table[K]) KeysWithNumbers() int {
	if own := t.own.Load(); own != nil {
		return own.Size()
	}
	return 0
}

// NumbersFor returns the table's numbers in force (for every key without
// numbers of its own) and where they come from.
func (t *Table[K]) NumbersFor() (atomicbucket.Numbers, atomicbucket.Origin) {
	r := t.cur.Load()
	if r == &t.r {
		return NumbersOf(r), atomicbucket.FromPolicy
	}
	return NumbersOf(r), atomicbucket.FromOverride
}

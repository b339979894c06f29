package atomicbucket

import (
	"errors"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
)

// A table's numbers at run time.
//
// Until its numbers first change, a table is what it always was: every bucket
// is written in the table's own rule, and a check pays one atomic load (ov,
// nil) to know it. The first change sets ov, for good: from then on every
// check resolves the numbers its bucket is written in (slot.nums, an
// installation: numbers.go) and judges by them.
//
// Why no check is judged by replaced numbers, and no bucket is reset: an
// installation that is replaced records its successor (succ) before the
// change returns, and a check that finds its bucket written in a replaced
// installation converts it first (settle), following the successions in
// order, each as of the moment it was made (convertWord), so that a bucket
// untouched since a change equals one converted at the change. A conversion
// replaces the bucket's slot under the map's lock for the key, after a
// compare-and-swap of the old word to dead: a check that took tokens from the
// old word before that is in the converted one, and a check that comes after
// finds the word dead and looks the key up again, as after a sweep. A key
// given numbers of its own is converted when they are set (its old numbers
// are still in force for the other keys, so nothing else would tell it); a
// bucket is made in the numbers it reads under the map's lock for its key,
// which the change takes after installing them (create).

// overlay is a table's numbers in force: for every key (plan), and for some
// keys of their own (keys). A change of plan installs a new overlay; keys is
// one concurrent map for the table's life (nil until a key is first given
// numbers), shared by its overlays and changed in place under t.changes, so
// that giving n keys numbers of their own costs O(n), not a copy of the map
// per key. A key's entry is its installation; it is stored (installed)
// before its successions are recorded, as a new overlay is.
type overlay[K comparable] struct {
	plan *numbers
	keys *xsync.MapOf[K, *numbers]
}

// forKey is the installation in force for key.
func (o *overlay[K]) forKey(key K) *numbers {
	if o.keys != nil {
		if n, ok := o.keys.Load(key); ok {
			return n
		}
	}
	return o.plan
}

// numsOf is the installation s is written in.
func (t *Table[K]) numsOf(s *slot) *numbers {
	if n := t.m.numsOf(s); n != nil {
		return n
	}
	return &t.base
}

// settle brings key's bucket, if it has one, to the numbers in force for it:
// the successions of the numbers it is written in, in order, then, when the
// key has been given numbers of its own since, a conversion into them as of
// the moment they were set. A change under way (installed, its successions
// not yet recorded) is left to the changer, which settles the key after it:
// until then the bucket's numbers are the ones in force.
func (t *Table[K]) settle(key K) {
	t.m.compute(key, func(cur *slot, loaded bool) (*slot, bool) {
		if !loaded {
			return nil, true // no bucket: nothing to convert
		}
		from := t.numsOf(cur)
		var chain []*succession
		n := from
		for s := n.next(); s != nil; s = n.next() {
			chain = append(chain, s)
			n = s.to
		}
		// The key's own numbers, read after the successions: a change installs
		// its overlay before it records successions.
		var own *numbers
		if ov := t.ov.Load(); ov != nil {
			if k := ov.forKey(key); k != n && k.origin == FromKeyOverride && k.next() == nil {
				own = k
			}
		}
		if len(chain) == 0 && own == nil {
			return cur, false
		}
		var w int64
		for {
			w = cur.tat.Load()
			if w < 0 {
				return cur, false // dead: being removed by whoever killed it, under this lock
			}
			if cur.tat.CompareAndSwap(w, moved) {
				break
			}
		}
		// Read after the word is dead: no check can act on it any more, and
		// every one that did has recorded its time (see).
		seen := cur.seen.Load()
		n = from
		for _, s := range chain {
			at := convertAt(&n.rule, &s.to.rule, s.at, seen)
			w = convertWord(&n.rule, &s.to.rule, s.env, w, t.m.anchorOf(cur), at, s.carry)
			seen = max(seen, at)
			n = s.to
		}
		if own != nil {
			at := convertAt(&n.rule, &own.rule, own.since, seen)
			w = convertWord(&n.rule, &own.rule, own.env, w, t.m.anchorOf(cur), at, own.carryIn)
			seen = max(seen, at)
			n = own
		}
		nums := n
		if n == &t.base {
			nums = nil
		}
		next := t.m.again(cur, nums)
		next.tat.Store(w)
		next.seen.Store(seen)
		t.reclaim.filled(&n.rule, w, t.m.anchorOf(cur))
		return next, false
	})
}

// current returns key's bucket, written in the numbers in force, and those
// numbers, converting a bucket written in replaced ones; when make is set, a
// key without a bucket gets one (s nil: the key is new and the table is at its
// cap, with create's next). Without a bucket, n is the key's numbers.
// ov is the overlay the caller loaded (not nil).
func (t *Table[K]) current(ov *overlay[K], key K, now int64, mk bool) (s *slot, n *numbers, next int64) {
	for {
		if s = t.m.load(key); s == nil {
			if !mk {
				return nil, ov.forKey(key), 0
			}
			if s, next = t.create(key, now); s == nil {
				return nil, ov.forKey(key), next
			}
		}
		n = t.numsOf(s)
		if n.next() == nil {
			return s, n, 0
		}
		t.settle(key)
		ov = t.ov.Load()
	}
}

// allowOver is AllowAt (cost 1) or the Allowed of AllowNAt for a table whose
// numbers have changed; now in ns, clamped.
func (t *Table[K]) allowOver(ov *overlay[K], key K, now, cost int64) bool {
	for {
		s, n, _ := t.current(ov, key, now, true)
		r := &n.rule
		if cost < 0 || cost > r.burst {
			return false
		}
		if s == nil {
			return t.allowAtCap && r.debt+cost*r.emit <= r.tau
		}
		if now < n.since {
			if d, alive := t.late(s, n, now, cost, true); alive {
				return d.Allowed
			}
		} else {
			nowU := r.units(now, t.m.anchorOf(s))
			tat, ok := advance(&s.tat, &s.seen, now, nowU, cost*r.emit, nowU+r.tau)
			if tat >= 0 {
				return ok
			}
		}
		retry()
		ov = t.ov.Load()
	}
}

// allowNOver is AllowNAt for a table whose numbers have changed.
func (t *Table[K]) allowNOver(ov *overlay[K], key K, now, cost int64) Decision {
	for {
		// A cost the key's numbers can never take makes no bucket.
		mk := cost > 0 && cost <= ov.forKey(key).rule.burst
		s, n, next := t.current(ov, key, now, mk)
		r := &n.rule
		switch {
		case s == nil && (!mk || t.allowAtCap):
			return t.absentIn(r, key, now, cost)
		case s == nil:
			return Decision{RetryAfter: time.Duration(next - now)} // at the cap
		}
		nowU := r.units(now, t.m.anchorOf(s))
		switch {
		case now < n.since:
			if d, alive := t.late(s, n, now, cost, true); alive {
				return d
			}
		case cost < 0 || cost > r.burst:
			if tat := s.tat.Load(); tat >= 0 {
				return r.outOfRange(tat, now, nowU, t.m.anchorOf(s))
			}
		default:
			inc := cost * r.emit
			tat, ok := advance(&s.tat, &s.seen, now, nowU, inc, nowU+r.tau)
			if tat >= 0 {
				return r.decide(ok, tat, inc, now, nowU, t.m.anchorOf(s))
			}
		}
		retry()
		ov = t.ov.Load()
	}
}

// absentIn decides a request of cost against the fresh bucket key would get
// under r at now (ns), without making it.
func (t *Table[K]) absentIn(r *Rule, key K, now, cost int64) Decision {
	anchor := r.anchorFor(t.gridHash(key))
	return r.peek(r.fresh(now, anchor), now, anchor, cost)
}

// late judges a check of cost stamped now (ns) on s, written in n, before n
// came in force (numbers.late); take: an admission takes its tokens. alive is
// false when s is dead.
func (t *Table[K]) late(s *slot, n *numbers, now, cost int64, take bool) (Decision, bool) {
	at, pen := n.late(now, n.rule.mode != modeGreedy)
	return n.rule.judgeLate(&s.tat, &s.seen, now, at, pen, t.m.anchorOf(s), cost, take)
}

// peekOver is PeekAt for a table whose numbers have changed.
func (t *Table[K]) peekOver(ov *overlay[K], key K, now, cost int64) Decision {
	for {
		s, n, _ := t.current(ov, key, now, false)
		if s == nil {
			return t.absentIn(&n.rule, key, now, cost)
		}
		if now < n.since {
			if d, alive := t.late(s, n, now, cost, false); alive {
				return d
			}
		} else if tat := s.tat.Load(); tat >= 0 {
			return n.rule.peek(tat, now, t.m.anchorOf(s), cost)
		}
		retry()
		ov = t.ov.Load()
	}
}

// refundOver is RefundAt for a table whose numbers have changed.
func (t *Table[K]) refundOver(ov *overlay[K], key K, now, cost int64) {
	for {
		s, n, _ := t.current(ov, key, now, false)
		r := &n.rule
		if s == nil || cost <= 0 || cost > r.burst {
			return
		}
		// Given back no earlier than the word's numbers came in force: a
		// bucket full at an earlier stamp would be fuller than full now.
		at := max(now, n.since)
		if giveBack(&s.tat, &s.seen, at, r.units(at, t.m.anchorOf(s)), cost*r.emit) {
			t.reclaim.filled(r, s.tat.Load(), t.m.anchorOf(s))
			return
		}
		retry()
		ov = t.ov.Load()
	}
}

// reserveOver is ReserveAt for a table whose numbers have changed.
func (t *Table[K]) reserveOver(ov *overlay[K], key K, now Time, cost int64, maxWait time.Duration) Reservation {
	n := clampNow(now)
	for {
		mk := cost > 0 && cost <= ov.forKey(key).rule.burst
		s, nm, next := t.current(ov, key, n, mk)
		r := &nm.rule
		switch {
		case s == nil && (!mk || t.allowAtCap):
			// Untracked keys cannot hold tokens for later: only an immediate admission.
			return immediate(t.absentIn(r, key, n, cost), now)
		case s == nil:
			return immediate(Decision{RetryAfter: time.Duration(next - n)}, now)
		}
		if n < nm.since {
			// Stamped before the numbers came in force: admitted now or not
			// at all (late), never ahead of time.
			if d, alive := t.late(s, nm, n, cost, true); alive {
				return immediate(d, now)
			}
		} else if res, alive := r.reserve(&s.tat, &s.seen, n, t.m.anchorOf(s), cost, maxWait); alive {
			res.owner, res.nums = &t.reclaim, nm
			return res
		}
		retry()
		ov = t.ov.Load()
	}
}

// overlayHeld is the table's numbers in force, as an overlay even before
// the first change. Callers hold t.changes.
func (t *Table[K]) overlayHeld() *overlay[K] {
	if ov := t.ov.Load(); ov != nil {
		return ov
	}
	return &overlay[K]{plan: &t.base}
}

// SetNumbersAt makes n the numbers of every key without numbers of its own,
// from now on: every bucket is carried into them as of now, by c. Numbers a
// rule cannot hold are refused with NewRule's error (wrapping
// ErrInvalidLimit), and nothing changes. See Numbers.
func (t *Table[K]) SetNumbersAt(now Time, n Numbers, c Carry) error {
	r, err := t.rule.WithNumbers(n)
	if err != nil {
		return err
	}
	t.setPlan(clampNow(now), &numbers{rule: r, origin: FromOverride}, c)
	return nil
}

// ClearNumbersAt returns the keys without numbers of their own to the table's
// own rule (the policy's numbers), carrying their buckets by c.
func (t *Table[K]) ClearNumbersAt(now Time, c Carry) {
	t.changes.Lock()
	defer t.changes.Unlock()
	if t.ov.Load() == nil {
		return // never changed
	}
	t.setPlanHeld(clampNow(now), &numbers{rule: t.rule, origin: FromPolicy}, c)
}

func (t *Table[K]) setPlan(now int64, n *numbers, c Carry) {
	t.changes.Lock()
	defer t.changes.Unlock()
	t.setPlanHeld(now, n, c)
}

func (t *Table[K]) setPlanHeld(now int64, n *numbers, c Carry) {
	old := t.overlayHeld()
	n.since, n.hi = now, t.faster(n.rule.limit)
	env := t.reclaim.changing(t.rule.limit, &n.rule.limit, now)
	t.ov.Store(&overlay[K]{plan: n, keys: old.keys})
	old.plan.supersede(n, now, c, env)
}

// ErrEmptyKey refuses numbers for the empty string key, which no door ever
// checks (a request without a key is answered as missing its key), so that
// numbers given to it would never apply.
var ErrEmptyKey = errors.New("atomicbucket: the empty key has no numbers of its own: no door checks it (a request without a key is missing_key)")

// SetKeyNumbersAt gives key numbers of its own, from now on, whatever the
// table's: its bucket is carried into them as of now, by c. Numbers a rule
// cannot hold are refused (see SetNumbersAt), and so is the empty string key
// (ErrEmptyKey).
func (t *Table[K]) SetKeyNumbersAt(now Time, key K, n Numbers, c Carry) error {
	if s, ok := any(key).(string); ok && s == "" {
		return ErrEmptyKey
	}
	r, err := t.rule.WithNumbers(n)
	if err != nil {
		return err
	}
	at := clampNow(now)
	t.changes.Lock()
	defer t.changes.Unlock()
	old := t.overlayHeld()
	nk := &numbers{rule: r, since: at, origin: FromKeyOverride, carryIn: c, env: t.reclaim.changing(t.rule.limit, nil, at), hi: t.faster(r.limit)}
	if old.keys == nil { // the first key with numbers of its own
		keys := xsync.NewMapOf[K, *numbers]()
		keys.Store(key, nk)
		t.ov.Store(&overlay[K]{plan: old.plan, keys: keys})
	} else if prev, ok := old.keys.LoadAndStore(key, nk); ok {
		prev.supersede(nk, at, c, nk.env)
	}
	t.settle(key)
	return nil
}

// ClearKeyNumbersAt takes key's own numbers away: from now on it has the
// table's, its bucket carried into them as of now, by c. A key without
// numbers of its own is left alone.
func (t *Table[K]) ClearKeyNumbersAt(now Time, key K, c Carry) {
	at := clampNow(now)
	t.changes.Lock()
	defer t.changes.Unlock()
	old := t.ov.Load()
	if old == nil || old.keys == nil {
		return
	}
	prev, ok := old.keys.LoadAndDelete(key)
	if !ok {
		return
	}
	// The key's bucket is written in the plan's numbers from now on: in a
	// copy of them installed now, which follows the plan's successions, so
	// that a check stamped before now is judged as stamped before the key's
	// numbers changed (late).
	back := &numbers{rule: old.plan.rule, since: at, origin: old.plan.origin, hi: t.fastest, follows: old.plan}
	prev.supersede(back, at, c, t.reclaim.changing(t.rule.limit, nil, at))
	t.settle(key)
}

// faster takes l's rate into the fastest the table has had and returns that.
// Callers hold t.changes.
func (t *Table[K]) faster(l Limit) rate {
	if r := rateOf(l); r.faster(t.fastest) {
		t.fastest = r
	}
	return t.fastest
}

// NumbersFor returns the numbers in force for key and where they come from.
func (t *Table[K]) NumbersFor(key K) (Numbers, Origin) {
	ov := t.ov.Load()
	if ov == nil {
		return NumbersOf(t.rule.limit), FromPolicy
	}
	n := ov.forKey(key)
	return n.Numbers(), n.origin
}

// keysWithNumbers is the number of keys with numbers of their own.
func (t *Table[K]) keysWithNumbers() int {
	if ov := t.ov.Load(); ov != nil && ov.keys != nil {
		return ov.keys.Size()
	}
	return 0
}

// ResetAt makes key's bucket new as of now ("unblock this user"): from now it
// holds the initial tokens of the numbers in force for the key, as a key first
// seen at now would (its interval grid, placed by the key, stays). Checks
// under way either took their tokens before (and are forgotten with the old
// bucket) or find the new one; a reservation on the old bucket gives nothing
// back. A key without a bucket is new already and is left as it is. It reports
// whether the key had a bucket.
func (t *Table[K]) ResetAt(key K, now Time) bool {
	at := clampNow(now)
	var made *slot
	r := &t.rule
	t.m.compute(key, func(cur *slot, loaded bool) (*slot, bool) {
		if !loaded {
			return nil, true
		}
		for {
			w := cur.tat.Load()
			if w < 0 {
				return cur, false // swept: its sweep removes it
			}
			if cur.tat.CompareAndSwap(w, dead) {
				break
			}
		}
		// Made under the key's lock, in the numbers in force for the key, as
		// create makes a bucket, but full only from now: a bucket full since
		// its reset counts as full at a later change once full long enough,
		// like any other (Carry), so a reset never mints through a change.
		var nums *numbers
		if ov := t.ov.Load(); ov != nil {
			if nums = ov.forKey(key); nums == &t.base {
				nums = nil
			}
		}
		made = t.m.again(cur, nums)
		r = &t.numsOf(made).rule
		made.tat.Store(r.fresh(at, t.m.anchorOf(made)))
		made.seen.Store(max(cur.seen.Load(), at))
		return made, false
	})
	if made == nil {
		return false
	}
	t.reclaim.filled(r, made.tat.Load(), t.m.anchorOf(made))
	return true
}

// ChangedRule is, once the table's numbers have ever changed, the rule in
// force for key; nil before (one atomic load). Generated middlewares use it to
// keep their constant fields until then.
func (t *Table[K]) ChangedRule(key K) *Rule {
	if ov := t.ov.Load(); ov != nil {
		return &ov.forKey(key).rule
	}
	return nil
}

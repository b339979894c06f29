package atomicwindow

import (
	"sync/atomic"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Settled costs on a window (atomicbucket's SettleAt on a bucket): a request
// admitted at an estimate is settled at its actual cost. A window counts the
// excess of a higher actual at settlement time, even beyond its limit: the
// window then holds more than it admits, and denies until enough of it has
// left. A lower actual gives nothing back: a unit counted in a window cannot
// be taken out of it once later admissions were counted over it (the exact
// ring keeps times in admission order), so a window keeps an overestimate.
// One settlement counts at most Limit units (the rest is forgiven and
// returned), and a counted window's sub-window at most LimitMax.

// charge counts excess units at now (ns) on the words w, beyond what a check
// may admit: at most the limit, and in a counted window at most what its
// sub-window's count can hold. It returns the units not counted, and alive
// false when w is dead (nothing done).
func (r *Rule) charge(w []atomic.Uint64, now, excess int64) (forgiven int64, alive bool) {
	for {
		v, ok := r.view(w, now, 0)
		if !ok {
			return 0, false
		}
		c := min(excess, r.limit)
		if !r.exact && v.nextK == v.head>>countBits {
			c = min(c, int64(countMask-v.head&countMask))
		}
		if c <= 0 {
			return excess, true
		}
		if r.commit(w, &v, c) {
			return excess - c, true
		}
	}
}

// SettleAt settles a request of key admitted at cost estimate whose actual
// cost is actual, at now: a higher actual counts the excess in key's window
// at now (making the key's window if it has none; a new key at the cap gets
// none, and all of it is forgiven), at most Limit units; a lower one gives
// nothing back. It returns the units of the excess forgiven. A negative
// estimate or actual settles nothing.
func (t *Table[K]) SettleAt(key K, now atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	if estimate < 0 || actual <= estimate {
		return 0
	}
	excess := actual - estimate
	n := clampNow(now)
	for {
		r := t.ruleFor(key)
		st, ok := t.m.Load(key)
		if !ok {
			if st = t.create(key, r, n); st == nil {
				return excess
			}
		}
		if st.rule != r {
			t.carry(key, st, r, n)
			continue
		}
		if f, alive := r.charge(st.w, n, excess); alive {
			return f
		}
		retry()
	}
}

// SettleAt is Table.SettleAt for the one window.
func (g *Window) SettleAt(now atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	if estimate < 0 || actual <= estimate {
		return 0
	}
	n := clampNow(now)
	for {
		st := g.state(n)
		if f, alive := st.rule.charge(st.w, n, actual-estimate); alive {
			return f
		}
	}
}

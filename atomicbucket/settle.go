package atomicbucket

import "sync/atomic"

// Settled costs. A request whose cost is known only after it is served (the
// tokens a language model generated, the bytes a query scanned) is admitted
// at an estimate (AllowNAt), and settled when its actual cost is known
// (SettleAt): a lower actual gives the difference back, as RefundAt does; a
// higher one charges the excess at once, even below empty. A bucket below
// empty is in debt: its TAT runs more than tau ahead of now, so every check
// denies, with a RetryAfter that counts the debt, until refill has repaid it.
// The debt is bounded: a bucket owes at most MaxDebt tokens, and a charge
// that would go beyond that is forgiven (SettleAt reports how much).
//
// A debt is a reservation nobody waits for: the word runs ahead of now as a
// reservation's does, never further than the MaxWait every rule's overflow
// budget already holds, so settling needs no budget of its own.

// MaxDebt is the most tokens a bucket of r may owe after settlements: the
// burst, or what the rule refills in MaxWait when that is less. A bucket in
// the most debt holds −MaxDebt tokens and allows nothing until refill has
// brought it back above the request's cost.
func (r *Rule) MaxDebt() int64 { return min(r.tau, r.maxAhead) / r.emit }

// owe charges inc units at now (units; at in ns) to the word w beyond what a
// check may take: TAT ← min(max(TAT, now) + inc, now + bound). A word already
// at or beyond now + bound (a check stamped later moved it) is left as it is.
// It returns the units it could not charge, and the word it found: negative
// when w is dead and nothing was done. Nothing it computes exceeds
// now + bound, so a rule's overflow budget holds it.
func owe(w, seen *atomic.Int64, at, now, inc, bound int64) (forgiven, old int64) {
	for {
		old = w.Load()
		if old < 0 {
			return 0, old
		}
		base := max(old, now)
		room := now + bound - base
		if room <= 0 {
			return inc, old
		}
		c := min(inc, room)
		see(seen, at)
		if w.CompareAndSwap(old, base+c) {
			return inc - c, old
		}
	}
}

// charge owes excess tokens to the word w of a bucket of r at now (ns; nowU
// in units), at most MaxDebt below empty: the tokens it could not charge
// (rounded up), and the word it found (negative: dead, nothing done). The
// product excess·emit never overflows: no bucket can owe more than
// burst + MaxDebt tokens beyond now.
func (r *Rule) charge(w, seen *atomic.Int64, at, nowU, excess int64) (forgiven, old int64) {
	debt := r.MaxDebt()
	c := min(excess, r.burst+debt)
	f, old := owe(w, seen, at, nowU, c*r.emit, r.tau+debt*r.emit)
	return (f+r.emit-1)/r.emit + excess - c, old
}

// SettleAt settles a request admitted with cost estimate whose actual cost
// turned out to be actual, at now: an actual below the estimate gives the
// difference back (never beyond full, as RefundAt); one above it charges the
// excess as debt, the bucket going below empty by at most MaxDebt tokens. It
// returns the tokens of the excess it could not charge (forgiven: the debt
// bound was reached). A negative actual, or a negative estimate, settles
// nothing: the request keeps what it was admitted with.
func (b *Bucket) SettleAt(now Time, estimate, actual int64) (forgiven int64) {
	switch {
	case estimate < 0 || actual < 0 || actual == estimate:
		return 0
	case actual < estimate:
		b.RefundAt(now, estimate-actual)
		return 0
	}
	n := clampNow(now)
	excess := actual - estimate
	if b.over.Load() == nil {
		if f, old := b.rule.charge(&b.tat, &b.seen, n, b.rule.units(n, b.anchor), excess); old >= 0 {
			return f
		}
	}
	for {
		o := b.in()
		r := &o.n.rule
		at := max(n, o.n.since) // as refundOver: never in numbers before they came in force
		if f, old := r.charge(&o.tat, &b.seen, at, r.units(at, b.anchor), excess); old >= 0 {
			return f
		}
	}
}

// SettleAt is Bucket.SettleAt for key's bucket. A lower actual gives back to a
// bucket the key still has (one it no longer has was full). A higher one
// charges the key's bucket, making it when the key has none; a new key at the
// cap gets no bucket, and its whole excess is forgiven.
func (t *Table[K]) SettleAt(key K, now Time, estimate, actual int64) (forgiven int64) {
	switch {
	case estimate < 0 || actual < 0 || actual == estimate:
		return 0
	case actual < estimate:
		t.RefundAt(key, now, estimate-actual)
		return 0
	}
	n := clampNow(now)
	excess := actual - estimate
	for {
		if ov := t.ov.Load(); ov != nil {
			return t.oweOver(ov, key, n, excess)
		}
		s := t.m.load(key)
		if s == nil {
			if s, _ = t.create(key, n); s == nil {
				return excess // at the cap: no bucket to owe it
			}
		}
		if t.m.hasNums(s) {
			continue
		}
		if f, old := t.rule.charge(&s.tat, &s.seen, n, t.rule.units(n, t.m.anchorOf(s)), excess); old >= 0 {
			return f
		}
		retry()
	}
}

// oweOver is SettleAt's charge for a table whose numbers have changed.
func (t *Table[K]) oweOver(ov *overlay[K], key K, now, excess int64) int64 {
	for {
		s, n, _ := t.current(ov, key, now, true)
		if s == nil {
			return excess
		}
		r := &n.rule
		at := max(now, n.since) // as refundOver
		if f, old := r.charge(&s.tat, &s.seen, at, r.units(at, t.m.anchorOf(s)), excess); old >= 0 {
			return f
		}
		retry()
		ov = t.ov.Load()
	}
}

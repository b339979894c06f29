package atomicbucket

import (
	"sync/atomic"
	"time"
)

// A single bucket's numbers at run time. Until they first change, a bucket
// uses its own word and rule, and a check pays one atomic load (over, nil) to
// know it. A change kills the word in force (compare-and-swap to dead: a check
// that took tokens before is in what the change converts, one that comes
// after finds it dead and loads over again) and installs a new word written in
// the new numbers, converted as of the change (convertWord). A killed word
// stays dead, so no check can be judged by numbers other than its word's.

// bucketWord is a bucket's word in force after a change, and its numbers.
type bucketWord struct {
	tat atomic.Int64
	n   *numbers
}

// word is the bucket's word in force and the rule it is written in.
func (b *Bucket) word() (*atomic.Int64, *Rule) {
	if o := b.over.Load(); o != nil {
		return &o.tat, &o.n.rule
	}
	return &b.tat, &b.rule
}

// in is the word in force after a change, loaded again until it is live (a
// check that found the bucket's own word dead may come here before the first
// change has installed its word).
func (b *Bucket) in() *bucketWord {
	for {
		if o := b.over.Load(); o != nil && o.tat.Load() >= 0 {
			return o
		}
		retry() // a change is installing its word
	}
}

// allowOver is AllowNAt's decision for a bucket whose numbers have changed.
func (b *Bucket) allowOver(now, cost int64) bool {
	for {
		o := b.in()
		r := &o.n.rule
		if cost < 0 || cost > r.burst {
			return false
		}
		if now < o.n.since {
			if d, alive := b.late(o, now, cost, true); alive {
				return d.Allowed
			}
			continue
		}
		nowU := r.units(now, b.anchor)
		if tat, ok := advance(&o.tat, &b.seen, now, nowU, cost*r.emit, nowU+r.tau); tat >= 0 {
			return ok
		}
	}
}

// late judges a check of cost stamped now (ns) on o before its numbers came
// in force (numbers.late); take: an admission takes its tokens.
func (b *Bucket) late(o *bucketWord, now, cost int64, take bool) (Decision, bool) {
	at, pen := o.n.late(now, o.n.rule.mode != modeGreedy)
	return o.n.rule.judgeLate(&o.tat, &b.seen, now, at, pen, b.anchor, cost, take)
}

func (b *Bucket) allowNOver(now, cost int64) Decision {
	for {
		o := b.in()
		r := &o.n.rule
		nowU := r.units(now, b.anchor)
		if now < o.n.since {
			if d, alive := b.late(o, now, cost, true); alive {
				return d
			}
			continue
		}
		if cost < 0 || cost > r.burst {
			if tat := o.tat.Load(); tat >= 0 {
				return r.outOfRange(tat, now, nowU, b.anchor)
			}
			continue
		}
		inc := cost * r.emit
		if tat, ok := advance(&o.tat, &b.seen, now, nowU, inc, nowU+r.tau); tat >= 0 {
			return r.decide(ok, tat, inc, now, nowU, b.anchor)
		}
	}
}

func (b *Bucket) peekOver(now, cost int64) Decision {
	for {
		o := b.in()
		if now < o.n.since {
			if d, alive := b.late(o, now, cost, false); alive {
				return d
			}
		} else if tat := o.tat.Load(); tat >= 0 {
			return o.n.rule.peek(tat, now, b.anchor, cost)
		}
	}
}

func (b *Bucket) refundOver(now, cost int64) {
	for {
		o := b.in()
		r := &o.n.rule
		at := max(now, o.n.since) // see Table.refundOver
		if cost <= 0 || cost > r.burst || giveBack(&o.tat, &b.seen, at, r.units(at, b.anchor), cost*r.emit) {
			return
		}
	}
}

func (b *Bucket) reserveOver(now, cost int64, maxWait time.Duration) Reservation {
	for {
		o := b.in()
		if now < o.n.since { // see Table.reserveOver
			if d, alive := b.late(o, now, cost, true); alive {
				return immediate(d, Time(now))
			}
		} else if res, alive := o.n.rule.reserve(&o.tat, &b.seen, now, b.anchor, cost, maxWait); alive {
			return res
		}
	}
}

// SetNumbersAt makes n the bucket's numbers from now on, its tokens carried
// into them as of now by c. Numbers a rule cannot hold are refused with
// NewRule's error (wrapping ErrInvalidLimit), and nothing changes.
func (b *Bucket) SetNumbersAt(now Time, n Numbers, c Carry) error {
	r, err := b.rule.WithNumbers(n)
	if err != nil {
		return err
	}
	b.change(clampNow(now), &numbers{rule: r, origin: FromOverride}, c)
	return nil
}

// ClearNumbersAt returns the bucket to its own rule (the policy's numbers),
// its tokens carried by c.
func (b *Bucket) ClearNumbersAt(now Time, c Carry) {
	if b.over.Load() == nil {
		return
	}
	b.change(clampNow(now), &numbers{rule: b.rule, origin: FromPolicy}, c)
}

// ResetAt forgets the bucket's state: from now it holds the initial tokens of
// the numbers in force, as a new bucket would, refilling from now. An interval
// rule's grid stays where it was placed (at the bucket's creation, or the
// aligned wall-clock grid): its next boundary comes when it would have.
func (b *Bucket) ResetAt(now Time) { b.change(clampNow(now), nil, CarryAsIs) }

// change installs n at now: the word in force is killed and its tokens carried
// into n by c; a nil n is the numbers in force again, with the bucket's tokens
// forgotten (n's initial tokens).
func (b *Bucket) change(now int64, n *numbers, c Carry) {
	b.changes.Lock()
	defer b.changes.Unlock()
	w, from := b.word()
	fresh := n == nil
	if fresh {
		n = &numbers{rule: *from, origin: FromPolicy}
		if o := b.over.Load(); o != nil {
			n.origin = o.n.origin
		}
	}
	var tat int64
	for {
		tat = w.Load()
		if w.CompareAndSwap(tat, moved) {
			break
		}
	}
	n.since = now
	if b.env == nil {
		b.env = envelopeOf(b.rule.limit)
	}
	b.env = b.env.widen(n.rule.limit, now)
	n.hi = rate{b.env.tokens, b.env.period} // every number the bucket has had
	o := &bucketWord{n: n}
	if fresh {
		o.tat.Store(n.rule.fresh(now, b.anchor))
		see(&b.seen, now)
	} else {
		// b.seen read after the word is dead: see settle.
		at := convertAt(from, &n.rule, now, b.seen.Load())
		o.tat.Store(convertWord(from, &n.rule, b.env, tat, b.anchor, at, c))
		see(&b.seen, at)
	}
	b.over.Store(o)
}

// NumbersFor returns the bucket's numbers in force and where they come from.
func (b *Bucket) NumbersFor() (Numbers, Origin) {
	if o := b.over.Load(); o != nil {
		return o.n.Numbers(), o.n.origin
	}
	return NumbersOf(b.rule.limit), FromPolicy
}

// ChangedRule is, once the bucket's numbers have ever changed, the rule in
// force; nil before (one atomic load).
func (b *Bucket) ChangedRule() *Rule {
	if o := b.over.Load(); o != nil {
		return &o.n.rule
	}
	return nil
}

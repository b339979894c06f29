package genimpl

import (
	"context"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Global is a global (unkeyed) rule's limiter as a generated package gives
// it, over one Bucket: a generated limiter embeds it and adds only what is
// specialised (its Allow with the rule's units folded in as constants). Its
// methods are safe for concurrent use.
type Global struct {
	b    *atomicbucket.Bucket
	cost int64 // a request's default cost (Allow's)
	most Cost  // the most a request of the rule's routes may cost
}

// NewGlobal returns the limiter over b whose requests cost what c says.
func NewGlobal(b *atomicbucket.Bucket, c Cost) Global {
	return Global{b: b, cost: max(c.Default, 1), most: c}
}

// Bucket returns the runtime bucket behind the limiter.
func (l Global) Bucket() *atomicbucket.Bucket { return l.b }

// Cost is a request's default cost under the rule.
func (l Global) Cost() int64 { return l.cost }

// Rule returns the runtime rule behind the limiter (its units, exactness and
// limits).
func (l Global) Rule() *atomicbucket.Rule { return l.b.Rule() }

// Allow reports whether a request of the rule's default cost is allowed now,
// taking its tokens if so.
func (l Global) Allow() bool { return allowBucket(l.b, atomicbucket.Now(), l.cost) }

// AllowAt is Allow at time now.
func (l Global) AllowAt(now atomicbucket.Time) bool { return allowBucket(l.b, now, l.cost) }

// AllowN checks a request of the given cost now, taking its tokens if
// allowed.
func (l Global) AllowN(cost int64) atomicbucket.Decision {
	return allowNNow(l.b, cost)
}

// AllowNAt is AllowN at time now.
func (l Global) AllowNAt(now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return l.b.AllowNAt(now, cost)
}

// Peek is what AllowN would decide now, taking nothing.
func (l Global) Peek(cost int64) atomicbucket.Decision { return l.b.PeekAt(atomicbucket.Now(), cost) }

// PeekAt is Peek at time now.
func (l Global) PeekAt(now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return l.b.PeekAt(now, cost)
}

// Reserve takes cost tokens now if they can be had within maxWait; see
// Reservation.
func (l Global) Reserve(cost int64, maxWait time.Duration) atomicbucket.Reservation {
	return l.b.ReserveAt(atomicbucket.Now(), cost, maxWait)
}

// ReserveAt is Reserve at time now.
func (l Global) ReserveAt(now atomicbucket.Time, cost int64, maxWait time.Duration) atomicbucket.Reservation {
	return l.b.ReserveAt(now, cost, maxWait)
}

// Wait blocks until a request of cost may proceed, or ctx is done; its
// errors wrap ctx's.
func (l Global) Wait(ctx context.Context, cost int64) error { return l.b.Wait(ctx, cost) }

// Refund gives cost tokens back now, never beyond the burst.
func (l Global) Refund(cost int64) { l.b.RefundAt(atomicbucket.Now(), cost) }

// RefundAt is Refund at time now.
func (l Global) RefundAt(now atomicbucket.Time, cost int64) { l.b.RefundAt(now, cost) }

// Settle settles now a request admitted at cost estimate whose actual cost
// is actual: the difference is given back, or owed as debt (at most
// Rule().MaxDebt() tokens below empty); it returns the tokens forgiven
// beyond that bound (atomicbucket.Bucket.SettleAt).
func (l Global) Settle(estimate, actual int64) (forgiven int64) {
	return l.b.SettleAt(atomicbucket.Now(), estimate, actual)
}

// SettleAt is Settle at time now.
func (l Global) SettleAt(now atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	return l.b.SettleAt(now, estimate, actual)
}

// SetNumbers makes n the rule's numbers from now on: the bucket is carried
// into them as of now by carry (CarryAsIs keeps the tokens held, at most the
// new burst). Numbers the rule cannot hold (or whose burst is below a
// request's default cost) are refused with the generator's own message (an
// error wrapping ErrInvalidLimit), and nothing changes.
func (l Global) SetNumbers(n atomicbucket.Numbers, carry atomicbucket.Carry) error {
	return l.SetNumbersAt(atomicbucket.Now(), n, carry)
}

// SetNumbersAt is SetNumbers at time now.
func (l Global) SetNumbersAt(now atomicbucket.Time, n atomicbucket.Numbers, carry atomicbucket.Carry) error {
	if err := l.CheckBurst(n); err != nil {
		return err
	}
	return l.b.SetNumbersAt(now, n, carry)
}

// CheckBurst says why SetNumbers would refuse n's burst: below a request's
// default cost (CheckCost), or below the most a request of the rule's
// routes may cost (Cost.Most, CheckMaxCost).
func (l Global) CheckBurst(n atomicbucket.Numbers) error { return l.most.check(n.Burst) }

// MinBurst is the least burst the limiter takes (CheckBurst).
func (l Global) MinBurst() int64 { return max(l.cost, l.most.Most, 1) }

// ClearNumbers returns the rule to the policy's numbers, its bucket carried
// by carry.
func (l Global) ClearNumbers(carry atomicbucket.Carry) { l.b.ClearNumbersAt(atomicbucket.Now(), carry) }

// ClearNumbersAt is ClearNumbers at time now.
func (l Global) ClearNumbersAt(now atomicbucket.Time, carry atomicbucket.Carry) {
	l.b.ClearNumbersAt(now, carry)
}

// NumbersFor returns the rule's numbers in force and where they come from.
func (l Global) NumbersFor() (atomicbucket.Numbers, atomicbucket.Origin) { return l.b.NumbersFor() }

// Reset forgets the bucket's state: from now it holds the initial tokens of
// the numbers in force, refilling from now (an interval rule's grid stays
// where it was: its next boundary comes when it would have).
func (l Global) Reset() { l.b.ResetAt(atomicbucket.Now()) }

// ResetAt is Reset at time now.
func (l Global) ResetAt(now atomicbucket.Time) { l.b.ResetAt(now) }

// allowBucket is AllowAt for a request of cost: one call, so that Global's
// Allow inlines.
func allowBucket(b *atomicbucket.Bucket, now atomicbucket.Time, cost int64) bool {
	if cost == 1 {
		return b.AllowAt(now)
	}
	return b.AllowNAt(now, cost).Allowed
}

package atomicbucket

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Reservation is tokens taken, possibly ahead of time, by Reserve. It belongs to
// the goroutine that made it: CancelAt must not be called from two goroutines.
type Reservation struct {
	// OK reports whether the tokens were taken. When false nothing changed and
	// the other fields are zero, except RetryAfter.
	OK bool
	// Delay is how long after the reserving call's time the holder may act.
	Delay time.Duration
	// RetryAfter is, for a refused reservation, the wait after which the same
	// request would be allowed at once (Never when its cost exceeds the burst).
	RetryAfter time.Duration

	at     Time          // when the holder may act
	inc    int64         // the units taken
	word   *atomic.Int64 // the bucket the units came from; nil once cancelled
	seen   *atomic.Int64 // its check times (see)
	rule   *Rule
	anchor int64
	owner  *reclaimer // the table of a keyed bucket, told when a cancel fills it; nil for a Bucket
	nums   *numbers   // a table's: the numbers the units were taken in (a Bucket's word is moved when they change)
}

// At is the time at which the holder may act.
func (r *Reservation) At() Time { return r.at }

// CancelAt gives the reserved tokens back if the holder has not reached its
// time to act (now < At) and reports whether it did. Once the time to act has
// come the tokens count as used and CancelAt does nothing; a second one does
// nothing. After a change of the numbers in force for the bucket (SetNumbersAt,
// SetKeyNumbersAt, ClearNumbersAt and the like) the tokens are carried into the
// new numbers with the rest of the bucket: CancelAt gives nothing back and
// returns false.
func (r *Reservation) CancelAt(now Time) bool {
	if !r.OK || r.word == nil || now >= r.at {
		return false
	}
	if r.nums != nil && r.nums.next() != nil {
		r.word = nil // carried into the numbers that replaced them
		return false
	}
	found := giveBackWord(r.word, r.seen, clampNow(now), r.rule.units(clampNow(now), r.anchor), r.inc)
	if found >= 0 && r.owner != nil {
		r.owner.filled(r.rule, r.word.Load(), r.anchor)
	}
	r.word = nil
	// A bucket swept since was full: the tokens were spent, and the
	// reservation is cancelled all the same.
	return found != moved
}

// immediate is the reservation that holds no tokens for later: d's admission at
// now, or its refusal.
func immediate(d Decision, now Time) Reservation {
	if !d.Allowed {
		return Reservation{RetryAfter: d.RetryAfter}
	}
	return Reservation{OK: true, at: now}
}

// reserve takes cost at now from the word w if it can be served within maxWait.
// alive is false when w is a dead (swept) table bucket: nothing was done and the
// caller looks the key up again.
func (r *Rule) reserve(w, seen *atomic.Int64, now, anchor, cost int64, maxWait time.Duration) (res Reservation, alive bool) {
	nowU := r.units(now, anchor)
	if cost < 0 || cost > r.burst {
		return Reservation{RetryAfter: Never}, true
	}
	maxWait = min(max(maxWait, 0), MaxWait)
	inc := cost * r.emit
	laterU := r.units(now+int64(maxWait), anchor)
	tat, ok := advance(w, seen, now, nowU, inc, laterU+r.tau)
	if tat < 0 {
		return Reservation{}, false
	}
	if !ok {
		return Reservation{RetryAfter: r.waitFor(max(tat, nowU)+inc-r.tau, now, nowU, anchor)}, true
	}
	delay := r.waitFor(tat-r.tau, now, nowU, anchor)
	return Reservation{OK: true, Delay: delay, at: Time(now).Add(delay), inc: inc, word: w, seen: seen, rule: r, anchor: anchor}, true
}

// ErrCostExceedsBurst is returned by Wait for a cost that no wait can serve.
var ErrCostExceedsBurst = errors.New("atomicbucket: cost exceeds the burst or is negative")

// ErrAtCap is returned by Table.Wait for a new key when the table is at its key
// cap and denies new keys (TableOptions.AllowAtCap false).
var ErrAtCap = errors.New("atomicbucket: new key refused: the table is at its key cap")

// waitOn is Wait for any bucket: reserve takes the tokens at now if they can be
// had within maxWait. It reads the clock once. The closure does not escape, so it
// costs no allocation (TestZeroAllocs).
func waitOn(ctx context.Context, cost int64, reserve func(now Time, maxWait time.Duration) Reservation) error {
	if err := ctx.Err(); err != nil {
		return waitError(cost, err)
	}
	now := Now()
	maxWait, err := waitBudget(ctx, now, cost)
	if err != nil {
		return err
	}
	res := reserve(now, maxWait)
	return res.wait(ctx, cost, maxWait)
}

// waitBudget is how long Wait may wait: until ctx's deadline, or MaxWait.
func waitBudget(ctx context.Context, now Time, cost int64) (time.Duration, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		return MaxWait, nil
	}
	left := dl.Sub(now.Time())
	if left < 0 {
		return 0, waitError(cost, context.DeadlineExceeded)
	}
	return left, nil
}

func waitError(cost int64, err error) error {
	return fmt.Errorf("atomicbucket: wait for %d tokens: %w", cost, err)
}

// wait sleeps until the reservation's time to act or until ctx is done, in which
// case it cancels the reservation.
func (r *Reservation) wait(ctx context.Context, cost int64, maxWait time.Duration) error {
	if !r.OK {
		if r.RetryAfter == Never {
			return fmt.Errorf("%w: %d tokens", ErrCostExceedsBurst, cost)
		}
		if _, has := ctx.Deadline(); has && r.RetryAfter > maxWait {
			return fmt.Errorf("atomicbucket: %v needed, beyond the context's deadline: %w", r.RetryAfter, context.DeadlineExceeded)
		}
		if r.RetryAfter > maxWait {
			return fmt.Errorf("atomicbucket: %v needed, beyond MaxWait (%v)", r.RetryAfter, MaxWait)
		}
		return ErrAtCap // refused with a wait it could afford: only a table at its key cap does that
	}
	if r.Delay == 0 {
		return nil
	}
	t := time.NewTimer(r.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.CancelAt(Now())
		return waitError(cost, ctx.Err())
	}
}

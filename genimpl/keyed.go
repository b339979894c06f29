package genimpl

import (
	"context"
	"math"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/keycap"
	"github.com/limitgen/limitgen/internal/keyhash"
)

// Keyed is a keyed rule's limiter as a generated package gives it, over one
// Table: a generated limiter embeds it and adds only what is specialised
// (its Allow with the rule's units folded in as constants). Its methods are
// safe for concurrent use.
type Keyed[K comparable] struct {
	t     *atomicbucket.Table[K]
	cost  int64        // a request's default cost (Allow's)
	most  Cost         // the most a request of the rule's routes may cost
	keyOK func(K) bool // whether a key may have numbers of its own; nil: every key
}

// Cost is what a rule's requests cost: Default when a door says nothing,
// and the Most one of the rule's routes may cost (Of names it), which the
// numbers' burst must hold. Zero fields: 1, and no such route.
type Cost struct {
	Default, Most int64
	Of            string
}

// NewKeyed returns the limiter over t whose requests cost what c says;
// keyOK, when not nil, says which keys may be given numbers of their own (a
// key no door ever checks, such as the empty string, may not: its numbers
// would never apply).
func NewKeyed[K comparable](t *atomicbucket.Table[K], c Cost, keyOK func(K) bool) Keyed[K] {
	return Keyed[K]{t: t, cost: max(c.Default, 1), most: c, keyOK: keyOK}
}

// NonEmpty is NewKeyed's keyOK for string keys: the empty key is no key.
func NonEmpty(key string) bool { return key != "" }

// Table returns the runtime table behind the limiter.
func (l Keyed[K]) Table() *atomicbucket.Table[K] { return l.t }

// Rule returns the runtime rule behind the limiter (its units, exactness and
// limits).
func (l Keyed[K]) Rule() *atomicbucket.Rule { return l.t.Rule() }

// Allow reports whether a request of the rule's default cost is allowed now,
// taking its tokens if so.
func (l Keyed[K]) Allow(key K) bool { return allowCostNow(l.t, key, l.cost) }

// AllowAt is Allow at time now.
func (l Keyed[K]) AllowAt(key K, now atomicbucket.Time) bool { return allowCost(l.t, key, now, l.cost) }

// AllowN checks a request of the given cost now, taking its tokens if
// allowed.
func (l Keyed[K]) AllowN(key K, cost int64) atomicbucket.Decision {
	return allowNNowKey(l.t, key, cost)
}

// AllowNAt is AllowN at time now.
func (l Keyed[K]) AllowNAt(key K, now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return l.t.AllowNAt(key, now, cost)
}

// Peek is what AllowN would decide now, taking nothing.
func (l Keyed[K]) Peek(key K, cost int64) atomicbucket.Decision {
	return l.t.PeekAt(key, atomicbucket.Now(), cost)
}

// PeekAt is Peek at time now.
func (l Keyed[K]) PeekAt(key K, now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return l.t.PeekAt(key, now, cost)
}

// Reserve takes cost tokens now if they can be had within maxWait; see
// Reservation.
func (l Keyed[K]) Reserve(key K, cost int64, maxWait time.Duration) atomicbucket.Reservation {
	return l.t.ReserveAt(key, atomicbucket.Now(), cost, maxWait)
}

// ReserveAt is Reserve at time now.
func (l Keyed[K]) ReserveAt(key K, now atomicbucket.Time, cost int64, maxWait time.Duration) atomicbucket.Reservation {
	return l.t.ReserveAt(key, now, cost, maxWait)
}

// Wait blocks until a request of cost may proceed, or ctx is done; its
// errors wrap ctx's.
func (l Keyed[K]) Wait(ctx context.Context, key K, cost int64) error { return l.t.Wait(ctx, key, cost) }

// Refund gives cost tokens back now, never beyond the burst.
func (l Keyed[K]) Refund(key K, cost int64) { l.t.RefundAt(key, atomicbucket.Now(), cost) }

// RefundAt is Refund at time now.
func (l Keyed[K]) RefundAt(key K, now atomicbucket.Time, cost int64) { l.t.RefundAt(key, now, cost) }

// Settle settles now a request admitted at cost estimate whose actual cost
// is actual: the difference is given back, or owed as debt (at most
// Rule().MaxDebt() tokens below empty); it returns the tokens forgiven
// beyond that bound (atomicbucket.Table.SettleAt).
func (l Keyed[K]) Settle(key K, estimate, actual int64) (forgiven int64) {
	return l.t.SettleAt(key, atomicbucket.Now(), estimate, actual)
}

// SettleAt is Settle at time now.
func (l Keyed[K]) SettleAt(key K, now atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	return l.t.SettleAt(key, now, estimate, actual)
}

// AddForgiven adds the tokens two rules' settlements forgave (a generated
// settlement's sum over its route's rules), saturating at the largest
// int64: a huge actual cost forgives nearly that much on every rule, and a
// sum that wrapped would read as no settlement at all.
func AddForgiven(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Sweep removes the buckets that have been full for SweepGrace, and returns
// how many.
func (l Keyed[K]) Sweep() int { return l.t.SweepAt(atomicbucket.Now()) }

// Len is the number of keys tracked.
func (l Keyed[K]) Len() int64 { return l.t.Len() }

// Stats returns the table's counters: keys tracked, evictions, new keys that
// met the cap.
func (l Keyed[K]) Stats() atomicbucket.TableStats { return l.t.Stats() }

// RunSweeper calls Sweep every interval until ctx is done; run it in its own
// goroutine. It is optional: the tables reclaim full buckets themselves; it
// returns idle keys' memory sooner when no new keys come.
func (l Keyed[K]) RunSweeper(ctx context.Context, interval time.Duration) {
	keycap.RunEvery(ctx, interval, func() { l.t.SweepAt(atomicbucket.Now()) })
}

// SetNumbers makes n the rule's numbers for every key without numbers of its
// own from now on: every bucket is carried into them as of now by carry
// (CarryAsIs keeps the tokens held, at most the new burst). Numbers the rule
// cannot hold (or whose burst is below a request's default cost) are refused
// with the generator's own message (an error wrapping ErrInvalidLimit), and
// nothing changes.
func (l Keyed[K]) SetNumbers(n atomicbucket.Numbers, carry atomicbucket.Carry) error {
	return l.SetNumbersAt(atomicbucket.Now(), n, carry)
}

// SetNumbersAt is SetNumbers at time now.
func (l Keyed[K]) SetNumbersAt(now atomicbucket.Time, n atomicbucket.Numbers, carry atomicbucket.Carry) error {
	if err := l.checkCost(n); err != nil {
		return err
	}
	return l.t.SetNumbersAt(now, n, carry)
}

// ClearNumbers returns the rule to the policy's numbers, its buckets carried
// by carry.
func (l Keyed[K]) ClearNumbers(carry atomicbucket.Carry) { l.ClearNumbersAt(atomicbucket.Now(), carry) }

// ClearNumbersAt is ClearNumbers at time now.
func (l Keyed[K]) ClearNumbersAt(now atomicbucket.Time, carry atomicbucket.Carry) {
	l.t.ClearNumbersAt(now, carry)
}

// SetKeyNumbers gives key numbers of its own from now on (an enterprise
// customer's quota), whatever the rule's; its bucket is carried into them as
// of now by carry. Numbers the rule cannot hold are refused as by SetNumbers,
// a key no door checks with ErrEmptyKey, and nothing changes.
func (l Keyed[K]) SetKeyNumbers(key K, n atomicbucket.Numbers, carry atomicbucket.Carry) error {
	return l.SetKeyNumbersAt(key, atomicbucket.Now(), n, carry)
}

// SetKeyNumbersAt is SetKeyNumbers at time now.
func (l Keyed[K]) SetKeyNumbersAt(key K, now atomicbucket.Time, n atomicbucket.Numbers, carry atomicbucket.Carry) error {
	if l.keyOK != nil && !l.keyOK(key) {
		return atomicbucket.ErrEmptyKey
	}
	if err := l.checkCost(n); err != nil {
		return err
	}
	return l.t.SetKeyNumbersAt(now, key, n, carry)
}

// ClearKeyNumbers takes key's own numbers away: from now on it has the
// rule's, its bucket carried by carry.
func (l Keyed[K]) ClearKeyNumbers(key K, carry atomicbucket.Carry) {
	l.t.ClearKeyNumbersAt(atomicbucket.Now(), key, carry)
}

// ClearKeyNumbersAt is ClearKeyNumbers at time now.
func (l Keyed[K]) ClearKeyNumbersAt(key K, now atomicbucket.Time, carry atomicbucket.Carry) {
	l.t.ClearKeyNumbersAt(now, key, carry)
}

// NumbersFor returns the numbers in force for key and where they come from
// (the policy, SetNumbers, SetKeyNumbers).
func (l Keyed[K]) NumbersFor(key K) (atomicbucket.Numbers, atomicbucket.Origin) {
	return l.t.NumbersFor(key)
}

// Reset makes key's bucket new ("unblock this user"): from now it holds the
// initial tokens of the numbers in force for key, refilling from now, as a
// key first seen now would; a key without a bucket is left as it is.
func (l Keyed[K]) Reset(key K) { l.t.ResetAt(key, atomicbucket.Now()) }

// ResetAt is Reset at time now.
func (l Keyed[K]) ResetAt(key K, now atomicbucket.Time) { l.t.ResetAt(key, now) }

// checkCost refuses numbers whose burst is below a request's default cost, as
// the generator refuses such a policy.
func (l Keyed[K]) checkCost(n atomicbucket.Numbers) error { return l.most.check(n.Burst) }

// check says why burst cannot hold the rule's requests: below a request's
// default cost (CheckCost), or below the most one of its routes may cost
// (CheckMaxCost).
func (c Cost) check(burst int64) error {
	if c.Default > 1 {
		if err := CheckCost(burst, c.Default); err != nil {
			return err
		}
	}
	if c.Most > 0 {
		return CheckMaxCost(burst, c.Most, c.Of)
	}
	return nil
}

// CheckBurst says why SetNumbers and SetKeyNumbers would refuse n's burst:
// below a request's default cost (CheckCost), or below the most a request
// of the rule's routes may cost (Cost.Most, CheckMaxCost).
func (l Keyed[K]) CheckBurst(n atomicbucket.Numbers) error { return l.checkCost(n) }

// MinBurst is the least burst the limiter takes (CheckBurst): a request's
// default cost, or the most a request of its routes may cost, whichever is
// more.
func (l Keyed[K]) MinBurst() int64 { return max(l.cost, l.most.Most, 1) }

// Cost is a request's default cost under the rule.
func (l Keyed[K]) Cost() int64 { return l.cost }

// allowCost is AllowAt for a request of cost (AllowAt's loop when it is 1):
// one call, so that Keyed's Allow inlines.
func allowCost[K comparable](t *atomicbucket.Table[K], key K, now atomicbucket.Time, cost int64) bool {
	if cost == 1 {
		return t.AllowAt(key, now)
	}
	return t.AllowNAt(key, now, cost).Allowed
}

// allowCostNow is allowCost now, in one call too.
func allowCostNow[K comparable](t *atomicbucket.Table[K], key K, cost int64) bool {
	if cost == 1 {
		return t.AllowAt(key, atomicbucket.Now())
	}
	return t.AllowNAt(key, atomicbucket.Now(), cost).Allowed
}

// RunEvery calls f every interval (a minute when interval is not positive)
// until ctx is done: a generated limiter's RunSweeper sweeps the tables of
// every plan with it. Run it in its own goroutine.
func RunEvery(ctx context.Context, interval time.Duration, f func()) {
	keycap.RunEvery(ctx, interval, f)
}

// TextHash is the hash that places the grid of a composite key whose text
// form is b (FNV-1a, as a string key's): a generated key type's gridHash,
// which its table's TableOptions.KeyHash calls.
func TextHash(b []byte) uint64 { return keyhash.Of(b) }

// AddStats is the sum of two tables' counters: a generated limiter's Stats
// over the tables of every plan.
func AddStats(a, b atomicbucket.TableStats) atomicbucket.TableStats {
	return atomicbucket.TableStats{Keys: a.Keys + b.Keys, Evictions: a.Evictions + b.Evictions, AtCapHits: a.AtCapHits + b.AtCapHits}
}

// allowNNowKey is AllowNAt now, in one call, so that Keyed's AllowN inlines
// (the runtime's checks other than Allow take the time).
func allowNNowKey[K comparable](t *atomicbucket.Table[K], key K, cost int64) atomicbucket.Decision {
	return t.AllowNAt(key, atomicbucket.Now(), cost)
}

// allowNNow is allowNNowKey for a bucket.
func allowNNow(b *atomicbucket.Bucket, cost int64) atomicbucket.Decision {
	return b.AllowNAt(atomicbucket.Now(), cost)
}

package genimpl

import (
	"context"
	"time"

	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/internal/keycap"

	"github.com/limitgen/limitgen/atomicbucket"
)

// KeyedWindow is a keyed window rule's limiter as a generated package gives
// it, over one Table: a generated limiter embeds it. Its methods are
// safe for concurrent use. A window has no Refund, Reserve or Wait: what it
// admitted stays counted until it leaves the window (see Window).
type KeyedWindow[K comparable] struct {
	t    *atomicwindow.Table[K]
	cost int64 // a request's default cost (Allow's)
}

// NewKeyedWindow returns the limiter over t whose requests cost cost by
// default.
func NewKeyedWindow[K comparable](t *atomicwindow.Table[K], cost int64) KeyedWindow[K] {
	return KeyedWindow[K]{t: t, cost: max(cost, 1)}
}

// Table returns the runtime table behind the limiter.
func (l KeyedWindow[K]) Table() *atomicwindow.Table[K] { return l.t }

// Rule returns the window rule behind the limiter.
func (l KeyedWindow[K]) Rule() *atomicwindow.Rule { return l.t.Rule() }

// Cost is a request's default cost under the rule.
func (l KeyedWindow[K]) Cost() int64 { return l.cost }

// Allow reports whether a request of the rule's default cost is admitted
// now, counting it if so.
func (l KeyedWindow[K]) Allow(key K) bool {
	return l.t.AllowCost(key, atomicbucket.Now(), l.cost)
}

// AllowAt is Allow at time now.
func (l KeyedWindow[K]) AllowAt(key K, now atomicbucket.Time) bool {
	return l.t.AllowCost(key, now, l.cost)
}

// AllowN decides a request of the given cost now, counting it if admitted.
func (l KeyedWindow[K]) AllowN(key K, cost int64) atomicbucket.Decision {
	return l.t.AllowNAt(key, atomicbucket.Now(), cost)
}

// AllowNAt is AllowN at time now.
func (l KeyedWindow[K]) AllowNAt(key K, now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return l.t.AllowNAt(key, now, cost)
}

// Peek is what AllowN would decide now, counting nothing.
func (l KeyedWindow[K]) Peek(key K, cost int64) atomicbucket.Decision {
	return l.t.PeekAt(key, atomicbucket.Now(), cost)
}

// PeekAt is Peek at time now.
func (l KeyedWindow[K]) PeekAt(key K, now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return l.t.PeekAt(key, now, cost)
}

// Settle settles now a request of key admitted by a check at time
// admitted at cost estimate, whose actual cost is actual: a higher actual
// counts the excess in the window now (at most the limit; the rest is
// forgiven, and returned), a lower one gives the difference back from the
// units the window counted at the admission's grain, while they are in the
// window (atomicwindow.Table.SettleAt).
func (l KeyedWindow[K]) Settle(key K, admitted atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	return l.t.SettleAt(key, atomicbucket.Now(), admitted, estimate, actual)
}

// SettleAt is Settle at time now.
func (l KeyedWindow[K]) SettleAt(key K, now, admitted atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	return l.t.SettleAt(key, now, admitted, estimate, actual)
}

// Reset empties key's window now: what it admitted no longer counts (a
// customer's quota given back after a refund). It reports whether the key
// had a window.
func (l KeyedWindow[K]) Reset(key K) bool { return l.t.ResetAt(key, atomicbucket.Now()) }

// ResetAt is Reset at time now: what was admitted at or before now no longer
// counts.
func (l KeyedWindow[K]) ResetAt(key K, now atomicbucket.Time) bool { return l.t.ResetAt(key, now) }

// SetKeyNumbers gives key a window of its own from now on: n.Tokens in any
// n.Period (the limit as n.Burst), whatever the rule's (one customer's
// quota raised or cut). Its window is carried into them, holding what it
// held. Numbers a window cannot take, or whose limit is below a request's
// default cost, are refused (ErrNumbers), a key no door checks with
// ErrEmptyKey, and nothing changes.
func (l KeyedWindow[K]) SetKeyNumbers(key K, n atomicbucket.Numbers) error {
	return l.t.SetKeyNumbersAt(atomicbucket.Now(), key, n, l.cost)
}

// SetKeyNumbersAt is SetKeyNumbers at time now.
func (l KeyedWindow[K]) SetKeyNumbersAt(key K, now atomicbucket.Time, n atomicbucket.Numbers) error {
	return l.t.SetKeyNumbersAt(now, key, n, l.cost)
}

// ClearKeyNumbers takes key's own numbers away: from now on it has the
// rule's, its window carried into them.
func (l KeyedWindow[K]) ClearKeyNumbers(key K) { l.t.ClearKeyNumbersAt(atomicbucket.Now(), key) }

// ClearKeyNumbersAt is ClearKeyNumbers at time now.
func (l KeyedWindow[K]) ClearKeyNumbersAt(key K, now atomicbucket.Time) {
	l.t.ClearKeyNumbersAt(now, key)
}

// NumbersFor returns the numbers in force for key and where they come from
// (the policy, the rule's numbers set at run time, the key's own).
func (l KeyedWindow[K]) NumbersFor(key K) (atomicbucket.Numbers, atomicbucket.Origin) {
	return l.t.KeyNumbersFor(key)
}

// Sweep removes the keys whose windows have been empty for SweepGrace, and
// returns how many.
func (l KeyedWindow[K]) Sweep() int { return l.t.Sweep() }

// Len is the number of keys tracked.
func (l KeyedWindow[K]) Len() int64 { return l.t.Len() }

// Stats returns the table's counters: keys tracked, evictions, new keys that
// met the cap.
func (l KeyedWindow[K]) Stats() atomicbucket.TableStats { return l.t.Stats() }

// RunSweeper calls Sweep every interval until ctx is done; run it in its own
// goroutine. It is optional: the table reclaims empty windows itself; it
// returns idle keys' memory sooner when no new keys come.
func (l KeyedWindow[K]) RunSweeper(ctx context.Context, interval time.Duration) {
	keycap.RunEvery(ctx, interval, func() { l.t.Sweep() })
}

// GlobalWindow is a global window rule's limiter as a generated package
// gives it, over one Window. Its methods are safe for concurrent use.
type GlobalWindow struct {
	w    *atomicwindow.Window
	cost int64
}

// NewGlobalWindow returns the limiter over w whose requests cost cost by
// default.
func NewGlobalWindow(w *atomicwindow.Window, cost int64) GlobalWindow {
	return GlobalWindow{w: w, cost: max(cost, 1)}
}

// Window returns the runtime window behind the limiter.
func (l GlobalWindow) Window() *atomicwindow.Window { return l.w }

// Rule returns the window rule behind the limiter.
func (l GlobalWindow) Rule() *atomicwindow.Rule { return l.w.Rule() }

// Cost is a request's default cost under the rule.
func (l GlobalWindow) Cost() int64 { return l.cost }

// Allow reports whether a request of the rule's default cost is admitted
// now, counting it if so.
func (l GlobalWindow) Allow() bool { return l.w.AllowCost(atomicbucket.Now(), l.cost) }

// AllowAt is Allow at time now.
func (l GlobalWindow) AllowAt(now atomicbucket.Time) bool { return l.w.AllowCost(now, l.cost) }

// AllowN decides a request of the given cost now, counting it if admitted.
func (l GlobalWindow) AllowN(cost int64) atomicbucket.Decision {
	return l.w.AllowNAt(atomicbucket.Now(), cost)
}

// AllowNAt is AllowN at time now.
func (l GlobalWindow) AllowNAt(now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return l.w.AllowNAt(now, cost)
}

// Peek is what AllowN would decide now, counting nothing.
func (l GlobalWindow) Peek(cost int64) atomicbucket.Decision {
	return l.w.PeekAt(atomicbucket.Now(), cost)
}

// PeekAt is Peek at time now.
func (l GlobalWindow) PeekAt(now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return l.w.PeekAt(now, cost)
}

// Settle is KeyedWindow.Settle for the one window.
func (l GlobalWindow) Settle(admitted atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	return l.w.SettleAt(atomicbucket.Now(), admitted, estimate, actual)
}

// SettleAt is Settle at time now.
func (l GlobalWindow) SettleAt(now, admitted atomicbucket.Time, estimate, actual int64) (forgiven int64) {
	return l.w.SettleAt(now, admitted, estimate, actual)
}

// Reset empties the window now: what it admitted no longer counts.
func (l GlobalWindow) Reset() { l.w.ResetAt(atomicbucket.Now()) }

// ResetAt is Reset at time now: what was admitted at or before now no longer
// counts.
func (l GlobalWindow) ResetAt(now atomicbucket.Time) { l.w.ResetAt(now) }

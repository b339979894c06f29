package shared

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// WindowChecker decides window checks (at most N cost units in any interval
// of W) on a store: redisstore.Window and pgstore.Window. An error comes with
// a denial that says nothing of the window.
type WindowChecker interface {
	AllowN(ctx context.Context, key string, cost int64) (atomicbucket.Decision, error)
}

// WindowStore is a Store that keeps window rules too: its Window returns the
// checker of the window rule named name (the policy's namespace and the
// rule's name) with rule's numbers.
type WindowStore interface {
	Store
	Window(name string, rule atomicbucket.WindowRule) (WindowChecker, error)
}

// ErrNoWindows is wrapped by the error of a store that keeps no window
// rules.
var ErrNoWindows = errors.New("the store keeps no window rules")

// Window is a shared window rule bound to a store, with its failure
// setting: what a generated package's shared window limiter checks. While the
// store cannot answer (an error, or its breaker open after BreakerFailures
// failures in a row: a dead store costs a local decision, not a timeout a
// check), the rule's failure setting decides: FailDeny denies (an outage,
// RetryAfter a second), FailAllow admits, FailLocal decides on a window of
// this process holding the share of the limit (rounded down, at least 1).
// Its methods are safe for concurrent use.
type Window struct {
	c     WindowChecker
	mode  FailureMode
	share float64                           // FailLocal's share of the limit
	local *atomicbucket.WindowTable[string] // FailLocal's share
	base  atomicbucket.WindowRule           // as bound: the policy's numbers
	rule  atomic.Pointer[atomicbucket.WindowRule]
	br    circuit
	mu    sync.Mutex // serialises changes of numbers; never taken by a check
}

// RuledChecker is a WindowChecker whose numbers can change while it runs
// (redisstore.Window, pgstore.Window): SetRule makes rule its numbers for
// every later check, each window carried into them on the store as a rolling
// deploy carries it (what it holds kept), or refuses rule, changing nothing.
type RuledChecker interface {
	WindowChecker
	SetRule(rule atomicbucket.WindowRule) error
}

// BindWindow binds the window rule named name (namespace, when not empty,
// before it with a /) with rule's numbers and failure setting f to store.
func BindWindow(store Store, namespace, name string, rule atomicbucket.WindowRule, f Failure) (w *Window, err error) {
	ws, ok := store.(WindowStore)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNoWindows, store)
	}
	if namespace != "" {
		name = namespace + "/" + name
	}
	defer func() { // a store's Window that panics is a refusal, as Bind treats its Bind
		if p := recover(); p != nil {
			w, err = nil, fmt.Errorf("the store's Window panicked: %v", p)
		}
	}()
	c, err := ws.Window(name, rule)
	if err != nil {
		return nil, err
	}
	w = &Window{c: c, mode: f.Mode, share: f.Share, base: rule}
	w.rule.Store(&w.base)
	if f.Mode == FailLocal {
		if !(f.Share > 0 && f.Share <= 1) {
			return nil, fmt.Errorf("%w, not %v", ErrLocalShare, f.Share)
		}
		share, err := w.shareOf(rule)
		if err != nil {
			return nil, err
		}
		w.local = atomicbucket.NewWindowTable[string](share, atomicbucket.TableOptions{MaxKeys: 1 << 20})
	}
	return w, nil
}

// shareOf is FailLocal's window for rule: the share of its limit (rounded
// down, at least 1) in the same window.
func (w *Window) shareOf(rule atomicbucket.WindowRule) (atomicbucket.WindowRule, error) {
	share, err := atomicbucket.NewWindowRule(max(int64(math.Floor(float64(rule.Limit())*w.share)), 1), rule.Window())
	if err != nil {
		return share, fmt.Errorf("its local share %v: %w", w.share, err)
	}
	return share, nil
}

// Rule is the window's numbers in force.
func (w *Window) Rule() *atomicbucket.WindowRule { return w.rule.Load() }

// PolicyRule is the window's numbers as bound (the policy's).
func (w *Window) PolicyRule() atomicbucket.WindowRule { return w.base }

// SetNumbers makes n (a limit per window: Tokens per Period, Burst equal to
// Tokens; atomicbucket.WindowRuleOf, with the rule's cost) the window's
// numbers on the store and for its local share, or refuses them, changing
// nothing: a store whose checker cannot change numbers (no RuledChecker)
// refuses. On the store each key's window is carried into them at its next
// check, as two versions side by side carry it, so in any interval of the
// shorter window at most the larger limit is admitted.
func (w *Window) SetNumbers(n atomicbucket.Numbers, cost int64) error {
	rule, err := atomicbucket.WindowRuleOf(n, cost)
	if err != nil {
		return err
	}
	return w.set(rule)
}

// ClearNumbers gives the window back the numbers it was bound with.
func (w *Window) ClearNumbers() {
	w.set(w.base) //nolint:errcheck // the bound numbers were accepted at Bind
}

func (w *Window) set(rule atomicbucket.WindowRule) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, ok := w.c.(RuledChecker)
	if !ok {
		return fmt.Errorf("the store's %T cannot change a window's numbers", w.c)
	}
	var share atomicbucket.WindowRule
	if w.local != nil {
		var err error
		if share, err = w.shareOf(rule); err != nil {
			return err
		}
	}
	if err := rc.SetRule(rule); err != nil {
		return err
	}
	if w.local != nil {
		// A valid rule of cost 1: it cannot be refused (the policy's share
		// comes back as the table's own numbers).
		w.local.SetNumbers(atomicbucket.WindowNumbersOf(&share), 1) //nolint:errcheck
	}
	if rule == w.base {
		w.rule.Store(&w.base)
	} else {
		w.rule.Store(&rule)
	}
	return nil
}

// AllowN decides a request of cost for key on the store, or, when it cannot,
// by the failure setting (Result.Degraded, Err; Outage for a denial the
// outage itself makes).
func (w *Window) AllowN(ctx context.Context, key string, cost int64) Result {
	now := int64(atomicbucket.Now())
	ok, probe := w.br.Allow(now)
	if !ok {
		return w.fallback(key, cost, ErrCircuitOpen)
	}
	d, err := w.c.AllowN(ctx, key, cost)
	if err == nil {
		w.br.Success(probe)
		return Result{Decision: d}
	}
	if ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
		w.br.EndProbe(probe) // the caller gave up: no verdict on the store
	} else {
		w.br.Failure(int64(atomicbucket.Now()), probe)
		w.br.last.Store(&err)
	}
	return w.fallback(key, cost, err)
}

// fallback is the failure setting's decision while the store cannot decide.
func (w *Window) fallback(key string, cost int64, err error) Result {
	switch {
	case w.mode == FailAllow:
		return Result{Decision: atomicbucket.Decision{Allowed: true, Remaining: w.Rule().Limit()}, Degraded: true, Err: err}
	case w.mode == FailLocal && w.local != nil:
		return Result{Decision: w.local.AllowN(key, cost), Degraded: true, Err: err}
	}
	return Result{Decision: atomicbucket.Decision{RetryAfter: time.Second}, Degraded: true, Outage: true, Err: err}
}

// Health is nil while the store answers the window's checks; else the last
// failure, while the breaker is open.
func (w *Window) Health() error {
	if _, open := w.br.State(); open == 0 {
		return nil
	}
	if e := w.br.last.Load(); e != nil {
		return *e
	}
	return ErrCircuitOpen
}

// WindowWait turns a store window's answer, an out time − now in
// microseconds, into the wait the local window states: an admission counts
// until the last nanosecond before its out time, so the wait is 1 ns short
// of whole microseconds (0 for none).
func WindowWait(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	return time.Duration(us)*time.Microsecond - 1
}

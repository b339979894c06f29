package shared

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/verdict"
)

// WindowChecker decides window checks (at most N cost units in any interval
// of W) on a store: redisstore.Window and pgstore.Window. An error comes with
// a denial that says nothing of the window.
type WindowChecker interface {
	AllowN(ctx context.Context, key string, cost int64) (atomicbucket.Decision, error)
}

// WindowLeaser is a WindowChecker whose store also leases a window's units
// to an instance (redisstore.Window, pgstore.Window). Lease settles the
// lessee's previous grant prev (what it did not spend goes back, whether or
// not the grant has expired: the store still counts it) and grants at least
// cost and up to want units, or none for want 0 (a release). The store
// grants at most half of what the window has room for beyond the cost, and
// counts a grant, until it settles, as admitted at the end of its Term (from
// the store's now): every unit the lessee spends in its term then stays in
// the window for at least W after it was spent, so all instances together
// never admit more than N in any interval of W.
type WindowLeaser interface {
	WindowChecker
	Lease(ctx context.Context, key string, cost, want int64, prev Settlement) (Granted, error)
}

// WindowLeaseTerm is how long a window lease's grant may be spent: a quarter
// of the window, at most a second, at least a microsecond, in whole
// microseconds. A unit granted is counted for up to the term and the window
// after its grant (a counted window's sixteenth may add two sixteenths of
// the window), so a window kept full by leases admits at least N·W/(W +
// term) per W, exact, and N·W/(W + term + W/8), counted.
func WindowLeaseTerm(window time.Duration) time.Duration {
	return max(min(window/4, time.Second).Truncate(time.Microsecond), time.Microsecond)
}

// WindowStore is a Store that keeps window rules too: its Window returns the
// checker of the window rule named name (the policy's namespace and the
// rule's name) with rule's numbers.
type WindowStore interface {
	Store
	Window(name string, rule atomicwindow.Rule) (WindowChecker, error)
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
	share float64                     // FailLocal's share of the limit
	local *atomicwindow.Table[string] // FailLocal's share
	base  atomicwindow.Rule           // as bound: the policy's numbers
	rule  atomic.Pointer[atomicwindow.Rule]
	br    circuit      // the window's own breaker, on a store without an Engine (g nil)
	g     guardedStore // the store's Engine: its breakers, counts and Health hold the window's calls too
	mu    sync.Mutex   // serialises changes of numbers; never taken by a check
	own   sync.Map     // key → atomicwindow.Rule: keys with numbers of their own (SetKeyNumbers)
	// leases, for a leased window: its leases by key, each taking at most
	// lease units a grant.
	leases *Leases
	lease  int64
}

// guardedStore is a store built on an Engine (Engine.Guarded): a window
// bound to it goes through the store's breakers and counts, as its buckets
// do.
type guardedStore interface {
	Guarded(ctx context.Context, node string, fn func(ctx context.Context) error) error
	Health() error
}

// WindowPlacer is a WindowChecker whose windows live on several servers (a
// Redis Cluster's masters): Node names the server that holds key's window,
// whose breaker its checks go through.
type WindowPlacer interface {
	Node(key string) string
}

// WindowMarker is a WindowChecker that tells where its store counted an
// admission (redisstore.Window, pgstore.Window): a settlement at a lower
// actual gives back from there (Window.Settle), as a lease's settlement
// gives back what its grant did not spend (WindowLeaser).
type WindowMarker interface {
	AllowNMark(ctx context.Context, key string, cost int64) (atomicbucket.Decision, verdict.WindowMark, error)
}

// WindowSettler is a WindowChecker that counts a settlement's excess on its
// store (redisstore.Window, pgstore.Window): Settle counts excess units in
// key's window at the store's now, beyond the limit if need be, at most the
// limit of them, and returns the units not counted.
type WindowSettler interface {
	Settle(ctx context.Context, key string, excess int64) (forgiven int64, err error)
}

// WindowForgetter is a WindowChecker that can delete a key's window on its
// store, whatever it holds (redisstore.Window, pgstore.Window).
type WindowForgetter interface {
	Forget(ctx context.Context, key string) error
}

// RuledChecker is a WindowChecker whose numbers can change while it runs
// (redisstore.Window, pgstore.Window): SetRule makes rule its numbers for
// every later check, each window carried into them on the store as a rolling
// deploy carries it (what it holds kept), or refuses rule, changing nothing.
type RuledChecker interface {
	WindowChecker
	SetRule(rule atomicwindow.Rule) error
}

// KeyRuledChecker is a RuledChecker whose keys may have numbers of their own
// (redisstore.Window, pgstore.Window): SetKeyRule makes rule key's numbers
// for every later check of it, its window carried into them on the store
// as SetRule carries every key's, or refuses rule, changing nothing;
// ClearKeyRule gives the key the checker's numbers back.
type KeyRuledChecker interface {
	RuledChecker
	SetKeyRule(key string, rule atomicwindow.Rule) error
	ClearKeyRule(key string)
}

// WindowNumbers are a store window's numbers (redisstore.Window,
// pgstore.Window embed them): the rule every key checks by and the keys with
// numbers of their own, each as the store takes it (WindowNums). Until a key
// has its own, a lookup of one is a load of nil. Safe for concurrent use.
type WindowNumbers struct {
	rule atomic.Pointer[WindowNums]
	own  atomic.Pointer[sync.Map] // nil until SetKeyRule
}

// WindowNums are a window rule as a store takes it.
type WindowNums struct {
	Rule    atomicwindow.Rule
	GrainUs int64 // the sub-window in µs; 0: an exact window
}

// windowNumsOf is rule as a store takes it, or why it cannot: a counted
// window's sub-windows are whole microseconds.
func windowNumsOf(rule atomicwindow.Rule) (*WindowNums, error) {
	n := &WindowNums{Rule: rule}
	if !rule.Exact() {
		if rule.Grain()%time.Microsecond != 0 {
			return nil, fmt.Errorf("%w: a counted window on a store has sub-windows of whole microseconds: %v is not a multiple of 16µs", atomicbucket.ErrInvalidLimit, rule.Window())
		}
		n.GrainUs = int64(rule.Grain() / time.Microsecond)
	}
	return n, nil
}

// SetRule makes rule the numbers of every later check (RuledChecker): each
// key's window is carried into them at its next check, as the store carries
// what another version of the rule wrote.
func (w *WindowNumbers) SetRule(rule atomicwindow.Rule) error {
	n, err := windowNumsOf(rule)
	if err != nil {
		return err
	}
	w.rule.Store(n)
	return nil
}

// Rule returns the window's numbers (not a key's own).
func (w *WindowNumbers) Rule() *atomicwindow.Rule { return &w.rule.Load().Rule }

// SetKeyRule gives key numbers of its own for every later check
// (KeyRuledChecker): its window is carried into them at its next check, as
// SetRule carries every key's. A rule the store cannot take is refused,
// changing nothing.
func (w *WindowNumbers) SetKeyRule(key string, rule atomicwindow.Rule) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("a window's key has 1 to %d bytes, not %d", MaxKeyLen, len(key))
	}
	n, err := windowNumsOf(rule)
	if err != nil {
		return err
	}
	m := w.own.Load()
	if m == nil {
		w.own.CompareAndSwap(nil, &sync.Map{})
		m = w.own.Load()
	}
	m.Store(key, n)
	return nil
}

// ClearKeyRule gives key the window's numbers back (KeyRuledChecker).
func (w *WindowNumbers) ClearKeyRule(key string) {
	if m := w.own.Load(); m != nil {
		m.Delete(key)
	}
}

// NumsFor returns the numbers key checks by: its own, or the window's
// (always for "", which no key is).
func (w *WindowNumbers) NumsFor(key string) *WindowNums {
	if m := w.own.Load(); m != nil {
		if n, ok := m.Load(key); ok {
			return n.(*WindowNums)
		}
	}
	return w.rule.Load()
}

// AnyOwn reports whether some key has ever had numbers of its own.
func (w *WindowNumbers) AnyOwn() bool { return w.own.Load() != nil }

// BindWindow binds the window rule named name (namespace, when not empty,
// before it with a /) with rule's numbers and failure setting f to store.
func BindWindow(store Store, namespace, name string, rule atomicwindow.Rule, f Failure) (w *Window, err error) {
	return BindLeasedWindow(store, namespace, name, rule, f, 0)
}

// BindLeasedWindow is BindWindow of a window checked from leases of at most
// lease units a grant (0: a store call per check; at most the limit): each
// instance takes units from the store in batches and admits from them
// without a call (see WindowLeaser), one lease per key, at most MaxLeases
// (further keys are checked one call each). The store must lease windows
// (its checker a WindowLeaser). A store built on an Engine (redisstore,
// pgstore) gives back what the window's leases hold at its Close, as it
// does its buckets' leases: unspent units would otherwise count for a whole
// window.
func BindLeasedWindow(store Store, namespace, name string, rule atomicwindow.Rule, f Failure, lease int64) (w *Window, err error) {
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
	w.g, _ = store.(guardedStore)
	w.rule.Store(&w.base)
	if lease > 0 {
		lc, ok := c.(WindowLeaser)
		if !ok {
			return nil, fmt.Errorf("the store's %T cannot lease a window", c)
		}
		w.lease = min(lease, rule.Limit())
		w.leases = newLeases([]bool{true}, nil, nil, func(_ int, key string) *Lease {
			key = strings.Clone(key)
			l := NewLease(func(ctx context.Context, cost, want int64, prev Settlement) (Granted, error) {
				return lc.Lease(ctx, key, cost, want, prev)
			}, w.Rule().Limit(), w.lease)
			l.window = true
			return l
		})
	}
	if f.Mode == FailLocal {
		if !(f.Share > 0 && f.Share <= 1) {
			return nil, fmt.Errorf("%w, not %v", ErrLocalShare, f.Share)
		}
		share, err := w.shareOf(rule)
		if err != nil {
			return nil, err
		}
		w.local = atomicwindow.NewTable[string](share, atomicbucket.TableOptions{MaxKeys: 1 << 20})
	}
	if k, ok := store.(windowKeeper); ok && w.leases != nil {
		k.keepWindow(w) // released with the store's leases, at its Close
	}
	return w, nil
}

// shareOf is FailLocal's window for rule: the share of its limit (rounded
// down, at least 1) in the same window.
func (w *Window) shareOf(rule atomicwindow.Rule) (atomicwindow.Rule, error) {
	share, err := atomicwindow.NewRule(max(int64(math.Floor(float64(rule.Limit())*w.share)), 1), rule.Window())
	if err != nil {
		return share, fmt.Errorf("its local share %v: %w", w.share, err)
	}
	return share, nil
}

// Rule is the window's numbers in force.
func (w *Window) Rule() *atomicwindow.Rule { return w.rule.Load() }

// PolicyRule is the window's numbers as bound (the policy's).
func (w *Window) PolicyRule() atomicwindow.Rule { return w.base }

// SetNumbers makes n (a limit per window: Tokens per Period, Burst equal to
// Tokens; atomicwindow.RuleOf, with the rule's cost) the window's
// numbers on the store and for its local share, or refuses them, changing
// nothing: a store whose checker cannot change numbers (no RuledChecker)
// refuses. On the store each key's window is carried into them at its next
// check, as two versions side by side carry it, so in any interval of the
// shorter window at most the larger limit is admitted.
func (w *Window) SetNumbers(n atomicbucket.Numbers, cost int64) error {
	rule, err := atomicwindow.RuleOf(n, cost)
	if err != nil {
		return err
	}
	return w.set(rule)
}

// ClearNumbers gives the window back the numbers it was bound with.
func (w *Window) ClearNumbers() {
	w.set(w.base) //nolint:errcheck // the bound numbers were accepted at Bind
}

func (w *Window) set(rule atomicwindow.Rule) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, ok := w.c.(RuledChecker)
	if !ok {
		return fmt.Errorf("the store's %T cannot change a window's numbers", w.c)
	}
	var share atomicwindow.Rule
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
		w.local.SetNumbers(atomicwindow.NumbersOf(&share), 1) //nolint:errcheck
	}
	if rule == w.base {
		w.rule.Store(&w.base)
	} else {
		w.rule.Store(&rule)
	}
	if w.leases != nil {
		// Leases of the old numbers are replaced at their keys' next checks;
		// what they hold goes back now, within the longest a grant is spent.
		w.leases.Changed(0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		w.leases.ReleaseStale(ctx, 0)
	}
	return nil
}

// SetKeyNumbers gives key numbers of its own (a limit per window, as
// SetNumbers takes them), whatever the window's: one customer's quota raised
// or cut on the store, and in the local share. This instance's lease for key
// gives back what it holds and is dropped first, so the next check takes a
// grant of the new numbers; on the store the key's window is carried into
// them at its next check, holding what it held. Every instance checking the
// key must be given the same numbers (as for SetNumbers: two instances with
// different numbers for a key carry its window back and forth). Numbers the
// store cannot take, a key it cannot hold, or a store whose checker has no
// keys' numbers (no KeyRuledChecker) are refused, changing nothing.
func (w *Window) SetKeyNumbers(ctx context.Context, key string, n atomicbucket.Numbers, cost int64) error {
	rule, err := atomicwindow.RuleOf(n, cost)
	if err != nil {
		return err
	}
	if key == "" {
		return atomicbucket.ErrEmptyKey
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	kc, ok := w.c.(KeyRuledChecker)
	if !ok {
		return fmt.Errorf("the store's %T cannot give a window's key numbers of its own", w.c)
	}
	var share atomicwindow.Rule
	if w.local != nil {
		if share, err = w.shareOf(rule); err != nil {
			return err
		}
	}
	if w.leases != nil {
		w.leases.Forget(ctx, 0, key)
	}
	if err := kc.SetKeyRule(key, rule); err != nil {
		return err
	}
	w.own.Store(key, rule)
	if w.local != nil {
		// A valid rule of cost 1 for a key that is not empty: not refused.
		w.local.SetKeyNumbersAt(atomicbucket.Now(), key, atomicwindow.NumbersOf(&share), 1) //nolint:errcheck
	}
	return nil
}

// ClearKeyNumbers takes key's own numbers away: from now on it has the
// window's, on the store and in the local share (its lease dropped first,
// as SetKeyNumbers drops it).
func (w *Window) ClearKeyNumbers(ctx context.Context, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kc, ok := w.c.(KeyRuledChecker)
	if !ok {
		return
	}
	if w.leases != nil {
		w.leases.Forget(ctx, 0, key)
	}
	kc.ClearKeyRule(key)
	w.own.Delete(key)
	if w.local != nil {
		w.local.ClearKeyNumbersAt(atomicbucket.Now(), key)
	}
}

// KeyRule is the numbers key's checks go by: its own (SetKeyNumbers), or
// the window's.
func (w *Window) KeyRule(key string) (rule atomicwindow.Rule, own bool) {
	if r, ok := w.own.Load(key); ok {
		return r.(atomicwindow.Rule), true
	}
	return *w.rule.Load(), false
}

// Reset empties key's window on the store, so that what it admitted no
// longer counts (a customer's quota given back after a refund), and its
// window of the local share. This instance's lease for key gives back what
// it holds and is dropped first; another instance's lease may still spend
// what it was granted (at most the lease's size, within its term), and
// gives nothing back after the reset. It fails when the store cannot
// (its checker no WindowForgetter, or the store's error).
func (w *Window) Reset(ctx context.Context, key string) error {
	f, ok := w.c.(WindowForgetter)
	if !ok {
		return fmt.Errorf("the store's %T cannot reset a window", w.c)
	}
	if w.leases != nil {
		w.leases.Forget(ctx, 0, key)
	}
	if w.local != nil {
		w.local.Reset(key)
	}
	return f.Forget(ctx, key)
}

// Leases is a leased window's leases (nil for a window checked one call
// each).
func (w *Window) Leases() *Leases { return w.leases }

// ReleaseLeases gives back to the store the units this window's leases hold
// and did not spend (a service shutting down leaves them to the other
// instances). The leases go on working: a later check takes a new grant.
func (w *Window) ReleaseLeases(ctx context.Context) error {
	if w.leases == nil {
		return nil
	}
	return w.leases.Release(ctx)
}

// AllowN decides a request of cost for key on the store, or, when it cannot,
// by the failure setting (verdict.Result.Degraded, Err; Outage for a denial the
// outage itself makes).
func (w *Window) AllowN(ctx context.Context, key string, cost int64) verdict.Result {
	res, _ := w.AllowNMark(ctx, key, cost)
	return res
}

// AllowNMark is AllowN, with where the store counted an admission (the
// zero WindowMark when it counted nothing, or a failure setting decided):
// Settle gives a lower actual back from there. An admission from a lease is
// marked by the lease's grant.
func (w *Window) AllowNMark(ctx context.Context, key string, cost int64) (verdict.Result, verdict.WindowMark) {
	now := int64(atomicbucket.Now())
	var l *Lease
	if w.leases != nil {
		if l = w.leases.lease(ctx, 0, key); l != nil {
			d, g, call := l.local(now, cost)
			if !call {
				return verdict.Result{Decision: d}, grantMark(d, g)
			}
		}
	}
	// Declared here, not above: what the call sets escapes with it, and the
	// lease's own admissions above allocate nothing.
	var d atomicbucket.Decision
	var m verdict.WindowMark
	call := func(ctx context.Context) error {
		var err error
		switch mc, ok := w.c.(WindowMarker); {
		case l != nil:
			var g *grant
			d, g, err = l.refill(ctx, cost)
			m = grantMark(d, g)
		case ok:
			d, m, err = mc.AllowNMark(ctx, key, cost)
		default:
			d, err = w.c.AllowN(ctx, key, cost)
		}
		return err
	}
	if err := w.guarded(ctx, key, now, call); err != nil {
		return w.fallback(key, cost, err), verdict.WindowMark{}
	}
	return verdict.Result{Decision: d}, m
}

// grantMark is the mark of an admission d spent from a lease's grant g: the
// grant's slot and generation (none when it was not admitted).
func grantMark(d atomicbucket.Decision, g *grant) verdict.WindowMark {
	if !d.Allowed || g == nil {
		return verdict.WindowMark{}
	}
	return verdict.WindowMark{Slot: g.second, Gen: g.gen}
}

// guarded runs call, one of the window's store calls for key, through the
// store's breaker (its Engine's, or the window's own when the store has
// none), now being the time the caller read (ns): the call's error, or
// ErrCircuitOpen without a call.
func (w *Window) guarded(ctx context.Context, key string, now int64, call func(ctx context.Context) error) error {
	if w.g != nil {
		node := ""
		if p, ok := w.c.(WindowPlacer); ok {
			node = p.Node(key)
		}
		return w.g.Guarded(ctx, node, call)
	}
	ok, probe := w.br.Allow(now)
	if !ok {
		return ErrCircuitOpen
	}
	err := call(ctx)
	switch {
	case err == nil:
		w.br.Success(probe)
	case ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrLeaseWait):
		w.br.EndProbe(probe) // the caller gave up, or waited out another check's refill: no verdict on the store
	default:
		w.br.Failure(int64(atomicbucket.Now()), probe)
		w.br.last.Store(&err)
	}
	return err
}

// Settle settles a request of key admitted at cost estimate whose actual
// cost is actual, on the store (atomicwindow.Table.SettleAt's meaning): a
// higher actual counts the excess in the window now, at most the limit (the
// rest forgiven and returned); a lower one gives the difference back from
// where its check's admission was counted (mark, from AllowNMark), while
// the store still holds it there: to the lease's grant it was spent from,
// if that grant is still the lease's (no call), else on the store, in one
// call (the store's lease call settling that much of a grant, WindowLeaser).
// A zero mark gives nothing back. It goes through the store's breaker as
// checks do; when the store cannot, nothing is settled and the error says
// so (its checker no WindowSettler or WindowLeaser, or the store's error).
func (w *Window) Settle(ctx context.Context, key string, mark verdict.WindowMark, estimate, actual int64) (forgiven int64, err error) {
	switch {
	case estimate < 0 || actual < 0 || actual == estimate:
		return 0, nil
	case actual < estimate:
		return 0, w.giveBack(ctx, key, mark, estimate, estimate-actual)
	}
	ws, ok := w.c.(WindowSettler)
	if !ok {
		return 0, fmt.Errorf("the store's %T cannot settle a window", w.c)
	}
	call := func(ctx context.Context) error {
		var err error
		forgiven, err = ws.Settle(ctx, key, actual-estimate)
		return err
	}
	if err := w.guarded(ctx, key, int64(atomicbucket.Now()), call); err != nil {
		return 0, classed(err)
	}
	return forgiven, nil
}

// giveBack gives back units of an admission of key at cost estimate, marked
// mark (see Settle).
func (w *Window) giveBack(ctx context.Context, key string, mark verdict.WindowMark, estimate, back int64) error {
	if mark == (verdict.WindowMark{}) {
		return nil
	}
	if w.leases != nil {
		if l, ok := w.leases.Lookup(0, key); ok && l.giveBackTo(mark.Slot, mark.Gen, back) {
			return nil
		}
	}
	wl, ok := w.c.(WindowLeaser)
	if !ok {
		return fmt.Errorf("the store's %T cannot give a window's units back", w.c)
	}
	call := func(ctx context.Context) error {
		_, err := wl.Lease(ctx, key, 0, 0, Settlement{Second: mark.Slot, Size: estimate, Unspent: back, Gen: mark.Gen})
		return err
	}
	if err := w.guarded(ctx, key, int64(atomicbucket.Now()), call); err != nil {
		return classed(err)
	}
	return nil
}

// fallback is the failure setting's decision while the store cannot decide.
func (w *Window) fallback(key string, cost int64, err error) verdict.Result {
	switch {
	case w.mode == FailAllow:
		return verdict.Result{Decision: atomicbucket.Decision{Allowed: true, Remaining: w.Rule().Limit()}, Degraded: true, Err: classed(err)}
	case w.mode == FailLocal && w.local != nil:
		return verdict.Result{Decision: w.local.AllowN(key, cost), Degraded: true, Err: classed(err)}
	}
	return verdict.Result{Decision: atomicbucket.Decision{RetryAfter: time.Second}, Degraded: true, Outage: true, Err: classed(err)}
}

// Health is nil while the store answers the window's checks; else the last
// failure, while the breaker is open. On a store built on an Engine it is
// the store's Health, whose breakers the window's checks go through.
func (w *Window) Health() error {
	if w.g != nil {
		return w.g.Health()
	}
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

// WindowGranted reads a store's answer to a window lease call for a window
// of limit units: seven numbers, 1 granted, 0 denied (or released), −1 a
// cost outside [0, limit]; what was in the window before the grant; the
// units granted (denied: out time − now, µs, of the admission whose leaving
// makes room); out time − now of the newest admission after the call (0:
// empty); the grant's slot, term (µs) and generation.
func WindowGranted(limit int64, res []int64) (Granted, error) {
	if len(res) != 7 {
		return Granted{}, fmt.Errorf("the store replied %d numbers to a window lease call, want 7", len(res))
	}
	in, x, reset := res[1], res[2], WindowWait(res[3])
	switch res[0] {
	case 1:
		if x < 0 || in+x > limit || res[5] <= 0 {
			return Granted{}, fmt.Errorf("the store granted %d units of a window holding %d of %d, for %dµs", x, in, limit, res[5])
		}
		return Granted{
			Decision: atomicbucket.Decision{Allowed: true, Remaining: max(limit-in-x, 0), Reset: reset},
			Size:     x, Second: res[4], Term: time.Duration(res[5]) * time.Microsecond, Gen: res[6],
		}, nil
	case -1:
		return Granted{Decision: atomicbucket.Decision{Remaining: max(limit-in, 0), Reset: reset, RetryAfter: atomicbucket.Never}}, nil
	}
	return Granted{Decision: atomicbucket.Decision{Remaining: max(limit-in, 0), Reset: reset, RetryAfter: WindowWait(x)}}, nil
}

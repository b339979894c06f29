package shared

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
	"github.com/puzpuzpuz/xsync/v3"
)

// A store is a Backend (its I/O: one round trip per method) under an Engine
// (everything else: rules, the all-or-nothing tier, the failure settings and
// the breakers, coalescing, leases, Bind, Close). redisstore and pgstore are
// each a Backend and an Engine; a store of your own is the same, and passes
// the contract tests of storetest.

// StoreRule is a shared rule prepared for a store: its name (part of its
// keys), its integers on the store's microsecond clock, its failure setting
// and its lease. Build one with NewStoreRule (a store's NewRule).
type StoreRule struct {
	name     string
	n        Integers
	fallback *fallbackRule // decides when the store cannot
	lease    int64         // > 0: checked through Bind from leases of at most lease tokens
	global   bool          // one bucket, key "" (AsGlobal)
}

// AsGlobal returns a copy of r for a rule without keys: its one bucket's key
// is "", and a check with another key is refused. A rule from NewStoreRule
// is keyed: it refuses the empty key.
func (r *StoreRule) AsGlobal() *StoreRule {
	c := *r
	c.global = true
	return &c
}

// MaxKeyLen is the longest key a shared check takes, in bytes: what the
// doors' key sources return at most (verdict.MaxKeyLen). A longer one is
// refused before the store is asked.
const MaxKeyLen = verdict.MaxKeyLen

// checkKey refuses a key the rule cannot have: the empty key for a keyed
// rule (a request without a key must be refused before the check, as the
// middleware's missing_key does, not pooled in one bucket), another than ""
// for a global one, and one longer than MaxKeyLen.
func (c Call) checkKey() error {
	switch {
	case len(c.Key) > MaxKeyLen:
		return fmt.Errorf("%w: a key of %d bytes for rule %s; at most %d", ErrInvalidStep, len(c.Key), c.Rule.name, MaxKeyLen)
	case c.Rule.global && c.Key != "":
		return fmt.Errorf("%w: rule %s has no keys, but a check named key %q", ErrInvalidStep, c.Rule.name, c.Key)
	case !c.Rule.global && c.Key == "":
		return fmt.Errorf("%w: the empty key for rule %s, which is keyed: refuse a request without a key before checking it", ErrInvalidStep, c.Rule.name)
	}
	return nil
}

// NewStoreRule computes the numbers of a shared rule named name (NewIntegers),
// or says why a store on a microsecond clock cannot hold it. It fails over
// to denial (FailDeny) until WithFailure says otherwise.
func NewStoreRule(name string, l atomicbucket.Limit) (*StoreRule, error) {
	if name == "" {
		return nil, errors.New("a shared rule needs a name: it is part of its buckets' keys")
	}
	n, err := NewIntegers(l)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &StoreRule{name: name, n: n, fallback: &fallbackRule{}}, nil
}

// WithFailure returns a copy of r that decides by f when the store cannot
// (newFallbackRule: FailLocal's share never admits more than its share).
func (r *StoreRule) WithFailure(f Failure) (*StoreRule, error) {
	fb, err := newFallbackRule(r.n.Limit, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	c := *r
	c.fallback = fb
	return &c, nil
}

// Name is the rule's name, part of its keys.
func (r *StoreRule) Name() string { return r.name }

// Limit is the limit the rule was built from.
func (r *StoreRule) Limit() atomicbucket.Limit { return r.n.Limit }

// Integers are the rule's integers on the store's clock.
func (r *StoreRule) Integers() *Integers { return &r.n }

// Exact reports whether the units hold the written rate exactly: then every
// decision equals the exact reference's at the server's microsecond times.
func (r *StoreRule) Exact() bool { return r.n.Exact }

// RelativeError is how much lower than written the admitted rate is: 0 for
// an exact rule.
func (r *StoreRule) RelativeError() float64 { return r.n.RelativeError(r.n.Limit) }

// Failure is the rule's failure setting.
func (r *StoreRule) Failure() Failure { return r.fallback.Failure() }

// Stats counts what a store's checks did.
type Stats struct {
	Calls    int64 // checks that went to the store (a coalesced batch counts each of its checks)
	Degraded int64 // checks the failure settings decided (the store failed, a breaker was open, or the store was closed)
	Batches  int64 // round trips that carried coalesced checks (Coalesce)
	// Grants and GrantedTokens are the lease calls the store granted tokens
	// in, and the tokens (leased rules).
	Grants, GrantedTokens int64
	// Latency is how long round trips to the server took (every one that
	// was sent: checks, batches, lease calls, failed ones included), from a
	// connection in hand to the reply.
	Latency Latency
	// BreakerOpenings is how many times the store's circuit breakers have
	// opened (each server's counted: BreakerState.Openings), so that a run
	// can say whether a healthy server ever failed enough checks to open one.
	BreakerOpenings int64
}

// LatencyBounds are the upper bounds of Latency's buckets: a round trip to a
// store on the same network takes 50 µs to a few ms, and the default timeout
// is 200 ms.
var LatencyBounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second,
}

// Latency is a histogram of round-trip times: Counts[i] is how many took at
// most LatencyBounds[i] and more than the bound before it; the last count is
// those above every bound. Count and Sum are their number and total.
type Latency struct {
	Counts [len(LatencyBounds) + 1]int64
	Count  int64
	Sum    time.Duration
}

// latency records round trips into a Latency, without a lock.
type latency struct {
	counts [len(LatencyBounds) + 1]atomic.Int64
	sum    atomic.Int64
}

func (l *latency) record(d time.Duration) {
	i := 0
	for i < len(LatencyBounds) && d > LatencyBounds[i] {
		i++
	}
	l.counts[i].Add(1)
	l.sum.Add(int64(d))
}

// snapshot reads l. Its counts are read one by one while calls may be
// recorded: Count is their sum, so Count and Counts always agree.
func (l *latency) snapshot() Latency {
	var s Latency
	for i := range l.counts {
		s.Counts[i] = l.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Sum = time.Duration(l.sum.Load())
	return s
}

// DefaultTimeout bounds how long a check waits for its store when the
// caller's context allows longer: a shared limit must not hold a request up
// for long.
const DefaultTimeout = 200 * time.Millisecond

// Engine is a store over a Backend: what a store's API does, with only I/O
// left to the backend. Its methods are safe for concurrent use.
type Engine struct {
	b     Backend
	guard *storeGuard
	co    *batcher[Call] // nil unless Coalesce was called; the batcher of a store of one server
	// nodes are the batchers of a store of several servers (a Redis
	// Cluster's masters), one a server, made at its first check: each has
	// its own queue and calls in flight, so that a stalled server holds up
	// only the checks of its own keys, never another's batch.
	nodes *xsync.MapOf[string, *batcher[Call]]
	slots chan struct{} // one per call in flight to the client; nil: no bound (Slotted)
	own   bool          // the backend ends its calls by their deadlines (OwnDeadlines)

	batches   atomic.Int64
	grants    atomic.Int64 // lease calls that granted tokens
	granted   atomic.Int64 // the tokens they granted
	latency   latency
	gate      callGate // shut by Close: no more calls
	closeOnce sync.Once

	mu      sync.Mutex
	bounds  []*Binding // what Bind returned: ReleaseLeases gives their leases' tokens back
	windows []*Window  // the leased windows bound to the store: ReleaseLeases gives their units back
}

// windowKeeper is a store that gives back its leased windows' units with
// its buckets' (an Engine's ReleaseLeases, at Close).
type windowKeeper interface{ keepWindow(w *Window) }

func (e *Engine) keepWindow(w *Window) {
	e.mu.Lock()
	e.windows = append(e.windows, w)
	e.mu.Unlock()
}

// NewEngine returns an engine over b whose checks wait at most timeout
// (DefaultTimeout when 0) for the store, and coalesce concurrent single
// checks, at most coalesce a round trip, when coalesce is above 0.
func NewEngine(b Backend, timeout time.Duration, coalesce int) *Engine {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	e := &Engine{b: b, guard: newStoreGuard(timeout)}
	if p, ok := b.(Pinger); ok {
		e.guard.ping = p.Ping
	}
	_, e.own = b.(OwnDeadlines)
	if sb, ok := b.(Slotted); ok && sb.Slots() > 0 {
		e.slots = make(chan struct{}, sb.Slots())
	}
	if coalesce > 0 {
		e.co = newBatcher(coalesce, timeout, e.flush)
		e.nodes = xsync.NewMapOf[string, *batcher[Call]]()
	}
	return e
}

// batcherOf is the batcher c's check waits in: its server's.
func (e *Engine) batcherOf(c Call) *batcher[Call] {
	_, node := e.b.Place(c)
	if node == "" {
		return e.co
	}
	if bt, ok := e.nodes.Load(node); ok {
		return bt
	}
	bt, _ := e.nodes.LoadOrCompute(node, func() *batcher[Call] {
		return newBatcher(e.co.size, e.guard.Timeout, e.flush)
	})
	if e.guard.Closed() {
		bt.Close() // made while Close ran: stopped as Close stops the others
	}
	return bt
}

// Timeout is the most a check waits for the store.
func (e *Engine) Timeout() time.Duration { return e.guard.Timeout }

// Coalesce is the most checks one call to the store carries, as the store
// runs: 0 when each check makes its own call (stores differ in their
// default: see each one's Options.Coalesce).
func (e *Engine) Coalesce() int {
	if e.co == nil {
		return 0
	}
	return e.co.size
}

// Stats returns the store's counts so far.
func (e *Engine) Stats() Stats {
	calls, degraded := e.guard.Counts()
	return Stats{Calls: calls, Degraded: degraded, Batches: e.batches.Load(),
		Grants: e.grants.Load(), GrantedTokens: e.granted.Load(), Latency: e.latency.snapshot(), BreakerOpenings: e.guard.Openings()}
}

// Breakers are the states of the store's circuit breakers, one per server
// it has called (a Cluster's masters each have their own).
func (e *Engine) Breakers() []BreakerState { return e.guard.States() }

// Health is the store's live state: nil while it answers, otherwise why not
// (storeGuard.Health). A generated package's SharedErr reports it.
func (e *Engine) Health() error { return e.guard.Health() }

// StartFailed records that the store could not reach its server when made
// (storeGuard.StartFailed): Health says so until a call succeeds.
func (e *Engine) StartFailed(err error) { e.guard.StartFailed(err) }

// roundTrip is a call enter let through: its context's cancel, when it
// started (for Stats.Latency), and the time it had for the server.
type roundTrip struct {
	cancel context.CancelFunc
	start  atomicbucket.Time
	budget time.Duration
}

// enter lets a call go to the server: the store is open and (Slotted) a
// connection is free. The call's context ends the store's timeout after
// enter began (or at ctx's deadline, if sooner: a coalesced batch's is its
// earliest check's), so that a check's wait for a connection and its round
// trip together never pass the timeout; a connection had only after half of
// it is given back, so that a call has the other half at least. A call that
// cannot have a connection in time fails with ErrOverload: it never left the
// process. With own (a Backend method's call, when the backend ends its
// calls by their deadlines: OwnDeadlines) the context carries the deadline
// without a timer.
func (e *Engine) enter(ctx context.Context, own bool) (context.Context, roundTrip, error) {
	if !e.gate.Enter() {
		return nil, roundTrip{}, ErrClosed
	}
	start := atomicbucket.Now()
	at := time.Now().Add(e.guard.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(at) {
		at = d
	}
	var cctx context.Context
	cancel := context.CancelFunc(noCancel)
	if own {
		cctx = &deadline{Context: ctx, at: at}
	} else {
		cctx, cancel = context.WithDeadline(ctx, at)
	}
	if e.slots != nil {
		select {
		case e.slots <- struct{}{}:
		default:
			if err := e.waitSlot(cctx, own, start, at); err != nil {
				cancel()
				e.gate.Leave()
				return nil, roundTrip{}, err
			}
		}
	}
	return cctx, roundTrip{cancel: cancel, start: atomicbucket.Now(), budget: time.Until(at)}, nil
}

// waitSlot waits for one of the client's connections until at: a slot had
// after half the timeout is given back (ErrOverload), and so is none by at.
func (e *Engine) waitSlot(ctx context.Context, own bool, start atomicbucket.Time, at time.Time) error {
	expired := ctx.Done() // a timer's context ends at at
	var t *time.Timer
	if own {
		t = time.NewTimer(time.Until(at))
		defer t.Stop()
	}
	var timer <-chan time.Time
	if t != nil {
		timer = t.C
	}
	select {
	case e.slots <- struct{}{}:
		if waited := atomicbucket.Now().Sub(start); waited > e.guard.Timeout/2 {
			<-e.slots
			return fmt.Errorf("%w: waited %v for a connection, more than half the %v timeout: %w",
				ErrOverload, waited.Round(time.Microsecond), e.guard.Timeout, context.DeadlineExceeded)
		}
		return nil
	case <-expired:
		return fmt.Errorf("%w: %w", ErrOverload, cmp.Or(ctx.Err(), error(context.DeadlineExceeded)))
	case <-timer:
		return fmt.Errorf("%w: %w", ErrOverload, context.DeadlineExceeded)
	}
}

func noCancel() {}

// deadline is a call's context for a backend that ends its calls by their
// deadlines itself (OwnDeadlines): ctx with the deadline at and no timer.
// Its Done and Err are ctx's: nothing watches the deadline but the backend.
type deadline struct {
	context.Context
	at time.Time
}

func (d *deadline) Deadline() (time.Time, bool) { return d.at, true }

// ended is err, a call's error, saying so when the call's context had ended
// (its deadline, the caller's cancellation): a client that reacts to the
// context by cancelling the statement on the server (pgstore.ConfigurePool)
// reports the server's "canceled" error, which is the deadline's doing.
func ended(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// leave ends a call enter let through, recording how long it took, and
// returns its error as the breaker should count it: a call that timed out
// having had less than half the store's timeout for the server (the rest
// went waiting in this process: in a coalescer's queue, for a connection)
// says nothing of the server, and is ErrOverload.
func (e *Engine) leave(c roundTrip, err error) error {
	e.latency.record(atomicbucket.Now().Sub(c.start))
	c.cancel()
	if e.slots != nil {
		<-e.slots
	}
	e.gate.Leave()
	if err != nil && c.budget < e.guard.Timeout/2 && IsTimeout(err) {
		return fmt.Errorf("%w: the call had %v of the %v timeout for the server: %w", ErrOverload, c.budget.Round(time.Microsecond), e.guard.Timeout, err)
	}
	return err
}

// RoundTrip runs fn, one round trip of the store's own to its server (a
// window's check or batch), as the engine's round trips go: not after Close
// (ErrClosed), holding one of the client's connections (Slotted), within the
// store's timeout (fn's context), recorded in Stats.Latency; a call that
// could not have a connection in time, or had less than half the timeout
// for the server, fails with ErrOverload (no failure of the server's).
func (e *Engine) RoundTrip(ctx context.Context, fn func(ctx context.Context) error) error {
	cctx, rt, err := e.enter(ctx, false) // fn's client may need the timer
	if err != nil {
		return err
	}
	return e.leave(rt, ended(cctx, fn(cctx)))
}

// Guarded runs fn, a check of the store's own that the engine does not make
// itself (a shared window's), as the engine's checks go: behind the breaker
// of node, the server it reaches ("" for a store of one server), which the
// store's buckets share (ErrCircuitOpen without a call while it is open);
// not after Close (ErrClosed); counted in Stats.Calls, and in
// Stats.Degraded when it fails (the caller's failure setting then decides);
// a failure of the server's counted against its breaker, as a bucket
// check's is, and seen by Health.
func (e *Engine) Guarded(ctx context.Context, node string, fn func(ctx context.Context) error) error {
	g := e.guard
	if g.Closed() {
		g.Count(0, true)
		return ErrClosed
	}
	var ps passage
	if !g.admit(&ps, int64(atomicbucket.Now()), node) {
		g.Count(0, true)
		return ErrCircuitOpen
	}
	err := fn(ctx)
	if err != nil && !errors.Is(err, ErrOverload) && errors.Is(err, ErrLeaseWait) {
		err = fmt.Errorf("%w: %w", ErrOverload, err) // waited out another check's refill: the store was not asked
	}
	ps.done(ctx, err)
	if err != nil {
		g.Count(0, true)
	}
	return err
}

// Within runs fn, a call of the store's own to its server outside the
// engine (a sweep), as the engine's calls go: not after Close (ErrClosed),
// which waits for it, and (Slotted) holding one of the client's connections,
// waiting for it within ctx.
func (e *Engine) Within(ctx context.Context, fn func() error) error {
	if !e.gate.Enter() {
		return ErrClosed
	}
	defer e.gate.Leave()
	if e.slots != nil {
		select {
		case e.slots <- struct{}{}:
			defer func() { <-e.slots }()
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrOverload, ctx.Err())
		}
	}
	return fn()
}

// Clamped is c with a cost outside the rule's range made Burst+1 (denied by
// every backend, taken by none): what a Backend is given.
func (c Call) Clamped() Call {
	if c.Cost < 0 || c.Cost > c.Rule.n.Limit.Burst {
		c.Cost = c.Rule.n.Limit.Burst + 1
	}
	return c
}

// Decision is the Decision a backend's reply describes for c (with its cost
// as the caller gave it: out of range, RetryAfter is Never).
func (c Call) Decision(r Reply) atomicbucket.Decision {
	return c.Rule.n.Decision(r.Allowed, r.Ahead, r.Excess, r.Since, c.Cost)
}

// Granted is the answer a backend's lease reply describes for c.
func (c Call) Granted(lr LeaseReply) Granted {
	d := c.Decision(lr.Reply)
	if !lr.Allowed {
		return Granted{Decision: d}
	}
	return Granted{Decision: d, Size: lr.Excess, Second: lr.Second, Usec: lr.Usec}
}

// repeated is the index of the first call that names a bucket an earlier
// call names, or -1 (each would see the bucket as it was before the check,
// and the last write would win: more admitted than the bucket holds).
func repeated(calls []Call) int {
	for i := 1; i < len(calls); i++ {
		for j := range i {
			if calls[i].Rule.name == calls[j].Rule.name && calls[i].Key == calls[j].Key {
				return i
			}
		}
	}
	return -1
}

// nodeError is an error of the server named Node: its breaker's failure.
type nodeError struct {
	Node string
	Err  error
}

func (e *nodeError) Error() string {
	if e.Node == "" {
		return e.Err.Error()
	}
	return e.Node + ": " + e.Err.Error()
}

func (e *nodeError) Unwrap() error { return e.Err }

// tier runs calls in one round trip where their buckets share a group, and
// otherwise (mode ModeTake on a Cluster) as ordered takes with refunds.
func (e *Engine) tier(ctx context.Context, calls []Call, mode Mode) (atomicbucket.Decision, int, error) {
	if len(calls) == 0 {
		return atomicbucket.Decision{Allowed: true}, -1, nil
	}
	if i := repeated(calls); i >= 0 {
		return atomicbucket.Decision{}, i, fmt.Errorf("%s: %w: tier step %d names rule %s and its key again", e.b.Name(), ErrInvalidStep, i, calls[i].Rule.name)
	}
	for i, c := range calls {
		if err := c.checkKey(); err != nil {
			return atomicbucket.Decision{}, i, fmt.Errorf("%s: %w", e.b.Name(), err)
		}
	}
	var buf [4]Call
	cl := buf[:0]
	group, node := e.b.Place(calls[0])
	spans := false
	for _, c := range calls {
		cl = append(cl, c.Clamped())
		if g, _ := e.b.Place(c); g != group {
			spans = true
		}
	}
	if spans {
		if mode != ModeTake {
			return atomicbucket.Decision{}, -1, fmt.Errorf("%s: a tier whose keys span servers can only be taken", e.b.Name())
		}
		return e.orderedTier(ctx, calls, cl)
	}
	cctx, rt, err := e.enter(ctx, e.own)
	if err != nil {
		return atomicbucket.Decision{}, -1, err
	}
	r, err := e.b.Tier(cctx, cl, mode)
	err = e.leave(rt, ended(cctx, err))
	if err != nil {
		return atomicbucket.Decision{}, -1, &nodeError{node, err}
	}
	if r.Index < 0 || r.Index >= len(calls) {
		return atomicbucket.Decision{}, -1, fmt.Errorf("%s: the store replied for step %d of %d", e.b.Name(), r.Index, len(calls))
	}
	return calls[r.Index].Decision(r), r.Index, nil
}

// orderedTier is a tier whose buckets span groups (a Cluster's slots): each
// call is one round trip, in order; when one denies, the calls before it are
// refunded, last first, as atomicbucket.TierAt does. Between a take and its
// refund the tokens are held, so other requests may be denied that a single
// call would have admitted (never the reverse: nothing is admitted beyond any
// rule's limit). A failed refund leaves its tokens taken: stricter, never
// looser.
func (e *Engine) orderedTier(ctx context.Context, calls, clamped []Call) (atomicbucket.Decision, int, error) {
	var best atomicbucket.Decision
	bestIndex := -1
	for i := range calls {
		d, err := e.one(ctx, calls[i], clamped[i], ModeTake)
		if err != nil || !d.Allowed {
			for j := i - 1; j >= 0; j-- {
				e.one(ctx, calls[j], clamped[j], ModeRefund) //nolint:errcheck // see above
			}
			return d, i, err
		}
		if bestIndex < 0 || d.Remaining < best.Remaining {
			best, bestIndex = d, i
		}
	}
	return best, bestIndex, nil
}

// oneCall holds the one-call slices one hands to Backend.Tier (which keeps
// no reference to it after it returns): a slice made on every check was an
// allocation.
var oneCall = sync.Pool{New: func() any { return new([1]Call) }}

// one runs a single call's Tier in mode: the decision for c (clamped is c
// with its cost clamped), or its node's error.
func (e *Engine) one(ctx context.Context, c, clamped Call, mode Mode) (atomicbucket.Decision, error) {
	if err := c.checkKey(); err != nil {
		return atomicbucket.Decision{}, fmt.Errorf("%s: %w", e.b.Name(), err)
	}
	_, node := e.b.Place(c)
	cctx, rt, err := e.enter(ctx, e.own)
	if err != nil {
		return atomicbucket.Decision{}, err
	}
	one := oneCall.Get().(*[1]Call)
	one[0] = clamped
	r, err := e.b.Tier(cctx, one[:], mode)
	one[0] = Call{}
	oneCall.Put(one)
	err = e.leave(rt, ended(cctx, err))
	if err != nil {
		return atomicbucket.Decision{}, &nodeError{node, err}
	}
	return c.Decision(r), nil
}

// AllowN decides a request of cost for key under r at the server's time,
// taking the tokens if it is allowed; concurrent calls share round trips when
// the store coalesces. A cost below 0 or above the burst is denied
// (RetryAfter Never); a cost of 0 takes nothing and creates nothing. The
// error is the store's (the connection, the context): the decision is then
// the zero Decision, a denial, and the caller decides what to do (Check has
// the rule's failure setting decide).
func (e *Engine) AllowN(ctx context.Context, r *StoreRule, key string, cost int64) (atomicbucket.Decision, error) {
	c := Call{r, key, cost}
	if e.co != nil && cost >= 0 && cost <= r.n.Limit.Burst && c.checkKey() == nil {
		return e.batcherOf(c).Do(ctx, c)
	}
	return e.one(ctx, c, c.Clamped(), ModeTake)
}

// PeekN is what AllowN would decide, taking nothing.
func (e *Engine) PeekN(ctx context.Context, r *StoreRule, key string, cost int64) (atomicbucket.Decision, error) {
	c := Call{r, key, cost}
	return e.one(ctx, c, c.Clamped(), ModePeek)
}

// RefundN gives cost tokens back to key's bucket under r, never beyond full.
func (e *Engine) RefundN(ctx context.Context, r *StoreRule, key string, cost int64) error {
	if cost <= 0 {
		return nil
	}
	c := Call{r, key, min(cost, r.n.Limit.Burst)}
	_, err := e.one(ctx, c, c, ModeRefund)
	return err
}

// AllowTier checks a request against every call, all or nothing: when a
// call's bucket cannot take its cost, nothing is taken from any, and the
// decision is that call's (index); when all can, each takes its cost and the
// decision is that of the call left with the fewest whole tokens (the first
// on a tie), which is what rate-limit headers should show. It is one round
// trip where the buckets share a server group (always, but on a Redis
// Cluster: where they share a slot), and otherwise ordered takes with
// refunds. Two calls naming the same rule and key are refused.
func (e *Engine) AllowTier(ctx context.Context, calls []Call) (atomicbucket.Decision, int, error) {
	return e.tier(ctx, calls, ModeTake)
}

// Check is AllowN for a service's hot path: it never fails. It asks the
// store unless the breaker of the bucket's server is open, within the
// store's timeout (or ctx's deadline, if sooner); when the store cannot
// answer, the rule's failure setting decides, and the Result says so.
func (e *Engine) Check(ctx context.Context, r *StoreRule, key string, cost int64) Result {
	res, _ := e.CheckTier(ctx, []Call{{r, key, cost}})
	return res
}

// CheckTier is AllowTier that never fails: when the store cannot decide,
// the calls' failure settings do, in order and all or nothing (a call that
// denies gives back what the local shares of the calls before it took). A
// tier naming one bucket twice is denied with an error, counted as no
// failure of the store's.
func (e *Engine) CheckTier(ctx context.Context, calls []Call) (Result, int) {
	if len(calls) == 0 {
		return Result{Decision: atomicbucket.Decision{Allowed: true}}, -1
	}
	if i := repeated(calls); i >= 0 {
		return Result{Err: fmt.Errorf("%s: %w: tier step %d names rule %s and its key again", e.b.Name(), ErrInvalidStep, i, calls[i].Rule.name)}, i
	}
	for i, c := range calls { // the caller's mistake, not the store's: denied, no failure counted
		if err := c.checkKey(); err != nil {
			return Result{Decision: atomicbucket.Decision{RetryAfter: atomicbucket.Never}, Err: fmt.Errorf("%s: %w", e.b.Name(), err)}, i
		}
	}
	g := e.guard
	if g.Closed() {
		return e.fallback(calls, ErrClosed)
	}
	// Every server the tier reaches must have its breaker closed (or be
	// probed by this check).
	var nb [4]string
	nodes := nb[:0]
	for _, c := range calls {
		if _, node := e.b.Place(c); !slices.Contains(nodes, node) {
			nodes = append(nodes, node)
		}
	}
	var ps passage
	if !g.admit(&ps, int64(atomicbucket.Now()), nodes...) {
		return e.fallback(calls, ErrCircuitOpen)
	}
	// Each call bounds its wait for the server by the store's timeout (enter),
	// and a coalesced check its wait in the queue (batcher.Do).
	var d atomicbucket.Decision
	var i int
	var err error
	if len(calls) == 1 {
		d, err = e.AllowN(ctx, calls[0].Rule, calls[0].Key, calls[0].Cost)
	} else {
		d, i, err = e.tier(ctx, calls, ModeTake)
	}
	ps.done(ctx, err)
	if err != nil {
		return e.fallback(calls, err)
	}
	return Result{Decision: d}, i
}

// fallback decides calls by their rules' failure settings, as
// atomicbucket.TierAt composes them, with err.
func (e *Engine) fallback(calls []Call, err error) (Result, int) {
	e.guard.Count(0, true)
	var buf [4]fallbackStep
	fs := buf[:0]
	for _, c := range calls {
		fs = append(fs, c.Rule.fallback.Step(c.Key, c.Cost))
	}
	return degraded(err, fs...)
}

// flush sends a coalesced batch: split by node (each node's part in one
// round trip, the nodes in parallel) and, within a node, by group.
func (e *Engine) flush(ctx context.Context, batch []*waitingCheck[Call]) {
	if len(batch) == 1 {
		// A check alone (a quiet moment): its own call, as without
		// coalescing, without the batch's bookkeeping.
		p := batch[0]
		e.batches.Add(1)
		d, err := e.one(ctx, p.Check, p.Check.Clamped(), ModeTake)
		p.Done(d, err)
		return
	}
	type part struct {
		node    string
		groups  [][]Call
		pending [][]*waitingCheck[Call]
		index   map[uint32]int
	}
	var parts []*part
	for _, p := range batch {
		group, node := e.b.Place(p.Check)
		var pt *part
		for _, x := range parts {
			if x.node == node {
				pt = x
			}
		}
		if pt == nil {
			pt = &part{node: node, index: map[uint32]int{}}
			parts = append(parts, pt)
		}
		gi, ok := pt.index[group]
		if !ok {
			gi = len(pt.groups)
			pt.index[group] = gi
			pt.groups, pt.pending = append(pt.groups, nil), append(pt.pending, nil)
		}
		pt.groups[gi] = append(pt.groups[gi], p.Check)
		pt.pending[gi] = append(pt.pending[gi], p)
	}
	send := func(pt *part) {
		e.batches.Add(1)
		var replies [][]Reply
		cctx, rt, err := e.enter(ctx, e.own)
		if err == nil {
			replies, err = e.b.Each(cctx, pt.groups)
			err = e.leave(rt, ended(cctx, err))
		}
		if err == nil && len(replies) != len(pt.groups) {
			err = fmt.Errorf("%s: %d replies for %d groups", e.b.Name(), len(replies), len(pt.groups))
		}
		for gi, ps := range pt.pending {
			for ci, p := range ps {
				switch {
				case err != nil:
					p.Done(atomicbucket.Decision{}, &nodeError{pt.node, err})
				case len(replies[gi]) != len(ps):
					p.Done(atomicbucket.Decision{}, fmt.Errorf("%s: %d replies for %d checks", e.b.Name(), len(replies[gi]), len(ps)))
				default:
					p.Done(p.Check.Decision(replies[gi][ci]), nil)
				}
			}
		}
	}
	if len(parts) == 1 {
		send(parts[0])
		return
	}
	var wg sync.WaitGroup
	for _, pt := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(pt)
		}()
	}
	wg.Wait()
}

// NewLease returns a lease of key's bucket under r, asking for at most
// maxBatch tokens at a time (at least 1, at most the burst).
func (e *Engine) NewLease(r *StoreRule, key string, maxBatch int64) *Lease {
	c := Call{r, key, 0}
	_, node := e.b.Place(c)
	l := NewLease(func(ctx context.Context, cost, want int64, prev Settlement) (Granted, error) {
		cctx, rt, err := e.enter(ctx, e.own)
		if err != nil {
			return Granted{}, err
		}
		c := Call{r, key, cost}
		lr, err := e.b.Lease(cctx, c.Clamped(), want, prev)
		err = e.leave(rt, ended(cctx, err))
		if err != nil {
			return Granted{}, err
		}
		g := c.Granted(lr)
		if g.Allowed && g.Size > 0 {
			e.grants.Add(1)
			e.granted.Add(g.Size)
		}
		return g, nil
	}, r.n.Limit.Burst, maxBatch)
	l.node = node
	return l
}

// CheckLease decides cost from l, never failing: locally when the lease can,
// else by a refill behind its server's breaker and within the store's
// timeout; when the store cannot, r's failure setting decides.
func (e *Engine) CheckLease(ctx context.Context, l *Lease, r *StoreRule, key string, cost int64) Result {
	res, _, _ := l.Check(ctx, e.guard, r.fallback.Step(key, cost), cost, int64(atomicbucket.Now()))
	return res
}

// ErrInvalidRule is wrapped by the errors of Bind for a rule a store cannot
// hold.
var ErrInvalidRule = errors.New("invalid rule")

// Bind prepares a generated package's shared rules (Store): each rule's
// numbers, its failure setting and its lease. It refuses a rule the store
// cannot hold within the contract, saying why, and two rules with one name.
func (e *Engine) Bind(rules []Rule) (Bound, error) {
	bound := make([]*StoreRule, len(rules))
	seen := map[string]bool{}
	leased := make([]bool, len(rules))
	fallbacks := make([]*fallbackRule, len(rules))
	for i, sr := range rules {
		name := sr.Name
		if sr.Namespace != "" {
			if err := CheckNamespace(sr.Namespace); err != nil {
				return nil, fmt.Errorf("%s: %w: %s: %w", e.b.Name(), ErrInvalidRule, sr.Name, err)
			}
			name = sr.Namespace + "/" + sr.Name
		}
		if seen[name] {
			return nil, fmt.Errorf("%s: %w: two shared rules named %q", e.b.Name(), ErrInvalidRule, name)
		}
		seen[name] = true
		if _, err := integersOf(sr); err != nil { // the generated units are the ones this version computes
			return nil, fmt.Errorf("%s: %w: %s: %w", e.b.Name(), ErrInvalidRule, sr.Name, err)
		}
		r, err := NewStoreRule(name, sr.Limit)
		if err == nil {
			err = e.b.CheckRule(r)
		}
		if err == nil {
			r, err = r.WithFailure(sr.Failure)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", e.b.Name(), ErrInvalidRule, err)
		}
		if sr.Lease > 0 {
			r.lease = min(sr.Lease, r.n.Limit.Burst)
		}
		r.global = sr.Global
		bound[i], leased[i], fallbacks[i] = r, sr.Lease > 0, r.fallback
	}
	b := &Binding{e: e, rules: bound}
	b.leaseOf = make([]int64, len(rules))
	for i, sr := range rules {
		b.leaseOf[i] = sr.Lease
	}
	b.leases = newLeases(leased, fallbacks, e.guard, func(rule int, key string) *Lease {
		r := b.ruleFor(rule, key)
		return e.NewLease(r, key, r.lease)
	})
	e.mu.Lock()
	e.bounds = append(e.bounds, b)
	e.mu.Unlock()
	return b, nil
}

// ReleaseLeases gives back to the store the tokens that the leases of every
// package bound to it hold (Lease.Release), and the units its leased windows
// hold (Window.ReleaseLeases), so that a service shutting down
// leaves them to the other instances instead of holding them until their
// grants expire. The leases go on working: a later check takes a new grant.
// It returns the first error, having tried every lease.
func (e *Engine) ReleaseLeases(ctx context.Context) error {
	e.mu.Lock()
	bounds := append([]*Binding(nil), e.bounds...)
	windows := append([]*Window(nil), e.windows...)
	e.mu.Unlock()
	var first error
	for _, b := range bounds {
		if err := b.leases.Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	for _, w := range windows {
		if err := w.ReleaseLeases(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close stops the store's traffic: checks after it are decided by their
// rules' failure settings with ErrClosed, and the direct calls (AllowN,
// AllowTier, leases) fail with it, without a call; a coalescing store sends
// what is queued and stops its goroutines. On the way it gives back the
// tokens the store's leases hold (ReleaseLeases, for at most 2 s: grants
// expire by then anyway). It returns once no call is in flight; it is safe
// while checks run, and may be called more than once. The client is the
// caller's to close.
func (e *Engine) Close() {
	e.closeOnce.Do(func() {
		e.guard.Close()
		if e.co != nil {
			e.co.Close()
			e.nodes.Range(func(_ string, bt *batcher[Call]) bool {
				bt.Close()
				return true
			})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		e.ReleaseLeases(ctx) //nolint:errcheck // best effort: a grant not given back expires
		cancel()
		e.gate.Close()
	})
}

// Binding is the Bound an Engine's Bind returns: it checks the steps' rule
// indexes, decides from leases when every step's rule is leased, and
// otherwise checks the steps on the store.
type Binding struct {
	e      *Engine
	rules  []*StoreRule // as bound
	leases *Leases
	numbersState
}

// Leases are the binding's leases.
func (b *Binding) Leases() *Leases { return b.leases }

// Health is the store's live state (Engine.Health).
func (b *Binding) Health() error { return b.e.Health() }

// Check decides steps on the store, or, when every step's rule is leased,
// from each step's lease in order, all or nothing. A step naming no bound
// rule is denied, as a rule that cannot be checked.
func (b *Binding) Check(ctx context.Context, steps []Step) (Result, int) {
	for i, s := range steps {
		if s.Rule < 0 || s.Rule >= len(b.rules) {
			return Result{Err: fmt.Errorf("%s: %w: step %d names rule %d of %d bound", b.e.b.Name(), ErrInvalidStep, i, s.Rule, len(b.rules))}, i
		}
	}
	for i, s := range steps {
		if err := (Call{b.ruleFor(s.Rule, s.Key), s.Key, s.Cost}).checkKey(); err != nil {
			return Result{Decision: atomicbucket.Decision{RetryAfter: atomicbucket.Never}, Err: fmt.Errorf("%s: %w", b.e.b.Name(), err)}, i
		}
	}
	if len(steps) > 0 {
		if res, i, ok := b.leases.Check(ctx, steps); ok {
			return res, i
		}
	}
	var buf [4]Call
	calls := buf[:0]
	for _, s := range steps {
		calls = append(calls, Call{b.ruleFor(s.Rule, s.Key), s.Key, s.Cost})
	}
	return b.e.CheckTier(ctx, calls)
}

// Refund gives back what an allowed Check of steps took (see Bound.Refund): a
// refund call a step, in reverse order, skipping leased rules. It returns the
// first error, after trying every step.
func (b *Binding) Refund(ctx context.Context, steps []Step) error {
	var first error
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		if s.Rule < 0 || s.Rule >= len(b.rules) || b.leases.Leased(s.Rule) || s.Cost <= 0 {
			continue
		}
		if err := b.e.RefundN(ctx, b.ruleFor(s.Rule, s.Key), s.Key, s.Cost); err != nil && first == nil {
			first = fmt.Errorf("%s: refund: %w", b.e.b.Name(), err)
		}
	}
	return first
}

// CheckStep is Check of one step; a leased rule's check allocates nothing.
func (b *Binding) CheckStep(ctx context.Context, step Step) Result {
	if step.Rule < 0 || step.Rule >= len(b.rules) {
		return Result{Err: fmt.Errorf("%s: %w: a step names rule %d of %d bound", b.e.b.Name(), ErrInvalidStep, step.Rule, len(b.rules))}
	}
	r := b.ruleFor(step.Rule, step.Key)
	if err := (Call{r, step.Key, step.Cost}).checkKey(); err != nil {
		return Result{Decision: atomicbucket.Decision{RetryAfter: atomicbucket.Never}, Err: fmt.Errorf("%s: %w", b.e.b.Name(), err)}
	}
	if res, ok := b.leases.CheckStep(ctx, step); ok {
		return res
	}
	return b.e.Check(ctx, r, step.Key, step.Cost)
}

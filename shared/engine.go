package shared

import (
	"context"
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
// refunded, last first, as tier.At does. Between a take and its
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

// SettleN settles a request of key under r admitted at cost estimate whose
// actual cost is actual (atomicbucket.Table.SettleAt, on the store): a
// lower actual gives the difference back (ModeRefund), a higher one charges
// the excess as debt, at most r's MaxDebt tokens below empty (ModeOwe), in
// one round trip; it returns the tokens of the excess forgiven beyond that
// bound. A negative estimate or actual settles nothing. On an error nothing
// may have been settled: the request keeps what it was admitted with.
func (e *Engine) SettleN(ctx context.Context, r *StoreRule, key string, estimate, actual int64) (forgiven int64, err error) {
	c, mode, ok, forgiven := r.SettleStep(key, estimate, actual)
	if !ok {
		return forgiven, nil
	}
	if err := c.checkKey(); err != nil {
		return 0, fmt.Errorf("%s: %w", e.b.Name(), err)
	}
	_, node := e.b.Place(c)
	cctx, rt, err := e.enter(ctx, e.own)
	if err != nil {
		return 0, err
	}
	one := oneCall.Get().(*[1]Call)
	one[0] = c
	rep, err := e.b.Tier(cctx, one[:], mode)
	one[0] = Call{}
	oneCall.Put(one)
	if err = e.leave(rt, ended(cctx, err)); err != nil {
		return 0, &nodeError{node, err}
	}
	return r.Forgiven(c, mode, rep, actual-estimate), nil
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
func (e *Engine) Check(ctx context.Context, r *StoreRule, key string, cost int64) verdict.Result {
	res, _ := e.CheckTier(ctx, []Call{{r, key, cost}})
	return res
}

// CheckTier is AllowTier that never fails: when the store cannot decide,
// the calls' failure settings do, in order and all or nothing (a call that
// denies gives back what the local shares of the calls before it took). A
// tier naming one bucket twice is denied with an error, counted as no
// failure of the store's.
func (e *Engine) CheckTier(ctx context.Context, calls []Call) (verdict.Result, int) {
	if len(calls) == 0 {
		return verdict.Result{Decision: atomicbucket.Decision{Allowed: true}}, -1
	}
	if i := repeated(calls); i >= 0 {
		return verdict.Result{Err: classed(fmt.Errorf("%s: %w: tier step %d names rule %s and its key again", e.b.Name(), ErrInvalidStep, i, calls[i].Rule.name))}, i
	}
	for i, c := range calls { // the caller's mistake, not the store's: denied, no failure counted
		if err := c.checkKey(); err != nil {
			return verdict.Result{Decision: atomicbucket.Decision{RetryAfter: atomicbucket.Never}, Err: classed(fmt.Errorf("%s: %w", e.b.Name(), err))}, i
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
	return verdict.Result{Decision: d}, i
}

// fallback decides calls by their rules' failure settings, as
// tier.At composes them, with err.
func (e *Engine) fallback(calls []Call, err error) (verdict.Result, int) {
	e.guard.Count(0, true)
	var buf [4]fallbackStep
	fs := buf[:0]
	for _, c := range calls {
		fs = append(fs, c.Rule.fallback.Step(c.Key, c.Cost))
	}
	return degraded(err, fs...)
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

package shared

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/tier"
	"github.com/limitgen/limitgen/verdict"
	"github.com/puzpuzpuz/xsync/v3"
)

// The doors' events name a store error by its class (verdict.Event's
// StoreError): a Result's Err is classed (classedError), and verdict finds
// its class with errors.As (verdict.ClassedError), so nothing registers
// anything when the package is initialised.

// fallbackRule is a rule's failure setting, ready to decide while its store
// cannot. The zero fallbackRule denies.
type fallbackRule struct {
	failure Failure
	burst   int64
	local   *atomicbucket.Table[string] // FailLocal's buckets
}

// ErrLocalShare is wrapped by newFallbackRule's error for a share outside (0, 1].
var ErrLocalShare = errors.New("a local share must be in (0, 1]")

// newFallbackRule prepares f for a rule of limit l. For FailLocal it builds the
// local buckets: l's rate and burst times Share, the period stretched and
// the burst rounded down, so that the fallback never admits more than its
// share.
func newFallbackRule(l atomicbucket.Limit, f Failure) (*fallbackRule, error) {
	fb := &fallbackRule{failure: f, burst: l.Burst}
	if f.Mode != FailLocal {
		return fb, nil
	}
	l, err := shareOf(l, f.Share)
	if err != nil {
		return nil, err
	}
	rule, err := atomicbucket.NewRule(l)
	if err != nil {
		return nil, fmt.Errorf("its local share %v: %w", f.Share, err)
	}
	fb.local = atomicbucket.NewTable[string](rule, atomicbucket.TableOptions{MaxKeys: 1 << 20})
	return fb, nil
}

// Failure is the setting the fallback decides by.
func (f *fallbackRule) Failure() Failure {
	if f == nil {
		return Failure{}
	}
	return f.failure
}

// Step is a request of cost for key decided by the fallback, as a step of
// tier.At.
func (f *fallbackRule) Step(key string, cost int64) fallbackStep {
	return fallbackStep{f, key, cost}
}

// fallbackStep is one step of a tier decided by its rule's failure setting.
type fallbackStep struct {
	f    *fallbackRule
	key  string
	cost int64
}

// AllowNAt decides the step at now: FailAllow admits, FailLocal asks the
// local share, FailDeny denies with a RetryAfter of a second (when the store
// may be back).
func (s fallbackStep) AllowNAt(now atomicbucket.Time) atomicbucket.Decision {
	if f := s.f; f != nil {
		switch f.failure.Mode {
		case FailAllow:
			return atomicbucket.Decision{Allowed: true, Remaining: f.burst}
		case FailLocal:
			if f.local != nil {
				return f.local.AllowNAt(s.key, now, s.cost)
			}
		}
	}
	return atomicbucket.Decision{RetryAfter: time.Second}
}

// outage reports whether the step denies because the store could not decide
// (FailDeny, or no setting), rather than by a local share's limit.
func (s fallbackStep) outage() bool {
	return s.f == nil || s.f.failure.Mode != FailAllow && (s.f.failure.Mode != FailLocal || s.f.local == nil)
}

// degraded is the Result of steps decided by their failure settings for
// err: fallbackTier's decision, an outage when the step that denied refuses
// for the outage itself, and the index of that step.
func degraded(err error, steps ...fallbackStep) (verdict.Result, int) {
	d, i := fallbackTier(steps...)
	return verdict.Result{Decision: d, Degraded: true, Outage: !d.Allowed && steps[i].outage(), Err: classed(err)}, i
}

// classedError is a shared check's error with its class (ErrorClass), which
// a door's events read through verdict.ClassedError. It is the error as it
// was (Error, Unwrap), only named.
type classedError struct{ err error }

func (e classedError) Error() string      { return e.err.Error() }
func (e classedError) Unwrap() error      { return e.err }
func (e classedError) ErrorClass() string { return ErrorClass(e.err) }

// classError is one of this package's errors a check's Result may carry
// (ErrCircuitOpen, ErrClosed, ErrNoStore, …): it names its class itself,
// so that an error built around it elsewhere (a generated package's
// "no store given") is classed too.
type classError struct{ msg, class string }

func (e *classError) Error() string      { return e.msg }
func (e *classError) ErrorClass() string { return e.class }

// classed is err with its class (nil for nil).
func classed(err error) error {
	if err == nil {
		return nil
	}
	return classedError{err}
}

// RefundAt gives a local share back what AllowNAt took (a tier's later step
// denied).
func (s fallbackStep) RefundAt(now atomicbucket.Time) {
	if f := s.f; f != nil && f.failure.Mode == FailLocal && f.local != nil {
		f.local.RefundAt(s.key, now, s.cost)
	}
}

// fallbackTier decides steps by their rules' failure settings, as
// tier.At composes them: the decision, and the index of the step
// it is from.
func fallbackTier(steps ...fallbackStep) (atomicbucket.Decision, int) {
	var buf [4]tier.Step
	ts := buf[:0]
	for _, s := range steps {
		ts = append(ts, s)
	}
	d, i, _ := tier.At(atomicbucket.Now(), ts...)
	return d, i
}

// ErrCircuitOpen is the verdict.Result.Err of a check a store's breaker answered
// without asking the store.
var ErrCircuitOpen error = &classError{fmt.Sprintf("circuit open: the store failed %d checks in a row; retrying after a pause", BreakerFailures), "circuit_open"}

// The breaker: after BreakerFailures failed calls in a row, checks do not go
// to the store for a pause (BreakerPause, doubling up to BreakerMaxPause while
// probes keep failing); then one check probes it, and a success closes the
// breaker. A dead store then costs a local decision, not a timeout per
// request.
const (
	BreakerFailures = 5
	BreakerPause    = 250 * time.Millisecond
	BreakerMaxPause = time.Second
)

// ProbeEvery is how often a store whose backend is a Pinger pings each
// server that is not answering (see Pinger), however few checks come: the
// breaker's first pause, so that an idle store recovers as soon as a busy
// one's first probe would.
const ProbeEvery = BreakerPause

// circuit is a store's circuit breaker. The zero circuit is closed.
type circuit struct {
	failures  atomic.Int64          // failed calls in a row
	openUntil atomic.Int64          // atomicbucket time (ns) before which no check goes to the store; 0 when closed
	pause     atomic.Int64          // the current pause, ns
	probing   atomic.Bool           // one check is probing a half-open breaker
	last      atomic.Pointer[error] // the last failure's error, for Health
	answered  atomic.Uint64         // calls the server answered so far (Success)
	opened    atomic.Int64          // times it went from closed to open
	g         *storeGuard           // the guard whose breaker it is (nil for a circuit of one's own)
}

// Allow reports whether a check may go to the store at now (atomicbucket
// time), and whether it is the probe of a half-open breaker: the caller then
// reports its outcome with Success, Failure or EndProbe.
func (b *circuit) Allow(now int64) (ok, probe bool) {
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if now < until || !b.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

// Answered is how many calls the server has answered so far: a check reads
// it before its call, and storeGuard's failure accounting compares (see failed).
func (b *circuit) Answered() uint64 { return b.answered.Load() }

// Success records a call the store answered.
func (b *circuit) Success(probe bool) {
	b.answered.Add(1)
	if b.g != nil && b.g.start.Load() != nil {
		b.g.start.Store(nil) // the store answers: what start said is over
	}
	b.failures.Store(0)
	if probe || b.openUntil.Load() != 0 {
		b.openUntil.Store(0)
		b.pause.Store(0)
	}
	if probe {
		b.probing.Store(false)
	}
}

// Failure records a call the store failed at now.
func (b *circuit) Failure(now int64, probe bool) {
	if b.g != nil {
		defer b.g.kick() // the guard pings the server until it answers
	}
	n := b.failures.Add(1)
	if probe || n >= BreakerFailures {
		p := b.pause.Load()
		switch {
		case p == 0:
			p = int64(BreakerPause)
		case probe:
			p = min(2*p, int64(BreakerMaxPause))
		}
		b.pause.Store(p)
		if b.openUntil.Swap(now+p) == 0 {
			b.opened.Add(1)
		}
	}
	if probe {
		b.probing.Store(false)
	}
}

// EndProbe ends a probe's turn without a verdict on the store (the check
// never reached it).
func (b *circuit) EndProbe(probe bool) {
	if probe {
		b.probing.Store(false)
	}
}

// State is the failed calls in a row and the atomicbucket time until which
// the breaker is open (0: closed).
func (b *circuit) State() (failures, openUntil int64) {
	return b.failures.Load(), b.openUntil.Load()
}

// storeGuard is what a store's calls pass: its timeout, its circuit breakers
// (one per server: a stalled Cluster master opens only its own), whether it
// is closed, and its counts. Engine runs every check through it.
type storeGuard struct {
	Timeout  time.Duration // the most a call may take when the caller's context allows longer
	breakers *xsync.MapOf[string, *circuit]
	calls    atomic.Int64
	degraded atomic.Int64
	closed   atomic.Bool           // Close was called: no more calls
	start    atomic.Pointer[error] // why the store could not be reached when made (StartFailed), until a call succeeds
	// ping asks a server whether it answers (the backend's Pinger; nil: the
	// guard never probes by itself); probing is set while the goroutine
	// that pings the servers not answering runs (kick), done closed by
	// Close.
	ping    func(ctx context.Context, node string) error
	probing atomic.Bool
	done    chan struct{}
}

// newStoreGuard returns a guard with timeout and no breaker open.
func newStoreGuard(timeout time.Duration) *storeGuard {
	return &storeGuard{Timeout: timeout, breakers: xsync.NewMapOf[string, *circuit](), done: make(chan struct{})}
}

// kick starts the guard's prober unless it runs (or the guard cannot ping,
// or is closed): it pings every server not answering every ProbeEvery, and
// ends once all answer.
func (g *storeGuard) kick() {
	if g.ping == nil || g.closed.Load() || !g.probing.CompareAndSwap(false, true) {
		return
	}
	go g.probe()
}

// probe is the prober's loop (kick).
func (g *storeGuard) probe() {
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-g.done:
			g.probing.Store(false)
			return
		}
		if g.pingSilent() {
			continue
		}
		// All answer: end, unless a failure came in between (its kick saw
		// the prober running).
		g.probing.Store(false)
		if len(g.silent()) == 0 || !g.probing.CompareAndSwap(false, true) {
			return
		}
	}
}

// silent are the servers not answering: whose breaker is open or whose last
// call failed, and "" while the store has not reached its server since it
// was made.
func (g *storeGuard) silent() []string {
	var nodes []string
	g.breakers.Range(func(node string, b *circuit) bool {
		if n, until := b.State(); n > 0 || until != 0 {
			nodes = append(nodes, node)
		}
		return true
	})
	if g.start.Load() != nil && !slices.Contains(nodes, "") {
		nodes = append(nodes, "")
	}
	return nodes
}

// pingSilent pings each server not answering, recording the answers as the
// calls' would be (a success closes its breaker and ends what StartFailed
// said), and reports whether any is still not answering.
func (g *storeGuard) pingSilent() bool {
	still := false
	for _, node := range g.silent() {
		ctx, cancel := context.WithTimeout(context.Background(), g.Timeout)
		err := g.ping(ctx, node)
		cancel()
		if g.closed.Load() {
			return false
		}
		if err != nil {
			still = true
			continue
		}
		if b, ok := g.breakers.Load(node); ok {
			b.Success(false)
		}
		if node == "" {
			g.start.Store(nil)
		}
	}
	return still
}

// circuit is the breaker of the server named node ("" for a store of one
// server).
func (g *storeGuard) circuit(node string) *circuit {
	if b, ok := g.breakers.Load(node); ok {
		return b
	}
	b, _ := g.breakers.LoadOrCompute(node, func() *circuit { return &circuit{g: g} })
	return b
}

// ErrUnhealthy is wrapped by Health's error.
var ErrUnhealthy = errors.New("the store is not answering")

// StartFailed records that the store could not be reached when it was made
// (err says how): Health reports it until a call succeeds. A store made while
// its server is down works from the moment the server answers; until then
// each rule's failure setting decides, counted as degraded.
func (g *storeGuard) StartFailed(err error) {
	g.start.Store(&err)
	g.kick()
}

// Health is nil while the store answers: it reached its server when made (or
// a call has succeeded since) and no server's last call failed. Otherwise it
// says which servers failed how many calls in a row, with the last error,
// wrapping ErrUnhealthy. It is the live state, as a health check reads it.
func (g *storeGuard) Health() error {
	if g.closed.Load() {
		return fmt.Errorf("%w: %w", ErrUnhealthy, ErrClosed)
	}
	var bad []string
	g.breakers.Range(func(node string, b *circuit) bool {
		n := b.failures.Load()
		if n == 0 {
			return true
		}
		what := "the server"
		if node != "" {
			what = "server " + node
		}
		msg := fmt.Sprintf("%s failed %d calls in a row", what, n)
		if b.openUntil.Load() != 0 {
			msg += " (circuit open)"
		}
		if last := b.last.Load(); last != nil {
			msg += ", the last: " + (*last).Error()
		}
		bad = append(bad, msg)
		return true
	})
	slices.Sort(bad)
	if start := g.start.Load(); start != nil {
		bad = append([]string{"not reached since it was made: " + (*start).Error()}, bad...)
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; the rules' failure settings decide meanwhile", ErrUnhealthy, strings.Join(bad, "; "))
}

// Close makes every later check be decided by the failure settings, with
// ErrClosed, without a call (a closed store makes no more calls). It may be
// called more than once.
func (g *storeGuard) Close() {
	if g.closed.CompareAndSwap(false, true) {
		close(g.done)
	}
}

// Closed reports whether Close was called.
func (g *storeGuard) Closed() bool { return g.closed.Load() }

// failed records a call to node that failed: a failure of the server's,
// unless it says nothing of the server: the caller's own context had ended
// (a client that went away, a deadline shorter than the guard's timeout),
// the check never left the process (ErrOverload), the store was closed, or
// the call timed out while the server answered other calls (answered moved
// past mark, read before the call): the time went waiting behind this
// process's own calls (a connection, a coalescer's queue, a row lock its
// callers queue on), not to a server that stopped answering. Then only a
// probe's turn ends. Otherwise callers that give up, or a process that
// queues its own checks, could open the breaker against a healthy server.
func (g *storeGuard) failed(ctx context.Context, b *circuit, err error, probe bool, mark uint64) {
	if ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrOverload) ||
		IsTimeout(err) && b.answered.Load() != mark {
		b.EndProbe(probe)
		return
	}
	b.last.Store(&err)
	b.Failure(int64(atomicbucket.Now()), probe)
}

// passage is one check's way through the breakers of the servers it
// reaches (at most four: a tier's buckets on a Cluster's masters): admit
// lets it through, counting it as a call, and done records the outcome. It
// is the only place the breakers' sequence is written: Engine.CheckTier and
// Lease.Check both go through it.
type passage struct {
	g        *storeGuard
	nodes    [4]string
	breakers [4]*circuit
	probes   [4]bool
	marks    [4]uint64 // each breaker's Answered before the call
	n        int
}

// admit lets a check to nodes through at now when every one's breaker
// allows it (closed, or this check is its half-open probe), counting the
// call; otherwise it ends the probes it took and reports false (the check
// is then the failure settings', ErrCircuitOpen). At most four nodes.
func (g *storeGuard) admit(p *passage, now int64, nodes ...string) bool {
	p.g, p.n = g, 0
	for _, node := range nodes[:min(len(nodes), len(p.nodes))] {
		b := g.circuit(node)
		ok, probe := b.Allow(now)
		if !ok {
			for i := range p.n {
				p.breakers[i].EndProbe(p.probes[i])
			}
			return false
		}
		p.nodes[p.n], p.breakers[p.n], p.probes[p.n], p.marks[p.n] = node, b, probe, b.Answered()
		p.n++
	}
	g.Count(1, false)
	return true
}

// done records the call's outcome: a success closes every breaker it went
// through (or keeps it closed); a failure is the failing server's (the
// node a nodeError names, or the only one), and the other probes end.
func (p *passage) done(ctx context.Context, err error) {
	if err == nil {
		for i := range p.n {
			p.breakers[i].Success(p.probes[i])
		}
		return
	}
	failed := -1
	var ne *nodeError
	if errors.As(err, &ne) {
		for i := range p.n {
			if p.nodes[i] == ne.Node {
				failed = i
			}
		}
	} else if p.n == 1 {
		failed = 0
	}
	for i := range p.n {
		if i == failed {
			p.g.failed(ctx, p.breakers[i], err, p.probes[i], p.marks[i])
		} else {
			p.breakers[i].EndProbe(p.probes[i])
		}
	}
}

// Count adds to the guard's counts calls made, and whether the failure
// settings decided a check.
func (g *storeGuard) Count(calls int64, degraded bool) {
	g.calls.Add(calls)
	if degraded {
		g.degraded.Add(1)
	}
}

// Counts are the checks that went to the store, and the checks the failure
// settings decided (the store failed, or a breaker was open).
func (g *storeGuard) Counts() (calls, degraded int64) { return g.calls.Load(), g.degraded.Load() }

// Openings is how many times the store's breakers have opened, together.
func (g *storeGuard) Openings() int64 {
	var n int64
	g.breakers.Range(func(_ string, b *circuit) bool {
		n += b.opened.Load()
		return true
	})
	return n
}

// BreakerState is one server's breaker as Store.Breakers reports it.
type BreakerState struct {
	Node      string    // the server ("" for a store of one server)
	Failures  int64     // failed calls in a row
	Open      bool      // checks do not go to the server until OpenUntil
	OpenUntil time.Time // when a check may probe it again (zero when closed)
	Openings  int64     // times it has opened since the store was made
}

// States are the breakers' states, one per server the store has called.
func (g *storeGuard) States() []BreakerState {
	var out []BreakerState
	now := atomicbucket.Now()
	g.breakers.Range(func(node string, b *circuit) bool {
		n, until := b.State()
		st := BreakerState{Node: node, Failures: n, Openings: b.opened.Load()}
		if until != 0 {
			st.Open = true
			st.OpenUntil = time.Now().Add(time.Duration(until - int64(now)))
		}
		out = append(out, st)
		return true
	})
	return out
}

// ErrorClass names the kind of a shared check's error, for metrics and logs
// (a bounded set, unlike error strings): "circuit_open", "closed",
// "no_store", "lease_wait", "overload", "unavailable" (the server refused
// the connection, or cannot be reached), "timeout", "canceled", "invalid" (a step the
// store refused: a bucket named twice, a rule not bound), "store" for any
// other error of the store's, and "" for nil.
func ErrorClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrCircuitOpen):
		return "circuit_open"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, ErrNoStore):
		return "no_store"
	case errors.Is(err, ErrLeaseWait):
		return "lease_wait"
	case errors.Is(err, ErrOverload):
		return "overload"
	case isUnavailable(err):
		return "unavailable"
	case IsTimeout(err):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrInvalidStep):
		return "invalid"
	}
	return "store"
}

// ErrUnavailable is wrapped by the error of a call whose server could not be
// reached (its dials refused, or found no route), where the client's own
// error was only a deadline (go-redis dials again until then).
var ErrUnavailable error = &classError{"the store's server is unavailable", "unavailable"}

// isUnavailable reports whether err says the server could not be reached: a
// connection refused or reset, no route to it, its name not found, or
// ErrUnavailable.
func isUnavailable(err error) bool {
	if errors.Is(err, ErrUnavailable) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// ErrInvalidStep is wrapped by the error of a check a store refused as
// malformed (a tier naming one bucket twice, a step naming no bound rule):
// the caller's mistake, not the store's.
var ErrInvalidStep error = &classError{"invalid step", "invalid"}

// IsTimeout reports whether err is a timeout: a context's deadline, or a
// network deadline that a client set from one (go-redis and pgx turn a
// context's deadline into the connection's, whose error is then an i/o
// timeout rather than context.DeadlineExceeded).
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// ErrOverload wraps the error of a check that ran out of time in this
// process, before it reached the store: queued for one of the store's
// connections (Engine's slots) or for a coalesced call. The failure setting
// decides it, but it is no failure of the store's: a busy process does not
// open the breaker against a healthy server.
var ErrOverload error = &classError{"overloaded: the check waited in this process past the store's timeout", "overload"}

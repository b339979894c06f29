package shared

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
	"github.com/puzpuzpuz/xsync/v3"
)

// LeaseFunc is a store's lease call for one bucket: settle the lessee's
// previous grant prev (while it is valid, what it did not spend goes back,
// never beyond full), then grant at least cost and up to want tokens, or
// none for want 0 (a release). The store holds the tokens it grants until the
// start of its second after next: while a grant is valid the bucket holds at
// most its burst minus what grants hold, and an expired grant counts as spent
// at its expiry.
type LeaseFunc func(ctx context.Context, cost, want int64, prev Settlement) (Granted, error)

// Settlement is what a lease call tells the store of the lessee's previous
// grant: the store's second it is held under (a window's: its slot, and Gen
// the generation of the key's slots it was made in) and its size (0: none, or
// expired), and the tokens it did not spend.
type Settlement struct{ Second, Size, Unspent, Gen int64 }

// Granted is a store's answer to a lease call: its decision (a denial's
// RetryAfter is when the cost will be there), and when allowed the tokens
// granted (the cost included), the store's second the grant is held under,
// and the µs into that second at which it was granted. A window's grant
// (Term above 0) is held under a slot (Second) of the key's slots of
// generation Gen, and may be spent for Term from the store's now.
type Granted struct {
	atomicbucket.Decision
	Size, Second, Usec int64
	Term               time.Duration
	Gen                int64
}

// Expires is the atomicbucket time from which the grant may no longer be
// spent, for a call sent at sent (atomicbucket time, before the call): a
// bucket's store holds it until the start of its second after next, 2 s −
// Usec from the store's now, which is no earlier than sent; a window's grant
// is spent for its Term from then.
func (g Granted) Expires(sent int64) int64 {
	if g.Term > 0 {
		return sent + int64(g.Term)
	}
	return sent + (2_000_000-g.Usec)*1000
}

// Lease spends tokens of one shared bucket (a rule and a key) in this process:
// it takes a batch from the store in one call and admits requests from it
// locally, with one atomic operation and no round trip, until the batch runs
// out or expires. Only tokens the store granted are ever spent, and while a
// grant is valid the store counts its tokens as held, so all instances
// together never admit more than the shared bucket allows, in any window. The
// lease stops spending a grant by its own clock, from before it asked. What a
// lease did not spend goes back to the bucket with its next call (never
// beyond full), and on Release.
//
// The batch adapts: twice what the lease spent of its last grant (at least
// the request's cost, at most the lease's maxBatch), and the store grants at
// most half of what the bucket holds beyond the request's own cost, so a
// bucket running low is shared out in ever smaller pieces instead of drained
// by one instance.
type Lease struct {
	call  LeaseFunc
	burst int64
	node  string // the server holding the bucket, whose breaker guards the refills (Engine)

	cur         atomic.Pointer[grant] // the grant being spent; nil before the first
	deniedUntil atomic.Int64          // atomicbucket time (ns) before which the store said the cost is not there: denied locally
	mu          sync.Mutex            // one refill at a time
	maxBatch    int64
	calls       atomic.Int64 // store calls made
	epoch       int64        // Leases: the change of its rule's numbers it was made in
	// window: a window's lease, whose store counts a grant until its term
	// and the window are over, so what an expired grant did not spend can
	// still go back.
	window bool
}

// grant is one batch of tokens the store granted a lease.
type grant struct {
	left    atomic.Int64 // tokens not yet spent
	expires int64        // atomicbucket time (ns) from which none may be spent
	second  int64        // the store's second the grant is held under (to settle it)
	gen     int64        // a window's: the generation of the key's slots
	size    int64        // tokens granted
	// What the store said of the shared bucket with the grant taken: the
	// tokens it still held for everyone, and when it would be full again
	// (atomicbucket time). A decision from the grant reports the bucket as a
	// client sees it from here: those tokens and the grant's, not the grant's
	// alone (which would tell a client to back off while the bucket is full).
	storeLeft int64
	fullAt    int64
}

// decision is a spend of cost from g at now, leaving left in it, as the
// shared bucket looks from this lease: what the grant holds plus what the
// store held for everyone at the grant (at most the burst), full again when
// the store said.
func (g *grant) decision(now, left int64, burst int64) atomicbucket.Decision {
	return atomicbucket.Decision{Allowed: true, Remaining: min(left+g.storeLeft, burst), Reset: time.Duration(max(g.fullAt-now, 0))}
}

// NewLease returns a lease of a bucket of burst tokens through call, asking
// for at most maxBatch tokens at a time (at least 1, at most the burst).
func NewLease(call LeaseFunc, burst, maxBatch int64) *Lease {
	return &Lease{call: call, burst: burst, maxBatch: min(max(maxBatch, 1), burst)}
}

// AllowN admits a request of cost from the lease's tokens, refilling them
// from the store when they run short or expire. A denial comes from the store
// (the bucket does not hold the cost beyond what leases hold), with its
// RetryAfter; an error is the store's, and the caller's failure setting
// decides.
func (l *Lease) AllowN(ctx context.Context, cost int64) (atomicbucket.Decision, error) {
	d, _, call := l.local(int64(atomicbucket.Now()), cost)
	if !call {
		return d, nil
	}
	d, _, err := l.refill(ctx, cost)
	return d, err
}

// local decides cost without the store when it can: from the current grant,
// or a denial while the store's last one holds (call is false); otherwise
// the caller must refill. The grant spent from is returned for giveBack.
func (l *Lease) local(now, cost int64) (d atomicbucket.Decision, g *grant, call bool) {
	if cost < 0 || cost > l.burst {
		return atomicbucket.Decision{RetryAfter: atomicbucket.Never}, nil, false
	}
	if d, g, ok := l.spend(now, cost); ok {
		return d, g, false
	}
	if until := l.deniedUntil.Load(); until != 0 && now < until {
		// The store denied recently: until its wait is over, deny without
		// asking (stricter than asking, if another instance gives tokens back
		// meanwhile; never looser). A bucket over its limit then costs the
		// store one call per wait, not one per request.
		return atomicbucket.Decision{RetryAfter: time.Duration(until - now)}, nil, false
	}
	return atomicbucket.Decision{}, nil, true
}

// spend takes cost from the current grant if it is valid at now and holds it.
func (l *Lease) spend(now, cost int64) (atomicbucket.Decision, *grant, bool) {
	g := l.cur.Load()
	if g == nil || now >= g.expires {
		return atomicbucket.Decision{}, nil, false
	}
	for {
		left := g.left.Load()
		if left < cost {
			return atomicbucket.Decision{}, nil, false
		}
		if g.left.CompareAndSwap(left, left-cost) {
			return g.decision(now, left-cost, l.burst), g, true
		}
	}
}

// giveBack returns cost to grant g, which a tier took it from before another
// of its steps denied, if g is still the lease's grant (otherwise the tokens
// are dropped: stricter, never looser).
func (l *Lease) giveBack(g *grant, cost int64) {
	if g != nil && l.cur.Load() == g {
		g.left.Add(cost)
	}
}

// giveBackTo returns back units, spent from the window's grant of slot
// second and generation gen by a request that used less, to that grant if
// it is still the lease's and valid (true); false when it is not, and the
// units must go back to the store, which counts them there still.
func (l *Lease) giveBackTo(second, gen, back int64) bool {
	g := l.cur.Load()
	if g == nil || g.second != second || g.gen != gen || int64(atomicbucket.Now()) >= g.expires {
		return false
	}
	g.left.Add(back)
	return true
}

// refill settles the current grant and asks the store for a batch that
// covers cost, under the lease's lock: one refill at a time, and a request
// that waited for another's refill tries the new tokens first.
func (l *Lease) refill(ctx context.Context, cost int64) (atomicbucket.Decision, *grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent := int64(atomicbucket.Now())
	if d, g, ok := l.spend(sent, cost); ok {
		return d, g, nil
	}
	if err := ctx.Err(); err != nil {
		// The wait for another request's refill used up ctx: the store was not
		// asked, so this is no failure of the store's (see CheckLease).
		return atomicbucket.Decision{}, nil, fmt.Errorf("%w: %w", ErrLeaseWait, err)
	}
	// The batch: twice what was spent from the last grant (a lease spent
	// quickly grows, an idle one shrinks), at least the cost, at most maxBatch.
	prev, spent := l.settle(sent)
	want := min(max(2*spent, cost, 1), l.maxBatch)
	l.calls.Add(1)
	gr, err := l.call(ctx, cost, want, prev)
	if err != nil || !gr.Allowed {
		l.cur.Store(nil)
		if err == nil && gr.RetryAfter != atomicbucket.Never {
			l.deniedUntil.Store(int64(atomicbucket.Now().Add(gr.RetryAfter)))
		}
		return gr.Decision, nil, err
	}
	l.deniedUntil.Store(0)
	g := &grant{expires: gr.Expires(sent), second: gr.Second, gen: gr.Gen, size: gr.Size,
		storeLeft: gr.Remaining, fullAt: sent + int64(gr.Reset)}
	g.left.Store(g.size - cost)
	l.cur.Store(g)
	return g.decision(sent, g.size-cost, l.burst), g, nil
}

// idle reports whether the lease holds no valid grant and no refill is under
// way (a sweep may then drop it).
func (l *Lease) idle(now int64) bool {
	if !l.mu.TryLock() {
		return false
	}
	defer l.mu.Unlock()
	g := l.cur.Load()
	return g == nil || now >= g.expires
}

// ErrLeaseWait wraps the error of a check whose context ended while it
// waited for another check's refill of the same lease.
var ErrLeaseWait error = &classError{"waited for a lease's refill", "lease_wait"}

// settle ends the current grant (nothing more is spent from it): what to
// tell the store of it, and how many of its tokens were spent.
func (l *Lease) settle(now int64) (Settlement, int64) {
	g := l.cur.Load()
	if g == nil {
		return Settlement{}, 0
	}
	unspent := g.left.Swap(0)
	if now >= g.expires && !l.window {
		return Settlement{}, g.size - unspent // the store no longer holds it either
	}
	return Settlement{g.second, g.size, unspent, g.gen}, g.size - unspent
}

// Release gives the lease's unspent tokens back to the shared bucket, and
// ends its grant.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, _ := l.settle(int64(atomicbucket.Now()))
	l.cur.Store(nil)
	if s.Size == 0 {
		return nil
	}
	l.calls.Add(1)
	_, err := l.call(ctx, 0, 0, s)
	return err
}

// Held is the number of tokens the lease holds: granted by the store, valid,
// and not yet spent.
func (l *Lease) Held() int64 {
	g := l.cur.Load()
	if g == nil || int64(atomicbucket.Now()) >= g.expires {
		return 0
	}
	return g.left.Load()
}

// Calls is the number of store calls the lease has made.
func (l *Lease) Calls() int64 { return l.calls.Load() }

// Check decides cost from the lease at now, never failing: locally when the
// lease can, else by a refill from the store behind the breaker of the
// lease's server and within g's timeout; when the store cannot, fb decides.
// It also returns the grant spent from, for a tier's giveBack, and whether
// the check waited for a refill (time passed).
func (l *Lease) Check(ctx context.Context, g *storeGuard, fb fallbackStep, cost, now int64) (verdict.Result, *grant, bool) {
	d, gr, call := l.local(now, cost)
	if !call {
		return verdict.Result{Decision: d}, gr, false
	}
	if g.Closed() {
		g.Count(0, true)
		r, _ := degraded(ErrClosed, fb)
		return r, nil, false
	}
	var ps passage
	if !g.admit(&ps, now, l.node) {
		g.Count(0, true)
		r, _ := degraded(ErrCircuitOpen, fb)
		return r, nil, false
	}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if g.Timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, g.Timeout)
	}
	d, gr, err := l.refill(cctx, cost)
	cancel()
	if errors.Is(err, ErrLeaseWait) {
		ps.done(ctx, fmt.Errorf("%w: %w", ErrOverload, err)) // the store was not asked: no failure of its
	} else {
		ps.done(ctx, err)
	}
	if err != nil {
		g.Count(0, true)
		r, _ := degraded(err, fb)
		return r, nil, true
	}
	return verdict.Result{Decision: d}, gr, true
}

// MaxLeases is how many leases (a leased rule and a key) a Leases keeps. A
// lease whose grant has expired is dropped when room is needed (its tokens
// are back in the store's bucket by then); when every one is in use, the
// checks of further keys go to the store one by one, as for a rule without a
// lease, until room is made.
const MaxLeases = 1 << 16

// Leases keeps the leases of a bound package's leased rules, by rule and key,
// and decides checks from them: a store's Bound uses it for the steps whose
// rules are all leased.
type Leases struct {
	guard     *storeGuard
	fallbacks []*fallbackRule
	newLease  func(rule int, key string) *Lease
	maps      []*xsync.MapOf[string, *Lease] // a leased rule's leases by key; nil for other rules
	epochs    []atomic.Int64                 // by rule: changes of its numbers (Changed); a lease of an older one is replaced
	count     atomic.Int64                   // leases in the maps
	swept     atomic.Int64                   // atomicbucket time of the last sweep
	max       atomic.Int64
}

// newLeases keeps leases for the rules marked in leased (fallbacks are every
// rule's failure settings, by index), made by newLease and checked behind
// guard.
func newLeases(leased []bool, fallbacks []*fallbackRule, guard *storeGuard, newLease func(rule int, key string) *Lease) *Leases {
	ls := &Leases{guard: guard, fallbacks: fallbacks, newLease: newLease, maps: make([]*xsync.MapOf[string, *Lease], len(leased)), epochs: make([]atomic.Int64, len(leased))}
	for i, on := range leased {
		if on {
			ls.maps[i] = xsync.NewMapOf[string, *Lease]()
		}
	}
	ls.max.Store(MaxLeases)
	return ls
}

// Leased reports whether rule is checked from leases.
func (ls *Leases) Leased(rule int) bool {
	return rule >= 0 && rule < len(ls.maps) && ls.maps[rule] != nil
}

// Lookup returns rule's lease for key, if it keeps one.
func (ls *Leases) Lookup(rule int, key string) (*Lease, bool) {
	if !ls.Leased(rule) {
		return nil, false
	}
	return ls.maps[rule].Load(key)
}

// Len is the number of leases kept.
func (ls *Leases) Len() int64 { return ls.count.Load() }

// SetMax sets how many leases are kept at most (MaxLeases by default), and
// holds off the next sweep for a second.
func (ls *Leases) SetMax(n int64) {
	ls.max.Store(n)
	ls.swept.Store(int64(atomicbucket.Now()))
}

// CheckStep decides step from its rule's lease; ok is false, with nothing
// decided, when the rule is not leased or no lease can be kept for the key.
func (ls *Leases) CheckStep(ctx context.Context, step Step) (res verdict.Result, ok bool) {
	if !ls.Leased(step.Rule) {
		return verdict.Result{}, false
	}
	l := ls.lease(ctx, step.Rule, step.Key)
	if l == nil {
		return verdict.Result{}, false
	}
	res, _, _ = l.Check(ctx, ls.guard, ls.fallbacks[step.Rule].Step(step.Key, step.Cost), step.Cost, int64(atomicbucket.Now()))
	return res, true
}

// Check decides steps whose rules are all leased from their leases, in
// order: when a step denies, the steps before it get their tokens back
// (TierAt's rule); the decision is the denying step's, or that of the step
// left with the fewest tokens. ok is false, with nothing taken, when a step's
// rule is not leased or its lease cannot be kept.
func (ls *Leases) Check(ctx context.Context, steps []Step) (res verdict.Result, index int, ok bool) {
	var lb [4]*Lease
	leases := lb[:0]
	for _, st := range steps {
		if !ls.Leased(st.Rule) {
			return verdict.Result{}, 0, false
		}
		l := ls.lease(ctx, st.Rule, st.Key)
		if l == nil {
			return verdict.Result{}, 0, false
		}
		leases = append(leases, l)
	}
	type took struct {
		g     *grant
		local bool // decided by the failure setting: a local share gets it back
	}
	var tk [4]took
	taken := tk[:0]
	now := int64(atomicbucket.Now())
	index = -1
	for i, st := range steps {
		r, g, called := leases[i].Check(ctx, ls.guard, ls.fallbacks[st.Rule].Step(st.Key, st.Cost), st.Cost, now)
		if called { // time passed waiting for the store: the next lease's expiry is judged at the new now
			now = int64(atomicbucket.Now())
		}
		if !r.Allowed {
			for j := i - 1; j >= 0; j-- {
				if taken[j].local {
					ls.fallbacks[steps[j].Rule].Step(steps[j].Key, steps[j].Cost).RefundAt(atomicbucket.Time(now))
				} else {
					leases[j].giveBack(taken[j].g, steps[j].Cost)
				}
			}
			return r, i, true
		}
		taken = append(taken, took{g, r.Degraded})
		if index < 0 || r.Remaining < res.Remaining {
			res, index = r, i
		}
	}
	return res, index, true
}

// lease returns rule's lease for key, or nil when the most leases are kept
// and none can be dropped. A lease made before the rule's numbers last
// changed is replaced: the old one gives its grant back (within ctx) before
// the new one, made by newLease in the numbers in force, takes one.
func (ls *Leases) lease(ctx context.Context, rule int, key string) *Lease {
	m := ls.maps[rule]
	e := ls.epochs[rule].Load()
	l, ok := m.Load(key)
	if ok && l.epoch >= e {
		return l
	}
	if !ok && ls.count.Load() >= ls.max.Load() && !ls.sweep() {
		return nil
	}
	var old *Lease
	l, _ = m.Compute(strings.Clone(key), func(cur *Lease, loaded bool) (*Lease, bool) {
		if loaded && cur.epoch >= e {
			return cur, false
		}
		if loaded {
			old = cur
		} else {
			ls.count.Add(1)
		}
		nl := ls.newLease(rule, key)
		nl.epoch = e
		return nl, false
	})
	if old != nil {
		old.Release(ctx) //nolint:errcheck // best effort: a grant not given back expires
	}
	return l
}

// Changed tells the leases that rule's numbers changed: a lease made before
// is replaced at its next check by one in the numbers then in force (the old
// one's grant given back first).
func (ls *Leases) Changed(rule int) {
	if ls.Leased(rule) {
		ls.epochs[rule].Add(1)
	}
}

// ReleaseStale drops rule's leases made before its numbers last changed, or
// when keys are given, those keys' leases (whose own numbers changed: a
// lease made after is made in them), giving back what they hold, 16 at a
// time, within ctx: so that a change does not leave this
// instance's grants of the old numbers held in the store, where they would
// keep other instances' first checks in the new numbers from the tokens
// until they expire.
func (ls *Leases) ReleaseStale(ctx context.Context, rule int, key ...string) {
	if !ls.Leased(rule) {
		return
	}
	m, e := ls.maps[rule], ls.epochs[rule].Load()
	var stale []*Lease
	drop := func(k string, all bool) {
		m.Compute(k, func(cur *Lease, loaded bool) (*Lease, bool) {
			if !loaded || !all && cur.epoch >= e {
				return cur, !loaded
			}
			stale = append(stale, cur)
			ls.count.Add(-1)
			return nil, true
		})
	}
	if len(key) > 0 {
		for _, k := range key {
			drop(k, true)
		}
	} else {
		var keys []string
		m.Range(func(k string, l *Lease) bool {
			if l.epoch < e {
				keys = append(keys, k)
			}
			return true
		})
		for _, k := range keys {
			drop(k, false)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, l := range stale {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			l.Release(ctx) //nolint:errcheck // best effort: a grant not given back expires
		}()
	}
	wg.Wait()
}

// Forget drops rule's lease for key, giving back what it holds first (for a
// Reset).
func (ls *Leases) Forget(ctx context.Context, rule int, key string) {
	if !ls.Leased(rule) {
		return
	}
	if l, ok := ls.maps[rule].LoadAndDelete(key); ok {
		ls.count.Add(-1)
		l.Release(ctx) //nolint:errcheck // best effort: the bucket is forgotten next
	}
}

// sweep drops the leases whose grants have expired, at most once a second,
// and reports whether there is room for another.
func (ls *Leases) sweep() bool {
	now := int64(atomicbucket.Now())
	if last := ls.swept.Load(); now-last < int64(time.Second) || !ls.swept.CompareAndSwap(last, now) {
		return ls.count.Load() < ls.max.Load()
	}
	for _, m := range ls.maps {
		if m == nil {
			continue
		}
		m.Range(func(k string, l *Lease) bool {
			if l.idle(now) {
				m.Delete(k)
				ls.count.Add(-1)
			}
			return true
		})
	}
	return ls.count.Load() < ls.max.Load()
}

// Release gives back what every lease holds (Lease.Release), so that a
// service shutting down leaves it to the other instances instead of holding
// it until the grants expire. The leases go on working: a later check takes a
// new grant. It returns the first error, having tried every lease.
func (ls *Leases) Release(ctx context.Context) error {
	var first error
	for _, m := range ls.maps {
		if m == nil {
			continue
		}
		m.Range(func(_ string, l *Lease) bool {
			if err := l.Release(ctx); err != nil && first == nil {
				first = err
			}
			return true
		})
	}
	return first
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
func (e *Engine) CheckLease(ctx context.Context, l *Lease, r *StoreRule, key string, cost int64) verdict.Result {
	res, _, _ := l.Check(ctx, e.guard, r.fallback.Step(key, cost), cost, int64(atomicbucket.Now()))
	return res
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

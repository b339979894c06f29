package shared

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// fake is a Backend in memory for the engine's own tests: buckets that never
// refill (a count of tokens taken), spread over nodes servers by the key's
// hash, each key its own group; a node in down fails every call.
type fake struct {
	nodes int
	delay time.Duration // each round trip takes this long

	mu    sync.Mutex
	used  map[string]int64 // tokens taken, by rule and key
	down  map[string]bool
	calls map[string]int // round trips, by node

	inFlight, maxInFlight atomic.Int64
}

func newFake(nodes int) *fake {
	return &fake{nodes: nodes, used: map[string]int64{}, down: map[string]bool{}, calls: map[string]int{}}
}

func (f *fake) Name() string                 { return "fake" }
func (f *fake) CheckRule(r *StoreRule) error { return nil }

func (f *fake) Forget(ctx context.Context, c Call) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.used, c.Rule.name+"/"+c.Key)
	return nil
}

func (f *fake) Place(c Call) (uint32, string) {
	h := fnv.New32a()
	h.Write([]byte(c.Key))
	g := h.Sum32()
	return g, fmt.Sprintf("n%d", int(g)%f.nodes)
}

// enter counts a round trip to node, sleeps for the delay, and fails when
// the node is down.
func (f *fake) enter(node string) error {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxInFlight.Load()
		if n <= m || f.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	f.mu.Lock()
	f.calls[node]++
	down := f.down[node]
	f.mu.Unlock()
	time.Sleep(f.delay)
	if down {
		return errors.New("connection refused")
	}
	return nil
}

// reply is c's bucket's answer after used tokens are taken (allowed) or
// would have been (denied), in the rule's units.
func reply(c Call, used int64, allowed bool) Reply {
	n := c.Rule.n
	r := Reply{Allowed: allowed, Ahead: used * n.Emit}
	if !allowed {
		r.Ahead = (used - c.Cost) * n.Emit
		r.Excess = (used - n.Limit.Burst) * n.Emit
	}
	return r
}

func (f *fake) Tier(ctx context.Context, calls []Call, mode Mode) (Reply, error) {
	_, node := f.Place(calls[0])
	if err := f.enter(node); err != nil {
		return Reply{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range calls {
		k := c.Rule.name + "/" + c.Key
		if mode == ModeRefund {
			f.used[k] = max(f.used[k]-c.Cost, 0)
			return reply(c, f.used[k], true), nil
		}
		if f.used[k]+c.Cost > c.Rule.n.Limit.Burst {
			r := reply(c, f.used[k]+c.Cost, false)
			r.Index = i
			return r, nil
		}
	}
	best := Reply{Index: -1}
	for i, c := range calls {
		k := c.Rule.name + "/" + c.Key
		after := f.used[k] + c.Cost
		if mode == ModeTake {
			f.used[k] = after
		}
		if r := reply(c, after, true); best.Index < 0 || r.Ahead > best.Ahead {
			best, best.Index = r, i
		}
	}
	return best, nil
}

func (f *fake) Each(ctx context.Context, groups [][]Call) ([][]Reply, error) {
	_, node := f.Place(groups[0][0])
	for _, g := range groups {
		for _, c := range g {
			if _, n := f.Place(c); n != node {
				return nil, fmt.Errorf("one Each for nodes %s and %s", node, n)
			}
		}
	}
	if err := f.enter(node); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]Reply, len(groups))
	for i, g := range groups {
		for _, c := range g {
			k := c.Rule.name + "/" + c.Key
			if f.used[k]+c.Cost > c.Rule.n.Limit.Burst {
				out[i] = append(out[i], reply(c, f.used[k]+c.Cost, false))
				continue
			}
			f.used[k] += c.Cost
			out[i] = append(out[i], reply(c, f.used[k], true))
		}
	}
	return out, nil
}

// Lease grants up to want tokens (at least the cost) of what the bucket
// has left; the previous grant's unspent tokens are not given back.
func (f *fake) Lease(ctx context.Context, c Call, want int64, prev Settlement) (LeaseReply, error) {
	_, node := f.Place(c)
	if err := f.enter(node); err != nil {
		return LeaseReply{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := c.Rule.name + "/" + c.Key
	if f.used[k]+c.Cost > c.Rule.n.Limit.Burst {
		return LeaseReply{Reply: reply(c, f.used[k]+c.Cost, false)}, nil
	}
	g := max(min(want, c.Rule.n.Limit.Burst-f.used[k]), c.Cost)
	f.used[k] += g
	now := time.Now()
	r := reply(c, f.used[k], true)
	r.Excess = g
	return LeaseReply{Reply: r, Second: now.Unix(), Usec: int64(now.Nanosecond() / 1000)}, nil
}

func (f *fake) setDown(node string, down bool) {
	f.mu.Lock()
	f.down[node] = down
	f.mu.Unlock()
}

func (f *fake) callsTo(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[node]
}

func fakeRule(t *testing.T, name string, burst int64) *StoreRule {
	t.Helper()
	r, err := NewStoreRule(name, atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: burst})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// keysOn returns n keys whose buckets the fake places on node.
func keysOn(f *fake, r *StoreRule, node string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("key%d", i)
		if _, at := f.Place(Call{Rule: r, Key: k}); at == node {
			keys = append(keys, k)
		}
	}
	return keys
}

// A failing server opens its own breaker only: with n1 down, checks of keys
// on n0 and n2 are all decided by the store, n1's by the failure setting, and
// n1 stops being called once its breaker opens.
func TestBreakerPerNode(t *testing.T) {
	f := newFake(3)
	e := NewEngine(f, time.Second, 0)
	r := fakeRule(t, "r", 1000)
	f.setDown("n1", true)
	healthy := append(keysOn(f, r, "n0", 5), keysOn(f, r, "n2", 5)...)
	sick := keysOn(f, r, "n1", 5)
	ctx := context.Background()
	for range 10 {
		for _, k := range healthy {
			if res := e.Check(ctx, r, k, 1); res.Degraded || !res.Allowed {
				t.Fatalf("key %s on a healthy node: %+v", k, res)
			}
		}
		for _, k := range sick {
			if res := e.Check(ctx, r, k, 1); !res.Degraded || res.Allowed {
				t.Fatalf("key %s on the failed node: %+v", k, res)
			}
		}
	}
	if n := f.callsTo("n1"); n != BreakerFailures {
		t.Errorf("n1 was called %d times; its breaker should open after %d", n, BreakerFailures)
	}
	open := map[string]bool{}
	for _, b := range e.Breakers() {
		open[b.Node] = b.Open
	}
	if !open["n1"] || open["n0"] || open["n2"] {
		t.Errorf("breakers open: %v, want n1 only", open)
	}
	st := e.Stats()
	if st.Degraded != 50 || st.Calls != 100+BreakerFailures || st.BreakerOpenings != 1 {
		t.Errorf("stats %+v, want 50 degraded, %d calls and 1 breaker opening", st, 100+BreakerFailures)
	}
	for _, b := range e.Breakers() {
		if want := int64(map[bool]int{true: 1}[b.Node == "n1"]); b.Openings != want {
			t.Errorf("%s's breaker opened %d times, want %d", b.Node, b.Openings, want)
		}
	}
}

// A coalesced batch over three nodes goes to each node once, the nodes in
// parallel: the flush takes one round trip's time, not three.
func TestFlushPerNodeInParallel(t *testing.T) {
	f := newFake(3)
	f.delay = 50 * time.Millisecond
	e := NewEngine(f, time.Second, 0)
	r := fakeRule(t, "r", 1000)
	var batch []*waitingCheck[Call]
	for _, node := range []string{"n0", "n1", "n2"} {
		for _, k := range keysOn(f, r, node, 4) {
			batch = append(batch, &waitingCheck[Call]{Check: Call{r, k, 1}, done: make(chan outcome, 1)})
		}
	}
	start := time.Now()
	e.flush(context.Background(), batch)
	elapsed := time.Since(start)
	for _, p := range batch {
		if o := <-p.done; o.err != nil || !o.d.Allowed {
			t.Fatalf("%s: %+v %v", p.Check.Key, o.d, o.err)
		}
	}
	for _, node := range []string{"n0", "n1", "n2"} {
		if n := f.callsTo(node); n != 1 {
			t.Errorf("%s got %d round trips for its part of one batch, want 1", node, n)
		}
	}
	if elapsed > 2*f.delay || f.maxInFlight.Load() != 3 {
		t.Errorf("the flush took %v with %d round trips at once; three nodes in parallel take one round trip (%v)", elapsed, f.maxInFlight.Load(), f.delay)
	}
	if b := e.Stats().Batches; b != 3 {
		t.Errorf("%d batches counted, want 3 (one per node)", b)
	}
}

// A tier whose buckets are in different groups (a Cluster's slots) is taken
// in order; when a later step denies, the earlier steps get their tokens back.
func TestOrderedTierRefunds(t *testing.T) {
	f := newFake(2)
	e := NewEngine(f, time.Second, 0)
	wide, narrow := fakeRule(t, "wide", 10), fakeRule(t, "narrow", 1)
	ctx := context.Background()
	calls := []Call{{wide, "a", 1}, {narrow, "b", 1}}
	if d, i, err := e.AllowTier(ctx, calls); err != nil || !d.Allowed || i != 1 || d.Remaining != 0 {
		t.Fatalf("first tier: %+v, index %d, %v", d, i, err)
	}
	if d, i, err := e.AllowTier(ctx, calls); err != nil || d.Allowed || i != 1 {
		t.Fatalf("second tier: %+v, index %d, %v; narrow should deny", d, i, err)
	}
	// One token taken by the first tier; the second's was given back: a
	// check of one more would leave 8 (7 had it been kept).
	if d, err := e.PeekN(ctx, wide, "a", 1); err != nil || d.Remaining != 8 {
		t.Errorf("wide after a denied tier: %+v %v; the denied tier's take should be refunded", d, err)
	}
}

// Closing the engine while checks run: later checks are the failure
// setting's with ErrClosed, and no round trip starts after Close returns.
func TestEngineClose(t *testing.T) {
	for _, coalesce := range []int{0, 16} {
		f := newFake(1)
		e := NewEngine(f, time.Second, coalesce)
		r := fakeRule(t, "r", 1_000_000)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
						e.Check(context.Background(), r, "k", 1)
					}
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		e.Close()
		e.Close()
		after := f.callsTo("n0")
		if res := e.Check(context.Background(), r, "k", 1); res.Allowed || !res.Degraded || !errors.Is(res.Err, ErrClosed) {
			t.Errorf("coalesce %d: a check after Close: %+v", coalesce, res)
		}
		time.Sleep(20 * time.Millisecond)
		close(stop)
		wg.Wait()
		if n := f.callsTo("n0"); n != after {
			t.Errorf("coalesce %d: %d round trips after Close returned", coalesce, n-after)
		}
	}
}

// A client's network deadline (what go-redis and pgx make of a context's) is
// a timeout, as the context's own deadline is; other errors are the store's.
func TestErrorClass(t *testing.T) {
	for err, want := range map[error]string{
		nil:                      "",
		context.DeadlineExceeded: "timeout",
		&net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}: "timeout",
		fmt.Errorf("x: %w", ErrCircuitOpen):                                "circuit_open",
		ErrClosed:                                                          "closed",
		fmt.Errorf("%w: a nil *Store", ErrNoStore):                         "no_store",
		context.Canceled:                                                   "canceled",
		fmt.Errorf("%w: tier step 1", ErrInvalidStep):                      "invalid",
		errors.New("connection refused"):                                   "store",
	} {
		if got := ErrorClass(err); got != want {
			t.Errorf("ErrorClass(%v) = %q, want %q", err, got, want)
		}
	}
}

// Stats.Latency counts every round trip by how long it took (a failed one
// too), and Stats.Grants and GrantedTokens the lease calls that granted
// tokens and how many.
func TestStatsLatencyAndGrants(t *testing.T) {
	f := newFake(1)
	f.delay = 3 * time.Millisecond
	e := NewEngine(f, time.Second, 0)
	r := fakeRule(t, "r", 10)
	ctx := context.Background()
	for range 4 {
		if res := e.Check(ctx, r, "a", 1); !res.Allowed || res.Degraded {
			t.Fatalf("%+v", res)
		}
	}
	f.setDown("n0", true)
	if res := e.Check(ctx, r, "a", 1); !res.Degraded {
		t.Fatalf("a check of a down node: %+v", res)
	}
	f.setDown("n0", false)
	st := e.Stats()
	if st.Latency.Count != 5 {
		t.Fatalf("%d round trips in the histogram, want 5: %+v", st.Latency.Count, st.Latency)
	}
	var below int64
	for i, b := range LatencyBounds {
		if b < f.delay {
			below += st.Latency.Counts[i]
		}
	}
	if below != 0 || st.Latency.Sum < 5*f.delay {
		t.Errorf("round trips of at least %v: %d counted below it, %v in all: %+v", f.delay, below, st.Latency.Sum, st.Latency)
	}

	l := e.NewLease(r, "b", 4)
	for range 3 {
		if d, err := l.AllowN(ctx, 1); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	st = e.Stats()
	if st.Grants < 1 || st.GrantedTokens < 3 || st.GrantedTokens > 10 {
		t.Errorf("three tokens spent from a lease: %d grants of %d tokens", st.Grants, st.GrantedTokens)
	}
	if st.Latency.Count != 5+st.Grants {
		t.Errorf("%d round trips counted after %d lease calls, want %d", st.Latency.Count, st.Grants, 5+st.Grants)
	}
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// Closer is a store as the Close tests drive it.
type Closer interface {
	shared.Store
	Close()
}

// CloseUnderLoad closes a store (made by open, coalescing or not) from two
// goroutines at once while 16 others check a bound rule, as a service
// shutting down does: run with -race, it holds Close to being race-free and
// idempotent. Once Close has returned, every check is decided by the rule's
// failure setting (deny) with shared.ErrClosed, and the server sees no more
// traffic (traffic counts what the store sent it).
func CloseUnderLoad(t *testing.T, open func(t *testing.T, coalesce bool) Closer, traffic func() int64) {
	for _, coalesce := range []bool{false, true} {
		name := "direct"
		if coalesce {
			name = "coalesced"
		}
		t.Run(name, func(t *testing.T) {
			st := open(t, coalesce)
			b, err := st.Bind([]shared.Rule{{Name: "close_" + name, Limit: atomicbucket.Limit{Tokens: 1e6, Period: time.Second, Burst: 1e6}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var decided, closedErrs, otherErrs atomic.Int64
			var other atomic.Value // the first other error
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: []string{"a", "b", "c", "d"}[i%4], Cost: 1})
						switch {
						case !res.Degraded && res.Allowed:
							decided.Add(1)
						case errors.Is(res.Err, shared.ErrClosed):
							closedErrs.Add(1)
						case shared.IsTimeout(res.Err):
							// 16 checkers and -race on 2 cores can miss the
							// store's timeout; that is not what this test is about.
						default:
							otherErrs.Add(1)
							other.CompareAndSwap(nil, fmt.Sprintf("%+v", res))
						}
					}
				}()
			}
			for deadline := time.Now().Add(5 * time.Second); decided.Load() < 50 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			var closers sync.WaitGroup
			for range 2 {
				closers.Add(1)
				go func() { defer closers.Done(); st.Close() }()
			}
			closers.Wait()
			before := traffic()
			for range 100 {
				res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: "a", Cost: 1})
				if !res.Degraded || res.Allowed || !errors.Is(res.Err, shared.ErrClosed) {
					t.Fatalf("a check after Close: %+v, want denied by the failure setting with ErrClosed", res)
				}
			}
			time.Sleep(20 * time.Millisecond) // the 16 checkers go on meanwhile
			close(stop)
			wg.Wait()
			if after := traffic(); after != before {
				t.Errorf("the server saw %d calls after Close returned", after-before)
			}
			st.Close() // again: a no-op
			if decided.Load() == 0 || closedErrs.Load() == 0 || otherErrs.Load() != 0 {
				t.Errorf("checks: %d decided by the store, %d closed, %d failed otherwise (the first: %v)", decided.Load(), closedErrs.Load(), otherErrs.Load(), other.Load())
			}
		})
	}
}

// Breakered is a store that reports its breakers (shared.Engine.Breakers).
type Breakered interface {
	Closer
	Breakers() []shared.BreakerState
}

// Overload: callers check a bound rule on a healthy server for two
// seconds, on a store made by open (coalescing or not) whose client has one
// connection (not coalescing, with a timeout of a few round trips): the
// process, not the server, is the bottleneck, as in a service whose callers
// outnumber its pool. Checks that run out of time before they reach the server are decided
// by the failure setting with shared.ErrOverload, and no breaker opens
// (sampled every 5 ms): the process's own overload is no failure of the
// store's. (Before, the wait was inside the client's pool, its deadline
// counted as the server's failure, and the breaker opened.) A loaded machine
// can make round trips themselves outlast the timeout; such an attempt is
// run again (see below), never passed.
func Overload(t *testing.T, callers int, open func(t *testing.T, coalesce bool) Breakered) {
	for _, coalesce := range []bool{false, true} {
		name := "direct"
		if coalesce {
			name = "coalesced"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var decided, overload, timeout, other, opened atomic.Int64
			// An attempt whose breaker opened after round trips themselves
			// outlasted the timeout at the server often enough to open it
			// (the machine stalled; shared.BreakerFailures in a row open
			// one) cannot tell overload from a slow server: it is run again
			// on a new store, three attempts at most, and the last is judged.
			for attempt := 1; ; attempt++ {
				for _, c := range []*atomic.Int64{&decided, &overload, &timeout, &other, &opened} {
					c.Store(0)
				}
				st := open(t, coalesce)
				b, err := st.Bind([]shared.Rule{{Name: "overload_" + name, Limit: atomicbucket.Limit{Tokens: 1e6, Period: time.Second, Burst: 1e6}}})
				if err != nil {
					t.Fatal(err)
				}
				// Warm up: the connection dialled and the script loaded by
				// one check at a time until the store decides one (the
				// breaker is then closed), so a cold start is not judged.
				for deadline := time.Now().Add(10 * time.Second); b.CheckStep(ctx, shared.Step{Rule: 0, Key: "a", Cost: 1}).Degraded; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("no check of one caller was decided by the store in 10 s")
					}
				}
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for i := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						key := []string{"a", "b", "c", "d"}[i%4]
						for {
							select {
							case <-stop:
								return
							default:
							}
							res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: key, Cost: 1})
							switch {
							case !res.Degraded:
								decided.Add(1)
							case errors.Is(res.Err, shared.ErrOverload):
								overload.Add(1)
							case shared.IsTimeout(res.Err):
								timeout.Add(1)
							default:
								if other.Add(1) == 1 {
									t.Logf("the first other failure: %s: %v", shared.ErrorClass(res.Err), res.Err)
								}
							}
						}
					}()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					tick := time.NewTicker(5 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
							for _, br := range st.Breakers() {
								if br.Open {
									opened.Add(1)
								}
							}
						}
					}
				}()
				time.Sleep(2 * time.Second)
				close(stop)
				wg.Wait()
				t.Logf("attempt %d, %d callers for 2 s: %d decided by the store, %d waited past the timeout in the process (overload), %d timed out at the server, %d other; breaker seen open %d times",
					attempt, callers, decided.Load(), overload.Load(), timeout.Load(), other.Load(), opened.Load())
				if opened.Load() == 0 || timeout.Load() < shared.BreakerFailures || attempt == 3 {
					break
				}
			}
			if opened.Load() != 0 {
				t.Errorf("a breaker opened %d times against a healthy server", opened.Load())
			}
			if decided.Load() == 0 || other.Load() != 0 {
				t.Errorf("%d decided, %d failed otherwise", decided.Load(), other.Load())
			}
			if !coalesce && overload.Load() == 0 {
				t.Errorf("no check waited past the timeout: the test did not overload the process")
			}
		})
	}
}

// Down is a store made while its server is down, for StartsWhileDown.
type Down struct {
	Server string // its name in messages: "Redis", "PostgreSQL"
	Store  interface {
		shared.Store
		Stats() shared.Stats
	} // made by the store's New while nothing listens
	Says string // what SharedErr names while it is down (its address)
	Up   func() // starts the server
	Stop func() // stops it again
	// Within is how soon after Up the store must decide (the breaker's
	// longest pause, and whatever setup the store does first).
	Within time.Duration
}

// StartsWhileDown: a service starts while its store's server is down. New
// made the store; SharedErr says the store is not answering (naming d.Says);
// each check is decided by its rule's on_failure (Exports: deny) as an
// outage, counted degraded, its error classed "unavailable" (a refused
// connection, not a timeout); once the server answers, the store decides
// within d.Within and SharedErr is nil; when it dies again SharedErr says so
// again.
func StartsWhileDown(t *testing.T, d Down) {
	ctx := context.Background()
	lims := sharedlimits.New(sharedlimits.WithStore(d.Store))
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) || !strings.Contains(err.Error(), d.Says) {
		t.Fatalf("SharedErr with %s down: %v, want ErrUnhealthy saying %q", d.Server, err, d.Says)
	}
	for i := range 3 {
		res := lims.Exports.AllowN(ctx, 7, 1) // on_failure: deny
		if !res.Degraded || res.Allowed || !res.Outage {
			t.Fatalf("check %d with %s down: %+v, want a degraded denial for the outage", i, d.Server, res)
		}
		if c := shared.ErrorClass(res.Err); c != "unavailable" {
			t.Errorf("check %d with %s down: error class %q (%v), want unavailable", i, d.Server, c, res.Err)
		}
	}
	if s := d.Store.Stats(); s.Degraded < 3 {
		t.Errorf("Stats with %s down: %+v, want the 3 checks counted degraded", d.Server, s)
	}

	d.Up()
	up := time.Now()
	// An idle instance behind a readiness probe: no check comes, and the
	// store must still say it answers (it probes its server itself).
	for lims.SharedErr() != nil && time.Since(up) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if err := lims.SharedErr(); err != nil || time.Since(up) > d.Within {
		t.Errorf("%s up for %v with no check: SharedErr %v, want nil within %v (the store probes its server)", d.Server, time.Since(up), err, d.Within)
	}
	t.Logf("SharedErr nil %v after %s answered, with no check", time.Since(up), d.Server)
	var res verdict.Result
	for res = lims.Exports.AllowN(ctx, 8, 1); res.Degraded && time.Since(up) < 10*time.Second; res = lims.Exports.AllowN(ctx, 8, 1) {
		time.Sleep(10 * time.Millisecond)
	}
	if res.Degraded || !res.Allowed {
		t.Fatalf("%s up for %v: %+v, want the store to decide", d.Server, time.Since(up), res)
	}
	if took := time.Since(up); took > d.Within {
		t.Errorf("the store decided %v after %s answered, want within %v", took, d.Server, d.Within)
	}
	t.Logf("the store decided %v after %s answered", time.Since(up), d.Server)
	if err := lims.SharedErr(); err != nil {
		t.Errorf("SharedErr with %s up: %v", d.Server, err)
	}

	d.Stop()
	if res := lims.Exports.AllowN(ctx, 9, 1); !res.Degraded {
		t.Fatalf("a check with %s stopped: %+v, want degraded", d.Server, res)
	}
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) {
		t.Errorf("SharedErr after %s died: %v, want ErrUnhealthy (the live state)", d.Server, err)
	}
}

// probeMargin is what RecoversIdle allows beyond shared.ProbeEvery for the
// ping's round trip and a busy machine's scheduling.
const probeMargin = 750 * time.Millisecond

// RecoversIdle: what operators watch tells the truth, for buckets and
// windows alike, on one store.
//
//   - A shared window's checks are the store's calls: counted in Stats.Calls
//     and Stats.Latency as the buckets' are (they once counted nothing).
//   - Windows and buckets share the store's breaker: window checks that fail
//     with the server stopped open it, and a bucket check then finds it open
//     (ErrCircuitOpen) instead of paying its own timeouts.
//   - Once the server answers again, with no check at all (an idle instance
//     behind a readiness probe), the store probes the server itself:
//     SharedErr is nil and every breaker closed within shared.ProbeEvery
//     (and a margin), where before they stayed "not answering" until some
//     request checked.
func RecoversIdle(t *testing.T, store Instance, stop, restart func()) {
	ctx := context.Background()
	lims := sharedlimits.New(sharedlimits.WithStore(store))
	if err := lims.SharedErr(); err != nil {
		t.Fatal(err)
	}
	before := store.Stats()
	for i := range 4 {
		if res := lims.Quota.AllowN(ctx, "idle-"+strconv.Itoa(i), 1); res.Degraded || !res.Allowed {
			t.Fatalf("window check %d: %+v", i, res)
		}
		if res := lims.Exports.AllowN(ctx, uint64(100+i), 1); res.Degraded || !res.Allowed {
			t.Fatalf("bucket check %d: %+v", i, res)
		}
	}
	after := store.Stats()
	if calls := after.Calls - before.Calls; calls != 8 {
		t.Errorf("8 checks (4 window, 4 bucket) made %d calls in Stats, want 8", calls)
	}
	if n := after.Latency.Count - before.Latency.Count; n < 8 {
		t.Errorf("8 checks recorded %d round trips in Stats.Latency, want 8 (a window's round trips too)", n)
	}

	stop()
	for i := range shared.BreakerFailures {
		if res := lims.Quota.AllowN(ctx, "idle-down", 1); !res.Degraded {
			t.Fatalf("window check %d with the server stopped: %+v, want degraded", i, res)
		}
	}
	open := false
	for _, b := range store.Breakers() {
		open = open || b.Open
	}
	if !open {
		t.Errorf("after %d window checks failed: breakers %+v, want one open (the store's, which its windows share)", shared.BreakerFailures, store.Breakers())
	}
	if res := lims.Exports.AllowN(ctx, 200, 1); !res.Degraded || !errors.Is(res.Err, shared.ErrCircuitOpen) {
		t.Errorf("a bucket check after the windows opened the breaker: %+v, want degraded by the open circuit, no call of its own", res)
	}
	if got := store.Stats().Degraded - after.Degraded; got < int64(shared.BreakerFailures)+1 {
		t.Errorf("Stats.Degraded counted %d of the %d degraded checks", got, shared.BreakerFailures+1)
	}
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) {
		t.Fatalf("SharedErr with the server stopped: %v, want ErrUnhealthy", err)
	}

	restart()
	up := time.Now()
	for lims.SharedErr() != nil && time.Since(up) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(up)
	if err := lims.SharedErr(); err != nil {
		t.Fatalf("no check for %v after the server came back: SharedErr %v, want nil (the store probes it itself)", took, err)
	}
	for _, b := range store.Breakers() {
		if b.Open || b.Failures > 0 {
			t.Errorf("the server answers: breaker %+v, want closed with no failures", b)
		}
	}
	if within := shared.ProbeEvery + probeMargin; took > within {
		t.Errorf("SharedErr was nil %v after the server came back, with no check; want within %v (a probe interval and a margin)", took, within)
	}
	t.Logf("idle: SharedErr nil %v after the server came back", took)
	if res := lims.Quota.AllowN(ctx, "idle-up", 1); res.Degraded || !res.Allowed {
		t.Errorf("a window check once recovered: %+v", res)
	}
}

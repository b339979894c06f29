package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

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

package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
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

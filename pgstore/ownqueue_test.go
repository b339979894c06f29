package pgstore

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/shared"
)

// The process's own queue never opens the breaker: 64 callers on one hot
// key, with fsync on and a pool of 64 connections (one a caller, as a
// service sizes it), for cells of a second (LIMITGEN_OWNQUEUE_CELLS, default
// 3; the closing note's figure is 20). Before, 64 backends queued on the
// row's lock, a statement passed the 200 ms timeout, pgx closed its
// connection, the next check dialed inside its own 200 ms, and five timeouts
// in a row opened the breaker: hundreds of thousands of circuit_open
// decisions with the server healthy. Now the store keeps 16 statements in
// flight (DefaultConcurrency), coalesces by default, and a timeout while the
// server answers other calls is no failure of the server's. (Cancelling a
// late statement on the server to keep its connection, pgx's
// CancelRequestContextWatcherHandler, was tried and made this worse: each
// cancel request is a new backend, and a statement a check decided 233 in
// three seconds instead of 1,798.)
//
// At the store's defaults (coalescing) no check is degraded at all. With a
// statement a check (Coalesce -1; run with LIMITGEN_OWNQUEUE_DIRECT=1, which
// only measures) the row's commits, one at a time, bound the rate (about 540
// a second with this machine's fsync), 64 callers wait near the timeout and
// some pass it, and a stall in which none of the 16 statements in flight
// ends within 200 ms still opens the breaker: a server that answers nothing
// for a whole timeout cannot be told from a stopped one. Then the server is
// stopped (SIGSTOP): the breaker opens.
func TestOwnQueueNoDegraded(t *testing.T) {
	cells := 3
	if v, err := strconv.Atoi(os.Getenv("LIMITGEN_OWNQUEUE_CELLS")); err == nil && v > 0 {
		cells = v
	}
	srv := pgtest.Start(t, "-c", "fsync=on", "-c", "max_connections=200")
	modes := []struct {
		name     string
		coalesce int
	}{{"default", 0}}
	if os.Getenv("LIMITGEN_OWNQUEUE_DIRECT") != "" {
		// Measured, not judged: see the doc above.
		modes = append(modes, struct {
			name     string
			coalesce int
		}{"statement a check", -1})
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			// As a service sets it up: a pool of a connection a caller.
			cfg, err := pgxpool.ParseConfig(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 64
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			st, err := New(context.Background(), pool, Options{Coalesce: mode.coalesce})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			b, err := st.Bind([]shared.Rule{{Name: "hot", Limit: atomicbucket.Limit{Tokens: 1e6, Period: time.Second, Burst: 1e6}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for deadline := time.Now().Add(10 * time.Second); b.CheckStep(ctx, shared.Step{Rule: 0, Key: "hot", Cost: 1}).Degraded; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no check decided by the store in 10 s")
				}
			}
			var decided atomic.Int64
			var mu sync.Mutex
			classes := map[string]int64{}
			for c := range cells {
				stop := time.Now().Add(time.Second)
				var wg sync.WaitGroup
				for range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(stop) {
							res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: "hot", Cost: 1})
							if !res.Degraded {
								decided.Add(1)
								continue
							}
							mu.Lock()
							classes[shared.ErrorClass(res.Err)]++
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				t.Logf("cell %d: %d decided so far, degraded %s", c+1, decided.Load(), describe(classes))
			}
			// At the defaults nothing is degraded on a quiet machine (20
			// cells, 0 degraded: the closing note); beside make test's other
			// lane the process itself may lag in its first second, which is
			// overload (its own queue), never the server's failure.
			var total, overload int64 = decided.Load(), classes["overload"]
			for _, n := range classes {
				total += n
			}
			if mode.coalesce == 0 && (len(classes) > 1 || len(classes) == 1 && overload == 0 || overload*100 > total) {
				t.Errorf("at the defaults, degraded %s of %d checks; want none but overload, at most 1%%", describe(classes), total)
			}
		})
	}

	// A stalled server still opens the breaker.
	_, st := open(t, srv, 8, Options{})
	b, err := st.Bind([]shared.Rule{{Name: "hot", Limit: atomicbucket.Limit{Tokens: 1e6, Period: time.Second, Burst: 1e6}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: "hot", Cost: 1}); res.Degraded {
		t.Fatalf("before the stop: %v", res.Err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer srv.Signal(syscall.SIGCONT) //nolint:errcheck // best effort: the server is killed at the end
	start := time.Now()
	for {
		res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: "hot", Cost: 1})
		if shared.ErrorClass(res.Err) == "circuit_open" {
			break
		}
		if time.Since(start) > 2*shared.BreakerFailures*DefaultTimeout {
			t.Fatalf("a stopped server did not open the breaker in %v (last: %v)", time.Since(start), res.Err)
		}
	}
	t.Logf("the stopped server opened the breaker after %v (five timeouts of one caller)", time.Since(start).Round(time.Millisecond))
}

func describe(classes map[string]int64) string {
	if len(classes) == 0 {
		return "none"
	}
	var out []string
	for k, v := range classes {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

// TestStoppedServerBoundsEveryCheck: a check ends within the store's
// timeout when the server stops answering (SIGSTOP), on a pool of one
// connection. The first check's statement ends by its connection's
// deadline (no timer); the connection is then closed, and the next checks'
// wait for the pool (the closed connection's slot, held while pgx closes
// it; a new connection) ends by the acquire's timer, with or without a
// ConnectTimeout of the pool's below the store's timeout. Until the breaker
// opens, each is one such wait.
func TestStoppedServerBoundsEveryCheck(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, connect := range []time.Duration{0, 150 * time.Millisecond} {
		t.Run(fmt.Sprintf("connect_timeout=%v", connect), func(t *testing.T) {
			srv := pgtest.Start(t)
			cfg, err := pgxpool.ParseConfig(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1
			cfg.ConnConfig.ConnectTimeout = connect
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			st, err := New(context.Background(), pool, Options{Timeout: timeout, Coalesce: -1, SweepEvery: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			b, err := st.Bind([]shared.Rule{{Name: "r", Limit: atomicbucket.Limit{Tokens: 1e6, Period: time.Second, Burst: 1e6}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: "k", Cost: 1}); res.Degraded {
				t.Fatalf("before the stop: %v", res.Err)
			}
			if err := srv.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer srv.Signal(syscall.SIGCONT) //nolint:errcheck // best effort: the server is killed at the end
			for i := range shared.BreakerFailures {
				start := time.Now()
				res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: "k", Cost: 1})
				took := time.Since(start)
				t.Logf("check %d on the stopped server: %v in %v", i, res.Err, took.Round(time.Millisecond))
				if !res.Degraded {
					t.Fatalf("check %d on the stopped server was decided: %+v", i, res)
				}
				if took > 2*timeout {
					t.Errorf("check %d on the stopped server took %v; the store's timeout is %v", i, took, timeout)
				}
			}
		})
	}
}

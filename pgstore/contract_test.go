package pgstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/storetest"
)

// The store contract (storetest.Run), each property on a PostgreSQL server
// of its own (a copy of one initdb). Sweeps run only when a property asks
// (Forget). StartsWhileDown: the store's own probe sets the table up once
// the database answers, so the store decides within a second (it took 2.5 s
// when only a check's background setup, at most one a second, and then the
// breaker's probe did it). Overload: 512 callers on a pool of one connection
// with a 40 ms timeout, which their queue for the connection outlasts while
// a statement does not.
func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Name:            "PostgreSQL",
		UpWithin:        time.Second,
		OverloadCallers: 512,
		OverloadTimeout: 40 * time.Millisecond,
		Start: func(t *testing.T) storetest.Server {
			srv := pgtest.Start(t)
			var mu sync.Mutex
			var pools []*pgxpool.Pool
			var stores []*Store
			return storetest.Server{
				Open: func(t *testing.T, o storetest.Options) storetest.Instance {
					cfg, err := pgxpool.ParseConfig(srv.URL())
					if err != nil {
						t.Fatal(err)
					}
					cfg.MaxConns = 4
					if o.Conns > 0 {
						cfg.MaxConns = int32(o.Conns)
					}
					pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(pool.Close)
					st, err := New(context.Background(), pool, Options{Namespace: o.Namespace, Coalesce: o.Coalesce, Timeout: o.Timeout, SweepEvery: -1})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(st.Close)
					mu.Lock()
					pools, stores = append(pools, pool), append(stores, st)
					mu.Unlock()
					return st
				},
				Timed: func(t *testing.T) *storetest.TimedStore {
					_, st := open(t, srv, 4, Options{})
					return atStore(st)
				},
				Calls: func() int64 {
					mu.Lock()
					defer mu.Unlock()
					var n int64
					for _, p := range pools {
						n += p.Stat().AcquireCount()
					}
					return n
				},
				Forget: func(t *testing.T) {
					mu.Lock()
					st := stores[0]
					mu.Unlock()
					if _, err := st.Sweep(context.Background()); err != nil {
						t.Fatal(err)
					}
				},
				Stop: srv.Stop, Restart: func() { srv.Restart(t) },
				Says: "PostgreSQL did not answer at start",
			}
		},
	})
}

package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/storetest"
	"github.com/redis/go-redis/v9"
)

// The store contract (storetest.Run), each property on a redis-server of
// its own. StartsWhileDown: the store decides within a second of Redis
// answering (the breaker's longest pause). Overload: 1024 callers on a
// client of one connection with an 80 ms timeout, half of which their queue
// for the connection outlasts while a round trip does not, even under -race
// on a busy two-core machine (a 3 ms timeout made round trips themselves
// time out).
func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Name:            "Redis",
		UpWithin:        time.Second + 100*time.Millisecond,
		OverloadCallers: 1024,
		OverloadTimeout: 80 * time.Millisecond,
		Start: func(t *testing.T) storetest.Server {
			srv := redistest.Start(t)
			monitor := srv.Client(t)
			return storetest.Server{
				Open: func(t *testing.T, o storetest.Options) storetest.Instance {
					c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: o.Conns, ContextTimeoutEnabled: true})
					t.Cleanup(func() { c.Close() })
					st, err := New(context.Background(), c, Options{Namespace: o.Namespace, Coalesce: o.Coalesce, Timeout: o.Timeout})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(st.Close)
					return st
				},
				Timed: func(t *testing.T) *storetest.TimedStore { return scriptStore(srv.Client(t)) },
				Calls: func() int64 { return redistest.ScriptCalls(t, monitor) },
				Stop:  srv.Stop, Restart: func() { srv.Restart(t) },
				Says: srv.Addr,
			}
		},
	})
}

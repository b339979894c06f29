package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// instances returns a function making one process of a service: its own
// Redis client and store on the server at addr, and its own limiters from the
// generated package.
func instances(t *testing.T, addr string) func() *sharedlimits.Limits {
	return instancesWith(t, addr, redisstore.Options{})
}

// instancesWith is instances with the stores' options.
func instancesWith(t *testing.T, addr string, opts redisstore.Options) func() *sharedlimits.Limits {
	return func() *sharedlimits.Limits {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		st, err := redisstore.New(context.Background(), c, opts)
		if err != nil {
			t.Fatal(err)
		}
		l := sharedlimits.New(sharedlimits.WithStore(st))
		if err := l.SharedErr(); err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// Generated packages on one redis-server (package storetest's end-to-end
// tests): instances share a rule, a tier and a leased tier; the generated
// middleware answers 429 across instances.
func TestGeneratedInstancesShareTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	storetest.GeneratedInstances(t, instances(t, srv.Addr))
}

func TestGeneratedSharedRulesOneWay(t *testing.T) {
	srv := redistest.Start(t)
	storetest.GeneratedOneWay(t, instances(t, srv.Addr))
}

func TestGeneratedMiddlewareShared(t *testing.T) {
	srv := redistest.Start(t)
	storetest.GeneratedMiddleware(t, instances(t, srv.Addr))
}

func TestGeneratedSharedTier(t *testing.T) {
	srv := redistest.Start(t)
	storetest.GeneratedTier(t, instances(t, srv.Addr))
}

func TestGeneratedCoalesced(t *testing.T) {
	srv := redistest.Start(t)
	monitor := srv.Client(t)
	storetest.GeneratedCoalesced(t, instancesWith(t, srv.Addr, redisstore.Options{Coalesce: 64}), func() int64 { return redistest.ScriptCalls(t, monitor) })
}

// Before, a Redis outage reached the observers as ordinary outcomes.
func TestGeneratedMiddlewareDegraded(t *testing.T) {
	srv := redistest.Start(t)
	storetest.GeneratedMiddlewareDegraded(t, instances(t, srv.Addr), srv.Stop)
}

func TestGeneratedLeasedFields(t *testing.T) {
	srv := redistest.Start(t)
	storetest.GeneratedLeasedFields(t, instances(t, srv.Addr))
}

func TestGeneratedLeasedTier(t *testing.T) {
	srv := redistest.Start(t)
	monitor := srv.Client(t)
	storetest.GeneratedLeasedTier(t, instances(t, srv.Addr), func() int64 { return redistest.ScriptCalls(t, monitor) })
}

// A rolling deploy: two versions of one rule with other numbers check the
// same keys at once; every window of what they admit keeps within the
// larger version's envelope.
func TestRollingDeploy(t *testing.T) {
	srv := redistest.Start(t)
	figures := storetest.RollingDeploy(t, func(t *testing.T) shared.Store {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		st, err := redisstore.New(context.Background(), c, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Timeout() != 200*time.Millisecond {
			t.Fatalf("a store's default timeout is %v; the README and shared.DefaultTimeout say 200ms", st.Timeout())
		}
		return st
	}, 4*time.Second)
	for _, f := range figures {
		t.Log(f)
	}
}

// Shared rules' numbers changed at run time on eight instances of one
// service (storetest.GeneratedNumbers).
func TestGeneratedNumbers(t *testing.T) {
	srv := redistest.Start(t)
	storetest.GeneratedNumbers(t, instances(t, srv.Addr))
}

// A drained bucket read by a version with a larger burst is kept until
// that version's bucket is full (storetest.KeptForTheLargerBurst).
func TestKeptForTheLargerBurst(t *testing.T) {
	srv := redistest.Start(t)
	storetest.KeptForTheLargerBurst(t, func(t *testing.T) shared.Store {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		st, err := redisstore.New(context.Background(), c, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, nil)
}

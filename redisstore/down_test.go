package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A service starts while its Redis is down (storetest.StartsWhileDown): the
// store decides within a second of Redis answering (the breaker's longest
// pause), and a refused connection is classed unavailable, not a timeout
// (go-redis dials again until the deadline; the store's dial hook says why).
func TestStartsWhileDown(t *testing.T) {
	srv := redistest.Prepare(t) // nothing listens yet
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(context.Background(), c, redisstore.Options{})
	if err != nil {
		t.Fatalf("New with Redis down: %v, want a store that waits for it", err)
	}
	storetest.StartsWhileDown(t, storetest.Down{Server: "Redis", Store: st, Says: srv.Addr,
		Up: func() { srv.Restart(t) }, Stop: srv.Stop, Within: time.Second + 100*time.Millisecond})
}

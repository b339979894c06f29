package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// A service starts while its Redis is down: New makes the store, SharedErr
// says the store is not answering (naming the address), each check is decided
// by its rule's on_failure and counted as degraded; once Redis answers the
// store decides, within a second, and SharedErr is nil; when it dies again
// SharedErr says so again.
func TestStartsWhileDown(t *testing.T) {
	srv := redistest.Prepare(t) // nothing listens yet
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	st, err := redisstore.New(ctx, c, redisstore.Options{})
	if err != nil {
		t.Fatalf("New with Redis down: %v, want a store that waits for it", err)
	}
	lims := sharedlimits.New(sharedlimits.WithStore(st))
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("SharedErr with Redis down: %v, want ErrUnhealthy naming %s", err, srv.Addr)
	}
	for i := range 3 {
		res := lims.Exports.AllowN(ctx, 7, 1) // on_failure: deny
		if !res.Degraded || res.Allowed || !res.Outage {
			t.Fatalf("check %d with Redis down: %+v, want a degraded denial for the outage", i, res)
		}
	}
	if s := st.Stats(); s.Degraded < 3 {
		t.Errorf("Stats with Redis down: %+v, want the 3 checks counted degraded", s)
	}

	srv.Restart(t)
	up := time.Now()
	var res shared.Result
	for res = lims.Exports.AllowN(ctx, 8, 1); res.Degraded && time.Since(up) < 5*time.Second; res = lims.Exports.AllowN(ctx, 8, 1) {
		time.Sleep(10 * time.Millisecond)
	}
	if res.Degraded || !res.Allowed {
		t.Fatalf("Redis up for %v: %+v, want the store to decide", time.Since(up), res)
	}
	if took := time.Since(up); took > time.Second+100*time.Millisecond {
		t.Errorf("the store decided %v after Redis answered, want within a second (the breaker's longest pause)", took)
	}
	t.Logf("the store decided %v after Redis answered", time.Since(up))
	if err := lims.SharedErr(); err != nil {
		t.Errorf("SharedErr with Redis up: %v", err)
	}

	srv.Stop()
	if res := lims.Exports.AllowN(ctx, 9, 1); !res.Degraded {
		t.Fatalf("a check with Redis stopped: %+v, want degraded", res)
	}
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) {
		t.Errorf("SharedErr after Redis died: %v, want ErrUnhealthy (the live state)", err)
	}
}

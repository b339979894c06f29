package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Close under load, from two goroutines, with and without coalescing: no
// race (-race; before, a coalesced check's send raced the queue's close),
// later checks decided by the failure setting with shared.ErrClosed, and no
// script call reaches Redis after it (before, a store without coalescing
// kept calling).
func TestCloseUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	monitor := srv.Client(t)
	storetest.CloseUnderLoad(t, func(t *testing.T, coalesce bool) storetest.Closer {
		var opts Options
		if coalesce {
			opts.Coalesce = 64
		}
		st, err := New(context.Background(), srv.Client(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, func() int64 { return redistest.ScriptCalls(t, monitor) })
}

// The process's own overload is no failure of Redis's: 1024 callers on a
// client of one connection (with an 80 ms timeout, half of which their queue for the
// connection outlasts while a round trip does not, even under -race on a busy
// two-core machine; coalesced, the default) never open the breaker
// (storetest.Overload). A 3 ms timeout made round trips themselves time out.
func TestOverloadIsNoStoreFailure(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Overload(t, 1024, func(t *testing.T, coalesce bool) storetest.Breakered {
		opts := Options{Timeout: 80 * time.Millisecond}
		if coalesce {
			opts = Options{Coalesce: 256} // the default timeout: a batch of 256 checks is one script call of a few ms
		}
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		st, err := New(context.Background(), c, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	})
}

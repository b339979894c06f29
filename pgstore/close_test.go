package pgstore

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/pgstore/pgtest"
)

// Close under load, from two goroutines, with and without coalescing: no
// race (-race; before, a coalesced check's send raced the queue's close),
// later checks decided by the failure setting with shared.ErrClosed, and no
// statement leaves the pool after it (every statement acquires a
// connection; before, a store without coalescing kept sending them).
func TestCloseUnderLoad(t *testing.T) {
	srv := pgtest.Start(t)
	var pool *pgxpool.Pool
	storetest.CloseUnderLoad(t, func(t *testing.T, coalesce bool) storetest.Closer {
		var opts Options
		if coalesce {
			opts.Coalesce = 64
		}
		p, st := open(t, srv, 8, opts)
		pool = p
		return st
	}, func() int64 { return pool.Stat().AcquireCount() })
}

// The process's own overload is no failure of the database's: 512 callers
// on a pool of one connection (with a 40 ms timeout, which their queue for
// the connection outlasts while a statement does not; coalesced, the
// default) never open the breaker (storetest.Overload).
func TestOverloadIsNoStoreFailure(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Overload(t, 512, func(t *testing.T, coalesce bool) storetest.Breakered {
		opts := Options{Timeout: 40 * time.Millisecond}
		if coalesce {
			opts = Options{Coalesce: 256} // the default timeout: a batch is one statement and its commit
		}
		_, st := open(t, srv, 1, opts)
		return st
	})
}

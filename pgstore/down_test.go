package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/shared"
)

// A service starts while its PostgreSQL is down: New makes the store (the
// table is set up once the database answers), SharedErr says the store is
// not answering, each check is decided by its rule's on_failure and counted as
// degraded; once PostgreSQL answers the store decides within a couple of
// seconds (a background setup, then the breaker's probe), and SharedErr is
// nil; when it dies again SharedErr says so again.
func TestStartsWhileDown(t *testing.T) {
	srv := pgtest.Start(t)
	srv.Stop() // a fresh cluster, down: nothing listens, no table yet
	pool := srv.Pool(t)
	ctx := context.Background()
	st, err := pgstore.New(ctx, pool, pgstore.Options{})
	if err != nil {
		t.Fatalf("New with PostgreSQL down: %v, want a store that waits for it", err)
	}
	t.Cleanup(st.Close)
	lims := sharedlimits.New(sharedlimits.WithStore(st))
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) || !strings.Contains(err.Error(), "PostgreSQL did not answer at start") {
		t.Fatalf("SharedErr with PostgreSQL down: %v, want ErrUnhealthy saying so", err)
	}
	for i := range 3 {
		res := lims.Exports.AllowN(ctx, 7, 1) // on_failure: deny
		if !res.Degraded || res.Allowed || !res.Outage {
			t.Fatalf("check %d with PostgreSQL down: %+v, want a degraded denial for the outage", i, res)
		}
	}
	if s := st.Stats(); s.Degraded < 3 {
		t.Errorf("Stats with PostgreSQL down: %+v, want the 3 checks counted degraded", s)
	}

	srv.Restart(t)
	up := time.Now()
	var res shared.Result
	for res = lims.Exports.AllowN(ctx, 8, 1); res.Degraded && time.Since(up) < 10*time.Second; res = lims.Exports.AllowN(ctx, 8, 1) {
		time.Sleep(20 * time.Millisecond)
	}
	if res.Degraded || !res.Allowed {
		t.Fatalf("PostgreSQL up for %v: %+v, want the store to decide", time.Since(up), res)
	}
	if took := time.Since(up); took > 3*time.Second {
		t.Errorf("the store decided %v after PostgreSQL answered, want within about 2 s (a setup, a probe)", took)
	}
	t.Logf("the store decided %v after PostgreSQL answered", time.Since(up))
	if err := lims.SharedErr(); err != nil {
		t.Errorf("SharedErr with PostgreSQL up: %v", err)
	}

	srv.Stop()
	if res := lims.Exports.AllowN(ctx, 9, 1); !res.Degraded {
		t.Fatalf("a check with PostgreSQL stopped: %+v, want degraded", res)
	}
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) {
		t.Errorf("SharedErr after PostgreSQL died: %v, want ErrUnhealthy (the live state)", err)
	}
}

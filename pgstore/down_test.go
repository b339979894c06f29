package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
)

// A service starts while its PostgreSQL is down (storetest.StartsWhileDown):
// the table is set up once the database answers, so the store decides within
// a couple of seconds (a background setup, then the breaker's probe), and a
// refused connection is classed unavailable.
func TestStartsWhileDown(t *testing.T) {
	srv := pgtest.Start(t)
	srv.Stop() // a fresh cluster, down: nothing listens, no table yet
	pool := srv.Pool(t)
	st, err := pgstore.New(context.Background(), pool, pgstore.Options{})
	if err != nil {
		t.Fatalf("New with PostgreSQL down: %v, want a store that waits for it", err)
	}
	t.Cleanup(st.Close)
	storetest.StartsWhileDown(t, storetest.Down{Server: "PostgreSQL", Store: st, Says: "PostgreSQL did not answer at start",
		Up: func() { srv.Restart(t) }, Stop: srv.Stop, Within: 3 * time.Second})
}

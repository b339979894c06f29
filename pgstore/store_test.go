package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/shared"
)

// open connects a pool of at most conns connections to srv (closed when the
// test ends) and makes a store over it with opts (no background sweeps
// unless opts asks).
func open(t testing.TB, srv *pgtest.Server, conns int32, opts Options) (*pgxpool.Pool, *Store) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if opts.SweepEvery == 0 {
		opts.SweepEvery = -1
	}
	st, err := New(context.Background(), pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return pool, st
}

// atStore drives the check function at explicit times for package
// storetest's differential tests.
type atStore struct{ st *Store }

func (s atStore) Rule(name string, l atomicbucket.Limit) (any, bool, error) {
	r, err := NewRule(name, l)
	if err != nil {
		return nil, false, err
	}
	return r, r.Exact(), nil
}

func (s atStore) Check(steps []storetest.Step, take bool, sec, usec int64) (atomicbucket.Decision, int, error) {
	st := make([]Step, len(steps))
	for i, x := range steps {
		st[i] = Step{x.Rule.(*Rule), x.Key, x.Cost}
	}
	at := sec*1_000_000 + usec
	mode := int32(0)
	if take {
		mode = 1
	}
	return s.st.call(context.Background(), st, mode, &at)
}

func (s atStore) Lease(rule any, key string, cost, want int64, prev shared.Settlement, sec, usec int64) (shared.Granted, error) {
	at := sec*1_000_000 + usec
	return s.st.lease(context.Background(), rule.(*Rule), key, cost, want, prev, &at)
}

// Batch is the batch function (coalesced checks) at an explicit time.
func (s atStore) Batch(rule any, keys []string, costs []int64, sec, usec int64) ([]atomicbucket.Decision, error) {
	batch := make([]*pending, len(keys))
	for i := range keys {
		batch[i] = &pending{Check: Step{rule.(*Rule), keys[i], costs[i]}}
	}
	at := sec*1_000_000 + usec
	return s.st.batch(context.Background(), batch, &at)
}

// The check function at explicit microsecond times, against the exact
// reference: random greedy rules (checks and peeks), interval rules on their
// keys' grids, and tiers of up to four rules, all or nothing; and leases,
// whose grants and per-request checks together never exceed the envelope in
// any window, and whose expired grants count as spent at their expiry.
func TestMatchesReference(t *testing.T) {
	srv := pgtest.Start(t)
	_, st := open(t, srv, 4, Options{})
	t.Run("greedy", func(t *testing.T) {
		exact, decisions := storetest.Greedy(t, atStore{st}, 3, 200, 1_790_000_000)
		t.Logf("%d exact rules, %d decisions equal to the reference", exact, decisions)
	})
	t.Run("interval", func(t *testing.T) {
		decisions := storetest.Interval(t, atStore{st}, 11, 120, time.Now().Unix()+86400)
		t.Logf("%d interval decisions equal to the reference", decisions)
	})
	t.Run("tier", func(t *testing.T) {
		decisions, denied := storetest.Tiers(t, atStore{st}, 7, 60, time.Now().Unix()+86400)
		t.Logf("%d tier decisions (%d denied) equal to the reference", decisions, denied)
	})
	t.Run("lease-envelope", func(t *testing.T) {
		rules, total, leased := storetest.LeaseEnvelope(t, atStore{st})
		t.Logf("%d rules: %d tokens admitted, %d of them from leases; no window beyond the envelope", rules, total, leased)
	})
	t.Run("lease-expiry", func(t *testing.T) { storetest.LeaseExpiry(t, atStore{st}) })
}

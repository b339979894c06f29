package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/shared"
)

// instances returns a function making one process of a service: its own pool
// and store on srv, and its own limiters from the generated package; calls
// counts the checks that went to the stores it made.
func instances(t *testing.T, srv *pgtest.Server) (instance func() *sharedlimits.Limits, calls func() int64) {
	instance, calls, _ = instancesWith(t, srv, pgstore.Options{})
	return instance, calls
}

// instancesWith is instances with the stores' options; statements counts
// the statements their pools sent (each acquires a connection).
func instancesWith(t *testing.T, srv *pgtest.Server, opts pgstore.Options) (instance func() *sharedlimits.Limits, calls, statements func() int64) {
	var stores []*pgstore.Store
	var pools []*pgxpool.Pool
	instance = func() *sharedlimits.Limits {
		pool := srv.Pool(t)
		pools = append(pools, pool)
		st, err := pgstore.New(context.Background(), pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		stores = append(stores, st)
		l := sharedlimits.New(sharedlimits.WithStore(st))
		if err := l.SharedErr(); err != nil {
			t.Fatal(err)
		}
		return l
	}
	calls = func() int64 {
		var n int64
		for _, st := range stores {
			n += st.Stats().Calls
		}
		return n
	}
	statements = func() int64 {
		var n int64
		for _, p := range pools {
			n += p.Stat().AcquireCount()
		}
		return n
	}
	return instance, calls, statements
}

// Generated packages on one database (package storetest's end-to-end tests):
// instances share a rule, a tier and a leased tier; the generated middleware
// answers 429 across instances.
func TestGeneratedInstancesShareTheLimit(t *testing.T) {
	instance, _ := instances(t, pgtest.Start(t))
	storetest.GeneratedInstances(t, instance)
}

func TestGeneratedSharedRulesOneWay(t *testing.T) {
	instance, _ := instances(t, pgtest.Start(t))
	storetest.GeneratedOneWay(t, instance)
}

func TestGeneratedMiddlewareShared(t *testing.T) {
	instance, _ := instances(t, pgtest.Start(t))
	storetest.GeneratedMiddleware(t, instance)
}

func TestGeneratedSharedTier(t *testing.T) {
	instance, _ := instances(t, pgtest.Start(t))
	storetest.GeneratedTier(t, instance)
}

// Before, a generated package's checks never reached the coalescer (1.00
// statement a check through it).
func TestGeneratedCoalesced(t *testing.T) {
	instance, _, statements := instancesWith(t, pgtest.Start(t), pgstore.Options{Coalesce: 64})
	storetest.GeneratedCoalesced(t, instance, statements)
}

// Before, a database outage reached the observers as ordinary outcomes.
func TestGeneratedMiddlewareDegraded(t *testing.T) {
	srv := pgtest.Start(t)
	instance, _ := instances(t, srv)
	storetest.GeneratedMiddlewareDegraded(t, instance, srv.Stop)
}

func TestGeneratedLeasedFields(t *testing.T) {
	instance, _ := instances(t, pgtest.Start(t))
	storetest.GeneratedLeasedFields(t, instance)
}

func TestGeneratedLeasedTier(t *testing.T) {
	instance, calls := instances(t, pgtest.Start(t))
	storetest.GeneratedLeasedTier(t, instance, calls)
}

// A rolling deploy: two versions of one rule with other numbers check the
// same keys at once; every window of what they admit keeps within the
// larger version's envelope. Checks have 10 s, not the default 200 ms: eight
// callers on two keys' rows, and 2 of 6 runs under -race had a check wait
// past 200 ms.
func TestRollingDeploy(t *testing.T) {
	srv := pgtest.Start(t)
	figures := storetest.RollingDeploy(t, func(t *testing.T) shared.Store {
		pool := srv.Pool(t)
		// A statement a check, as before coalescing was the default: a
		// coalesced batch of one version can take a whole bucket before the
		// other version's first check, and the test needs both to admit.
		st, err := pgstore.New(context.Background(), pool, pgstore.Options{Timeout: 10 * time.Second, Coalesce: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	}, 4*time.Second)
	for _, f := range figures {
		t.Log(f)
	}
}

// A drained bucket read by a version with a larger burst is kept until
// that version's bucket is full (storetest.KeptForTheLargerBurst): the
// sweep, run just before the last check, leaves its row.
func TestKeptForTheLargerBurst(t *testing.T) {
	srv := pgtest.Start(t)
	var stores []*pgstore.Store
	storetest.KeptForTheLargerBurst(t, func(t *testing.T) shared.Store {
		st, err := pgstore.New(context.Background(), srv.Pool(t), pgstore.Options{Timeout: 10 * time.Second, SweepEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		stores = append(stores, st)
		return st
	}, func() {
		for _, st := range stores {
			if _, err := st.Sweep(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Shared rules' numbers changed at run time on eight instances of one
// service (storetest.GeneratedNumbers).
func TestGeneratedNumbers(t *testing.T) {
	instance, _ := instances(t, pgtest.Start(t))
	storetest.GeneratedNumbers(t, instance)
}

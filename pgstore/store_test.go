package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/storetest"
)

// open connects a pool of at most conns connections to srv (closed when the
// test ends) and makes a store over it with opts (no background sweeps and a
// statement a check unless opts asks).
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
	if opts.Coalesce == 0 {
		opts.Coalesce = -1 // a statement a check, unless the test asks (the default coalesces: TestOwnQueueNoDegraded)
	}
	st, err := New(context.Background(), pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return pool, st
}

// timed is the backend at explicit times (storetest.Timed), for package
// storetest's differential tests.
type timed struct{ b *backend }

func micros(sec, usec int64) *int64 {
	at := sec*1_000_000 + usec
	return &at
}

func (t timed) TierAt(calls []shared.Call, mode shared.Mode, sec, usec int64) (shared.Reply, error) {
	return t.b.tierAt(context.Background(), calls, mode, micros(sec, usec))
}

func (t timed) EachAt(calls []shared.Call, sec, usec int64) ([]shared.Reply, error) {
	return t.b.eachAt(context.Background(), calls, micros(sec, usec))
}

func (t timed) LeaseAt(c shared.Call, want int64, prev shared.Settlement, sec, usec int64) (shared.LeaseReply, error) {
	return t.b.leaseAt(context.Background(), c, want, prev, micros(sec, usec))
}

// atStore is st's check functions at explicit times, as package storetest
// drives them.
func atStore(st *Store) *storetest.TimedStore { return storetest.Backend(timed{st.b}, NewRule) }

// Store.Coalesce says what runs: pgstore coalesces by default, also when
// Options.Coalesce is 0 (which once meant a statement a check), and -1 turns
// it off.
func TestCoalesceAsRun(t *testing.T) {
	srv := pgtest.Start(t)
	for _, c := range []struct{ set, runs int }{{0, DefaultCoalesce}, {-1, 0}, {8, 8}} {
		st, err := New(context.Background(), srv.Pool(t), Options{Coalesce: c.set, SweepEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		if got := st.Coalesce(); got != c.runs {
			t.Errorf("Options.Coalesce %d: the store carries up to %d checks a statement; want %d", c.set, got, c.runs)
		}
	}
}

// The boxed arguments of a single check are the values the tier and batch
// functions get, for greedy and interval rules (keys with their own phase).
func TestBoxedValuesAreValues(t *testing.T) {
	for _, l := range []atomicbucket.Limit{
		{Tokens: 7, Period: time.Second, Burst: 1000},
		{Tokens: 3, Period: 250 * time.Millisecond, Burst: 9, Initial: 2, InitialSet: true},
		{Tokens: 5, Period: time.Hour, Burst: 30, Refill: atomicbucket.Interval},
		{Tokens: 5, Period: time.Hour, Burst: 30, Refill: atomicbucket.Interval, Aligned: true},
	} {
		r, err := NewRule("boxed", l)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"a", "some user"} {
			c := shared.Call{Rule: r, Key: key, Cost: 300}
			want := values(nil, c)
			got := boxedValues(c)
			for i, g := range got {
				if v, ok := g.(int64); !ok || v != want[i] {
					t.Errorf("%+v key %q: value %d is %#v, want int64 %d", l, key, i, g, want[i])
				}
			}
		}
	}
}

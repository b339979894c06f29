package pgstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/storetest"
)

// openSlots is storetest.OpenSlots on pool, coalescing at most coalesce
// calls a statement (0: a statement each).
func openSlots(pool *pgxpool.Pool, coalesce int) storetest.OpenSlots {
	return func(t *testing.T, name string, rule atomicslot.Rule, at func() time.Time) shared.SlotChecker {
		s, err := newSlots(context.Background(), pool, "limitgen_test_slots", name+"-c"+strconv.Itoa(coalesce), rule, 0)
		if err != nil {
			t.Fatal(err)
		}
		s.at = at
		if coalesce > 0 {
			s.co = shared.NewSlotBatch(coalesce, s.timeout, s.sendBatch)
			t.Cleanup(s.co.Close)
		}
		return s
	}
}

// The store's in-flight slots against the reference, under a crowd, and
// across two instances, one of which dies holding slots (storetest); a
// released key's row is gone, and a sweep deletes a key whose slots all
// expired unreleased.
func TestSlotsContract(t *testing.T) {
	srv := pgtest.Start(t)
	pool := srv.Pool(t)
	ctx := context.Background()
	t.Run("MatchesReference", func(t *testing.T) { storetest.SlotsMatchReference(t, openSlots(pool, 0), 16, 200, 43) })
	t.Run("MatchesReferenceCoalesced", func(t *testing.T) { storetest.SlotsMatchReference(t, openSlots(pool, 64), 16, 200, 44) })
	t.Run("NeverAboveLimit", func(t *testing.T) { storetest.SlotsNeverAboveLimit(t, openSlots(pool, 0), 16, 15) })
	t.Run("NeverAboveLimitCoalesced", func(t *testing.T) { storetest.SlotsNeverAboveLimit(t, openSlots(pool, 64), 16, 15) })
	t.Run("Linearizable", func(t *testing.T) { storetest.SlotsLinearizable(t, openSlots(pool, 0)) })
	t.Run("LinearizableCoalesced", func(t *testing.T) { storetest.SlotsLinearizable(t, openSlots(pool, 64)) })
	t.Run("AcrossInstances", func(t *testing.T) {
		a, err := New(ctx, srv.Pool(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(ctx, srv.Pool(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Close)
		t.Cleanup(b.Close)
		storetest.SlotsAcrossInstances(t, a, b)
	})
	s, err := newSlots(ctx, pool, "limitgen_test_slots", "rows", atomicslot.MustRule(2, 10*time.Millisecond), 0)
	if err != nil {
		t.Fatal(err)
	}
	rows := func() (n int) {
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM limitgen_test_slots WHERE r = 'rows'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if d, _, err := s.Acquire(ctx, "k", 9); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if got, err := s.Release(ctx, "k", 9); err != nil || got != shared.SlotReleased || rows() != 0 {
		t.Fatalf("release: %v %v, %d rows left", got, err, rows())
	}
	if d, _, err := s.Acquire(ctx, "leak", 9); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Errorf("a sweep with a slot held deleted %d rows (%v)", n, err)
	}
	s.at = func() time.Time { return time.Now().Add(-11 * time.Second) } // a slot 11 s past its expiry
	if d, _, err := s.Acquire(ctx, "old", 9); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Errorf("a sweep of a key whose slot expired 11 s ago deleted %d rows (%v), want 1", n, err)
	}
}

// TestSlotsDatabaseDown: with PostgreSQL stopped, deny answers an outage
// within the timeout, a release the database cannot take is counted, and
// once the database is back the rule answers again.
func TestSlotsDatabaseDown(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	st, err := New(ctx, srv.Pool(t), Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	s, err := shared.BindSlots(st, "", "down", atomicslot.MustRule(1, time.Second), shared.Failure{Mode: shared.FailDeny})
	if err != nil {
		t.Fatal(err)
	}
	held, r := s.Acquire(ctx, "k")
	if !r.Allowed || r.Degraded {
		t.Fatalf("with the database up: %+v", r)
	}
	srv.Stop()
	start := time.Now()
	if _, r := s.Acquire(ctx, "k"); r.Allowed || !r.Outage || r.Err == nil {
		t.Errorf("deny, database down: %+v", r)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("a denial with the database down took %v; the timeout is 300ms", el)
	}
	if held.Release() {
		t.Error("a release with the database down reported the slot returned")
	}
	if got := s.Stats(); got.ReleaseFailed != 1 {
		t.Errorf("stats after a release the database could not take: %+v", got)
	}
	srv.Restart(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, r := s.Acquire(ctx, "k")
		if r.Allowed && !r.Degraded {
			break // the slot the failed release left came back by its expiry
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the database came back: %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

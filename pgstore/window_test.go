package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/storetest"
)

// openWindow is storetest.OpenWindow on pool: a Window deciding at at's time
// or, with at nil, on the server's clock.
func openWindow(pool *pgxpool.Pool) storetest.OpenWindow {
	return func(t *testing.T, name string, rule atomicwindow.Rule, at func() time.Time) storetest.WindowCheck {
		w, err := NewWindow(context.Background(), pool, name, rule, WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.at = at
		return w.AllowN
	}
}

// openSettleWindow is openWindow giving the window as a settlement meets
// it.
func openSettleWindow(pool *pgxpool.Pool) storetest.OpenSettleWindow {
	return func(t *testing.T, name string, rule atomicwindow.Rule, at func() time.Time) storetest.SettleWindow {
		w, err := NewWindow(context.Background(), pool, name, rule, WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.at = at
		return w
	}
}

// The store's windows against the reference, at their edges, and with 16
// callers on two keys (storetest); then a sweep deletes nothing of full
// windows, and an empty window's row.
func TestWindowContract(t *testing.T) {
	srv := pgtest.Start(t)
	pool := srv.Pool(t)
	ctx := context.Background()
	t.Run("MatchesReference", func(t *testing.T) { storetest.WindowMatchesReference(t, openWindow(pool), 12, 200, 30) })
	t.Run("SettleMatchesReference", func(t *testing.T) {
		settled, back := storetest.WindowSettleMatchesReference(t, openSettleWindow(pool), 12, 150, 31)
		if back < settled/4 {
			t.Fatalf("%d settlements, %d gave back: the draw misses give-backs", settled, back)
		}
		t.Logf("%d settlements (%d gave back) equal to the reference", settled, back)
	})
	t.Run("Edges", func(t *testing.T) { storetest.WindowEdges(t, openWindow(pool)) })
	t.Run("Versions", func(t *testing.T) { storetest.WindowVersions(t, openWindow(pool)) })
	t.Run("ExactlyN", func(t *testing.T) { storetest.WindowExactlyN(t, openWindow(pool), 16, 50, 500) })
	w, err := NewWindow(ctx, pool, "hot50", atomicwindow.MustRule(50, time.Hour), WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Sweep(ctx); err != nil || n != 0 {
		t.Errorf("a sweep of full windows deleted %d rows (%v)", n, err)
	}
	short, err := NewWindow(ctx, pool, "short", atomicwindow.MustRule(5, 10*time.Millisecond), WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := short.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	time.Sleep(atomicbucket.SweepGrace + 50*time.Millisecond)
	if n, err := short.Sweep(ctx); err != nil || n != 1 {
		t.Errorf("a sweep after the window emptied deleted %d rows (%v), want 1", n, err)
	}
}

// openLeasedWindow is storetest.OpenLeasedWindow on pool.
func openLeasedWindow(pool *pgxpool.Pool) storetest.OpenLeasedWindow {
	return func(t *testing.T, name string, rule atomicwindow.Rule, at func() time.Time) (storetest.WindowCheck, storetest.WindowLease) {
		w, err := NewWindow(context.Background(), pool, name, rule, WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.at = at
		return w.AllowN, w.Lease
	}
}

// TestWindowLease: the store's window leases never let a key's window hold
// more than its limit, whatever lessees and checks do, and settle as they
// say (storetest).
func TestWindowLease(t *testing.T) {
	srv := pgtest.Start(t)
	pool := srv.Pool(t)
	t.Run("Envelope", func(t *testing.T) {
		total, leased := storetest.WindowLeaseEnvelope(t, openLeasedWindow(pool), 20, 5)
		t.Logf("%d units admitted, %d of them from leases", total, leased)
	})
	t.Run("Settles", func(t *testing.T) { storetest.WindowLeaseSettles(t, openLeasedWindow(pool)) })
	t.Run("Throughput", func(t *testing.T) {
		exact, counted := storetest.WindowLeaseThroughput(t, openLeasedWindow(pool))
		t.Logf("kept full by a lease: %.1f%% of the limit a window, exact (4 s); %.1f%%, counted (an hour)", 100*exact, 100*counted)
	})
}

// BenchmarkWindowCheck is one window check a statement on a server the
// benchmark starts, from one caller and from 16, on one key of a limit no
// run reaches (counted) and, case=drained, of 50 an hour drained by the
// first checks (every later check denied).
func BenchmarkWindowCheck(b *testing.B) {
	srv := pgtest.Start(b)
	pool := srv.Pool(b)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		limit int64
	}{{"allow", atomicwindow.LimitMax}, {"drained", 50}} {
		w, err := NewWindow(ctx, pool, "bench-"+c.name, atomicwindow.MustRule(c.limit, time.Hour), WindowOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("case="+c.name+"/callers=1", func(b *testing.B) {
			for b.Loop() {
				if _, err := w.AllowN(ctx, "k", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("case="+c.name+"/callers=16", func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := w.AllowN(ctx, "k", 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

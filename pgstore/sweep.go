package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/limitgen/limitgen/atomicbucket"
)

// sweepBatch is how many rows one sweep statement deletes at most.
const sweepBatch = 10_000

// Sweep deletes the rows of buckets that are full at the server's time (a
// full bucket is the same as an absent one), in statements of at most
// sweepBatch rows, and returns how many it deleted. Checks start it in the
// background at most once every Options.SweepEvery; instances sweeping at
// once skip each other's rows. It scans the table: on a table of millions
// of keys, sweep less often, or yourself at a quiet time.
func (s *Store) Sweep(ctx context.Context) (int64, error) { return s.b.sweepAll(ctx) }

func (s *backend) sweepAll(ctx context.Context) (int64, error) {
	if err := s.ensure(); err != nil {
		return 0, err
	}
	q := "DELETE FROM " + s.table + " WHERE ctid = ANY(ARRAY(SELECT ctid FROM " + s.table +
		" WHERE full_at >= 0 AND full_at <= (extract(epoch FROM clock_timestamp()) * 1000000)::bigint LIMIT $1 FOR UPDATE SKIP LOCKED))"
	var total int64
	for {
		var tag pgconn.CommandTag
		err := s.e.Within(ctx, func() (err error) {
			tag, err = s.pool.Exec(ctx, q, execMode, sweepBatch)
			return err
		})
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < sweepBatch {
			return total, nil
		}
	}
}

// maybeSweep starts a sweep in the background when the last one started
// SweepEvery ago or more.
func (s *backend) maybeSweep() {
	if s.sweep < 0 || s.closed.Load() {
		return
	}
	now := int64(atomicbucket.Now())
	last := s.swept.Load()
	if last != 0 && now-last < int64(s.sweep) || !s.swept.CompareAndSwap(last, now) {
		return
	}
	if last == 0 {
		return // the first check starts the clock: no sweep at start-up
	}
	s.sweeps.Add(1)
	go func() {
		defer s.sweeps.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.sweepAll(ctx) //nolint:errcheck // the next sweep tries again
	}()
}

// Close stops the store's traffic to the database: checks after it are
// decided by their rules' failure settings with shared.ErrClosed (Check,
// CheckTier and a bound package's checks), and the direct calls (AllowN,
// AllowTier, leases, Sweep) fail with it, without a statement; a coalescing
// store sends what is queued and stops its goroutines. On the way it gives
// back what the leases hold (ReleaseLeases, for at most 2 s) and waits for a
// background sweep to end. It is safe while checks run, and may be called
// more than once. It does not close the pool, which is the caller's.
func (s *Store) Close() {
	s.Engine.Close()
	s.b.closed.Store(true) // no new background sweeps
	s.b.sweeps.Wait()
	s.b.closersMu.Lock()
	defer s.b.closersMu.Unlock()
	for _, c := range s.b.closers {
		c()
	}
}

package pgstore

import (
	"context"

	"github.com/limitgen/limitgen/shared"
)

// Lease spends tokens of one shared bucket in this process (shared.Lease):
// it takes a batch from the database in one statement and admits requests
// from it locally, until the batch runs out or expires. While a grant is
// valid the bucket's row counts its tokens as held (the grants of the
// server's current and previous second), so all instances together never
// admit more than the shared bucket allows, in any window. A grant is valid
// until the start of the server's second after next.
type Lease = shared.Lease

// NewLease returns a lease of key's bucket under r, asking for at most
// maxBatch tokens at a time (at least 1, at most the burst).
func (s *Store) NewLease(r *Rule, key string, maxBatch int64) *Lease {
	return shared.NewLease(func(ctx context.Context, cost, want int64, prev shared.Settlement) (shared.Granted, error) {
		return s.lease(ctx, r, key, cost, want, prev, nil)
	}, r.n.Limit.Burst, maxBatch)
}

// lease runs the check function's lease mode (shared.LeaseFunc): settle the
// previous grant, then grant at least cost and up to want tokens (none for
// want 0), at the server's time or, for tests, at *at (Unix µs).
func (s *Store) lease(ctx context.Context, r *Rule, key string, cost, want int64, prev shared.Settlement, at *int64) (shared.Granted, error) {
	if !s.gate.Enter() {
		return shared.Granted{}, shared.ErrClosed
	}
	defer s.gate.Leave()
	res, err := s.exec(ctx, Step{r, key, cost}, 3, at, want, prev)
	if err != nil {
		return shared.Granted{}, err
	}
	if len(res) != 7 {
		return shared.Granted{}, errReply(res)
	}
	allowed, ahead, x, since, second, usec := res[0] == 1, res[2], res[3], res[4], res[5], res[6]
	d := r.n.Decision(allowed, ahead, x, since, cost)
	if !allowed {
		return shared.Granted{Decision: d}, nil
	}
	return shared.Granted{Decision: d, Size: x, Second: second, Usec: usec}, nil
}

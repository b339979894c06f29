package redisstore

import (
	"context"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// Lease spends tokens of one shared bucket in this process (shared.Lease):
// it takes a batch from Redis in one script call and admits requests from it
// locally, until the batch runs out or expires. While a grant is valid Redis
// counts its tokens as held (the bucket's value keeps the grants of Redis's
// current and previous second), so all instances together never admit more
// than the shared bucket allows, in any window. A grant is valid until the
// start of Redis's second after next.
type Lease = shared.Lease

// NewLease returns a lease of key's bucket under r, asking for at most
// maxBatch tokens at a time (at least 1, at most the burst).
func (s *Store) NewLease(r *Rule, key string, maxBatch int64) *Lease {
	return shared.NewLease(func(ctx context.Context, cost, want int64, prev shared.Settlement) (shared.Granted, error) {
		return s.lease(ctx, r, key, cost, want, prev)
	}, r.n.Limit.Burst, maxBatch)
}

// lease runs the script's lease mode (shared.LeaseFunc): settle the previous
// grant, then grant at least cost and up to want tokens (none for want 0).
// now is for the explicit-time script of the tests (seconds, microseconds).
func (s *Store) lease(ctx context.Context, r *Rule, key string, cost, want int64, prev shared.Settlement, now ...any) (shared.Granted, error) {
	if !s.gate.Enter() {
		return shared.Granted{}, shared.ErrClosed
	}
	defer s.gate.Leave()
	args := append(r.args([]any{1, "3"}), r.keyPhase(key), cost, want, prev.Second, prev.Size, prev.Unspent)
	args = append(args, now...)
	res, err := s.check.Run(ctx, s.client, []string{s.Key(r, key)}, args...).Int64Slice()
	if err != nil {
		return shared.Granted{}, err
	}
	if len(res) != 7 {
		return shared.Granted{}, errScript(res)
	}
	allowed, ahead, x, since, second, usec := res[0] == 1, res[2], res[3], res[4], res[5], res[6]
	d := atomicbucket.Decision{Allowed: allowed, Remaining: max((r.n.Tau-ahead)/r.n.Emit, 0), Reset: r.n.Duration(ahead, since)}
	if !allowed {
		d.RetryAfter = r.n.Duration(x, since)
		return shared.Granted{Decision: d}, nil
	}
	return shared.Granted{Decision: d, Size: x, Second: second, Usec: usec}, nil
}

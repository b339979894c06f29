package redisstore

import (
	"context"
	"time"

	"github.com/limitgen/limitgen/shared"
)

// Leases (shared.Lease) take a batch of a bucket's tokens from Redis in one
// script call and admit requests from it locally, until the batch runs out or
// expires. While a grant is valid Redis counts its tokens as held (the
// bucket's value keeps the grants of Redis's current and previous second), so
// all instances together never admit more than the shared bucket allows, in
// any window. A grant is valid until the start of Redis's second after next.

// Lease runs the lease script (shared.Backend): settle the previous
// grant, then grant at least c.Cost and up to want tokens (none for want 0).
func (b *backend) Lease(ctx context.Context, c shared.Call, want int64, prev shared.Settlement) (shared.LeaseReply, error) {
	return b.leaseAt(ctx, c, want, prev)
}

// leaseAt is Lease; now is for the explicit-time script of the tests
// (seconds, microseconds).
func (b *backend) leaseAt(ctx context.Context, c shared.Call, want int64, prev shared.Settlement, now ...any) (shared.LeaseReply, error) {
	a := append(args([]any{1, "0"}, c.Rule), c.Rule.Integers().Phase(c.Key), c.Cost, want, prev.Second, prev.Size, prev.Unspent)
	a = append(a, now...)
	start := time.Now()
	res, err := b.scripts[opLease].Run(ctx, b.client, []string{b.key(c.Rule, c.Key)}, a...).Int64Slice()
	if err != nil {
		_, node := b.Place(c)
		return shared.LeaseReply{}, b.dials.classify(err, node, start)
	}
	return shared.LeaseReplyOf(res)
}

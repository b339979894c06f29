// Package redisstore enforces limitgen's shared rules on Redis: the same GCRA
// as the local runtime (package atomicbucket), one Lua script per check, on
// the server's clock, in integers that a Lua number holds exactly, so that a
// limit holds across every instance of a service. It is its own module:
// services that never use Redis never download its client.
//
// This is the first part of the store: single checks of greedy rules on a
// single server. Tiers in one round trip, Cluster key layout, failure
// handling, leases and the generated API's seam come next.
package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/redis/go-redis/v9"
)

// Store checks shared rules on a Redis server.
type Store struct {
	client redis.UniversalClient
	prefix string
	check  *redis.Script
}

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "limitgen:"

// New returns a store over client (single server, Sentinel or Cluster through
// go-redis's UniversalClient), writing keys under DefaultPrefix.
func New(client redis.UniversalClient) *Store {
	return newStore(client, false)
}

func newStore(client redis.UniversalClient, explicitNow bool) *Store {
	return &Store{client: client, prefix: DefaultPrefix, check: redis.NewScript(script(explicitNow))}
}

// Key is the Redis key of rule r's bucket for key.
func (s *Store) Key(r *Rule, key string) string {
	return s.prefix + r.name + ":" + key
}

// AllowN decides a request of cost for key under r at the server's time,
// taking the tokens if it is allowed. A cost below 0 or above the burst is
// answered without a round trip (RetryAfter is Never); a cost of 0 takes
// nothing and creates nothing. The error is Redis's (the connection, the
// context): the decision is then the zero Decision, a denial, and the caller's
// failure setting decides what to do.
func (s *Store) AllowN(ctx context.Context, r *Rule, key string, cost int64) (atomicbucket.Decision, error) {
	return s.run(ctx, r, key, cost, true, nil)
}

// PeekN is what AllowN would decide, taking nothing.
func (s *Store) PeekN(ctx context.Context, r *Rule, key string, cost int64) (atomicbucket.Decision, error) {
	return s.run(ctx, r, key, cost, false, nil)
}

func (s *Store) run(ctx context.Context, r *Rule, key string, cost int64, take bool, now []any) (atomicbucket.Decision, error) {
	if cost < 0 || cost > r.limit.Burst {
		d, err := s.run(ctx, r, key, 0, false, now) // the bucket as it is
		d.Allowed, d.RetryAfter = false, atomicbucket.Never
		return d, err
	}
	t := "0"
	if take {
		t = "1"
	}
	args := append([]any{r.emit, r.tau, r.debt, r.perSecond, r.perMicro, cost, t}, now...)
	res, err := s.check.Run(ctx, s.client, []string{s.Key(r, key)}, args...).Int64Slice()
	if err != nil {
		return atomicbucket.Decision{}, err
	}
	if len(res) != 3 {
		return atomicbucket.Decision{}, fmt.Errorf("redisstore: the script returned %d values, want 3", len(res))
	}
	allowed, ahead, excess := res[0] == 1, res[1], res[2]
	d := atomicbucket.Decision{
		Allowed:   allowed,
		Remaining: max((r.tau-ahead)/r.emit, 0),
		Reset:     r.duration(ahead),
	}
	if !allowed {
		d.RetryAfter = r.duration(excess)
	}
	return d, nil
}

// atTime is the explicit-time arguments of the test variant of the script.
func atTime(sec, usec int64) []any {
	return []any{strconv.FormatInt(sec, 10), strconv.FormatInt(usec, 10)}
}

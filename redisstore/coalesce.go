package redisstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// Coalescing (shared.Coalescer): while one script call is in flight, the
// checks that arrive wait, and go together in the next call, each decided on
// its own (the script's mode 4).

// pending is one coalesced check, waiting for its call.
type pending = shared.Pending[Step]

// Coalesce makes AllowN (and Check, which calls it) send concurrent checks to
// Redis together, at most maxBatch a call, from goroutines that Close stops.
// Call it once, before the store is used.
func (s *Store) Coalesce(maxBatch int) {
	s.co = shared.NewCoalescer(maxBatch, s.guard.Timeout, func(ctx context.Context, batch []*pending) {
		for _, part := range s.bySlot(batch) {
			ds, err := s.each(ctx, part)
			for i, p := range part {
				if err != nil {
					p.Done(atomicbucket.Decision{}, err)
				} else {
					p.Done(ds[i], nil)
				}
			}
		}
	})
}

// Close stops the store's traffic to Redis: checks after it are decided by
// their rules' failure settings with shared.ErrClosed (Check, CheckTier and a
// bound package's checks), and the direct calls (AllowN, AllowTier, leases)
// fail with it, without a call; a coalescing store sends what is queued and
// stops its goroutines. On the way it gives back the tokens the store's leases
// hold (ReleaseLeases, for at most 2 s: grants expire by then anyway). It is
// safe while checks run, and may be called more than once; the client is
// the caller's to close.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.guard.Close()
		if s.co != nil {
			s.co.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.ReleaseLeases(ctx) //nolint:errcheck // best effort: a grant not given back expires
		cancel()
		s.gate.Close()
	})
}

// bySlot splits a batch into one part per Cluster slot (a script call's keys
// must share one), keeping each part's checks in order; on a single server,
// or when every key shares a slot, the batch is one part.
func (s *Store) bySlot(batch []*pending) [][]*pending {
	if _, cluster := s.client.(*redis.ClusterClient); !cluster {
		return [][]*pending{batch}
	}
	first := slot(s.Key(batch[0].Check.Rule, batch[0].Check.Key))
	parts := map[uint16][]*pending{}
	var order []uint16
	for _, p := range batch {
		sl := first
		if p != batch[0] {
			sl = slot(s.Key(p.Check.Rule, p.Check.Key))
		}
		if _, ok := parts[sl]; !ok {
			order = append(order, sl)
		}
		parts[sl] = append(parts[sl], p)
	}
	out := make([][]*pending, len(order))
	for i, sl := range order {
		out[i] = parts[sl]
	}
	return out
}

// each runs the script's mode 4 over a batch: every check on its own. The
// batch's rules and buckets go once each (a batch under load is mostly one
// rule, often one key), then two arguments a check (bucket, cost); the script
// reads and writes each bucket once.
// now is for the explicit-time script of the tests (seconds, microseconds).
func (s *Store) each(ctx context.Context, batch []*pending, now ...any) ([]atomicbucket.Decision, error) {
	if !s.gate.Enter() {
		return nil, shared.ErrClosed
	}
	defer s.gate.Leave()
	type bucket struct {
		rule *Rule
		key  string
	}
	var rules []*Rule
	var keys []string
	var buckets []bucket
	at := make(map[bucket]int, 4)
	checks := make([]any, 0, 1+2*len(batch))
	checks = append(checks, len(batch))
	for _, p := range batch {
		bk := bucket{p.Check.Rule, p.Check.Key}
		i, ok := at[bk]
		if !ok {
			i = len(buckets)
			at[bk] = i
			buckets = append(buckets, bk)
			keys = append(keys, s.Key(bk.rule, bk.key))
			if !slices.Contains(rules, bk.rule) {
				rules = append(rules, bk.rule)
			}
		}
		checks = append(checks, i+1, p.Check.Cost)
	}
	args := make([]any, 0, 3+8*len(rules)+2*len(buckets)+len(checks))
	args = append(args, len(buckets), "4", len(rules))
	for _, r := range rules {
		args = r.args(args)
	}
	for _, bk := range buckets {
		args = append(args, slices.Index(rules, bk.rule)+1, bk.rule.keyPhase(bk.key))
	}
	args = append(args, checks...)
	args = append(args, now...)
	res, err := s.check.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != 4*len(batch) {
		return nil, fmt.Errorf("redisstore: the script returned %d values for %d checks, want 4 each", len(res), len(batch))
	}
	ds := make([]atomicbucket.Decision, len(batch))
	for i, p := range batch {
		r := p.Check.Rule
		allowed, ahead, excess, since := res[4*i] == 1, res[4*i+1], res[4*i+2], res[4*i+3]
		ds[i] = atomicbucket.Decision{Allowed: allowed, Remaining: max((r.n.Tau-ahead)/r.n.Emit, 0), Reset: r.n.Duration(ahead, since)}
		if !allowed {
			ds[i].RetryAfter = r.n.Duration(excess, since)
		}
	}
	return ds, nil
}

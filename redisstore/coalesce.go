package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/redis/go-redis/v9"
)

// Coalescing: while one script call is in flight, the checks that arrive
// wait, and go together in the next call, each decided on its own (the
// script's mode 4). Under load a call then carries many decisions, and Redis
// spends its time running the script instead of answering round trips; with
// one caller at a time it costs nothing but a channel hand-off.

// pending is one coalesced check, waiting for its call.
type pending struct {
	step Step
	done chan outcome // buffered: the flusher never blocks on a caller that gave up
}

type outcome struct {
	d   atomicbucket.Decision
	err error
}

// Coalesce makes AllowN (and Check, which calls it) send concurrent checks to
// Redis together, at most maxBatch a call, from goroutines that Close stops.
// Call it once, before the store is used.
func (s *Store) Coalesce(maxBatch int) {
	maxBatch = max(maxBatch, 1)
	s.queue = make(chan *pending, 4*maxBatch)
	s.stopped = make(chan struct{})
	var wg sync.WaitGroup
	for range flushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.flush(maxBatch)
		}()
	}
	go func() {
		wg.Wait()
		close(s.stopped)
	}()
}

// flushers is how many calls a coalescing store keeps in flight at once: two,
// so that one batch is encoded and decoded while Redis runs the other.
const flushers = 2

// Close gives back the tokens the store's leases hold (ReleaseLeases, for at
// most 2 s: grants expire by then anyway) and stops a coalescing store's
// goroutines; coalesced checks after it fail. It may be called more than once.
func (s *Store) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	s.ReleaseLeases(ctx) //nolint:errcheck // best effort: a grant not given back expires
	cancel()
	if s.queue != nil {
		s.closeOnce.Do(func() { close(s.queue) })
		<-s.stopped
	}
}

// errClosed is the error of a check on a closed coalescing store.
var errClosed = errors.New("redisstore: the store is closed")

// coalesced queues a check and waits for its call, or for ctx.
func (s *Store) coalesced(ctx context.Context, st Step) (d atomicbucket.Decision, err error) {
	p := &pending{step: st, done: make(chan outcome, 1)}
	defer func() {
		if recover() != nil { // the queue was closed
			d, err = atomicbucket.Decision{}, errClosed
		}
	}()
	select {
	case s.queue <- p:
	case <-ctx.Done():
		return atomicbucket.Decision{}, ctx.Err()
	}
	select {
	case o := <-p.done:
		return o.d, o.err
	case <-ctx.Done():
		return atomicbucket.Decision{}, ctx.Err() // the call may still run and take the tokens
	}
}

// flush sends the queued checks, a batch a call, until the queue is closed.
func (s *Store) flush(maxBatch int) {
	batch := make([]*pending, 0, maxBatch)
	for first := range s.queue {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < maxBatch {
			select {
			case p, ok := <-s.queue:
				if !ok {
					break fill
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.guard.Timeout)
		for _, part := range s.bySlot(batch) {
			ds, err := s.each(ctx, part)
			for i, p := range part {
				if err != nil {
					p.done <- outcome{err: err}
				} else {
					p.done <- outcome{d: ds[i]}
				}
			}
		}
		cancel()
	}
}

// bySlot splits a batch into one part per Cluster slot (a script call's keys
// must share one), keeping each part's checks in order; on a single server,
// or when every key shares a slot, the batch is one part.
func (s *Store) bySlot(batch []*pending) [][]*pending {
	if _, cluster := s.client.(*redis.ClusterClient); !cluster {
		return [][]*pending{batch}
	}
	first := slot(s.Key(batch[0].step.Rule, batch[0].step.Key))
	parts := map[uint16][]*pending{}
	var order []uint16
	for _, p := range batch {
		sl := first
		if p != batch[0] {
			sl = slot(s.Key(p.step.Rule, p.step.Key))
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
		bk := bucket{p.step.Rule, p.step.Key}
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
		checks = append(checks, i+1, p.step.Cost)
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
		r := p.step.Rule
		allowed, ahead, excess, since := res[4*i] == 1, res[4*i+1], res[4*i+2], res[4*i+3]
		ds[i] = atomicbucket.Decision{Allowed: allowed, Remaining: max((r.n.Tau-ahead)/r.n.Emit, 0), Reset: r.n.Duration(ahead, since)}
		if !allowed {
			ds[i].RetryAfter = r.n.Duration(excess, since)
		}
	}
	return ds, nil
}

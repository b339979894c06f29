package pgstore

import (
	"context"
	"fmt"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// pending is one coalesced check, waiting for its statement.
type pending = shared.Pending[Step]

// Coalesce makes AllowN (and Check, which calls it) send concurrent checks to
// the database together (shared.Coalescer), at most maxBatch a statement,
// each decided on its own: a hot key's checks then share one transaction and
// one commit instead of queueing for the row's lock one commit at a time. A
// check that finds no other waiting goes alone, as without coalescing.
// Call it once, before the store is used; Close stops it.
func (s *Store) Coalesce(maxBatch int) {
	s.co = shared.NewCoalescer(maxBatch, s.guard.Timeout, func(ctx context.Context, batch []*pending) {
		s.batches.Add(1)
		if len(batch) == 1 { // alone: the one-bucket function, with its fast path
			d, _, err := s.call(ctx, []Step{batch[0].Check}, 1, nil)
			batch[0].Done(d, err)
			return
		}
		ds, err := s.batch(ctx, batch, nil)
		for i, p := range batch {
			if err != nil {
				p.Done(atomicbucket.Decision{}, err)
			} else {
				p.Done(ds[i], nil)
			}
		}
	})
}

// batch runs the batch function: every check on its own, in order (checks of
// one bucket see each other's takes), each bucket read and written once, at
// the server's time or, for tests, at *at (Unix µs).
func (s *Store) batch(ctx context.Context, batch []*pending, at *int64) ([]atomicbucket.Decision, error) {
	if !s.gate.Enter() {
		return nil, shared.ErrClosed
	}
	defer s.gate.Leave()
	type bucket struct {
		rule *Rule
		key  string
	}
	index := make(map[bucket]int32, 4)
	var names []string
	var keys [][]byte
	var v []int64
	ci := make([]int32, len(batch))
	cc := make([]int64, len(batch))
	for j, p := range batch {
		bk := bucket{p.Check.Rule, p.Check.Key}
		i, ok := index[bk]
		if !ok {
			names = append(names, bk.rule.name)
			keys = append(keys, rowKey(bk.key))
			v = bk.rule.values(v, bk.key, 0)
			i = int32(len(names))
			index[bk] = i
		}
		ci[j], cc[j] = i, p.Check.Cost
	}
	ord := make([]int32, len(names))
	for i := range ord {
		ord[i] = int32(i + 1)
	}
	sortRows(ord, names, keys)
	var res []int64
	if err := s.pool.QueryRow(ctx, s.each, names, keys, ord, v, ci, cc, at).Scan(&res); err != nil {
		return nil, err
	}
	s.maybeSweep()
	if len(res) != 4*len(batch) {
		return nil, fmt.Errorf("pgstore: the batch function returned %d values for %d checks, want 4 each", len(res), len(batch))
	}
	ds := make([]atomicbucket.Decision, len(batch))
	for j, p := range batch {
		allowed, ahead, excess, since := res[4*j] == 1, res[4*j+1], res[4*j+2], res[4*j+3]
		ds[j] = p.Check.Rule.n.Decision(allowed, ahead, excess, since, p.Check.Cost)
	}
	return ds, nil
}

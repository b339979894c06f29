package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/limitgen/limitgen/shared"
)

// Each runs a coalesced batch (shared.Backend; the database is one group):
// one call alone goes to the one-bucket function, with its fast path; more
// to the batch function, every check on its own.
func (s *backend) Each(ctx context.Context, groups [][]shared.Call) ([][]shared.Reply, error) {
	out := make([][]shared.Reply, len(groups))
	for i, g := range groups {
		var err error
		if len(g) == 1 {
			var r shared.Reply
			r, err = s.tierAt(ctx, g, shared.ModeTake, nil)
			out[i] = []shared.Reply{r}
		} else {
			out[i], err = s.eachAt(ctx, g, nil)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// eachAt runs the batch function: every check on its own, in order (checks
// of one bucket see each other's takes), each bucket read and written once,
// the checks sent as runs (shared.Runs) and each run decided at once, at the
// server's time or, for tests, at *at (Unix µs).
func (s *backend) eachAt(ctx context.Context, calls []shared.Call, at *int64) ([]shared.Reply, error) {
	if err := s.ensure(); err != nil {
		return nil, err
	}
	type bucket struct {
		rule *shared.StoreRule
		key  string
	}
	index := make(map[bucket]int32, 4)
	var names []string
	var keys [][]byte
	var v []int64
	of := make([]int32, len(calls))
	for j, c := range calls {
		bk := bucket{c.Rule, c.Key}
		i, ok := index[bk]
		if !ok {
			names = append(names, s.ns+bk.rule.Name())
			keys = append(keys, rowKey(bk.key))
			v = values(v, shared.Call{Rule: bk.rule, Key: bk.key})
			i = int32(len(names))
			index[bk] = i
		}
		of[j] = i
	}
	runs := shared.Runs(calls, of)
	ci, cc, cn := make([]int32, len(runs)), make([]int64, len(runs)), make([]int32, len(runs))
	for j, r := range runs {
		ci[j], cc[j], cn[j] = r.Bucket, r.Cost, r.N
	}
	ord := make([]int32, len(names))
	for i := range ord {
		ord[i] = int32(i + 1)
	}
	sortRows(ord, names, keys)
	var res []int64
	qm := s.queryMode()
	err := s.onConn(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, s.each, qm, names, keys, ord, v, ci, cc, cn, at).Scan(&res)
		if s.unprepared(qm, err) {
			err = c.QueryRow(ctx, s.each, execMode, names, keys, ord, v, ci, cc, cn, at).Scan(&res)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s.maybeSweep()
	return shared.RunsReply(res, calls, runs, len(names))
}

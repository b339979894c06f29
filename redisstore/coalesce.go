package redisstore

import (
	"context"
	"slices"
	"time"

	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// Each runs the batch script (every check on its own) once per group (a
// Cluster slot: a script call's keys must share one), all groups in one
// pipeline: the engine hands it one node's groups, and runs the nodes in
// parallel.
func (b *backend) Each(ctx context.Context, groups [][]shared.Call) ([][]shared.Reply, error) {
	start := time.Now()
	out, err := b.pipelined(ctx, groups, true)
	if err != nil {
		_, node := b.Place(groups[0][0])
		return nil, b.dials.classify(err, node, start)
	}
	return out, nil
}

// pipelined is Each; reload loads the script once where a master lacks it.
func (b *backend) pipelined(ctx context.Context, groups [][]shared.Call, reload bool) ([][]shared.Reply, error) {
	if len(groups) == 1 {
		r, err := b.eachAt(ctx, groups[0])
		return [][]shared.Reply{r}, err
	}
	cmds := make([]*redis.Cmd, len(groups))
	runs := make([][]shared.Run, len(groups))
	buckets := make([]int, len(groups))
	_, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, g := range groups {
			var keys []string
			var a []any
			keys, a, runs[i], buckets[i] = b.eachArgs(g)
			cmds[i] = p.EvalSha(ctx, b.scripts[opBatch].Hash(), keys, a...)
		}
		return nil
	})
	if reload && redis.HasErrorPrefix(err, "NOSCRIPT") { // a master that restarted: load it (on every master), once
		if lerr := b.scripts[opBatch].Load(ctx, b.client).Err(); lerr != nil {
			return nil, lerr
		}
		return b.pipelined(ctx, groups, false)
	}
	if err != nil {
		return nil, err
	}
	out := make([][]shared.Reply, len(groups))
	for i, c := range cmds {
		res, err := c.Int64Slice()
		if err != nil {
			return nil, err
		}
		if out[i], err = shared.RunsReply(res, groups[i], runs[i], buckets[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// eachArgs are the keys and arguments of the batch script over calls: the batch's rules
// and buckets go once each (a batch under load is mostly one rule, often one
// key), then its checks as runs (shared.Runs), three arguments a run (bucket,
// cost, how many checks in a row: a hot key's batch is one run); the script
// reads and writes each bucket once, and decides a run at once. It returns
// the runs and the number of buckets too, to read the reply with.
func (b *backend) eachArgs(calls []shared.Call) ([]string, []any, []shared.Run, int) {
	type bucket struct {
		rule *shared.StoreRule
		key  string
	}
	var rules []*shared.StoreRule
	var keys []string
	var buckets []bucket
	at := make(map[bucket]int32, 4)
	of := make([]int32, len(calls))
	for j, c := range calls {
		bk := bucket{c.Rule, c.Key}
		i, ok := at[bk]
		if !ok {
			buckets = append(buckets, bk)
			i = int32(len(buckets))
			at[bk] = i
			keys = append(keys, b.key(bk.rule, bk.key))
			if !slices.Contains(rules, bk.rule) {
				rules = append(rules, bk.rule)
			}
		}
		of[j] = i
	}
	runs := shared.Runs(calls, of)
	a := make([]any, 0, 4+8*len(rules)+2*len(buckets)+3*len(runs))
	a = append(a, len(buckets), "0", len(rules)) // ARGV[2] is the check's; unread here
	for _, r := range rules {
		a = args(a, r)
	}
	for _, bk := range buckets {
		a = append(a, slices.Index(rules, bk.rule)+1, bk.rule.Integers().Phase(bk.key))
	}
	a = append(a, len(runs))
	for _, r := range runs {
		a = append(a, r.Bucket, r.Cost, r.N)
	}
	return keys, a, runs, len(buckets)
}

// eachAt runs the batch script over one group's calls; now is for the explicit-time
// script of the tests (seconds, microseconds).
func (b *backend) eachAt(ctx context.Context, calls []shared.Call, now ...any) ([]shared.Reply, error) {
	keys, a, runs, buckets := b.eachArgs(calls)
	res, err := b.scripts[opBatch].Run(ctx, b.client, keys, append(a, now...)...).Int64Slice()
	if err != nil {
		return nil, err
	}
	return shared.RunsReply(res, calls, runs, buckets)
}

package redisstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// Each runs the script's mode 4 (every check on its own) once per group (a
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
	_, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, g := range groups {
			keys, a := b.eachArgs(g)
			cmds[i] = p.EvalSha(ctx, b.check.Hash(), keys, a...)
		}
		return nil
	})
	if reload && redis.HasErrorPrefix(err, "NOSCRIPT") { // a master that restarted: load it (on every master), once
		if lerr := b.check.Load(ctx, b.client).Err(); lerr != nil {
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
		if out[i], err = eachReply(res, groups[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// eachArgs are the keys and arguments of mode 4 over calls: the batch's rules
// and buckets go once each (a batch under load is mostly one rule, often one
// key), then its checks as runs, three arguments a run (bucket, cost, how
// many checks in a row: a hot key's batch is one run); the script reads and
// writes each bucket once, and decides a run at once.
func (b *backend) eachArgs(calls []shared.Call) ([]string, []any) {
	type bucket struct {
		rule *Rule
		key  string
	}
	var rules []*Rule
	var keys []string
	var buckets []bucket
	at := make(map[bucket]int, 4)
	checks := make([]any, 1, 1+3*len(calls))
	runs, last := 0, -1
	for j, c := range calls {
		bk := bucket{c.Rule, c.Key}
		i, ok := at[bk]
		if !ok {
			i = len(buckets)
			at[bk] = i
			buckets = append(buckets, bk)
			keys = append(keys, b.key(bk.rule, bk.key))
			if !slices.Contains(rules, bk.rule) {
				rules = append(rules, bk.rule)
			}
		}
		if j > 0 && i == last && c.Cost == calls[j-1].Cost {
			checks[len(checks)-1] = checks[len(checks)-1].(int) + 1
			continue
		}
		checks = append(checks, i+1, c.Cost, 1)
		runs, last = runs+1, i
	}
	checks[0] = runs
	a := make([]any, 0, 3+8*len(rules)+2*len(buckets)+len(checks))
	a = append(a, len(buckets), "4", len(rules))
	for _, r := range rules {
		a = args(a, r)
	}
	for _, bk := range buckets {
		a = append(a, slices.Index(rules, bk.rule)+1, bk.rule.Integers().Phase(bk.key))
	}
	return keys, append(a, checks...)
}

// eachReply reads mode 4's reply to calls: for each run (the calls grouped
// as eachArgs groups them), how far its bucket was ahead before it and how
// many of its checks were admitted, then each bucket's since. Admitted check
// j of a run took j costs; the others are denied on the bucket as the last
// admitted one left it, by the excess one more cost would have put it past
// tau, which is what mode 4 decided for each check alone.
func eachReply(res []int64, calls []shared.Call) ([]shared.Reply, error) {
	type bucket struct {
		rule *Rule
		key  string
	}
	at := make(map[bucket]int, 4)
	bucketOf := make([]int, len(calls))
	runs := 0
	for j, c := range calls {
		bk := bucket{c.Rule, c.Key}
		i, ok := at[bk]
		if !ok {
			i = len(at)
			at[bk] = i
		}
		bucketOf[j] = i
		if j == 0 || i != bucketOf[j-1] || c.Cost != calls[j-1].Cost {
			runs++
		}
	}
	if len(res) != 2*runs+len(at) {
		return nil, fmt.Errorf("the store replied %d values for %d runs of checks on %d buckets, want 2 a run and 1 a bucket", len(res), runs, len(at))
	}
	out := make([]shared.Reply, len(calls))
	for j, run := 0, -1; j < len(calls); {
		run++
		first, ahead, took := j, res[2*run], res[2*run+1]
		for j++; j < len(calls) && bucketOf[j] == bucketOf[first] && calls[j].Cost == calls[first].Cost; j++ {
		}
		if took < 0 || took > int64(j-first) {
			return nil, fmt.Errorf("the store admitted %d of a run of %d checks", took, j-first)
		}
		n := calls[first].Rule.Integers()
		inc, since := calls[first].Cost*n.Emit, res[2*runs+bucketOf[first]]
		for x := first; x < j; x++ {
			if k := int64(x - first + 1); k <= took {
				out[x] = shared.Reply{Allowed: true, Ahead: ahead + k*inc, Since: since}
			} else {
				left := ahead + took*inc
				out[x] = shared.Reply{Ahead: left, Excess: left + inc - n.Tau, Since: since}
			}
		}
	}
	return out, nil
}

// eachAt runs mode 4 over one group's calls; now is for the explicit-time
// script of the tests (seconds, microseconds).
func (b *backend) eachAt(ctx context.Context, calls []shared.Call, now ...any) ([]shared.Reply, error) {
	keys, a := b.eachArgs(calls)
	res, err := b.check.Run(ctx, b.client, keys, append(a, now...)...).Int64Slice()
	if err != nil {
		return nil, err
	}
	return eachReply(res, calls)
}

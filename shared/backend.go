package shared

import (
	"context"
	"fmt"
)

// This file is the page a store's author reads: a store is a Backend, its
// I/O, each method one round trip to its server, under an Engine (NewEngine),
// which does everything else: rules, tiers, failure settings, breakers,
// coalescing, leases, Bind and Close. A Backend is given Calls and answers
// Replies, in the rule's integers on the server's clock (Integers);
// storetest holds a store to the exact reference.

// Call is one bucket's part in a store's round trip: the rule, the request's
// key, and the cost. A Backend gets costs in [0, Burst+1]: a cost outside the
// rule's range arrives as Burst+1, which every check denies and none takes,
// and the Engine answers it with RetryAfter Never.
type Call struct {
	Rule *StoreRule
	Key  string
	Cost int64
}

// Mode is what a Backend's Tier does with its calls' buckets.
type Mode uint8

const (
	ModePeek   Mode = iota // decide, taking nothing
	ModeTake               // take every call's cost, or none
	ModeRefund             // give the one call's cost back, never beyond full
	// ModeOwe charges the one call's cost as debt, beyond what a check may
	// take: its TAT ← min(max(TAT, now) + cost·Emit, now + OweBound()),
	// never lowered (Integers.OweBound; the cost is in [1, Burst+MaxDebt]).
	// The reply's Excess is the units it could not charge; Ahead is where
	// the TAT is after it.
	ModeOwe
)

// Reply is a backend's answer for a check, in the rule's units: whether it
// was allowed, the deciding call's index (a tier's), the TAT ahead of now
// after the check, for a denial how far the request would have put it
// beyond the tolerance, and for an interval rule the ns since its grid's last
// boundary (Integers.Decision reads them).
type Reply struct {
	Allowed              bool
	Index                int
	Ahead, Excess, Since int64
}

// LeaseReply is a backend's answer to a lease call: the Reply (Excess is the
// tokens granted when allowed), the store's second the grant is held under
// and the µs into it at which it was granted.
type LeaseReply struct {
	Reply
	Second, Usec int64
}

// Backend is a store's I/O, each method one round trip to its server.
type Backend interface {
	// Name is the store's package, in errors ("redisstore").
	Name() string
	// CheckRule refuses a rule the store cannot hold (a name its keys
	// cannot carry), saying why.
	CheckRule(r *StoreRule) error
	// Tier decides calls (all of one group: see Place) at the server's time,
	// all or nothing, by tier.At's rule: when a call's bucket
	// cannot take its cost, nothing is taken from any and the reply is that
	// call's; when all can, each takes its cost (ModeTake) and the reply is
	// that of the call left with the fewest whole tokens, the first on a
	// tie. ModeRefund has one call. calls is the engine's: Tier keeps no
	// reference to it once it returns.
	Tier(ctx context.Context, calls []Call, mode Mode) (Reply, error)
	// Each decides every call on its own, taking its cost if allowed, in
	// order (calls of one bucket see each other's takes): groups (each of one
	// group, all on one node) in one round trip, a reply per call.
	Each(ctx context.Context, groups [][]Call) ([][]Reply, error)
	// Lease settles the previous grant of c's bucket (while valid, what it
	// did not spend goes back, never beyond full), then grants at least
	// c.Cost and up to want tokens, or none for want 0 (LeaseFunc).
	Lease(ctx context.Context, c Call, want int64, prev Settlement) (LeaseReply, error)
	// Place is where c's bucket lives: calls of one group may go in one
	// Tier or Each call (a Redis Cluster's hash slot), and node names the
	// server that holds the group (its breaker's). A store of one server
	// answers 0 and "".
	Place(c Call) (group uint32, node string)
	// Forget deletes c's bucket (a Reset: its next check finds it full),
	// whatever numbers it was written with.
	Forget(ctx context.Context, c Call) error
}

// Pinger is implemented by a backend that can ask a server whether it
// answers, in one round trip that changes no bucket (Redis's PING; a
// PostgreSQL store sets its table up first if it never could). While a
// server's breaker is open or its last call failed, and while a store made
// with its server down has not reached it, the Engine pings it every
// ProbeEvery, by itself: Health and the breakers recover within ProbeEvery of
// the server answering, whether or not checks come (an idle instance behind
// a readiness probe would otherwise stay out). node is Place's ("" for a
// store of one server, and for a store made while its server was down).
type Pinger interface {
	Ping(ctx context.Context, node string) error
}

// Slotted is implemented by a backend whose client holds a bounded pool of
// connections: the Engine lets at most Slots calls go to the client at once,
// and a check that cannot have one within the store's timeout is decided by
// its failure setting with ErrOverload, which is no failure of the store's.
// Without it a busy process's callers would queue inside the client, time
// out there, and open the breaker against a healthy server.
type Slotted interface {
	Slots() int
}

// OwnDeadlines is implemented by a backend whose calls end by their
// context's deadline on their own: it sets its connections' deadlines from
// ctx.Deadline() (pgstore does), as a client does when a context's Done
// closes. The Engine then gives its calls a context with the deadline and
// no timer (its Done is the caller's, which the client may still watch),
// saving a timer, and the client's watch of it, a call.
type OwnDeadlines interface {
	OwnDeadlines()
}

// The replies of both stores' server code (the Lua script, the PL/pgSQL
// functions) are arrays of integers in one form, which these read:
//
//	a tier:      {allowed (1 or 0), index (1-based), ahead, excess, since}
//	a batch:     {ahead before, admitted} per run (Runs), then since per bucket
//	a lease:     {allowed, index, ahead, excess (granted when allowed), since, second, usec}

// TierReply reads a tier's reply for n calls.
func TierReply(res []int64, n int) (Reply, error) {
	if len(res) != 5 || res[1] < 1 || res[1] > int64(n) {
		return Reply{}, fmt.Errorf("the store replied %v to a check of %d buckets, want {allowed, index, ahead, excess, since}", res, n)
	}
	return Reply{Allowed: res[0] == 1, Index: int(res[1]) - 1, Ahead: res[2], Excess: res[3], Since: res[4]}, nil
}

// A Run is checks of a batch in a row on one bucket at one cost: a batch goes
// to the server as runs (Runs), and the server decides a run at once, since
// its checks differ only in what the ones before them took.
type Run struct {
	Bucket int32 // the bucket's number in the batch, from 1
	Cost   int64
	N      int32 // how many checks in a row
}

// Runs groups a batch's calls into runs, bucket[j] being call j's bucket
// (from 1).
func Runs(calls []Call, bucket []int32) []Run {
	var runs []Run
	for j, c := range calls {
		if n := len(runs); n > 0 && runs[n-1].Bucket == bucket[j] && runs[n-1].Cost == c.Cost {
			runs[n-1].N++
			continue
		}
		runs = append(runs, Run{Bucket: bucket[j], Cost: c.Cost, N: 1})
	}
	return runs
}

// RunsReply reads the reply to a batch sent as runs over buckets buckets:
// a run, how far its bucket was ahead of now before it and how many of its
// checks were admitted, then each bucket's since. Check k of a run (from 1)
// is admitted when k ≤ admitted, its bucket then k costs further ahead;
// the others are denied on the bucket as the last admitted one left it, by
// the excess one more cost would have put it past the rule's tau: what
// deciding each check on its own, in order, gives.
func RunsReply(res []int64, calls []Call, runs []Run, buckets int) ([]Reply, error) {
	if len(res) != 2*len(runs)+buckets {
		return nil, fmt.Errorf("the store replied %d values for %d runs of checks on %d buckets, want 2 a run and 1 a bucket", len(res), len(runs), buckets)
	}
	out := make([]Reply, 0, len(calls))
	for i, r := range runs {
		ahead, took := res[2*i], res[2*i+1]
		if took < 0 || took > int64(r.N) || r.Bucket < 1 || int(r.Bucket) > buckets {
			return nil, fmt.Errorf("the store admitted %d of a run of %d checks", took, r.N)
		}
		n := calls[len(out)].Rule.Integers()
		inc, since := r.Cost*n.Emit, res[2*len(runs)+int(r.Bucket)-1]
		left := ahead + took*inc
		for k := int64(1); k <= int64(r.N); k++ {
			if k <= took {
				out = append(out, Reply{Allowed: true, Ahead: ahead + k*inc, Since: since})
			} else {
				out = append(out, Reply{Ahead: left, Excess: left + inc - n.Tau, Since: since})
			}
		}
	}
	return out, nil
}

// LeaseReplyOf reads a lease call's reply.
func LeaseReplyOf(res []int64) (LeaseReply, error) {
	if len(res) != 7 {
		return LeaseReply{}, fmt.Errorf("the store replied %v to a lease call, want 7 values", res)
	}
	return LeaseReply{
		Reply:  Reply{Allowed: res[0] == 1, Ahead: res[2], Excess: res[3], Since: res[4]},
		Second: res[5], Usec: res[6],
	}, nil
}

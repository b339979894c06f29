// Package redisstore enforces limitgen's shared rules on Redis: the same GCRA
// as the local runtime (package atomicbucket), one Lua script per check, on
// the server's clock, in integers that a Lua number holds exactly, so that a
// limit holds across every instance of a service. It is its own module:
// services that never use Redis never download its client.
//
// A generated package reaches it through package shared: give New's store
// to the generated package's WithStore, and its shared rules are checked
// here (Bind, Check), per request or, for rules with a lease in the policy,
// from leases. Used directly: NewRule, then Store.Check (never fails: the
// rule's failure setting decides when Redis cannot), Store.CheckTier (a tier,
// all or nothing, in one call where its keys share a slot), Store.NewLease (a
// batch of tokens spent in the process) and Store.Coalesce (concurrent checks
// share script calls).
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// Store checks shared rules on a Redis server.
type Store struct {
	client redis.UniversalClient
	prefix string
	check  *redis.Script
	guard  shared.Guard // the breaker, the timeout (the most a Check waits for Redis), the counts

	co *shared.Coalescer[Step] // coalescing (coalesce.go); nil when off

	closeOnce sync.Once
	gate      shared.Gate // shut by Close: no more calls

	mu     sync.Mutex
	bounds []*shared.Binding // what Bind returned: ReleaseLeases gives their leases' tokens back
}

// DefaultTimeout bounds how long Check waits for Redis when the caller's
// context allows longer: a shared limit must not hold a request up for long.
const DefaultTimeout = 100 * time.Millisecond

// SetTimeout sets how long Check waits for Redis at most (DefaultTimeout by
// default). Set it before the store is used.
func (s *Store) SetTimeout(d time.Duration) { s.guard.Timeout = d }

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "limitgen:"

// New returns a store over client (single server, Sentinel or Cluster through
// go-redis's UniversalClient), writing keys under DefaultPrefix. The client
// must be created with ContextTimeoutEnabled: true, so that a check's context
// (Check's timeout) bounds its wait for Redis; without it go-redis waits out
// its own read timeout (3 s by default) on a Redis that does not answer, and
// New refuses the client.
func New(client redis.UniversalClient) (*Store, error) {
	var enabled bool
	switch c := client.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		enabled = c.Options().ContextTimeoutEnabled
	default:
		enabled = true // another implementation: its documentation says
	}
	if !enabled {
		return nil, errors.New("redisstore: the Redis client must be created with ContextTimeoutEnabled: true, so that a check's deadline bounds its wait for Redis")
	}
	return newStore(client, false), nil
}

func newStore(client redis.UniversalClient, explicitNow bool) *Store {
	s := &Store{client: client, prefix: DefaultPrefix, check: redis.NewScript(script(explicitNow))}
	s.guard.Timeout = DefaultTimeout
	return s
}

// Key is the Redis key of rule r's bucket for key (slot.go: the key is the
// hash tag).
func (s *Store) Key(r *Rule, key string) string {
	return s.prefix + "{" + key + "}:" + r.name
}

// AllowN decides a request of cost for key under r at the server's time,
// taking the tokens if it is allowed. A cost below 0 or above the burst is
// answered without a round trip (RetryAfter is Never); a cost of 0 takes
// nothing and creates nothing. The error is Redis's (the connection, the
// context): the decision is then the zero Decision, a denial, and the caller's
// failure setting decides what to do.
func (s *Store) AllowN(ctx context.Context, r *Rule, key string, cost int64) (atomicbucket.Decision, error) {
	if s.co != nil && cost >= 0 && cost <= r.n.Limit.Burst {
		return s.co.Do(ctx, Step{r, key, cost})
	}
	return s.run(ctx, r, key, cost, true, nil)
}

// PeekN is what AllowN would decide, taking nothing.
func (s *Store) PeekN(ctx context.Context, r *Rule, key string, cost int64) (atomicbucket.Decision, error) {
	return s.run(ctx, r, key, cost, false, nil)
}

func (s *Store) run(ctx context.Context, r *Rule, key string, cost int64, take bool, now []any) (atomicbucket.Decision, error) {
	d, _, err := s.tier(ctx, []Step{{r, key, cost}}, take, now)
	return d, err
}

// Step is one rule's part in a tier request: its bucket for Key, charged Cost.
type Step struct {
	Rule *Rule
	Key  string
	Cost int64
}

// AllowTier checks a request against every step in one script call, all or
// nothing: when a step's bucket cannot take its cost, nothing is taken from
// any, and the decision is that step's (index); when all can, each takes its
// cost and the decision is that of the step left with the fewest whole tokens
// (the first on a tie), which is what rate-limit headers should show. It is
// atomicbucket.TierAt's rule in one atomic step. On a single server any steps
// can share a call; on a Cluster, only steps whose keys share a slot. Two
// steps naming the same rule and key are refused.
func (s *Store) AllowTier(ctx context.Context, steps []Step) (d atomicbucket.Decision, index int, err error) {
	if i := repeated(steps); i >= 0 {
		return atomicbucket.Decision{}, i, fmt.Errorf("redisstore: tier step %d names rule %s and its key again", i, steps[i].Rule.name)
	}
	return s.tier(ctx, steps, true, nil)
}

// repeated is the index of the first step that names a bucket an earlier
// step names, or -1 (each step would see the bucket as it was before the
// check, and the last write would win: more admitted than the bucket holds).
func repeated(steps []Step) int {
	for i := 1; i < len(steps); i++ {
		for j := range i {
			if steps[i].Rule.name == steps[j].Rule.name && steps[i].Key == steps[j].Key {
				return i
			}
		}
	}
	return -1
}

func (s *Store) tier(ctx context.Context, steps []Step, take bool, now []any) (atomicbucket.Decision, int, error) {
	if len(steps) == 0 {
		return atomicbucket.Decision{Allowed: true}, -1, nil
	}
	if _, cluster := s.client.(*redis.ClusterClient); cluster && len(steps) > 1 && take && s.spansSlots(steps) {
		return s.orderedTier(ctx, steps)
	}
	mode := "0"
	if take {
		mode = "1"
	}
	return s.call(ctx, steps, mode, now)
}

// spansSlots reports whether the steps' keys fall in more than one Cluster slot.
func (s *Store) spansSlots(steps []Step) bool {
	first := slot(s.Key(steps[0].Rule, steps[0].Key))
	for _, st := range steps[1:] {
		if slot(s.Key(st.Rule, st.Key)) != first {
			return true
		}
	}
	return false
}

// orderedTier is a tier whose keys span Cluster slots: each step is one
// script call, in order; when one denies, the steps before it are refunded,
// last first, as atomicbucket.TierAt does. Between a take and its refund the
// tokens are held, so other requests may be denied that a single script would
// have admitted (never the reverse: nothing is admitted beyond any rule's
// limit). A failed refund leaves its tokens taken: stricter, never looser.
func (s *Store) orderedTier(ctx context.Context, steps []Step) (atomicbucket.Decision, int, error) {
	var best atomicbucket.Decision
	bestIndex := -1
	for i, st := range steps {
		d, _, err := s.call(ctx, []Step{st}, "1", nil)
		if err != nil || !d.Allowed {
			for j := i - 1; j >= 0; j-- {
				s.call(ctx, []Step{steps[j]}, "2", nil) //nolint:errcheck // see above
			}
			return d, i, err
		}
		if bestIndex < 0 || d.Remaining < best.Remaining {
			best, bestIndex = d, i
		}
	}
	return best, bestIndex, nil
}

// RefundN gives cost tokens back to key's bucket under r, never beyond full.
func (s *Store) RefundN(ctx context.Context, r *Rule, key string, cost int64) error {
	if cost <= 0 {
		return nil
	}
	cost = min(cost, r.n.Limit.Burst)
	_, _, err := s.call(ctx, []Step{{r, key, cost}}, "2", nil)
	return err
}

// call runs the script over steps in one call: mode "1" takes, "0" decides
// only, "2" refunds.
func (s *Store) call(ctx context.Context, steps []Step, mode string, now []any) (atomicbucket.Decision, int, error) {
	if !s.gate.Enter() {
		return atomicbucket.Decision{}, -1, shared.ErrClosed
	}
	defer s.gate.Leave()
	keys := make([]string, len(steps))
	t := mode
	args := make([]any, 0, 2+10*len(steps)+len(now))
	args = append(args, len(steps), t)
	for i, st := range steps {
		r, cost := st.Rule, st.Cost
		if cost < 0 || cost > r.n.Limit.Burst {
			cost = r.n.Limit.Burst + 1 // denied by the script like any cost above the burst; answered Never below
		}
		keys[i] = s.Key(r, st.Key)
		args = append(r.args(args), r.keyPhase(st.Key), cost)
	}
	args = append(args, now...)
	res, err := s.check.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return atomicbucket.Decision{}, -1, err
	}
	if len(res) != 5 || res[1] < 1 || int(res[1]) > len(steps) {
		return atomicbucket.Decision{}, -1, errScript(res)
	}
	allowed, i, ahead, excess, since := res[0] == 1, int(res[1])-1, res[2], res[3], res[4]
	return steps[i].Rule.n.Decision(allowed, ahead, excess, since, steps[i].Cost), i, nil
}

// errScript reports a script reply of the wrong shape.
func errScript(res []int64) error {
	return fmt.Errorf("redisstore: the script returned %v, want {allowed, index, ahead, excess, since}", res)
}

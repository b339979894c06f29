// Package redisstore enforces limitgen's shared rules on Redis: the same GCRA
// as the local runtime (package atomicbucket), one Lua script per round trip,
// on the server's clock, in integers that a Lua number holds exactly, so that
// a limit holds across every instance of a service. It is its own module:
// services that never use Redis never download its client.
//
// The store is a shared.Backend (the script calls: this package) under a
// shared.Engine (everything else, the same for every store). A generated
// package reaches it through package shared: give New's store to the
// generated package's WithStore, and its shared rules are checked here, per
// request or, for rules with a lease in the policy, from leases. Used
// directly: NewRule, then Store.Check (never fails: the rule's failure
// setting decides when Redis cannot), Store.CheckTier (a tier, all or
// nothing, in one call where its keys share a slot) and Store.NewLease (a
// batch of tokens spent in the process).
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

// Options configure a Store. The zero Options are the defaults.
type Options struct {
	// Namespace, when set, is part of every key the store writes
	// (limitgen:{Namespace}:{key}:rule), after the policy's own namespace in
	// the rule's name: stores of two environments (or tenants) on one Redis
	// never share a bucket.
	Namespace string
	// Timeout bounds a check's wait for Redis when the caller's context
	// allows longer. Default DefaultTimeout.
	Timeout time.Duration
	// Coalesce, when above 0, has concurrent checks share script calls, at
	// most Coalesce checks a call, each decided on its own: under load a call
	// then carries many decisions. A check that finds no other waiting goes
	// alone. 0, the default: a call a check (pgstore's 0 means its default
	// batch; Store.Coalesce says what runs).
	Coalesce int
}

// DefaultTimeout bounds how long a check waits for Redis when the caller's
// context allows longer: a shared limit must not hold a request up for long.
// It is every store's default, shared.DefaultTimeout (200 ms).
const DefaultTimeout = shared.DefaultTimeout

// Store checks shared rules on Redis: a shared.Engine over the script. Its
// methods are safe for concurrent use.
type Store struct {
	*shared.Engine
	b *backend
}

// backend is the store's I/O (shared.Backend): the scripts' calls.
type backend struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless the client is a Cluster's
	prefix  string
	scripts [5]*redis.Script // by op (script.go)
	dials   *dials           // what the client's dials said, to tell a refused server from a slow one
	// The store's windows (Store.Window), closed with it, coalescing as it
	// does.
	coalesce  int
	windowsMu sync.Mutex
	windows   []*Window
	closers   []func() // the store's coalescing in-flight rules' (Store.Slots)
}

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "limitgen:"

// MaxRelativeError is the most a rule's admitted rate may fall below the
// written one when its numbers cannot be held exactly (the same bound as the
// local runtime's).
const MaxRelativeError = atomicbucket.MaxRelativeError

// NewRule computes the units of a shared rule named name
// (shared.MicroUnits, with which the generator checks a policy's shared
// rules): the least fraction of a microsecond in which one token's time is
// whole; when that would not keep every value below 2^53, the finest unit that
// does, with the token's time rounded up (never admitting more than the
// limit), if the admitted rate is then within MaxRelativeError of the written
// one. Interval rules count whole slots, so they are always exact.
func NewRule(name string, l atomicbucket.Limit) (*shared.StoreRule, error) {
	r, err := shared.NewStoreRule(name, l)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w: %w", shared.ErrInvalidRule, err)
	}
	return r, nil
}

// New returns a store over client (single server, Sentinel or Cluster through
// go-redis's UniversalClient), writing keys under DefaultPrefix and
// opts.Namespace. It loads the script (on every master of a Cluster), waiting
// at most opts.Timeout (at least a second, or ctx, if sooner). A Redis that
// does not answer then does not fail New: a service starts while its store is
// down, each shared rule's on_failure decides (counted as degraded) until
// Redis answers, and from then on the store works; Health (and a generated
// package's SharedErr) says so, naming the address, until then. The client must be
// created with ContextTimeoutEnabled: true, so that a check's context (the
// store's timeout) bounds its wait for Redis; without it go-redis waits out
// its own read timeout (3 s by default) on a Redis that does not answer, and
// New refuses the client.
func New(ctx context.Context, client redis.UniversalClient, opts Options) (*Store, error) {
	var enabled bool
	var addr string
	switch c := client.(type) {
	case *redis.Client:
		enabled, addr = c.Options().ContextTimeoutEnabled, c.Options().Addr
	case *redis.ClusterClient:
		enabled, addr = c.Options().ContextTimeoutEnabled, fmt.Sprint(c.Options().Addrs)
	case *redis.Ring:
		enabled, addr = c.Options().ContextTimeoutEnabled, fmt.Sprint(c.Options().Addrs)
	default:
		enabled = true // another implementation: its documentation says
	}
	if !enabled {
		return nil, errors.New("redisstore: the Redis client must be created with ContextTimeoutEnabled: true, so that a check's deadline bounds its wait for Redis")
	}
	if opts.Namespace != "" {
		if err := shared.CheckNamespace(opts.Namespace); err != nil {
			return nil, fmt.Errorf("redisstore: Options.Namespace: %w", err)
		}
	}
	s := newStore(client, false, opts)
	timeout := s.Timeout()
	lctx, cancel := context.WithTimeout(ctx, max(timeout, time.Second))
	defer cancel()
	var err error
	if s.b.cluster != nil {
		err = s.b.cluster.ForEachMaster(lctx, func(ctx context.Context, c *redis.Client) error {
			return s.b.load(ctx, c)
		})
		if err == nil {
			// A Cluster client asks a node for COMMAND's table before its
			// first routed command, once: ask now, while every master
			// answers, not during the first check (which a stalled master
			// then holds up past every timeout).
			err = s.b.cluster.Do(lctx, "PING").Err()
		}
	} else {
		err = s.b.load(lctx, client)
	}
	if err != nil {
		// Down at start: the store works from the moment Redis answers (a
		// check that finds the script missing loads it); until then each
		// rule's on_failure decides, and Health says why.
		s.StartFailed(fmt.Errorf("redisstore: Redis at %s did not answer at start (%w): start it, or fix the client's address", addr, err))
	}
	return s, nil
}

func newStore(client redis.UniversalClient, explicitNow bool, opts Options) *Store {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	prefix := DefaultPrefix
	if opts.Namespace != "" {
		prefix += opts.Namespace + ":"
	}
	b := &backend{client: client, prefix: prefix, dials: &dials{}, coalesce: opts.Coalesce}
	for o := range b.scripts {
		b.scripts[o] = redis.NewScript(scriptFor(op(o), explicitNow))
	}
	b.cluster, _ = client.(*redis.ClusterClient)
	client.AddHook(b.dials)
	return &Store{Engine: shared.NewEngine(b, opts.Timeout, opts.Coalesce), b: b}
}

// load loads every script on c (a server, or a Cluster's master).
func (b *backend) load(ctx context.Context, c redis.Scripter) error {
	for _, s := range b.scripts {
		if err := s.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Key is the Redis key of rule r's bucket for key (slot.go: the key is the
// hash tag).
func (s *Store) Key(r *shared.StoreRule, key string) string { return s.b.key(r, key) }

func (b *backend) key(r *shared.StoreRule, key string) string {
	return b.prefix + "{" + key + "}:" + r.Name()
}

func (b *backend) Name() string { return "redisstore" }

// Slots is how many calls go to the client at once (shared.Slotted): its
// pool's size, on every master of a Cluster; 0 (no bound) for a client of
// another kind.
func (b *backend) Slots() int {
	switch c := b.client.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		return c.Options().PoolSize * max(len(c.Options().Addrs), 1)
	}
	return 0
}

// CheckRule accepts every rule: any name can be part of a key.
func (b *backend) CheckRule(*shared.StoreRule) error { return nil }

// Place is the bucket's Cluster slot and the address of its master; 0 and
// "" on a single server.
func (b *backend) Place(c shared.Call) (uint32, string) {
	if b.cluster == nil {
		return 0, ""
	}
	k := b.key(c.Rule, c.Key)
	node := ""
	if m, err := b.cluster.MasterForKey(context.Background(), k); err == nil {
		node = m.Options().Addr
	}
	return uint32(slot(k)), node
}

// Ping asks the server named node (a Cluster master's address; "" for a
// single server, or any of a Cluster's) whether it answers: PING
// (shared.Pinger). A Cluster master no longer in the client's view counts
// as answering: its breaker has nothing left to guard.
func (b *backend) Ping(ctx context.Context, node string) error {
	if b.cluster == nil || node == "" {
		return b.client.Ping(ctx).Err()
	}
	found := false
	err := b.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if c.Options().Addr != node {
			return nil
		}
		found = true
		return c.Ping(ctx).Err()
	})
	if !found && err == nil {
		return nil
	}
	return err
}

// Forget deletes c's bucket (shared.Backend: a Reset).
func (b *backend) Forget(ctx context.Context, c shared.Call) error {
	return b.client.Del(ctx, b.key(c.Rule, c.Key)).Err()
}

// args appends rule r's eight values of a script argument list (mode, then
// greedy: emit, tau, debt, perSecond, perMicro, 0, 0; interval: tokens, tau,
// debt, period, p, b, g) and returns it; script.go reads them.
func args(dst []any, r *shared.StoreRule) []any {
	n := r.Integers()
	x := n.Args()
	if n.Interval {
		return append(dst, 2, x.Tokens, x.Tau, x.Debt, x.Period, x.P, x.B, x.G)
	}
	return append(dst, 1, x.Emit, x.Tau, x.Debt, x.PerSecond, x.PerMicro, 0, 0)
}

// modeArgs are ARGV[2] for each mode, boxed once (a string made an interface
// value on every call was an allocation a check): the check script's take (1)
// or decide only (0); the refund script does not read it.
var modeArgs = [...]any{shared.ModePeek: "0", shared.ModeTake: "1", shared.ModeRefund: "2", shared.ModeOwe: "3"}

// Tier runs the check script over calls in one call (mode 0 decide, 1 take),
// the refund script (mode 2), or the owe script (ModeOwe: one call, its
// bound after the bucket's values).
func (b *backend) Tier(ctx context.Context, calls []shared.Call, mode shared.Mode) (shared.Reply, error) {
	return b.tierAt(ctx, calls, mode)
}

// tierAt is Tier; now is for the explicit-time script of the tests (seconds,
// microseconds).
func (b *backend) tierAt(ctx context.Context, calls []shared.Call, mode shared.Mode, now ...any) (shared.Reply, error) {
	var keys []string
	var a []any
	if n := calls[0].Rule.Integers(); len(calls) == 1 && mode == shared.ModeTake && !n.Interval {
		// the script's short form for the common check (script.go), its
		// key and arguments in one allocation
		one := &struct {
			keys [1]string
			args [9]any
		}{}
		x := n.Args()
		keys, a = one.keys[:], append(one.args[:0], "g", x.Emit, x.Tau, x.Debt, x.PerSecond, x.PerMicro, calls[0].Cost)
		keys[0] = b.key(calls[0].Rule, calls[0].Key)
	} else {
		keys = make([]string, len(calls))
		a = make([]any, 0, 2+10*len(calls)+len(now))
		a = append(a, len(calls), modeArgs[mode])
		for i, c := range calls {
			keys[i] = b.key(c.Rule, c.Key)
			a = append(args(a, c.Rule), c.Rule.Integers().Phase(c.Key), c.Cost)
		}
		if mode == shared.ModeOwe {
			a = append(a, calls[0].Rule.Integers().OweBound())
		}
	}
	a = append(a, now...)
	start := time.Now()
	o := opCheck
	switch mode {
	case shared.ModeRefund:
		o = opRefund
	case shared.ModeOwe:
		o = opOwe
	}
	res, err := b.scripts[o].Run(ctx, b.client, keys, a...).Int64Slice()
	if err != nil {
		_, node := b.Place(calls[0])
		return shared.Reply{}, b.dials.classify(err, node, start)
	}
	return shared.TierReply(res, len(calls))
}

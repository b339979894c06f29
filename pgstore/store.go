package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// Options configure a Store.
type Options struct {
	// Table is the buckets' table, optionally schema-qualified
	// ("limits.api_buckets"); its check functions are the same name with
	// "_check", "_check_tier" and "_check_each". Lower-case letters, digits
	// and underscores. Default DefaultTable.
	Table string
	// Unlogged creates the table UNLOGGED: no WAL for its writes (faster),
	// but PostgreSQL empties it after a crash (not after a clean restart), so
	// every bucket is full again. For abuse limits whose loss on a crash is
	// acceptable.
	Unlogged bool
	// NoCreate has New use the table and functions as they are, created by a
	// migration of your own from Store.Schema, instead of creating them.
	NoCreate bool
	// Timeout bounds a check's wait for the database when the caller's
	// context allows longer. Default DefaultTimeout.
	Timeout time.Duration
	// SweepEvery is how often, at most, checks start a sweep of the rows of
	// full buckets (Store.Sweep) in the background. Default
	// DefaultSweepEvery; below 0, never (call Sweep yourself).
	SweepEvery time.Duration
}

// Defaults of Options.
const (
	DefaultTable      = "limitgen_buckets"
	DefaultTimeout    = 200 * time.Millisecond
	DefaultSweepEvery = 30 * time.Second
)

// Store checks shared rules on PostgreSQL.
type Store struct {
	pool    *pgxpool.Pool
	table   string
	fn      string
	class   int32                   // the advisory lock class that serialises the schema's creation
	one     string                  // the query of a check of one bucket
	tier    string                  // the query of a tier's check
	each    string                  // the query of a coalesced batch
	co      *shared.Coalescer[Step] // coalescing; nil when off
	batches atomic.Int64            // coalesced statements sent
	unlog   bool
	guard   shared.Guard
	sweep   time.Duration
	swept   atomic.Int64 // atomicbucket time of the last sweep started
	sweeps  sync.WaitGroup
	closed  atomic.Bool // Close was called: no more background sweeps start

	closeOnce sync.Once
	gate      shared.Gate // shut by Close: no more statements

	mu     sync.Mutex
	bounds []*shared.Binding // what Bind returned: ReleaseLeases gives their leases' tokens back
}

var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,40}\.)?[a-z_][a-z0-9_]{0,40}$`)

// New returns a store over pool, creating its table and functions unless
// opts.NoCreate (then it checks that they are there). Concurrent New calls
// of several instances are safe: the creation is serialised by a lock.
//
// Behind PgBouncer in transaction mode, give the pool a query exec mode that
// needs no server-side prepared statements (default_query_exec_mode=exec or
// simple_protocol in the connection string): every check is one statement in
// its own transaction and keeps no session state.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if !tableName.MatchString(opts.Table) {
		return nil, fmt.Errorf("pgstore: table name %q: want lower-case letters, digits and underscores, optionally schema-qualified", opts.Table)
	}
	// A reserved word (user, order, …) would need quoting in every statement:
	// the server's own list says which are.
	var reserved []string
	if err := pool.QueryRow(ctx, "SELECT coalesce(array_agg(word), '{}') FROM pg_get_keywords() WHERE catcode IN ('R', 'T') AND word = ANY($1)",
		strings.Split(opts.Table, ".")).Scan(&reserved); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if len(reserved) > 0 {
		return nil, fmt.Errorf("pgstore: table name %q: %q is a reserved word in PostgreSQL (every statement would need it quoted); choose another, such as limitgen_%[2]s", opts.Table, reserved[0])
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.SweepEvery == 0 {
		opts.SweepEvery = DefaultSweepEvery
	}
	h := fnv.New32a()
	h.Write([]byte(opts.Table))
	s := &Store{pool: pool, table: opts.Table, fn: opts.Table + "_check", class: int32(h.Sum32()), unlog: opts.Unlogged, sweep: opts.SweepEvery}
	s.one = "SELECT " + s.fn + "($1::text, $2::bytea, $3::int8, $4::int8, $5::int8, $6::int8, $7::int8, $8::int8, $9::int8, $10::int8, $11::int4, $12::int8, $13::int8, $14::int8, $15::int8, $16::int8)"
	s.tier = "SELECT " + s.fn + "_tier($1::text[], $2::bytea[], $3::int4[], $4::int8[], $5::int4, $6::int8)"
	s.each = "SELECT " + s.fn + "_each($1::text[], $2::bytea[], $3::int4[], $4::int8[], $5::int4[], $6::int8[], $7::int8)"
	s.guard.Timeout = opts.Timeout
	if opts.NoCreate {
		var table, fn, tier, each *string
		err := pool.QueryRow(ctx, "SELECT to_regclass($1)::text, to_regprocedure($2)::text, to_regprocedure($3)::text, to_regprocedure($4)::text",
			s.table, s.fn+"(text, bytea, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, int, bigint, bigint, bigint, bigint, bigint)",
			s.fn+"_tier(text[], bytea[], int[], bigint[], int, bigint)",
			s.fn+"_each(text[], bytea[], int[], bigint[], int[], bigint[], bigint)").Scan(&table, &fn, &tier, &each)
		if err != nil {
			return nil, fmt.Errorf("pgstore: %w", err)
		}
		if table == nil || fn == nil || tier == nil || each == nil {
			return nil, fmt.Errorf("pgstore: NoCreate, but table %s or its functions %s, %[2]s_tier and %[2]s_each are missing: run Store.Schema's SQL first", s.table, s.fn)
		}
		return s, nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, 0)", s.class); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	for _, stmt := range s.statements() {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("pgstore: creating %s: %w", s.table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	return s, nil
}

// Schema is the SQL that creates the store's table and check functions, for
// a migration of your own (then pass Options.NoCreate).
func (s *Store) Schema() string {
	return strings.Join(s.statements(), ";\n\n") + ";\n"
}

func (s *Store) statements() []string { return schema(s.table, s.fn, s.unlog) }

// Table is the store's table.
func (s *Store) Table() string { return s.table }

// ErrInvalidRule is wrapped by every error NewRule returns.
var ErrInvalidRule = errors.New("pgstore: invalid rule")

// Rule is a limit in the integers the check function computes in
// (shared.Numbers, as on Redis): the units are those shared.MicroUnits
// computes, with which the generator checks a policy's shared rules, so every
// value is a bigint far from overflow.
type Rule struct {
	name     string
	n        shared.Numbers
	fallback *shared.Fallback
	lease    int64
}

var ruleName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,100}$`)

// NewRule computes the numbers of a shared rule named name (letters, digits,
// and _ . : -), or says why the store cannot hold it.
func NewRule(name string, l atomicbucket.Limit) (*Rule, error) {
	if !ruleName.MatchString(name) {
		return nil, fmt.Errorf("%w: name %q: want 1 to 100 letters, digits, _ . : or -", ErrInvalidRule, name)
	}
	n, err := shared.NewNumbers(l)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRule, name, err)
	}
	return &Rule{name: name, n: n, fallback: &shared.Fallback{}}, nil
}

// WithFailure returns a copy of r that decides by f when the database
// cannot (the default is FailDeny).
func (r *Rule) WithFailure(f shared.Failure) (*Rule, error) {
	fb, err := shared.NewFallback(r.n.Limit, f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRule, r.name, err)
	}
	c := *r
	c.fallback = fb
	return &c, nil
}

// Name is the rule's name, the r column of its rows.
func (r *Rule) Name() string { return r.name }

// Limit is the limit the rule was built from.
func (r *Rule) Limit() atomicbucket.Limit { return r.n.Limit }

// Exact reports whether the units hold the written rate exactly: then every
// decision equals the exact reference's at the server's microsecond times.
func (r *Rule) Exact() bool { return r.n.Exact }

// values appends the rule's 8 values of the function's v for key and cost.
func (r *Rule) values(dst []int64, key string, cost int64) []int64 {
	if cost < 0 || cost > r.n.Limit.Burst {
		cost = r.n.Limit.Burst + 1 // denied like any cost above the burst; answered Never
	}
	n := &r.n
	if n.Interval {
		return append(dst, 2, 1, n.Tau, n.Debt, n.Period, n.Tokens, n.Phase(key), cost)
	}
	return append(dst, 1, n.Emit, n.Tau, n.Debt, n.PerSecond, n.PerMicro, 0, cost)
}

// maxKeyBytes: a longer key is stored as its SHA-256 (a btree entry must fit
// a third of a page, and a hostile key must not make checks fail).
const maxKeyBytes = 128

// rowKey is key as the k column stores it.
func rowKey(key string) []byte {
	if len(key) > maxKeyBytes {
		sum := sha256.Sum256([]byte(key))
		return append([]byte("sha256:"), sum[:]...)
	}
	return []byte(key)
}

// Step is one rule's part in a tier request: its bucket for Key, charged Cost.
type Step struct {
	Rule *Rule
	Key  string
	Cost int64
}

// AllowN decides a request of cost for key under r at the server's time,
// taking the tokens if it is allowed, in one statement. A cost below 0 or
// above the burst is denied (RetryAfter Never); a cost of 0 takes nothing and
// creates nothing. The error is the database's (the connection, the
// context): the decision is then the zero Decision, a denial.
func (s *Store) AllowN(ctx context.Context, r *Rule, key string, cost int64) (atomicbucket.Decision, error) {
	if s.co != nil && cost >= 0 && cost <= r.n.Limit.Burst {
		return s.co.Do(ctx, Step{r, key, cost})
	}
	d, _, err := s.call(ctx, []Step{{r, key, cost}}, 1, nil)
	return d, err
}

// PeekN is what AllowN would decide, taking nothing.
func (s *Store) PeekN(ctx context.Context, r *Rule, key string, cost int64) (atomicbucket.Decision, error) {
	d, _, err := s.call(ctx, []Step{{r, key, cost}}, 0, nil)
	return d, err
}

// AllowTier checks a request against every step in one statement, all or
// nothing: when a step's bucket cannot take its cost, nothing is taken from
// any, and the decision is that step's (index); when all can, each takes its
// cost and the decision is that of the step left with the fewest whole tokens
// (the first on a tie). It is atomicbucket.TierAt's rule in one transaction.
// Two steps naming the same rule and key are refused.
func (s *Store) AllowTier(ctx context.Context, steps []Step) (atomicbucket.Decision, int, error) {
	if len(steps) == 0 {
		return atomicbucket.Decision{Allowed: true}, -1, nil
	}
	if i := repeated(steps); i >= 0 {
		return atomicbucket.Decision{}, i, fmt.Errorf("pgstore: tier step %d names rule %s and its key again", i, steps[i].Rule.name)
	}
	return s.call(ctx, steps, 1, nil)
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

// RefundN gives cost tokens back to key's bucket under r, never beyond full.
func (s *Store) RefundN(ctx context.Context, r *Rule, key string, cost int64) error {
	if cost <= 0 {
		return nil
	}
	_, _, err := s.call(ctx, []Step{{r, key, min(cost, r.n.Limit.Burst)}}, 2, nil)
	return err
}

// call runs a check function over steps in mode (0 decide, 1 take, 2
// refund), at the server's time or, for tests, at *at (Unix µs).
func (s *Store) call(ctx context.Context, steps []Step, mode int32, at *int64) (atomicbucket.Decision, int, error) {
	if !s.gate.Enter() {
		return atomicbucket.Decision{}, -1, shared.ErrClosed
	}
	defer s.gate.Leave()
	var res []int64
	var err error
	if len(steps) == 1 {
		res, err = s.exec(ctx, steps[0], mode, at, 0, shared.Settlement{})
	} else {
		res, err = s.execTier(ctx, steps, mode, at)
	}
	if err != nil {
		return atomicbucket.Decision{}, -1, err
	}
	if len(res) != 5 || res[1] < 1 || int(res[1]) > len(steps) {
		return atomicbucket.Decision{}, -1, errReply(res)
	}
	allowed, i, ahead, excess, since := res[0] == 1, int(res[1])-1, res[2], res[3], res[4]
	return steps[i].Rule.n.Decision(allowed, ahead, excess, since, steps[i].Cost), i, nil
}

// exec runs the one-bucket function on st in mode, with a lease's want and
// previous grant (mode 3).
func (s *Store) exec(ctx context.Context, st Step, mode int32, at *int64, want int64, prev shared.Settlement) ([]int64, error) {
	var v [8]int64
	st.Rule.values(v[:0], st.Key, st.Cost)
	var res []int64
	err := s.pool.QueryRow(ctx, s.one, st.Rule.name, rowKey(st.Key),
		v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], mode, at, want, prev.Second, prev.Size, prev.Unspent).Scan(&res)
	if err != nil {
		return nil, err
	}
	s.maybeSweep()
	return res, nil
}

// execTier runs the tier function over steps in mode.
func (s *Store) execTier(ctx context.Context, steps []Step, mode int32, at *int64) ([]int64, error) {
	names := make([]string, len(steps))
	keys := make([][]byte, len(steps))
	ord := make([]int32, len(steps))
	v := make([]int64, 0, 8*len(steps))
	for i, st := range steps {
		names[i] = st.Rule.name
		keys[i] = rowKey(st.Key)
		ord[i] = int32(i + 1)
		v = st.Rule.values(v, st.Key, st.Cost)
	}
	sortRows(ord, names, keys)
	var res []int64
	if err := s.pool.QueryRow(ctx, s.tier, names, keys, ord, v, mode, at).Scan(&res); err != nil {
		return nil, err
	}
	s.maybeSweep()
	return res, nil
}

// sortRows sorts ord (1-based indexes of names and keys) in the rows' order,
// (r, k): every tier and batch locks its rows in it, so none waits for
// another that waits for it.
func sortRows(ord []int32, names []string, keys [][]byte) {
	slices.SortFunc(ord, func(a, b int32) int {
		return cmp.Or(strings.Compare(names[a-1], names[b-1]), bytes.Compare(keys[a-1], keys[b-1]))
	})
}

// errReply reports a function reply of the wrong shape.
func errReply(res []int64) error {
	return fmt.Errorf("pgstore: the check function returned %v, want {allowed, index, ahead, excess, since}", res)
}

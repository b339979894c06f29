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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// Options configure a Store.
type Options struct {
	// Namespace, when set, starts the rule name of every row the store
	// writes ({Namespace}/{rule}), before the policy's own namespace: stores
	// of two environments (or tenants) in one table never share a bucket.
	Namespace string
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
	// context allows longer. Default DefaultTimeout. A check's statement
	// ends by it through its connection's deadline (no timer, and nothing
	// for pgx to watch); its wait for a connection has a timer.
	Timeout time.Duration
	// Coalesce has concurrent checks share statements, at most Coalesce
	// checks a statement, each decided on its own: a hot key's checks then
	// share one transaction and one commit instead of queueing for the row's
	// lock one commit at a time (with fsync on, a hot key's statements one at
	// a time decided about 540 checks a second here, and 64 callers then
	// waited past 200 ms; coalesced, 9,500 and none). A check that finds no
	// other waiting goes alone, as without coalescing. Default (and 0)
	// DefaultCoalesce; below 0, a statement a check. Before coalescing was
	// the default, 0 meant a statement a check: set -1 for that now
	// (Store.Coalesce says what runs; redisstore's 0 is still a call a check).
	Coalesce int
	// SweepEvery is how often, at most, checks start a sweep of the rows of
	// full buckets (Store.Sweep) in the background. Default
	// DefaultSweepEvery; below 0, never (call Sweep yourself).
	SweepEvery time.Duration
	// Concurrency is the most statements the store has in flight at once
	// (at most the pool's MaxConns); further checks wait their turn in this
	// process, within Timeout. Default DefaultConcurrency: more connections
	// only lengthen the queue on a hot row's lock inside the database, where
	// a check's wait then looks like a slow server.
	Concurrency int
}

// Defaults of Options.
const (
	DefaultTable      = "limitgen_buckets"
	DefaultTimeout    = shared.DefaultTimeout // every store's default, 200 ms
	DefaultSweepEvery = 30 * time.Second
	// DefaultCoalesce is the most checks a statement carries unless Options
	// say.
	DefaultCoalesce = 64
	// DefaultConcurrency bounds the statements in flight unless Options say:
	// 16, which on a 2-core machine decided a hot key faster than 64 with no
	// timeout, where 64 backends queued on its row's lock passed 200 ms.
	DefaultConcurrency = 16
)

// Store checks shared rules on PostgreSQL: a shared.Engine over the check
// functions. Its methods are safe for concurrent use.
type Store struct {
	*shared.Engine
	b *backend
}

// backend is the store's I/O (shared.Backend): the check functions' calls,
// and the background sweeps.
type backend struct {
	e     *shared.Engine
	pool  *pgxpool.Pool
	ns    string // Options.Namespace and "/", or "": before every row's rule name
	table string
	fn    string
	class int32  // the advisory lock class that serialises the schema's creation
	one   string // the query of a check of one bucket
	tier  string // the query of a tier's check
	each  string // the query of a coalesced batch
	// The store's coalescing in-flight rules' closers (Store.Slots), run by
	// Close.
	closersMu sync.Mutex
	closers   []func()
	unlog     bool
	sweep     time.Duration
	slots     int // statements in flight at once
	// mode is the pool's query mode, until a pooler in transaction mode
	// (PgBouncer) shows it keeps no prepared statements: then pooled is set
	// and every statement goes unprepared (execMode).
	mode   pgx.QueryExecMode
	pooled atomic.Bool
	swept  atomic.Int64 // atomicbucket time of the last sweep started
	sweeps sync.WaitGroup
	closed atomic.Bool // Close was called: no more background sweeps start

	noCreate bool
	ready    atomic.Bool  // the table and functions are there (created, or checked with NoCreate)
	setting  atomic.Bool  // a background setup is running
	tried    atomic.Int64 // atomicbucket time of the last background setup started
	// setupErr is why the table could not be set up, the last time it was
	// tried (a refused connection: the store's calls are then classed
	// unavailable).
	setupErr atomic.Pointer[error]
}

// checkTable refuses a table name the store cannot use, and a namespace
// shared.CheckNamespace refuses (opts names the options type, for the
// message).
func checkTable(table, namespace, opts string) error {
	if !tableName.MatchString(table) {
		return fmt.Errorf("pgstore: table name %q: want lower-case letters, digits and underscores, optionally schema-qualified", table)
	}
	if namespace != "" {
		if err := shared.CheckNamespace(namespace); err != nil {
			return fmt.Errorf("pgstore: %s.Namespace: %w", opts, err)
		}
	}
	return nil
}

var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,40}\.)?[a-z_][a-z0-9_]{0,40}$`)

// New returns a store over pool, creating its table and functions unless
// opts.NoCreate (then it checks that they are there). Concurrent New calls
// of several instances are safe: the creation is serialised by a lock. It
// fails when the database refuses (a reserved table name, NoCreate with the
// table missing). A database that does not answer does not fail New: a
// service starts while PostgreSQL is down, each shared rule's on_failure
// decides (counted as degraded), and once the database answers the table is
// set up in the background and the store decides; Health (and a generated
// package's SharedErr) says so until then.
//
// Behind PgBouncer in transaction mode, give the pool a query exec mode that
// needs no server-side prepared statements (default_query_exec_mode=exec or
// simple_protocol in the connection string): every check is one statement in
// its own transaction and keeps no session state.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if err := checkTable(opts.Table, opts.Namespace, "Options"); err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.SweepEvery == 0 {
		opts.SweepEvery = DefaultSweepEvery
	}
	h := fnv.New32a()
	h.Write([]byte(opts.Table))
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	switch {
	case opts.Coalesce == 0:
		opts.Coalesce = DefaultCoalesce
	case opts.Coalesce < 0:
		opts.Coalesce = 0
	}
	b := &backend{pool: pool, mode: pool.Config().ConnConfig.DefaultQueryExecMode, table: opts.Table, fn: opts.Table + "_check", class: int32(h.Sum32()), unlog: opts.Unlogged, sweep: opts.SweepEvery,
		slots: min(opts.Concurrency, int(pool.Config().MaxConns))}

	if opts.Namespace != "" {
		b.ns = opts.Namespace + "/"
	}
	b.e = shared.NewEngine(b, opts.Timeout, opts.Coalesce)
	s := &Store{Engine: b.e, b: b}
	b.noCreate = opts.NoCreate
	b.one = "SELECT " + b.fn + "($1::text, $2::bytea, $3::int8, $4::int8, $5::int8, $6::int8, $7::int8, $8::int8, $9::int8, $10::int8, $11::int4, $12::int8, $13::int8, $14::int8, $15::int8, $16::int8)"
	b.tier = "SELECT " + b.fn + "_tier($1::text[], $2::bytea[], $3::int4[], $4::int8[], $5::int4, $6::int8)"
	b.each = "SELECT " + b.fn + "_each($1::text[], $2::bytea[], $3::int4[], $4::int8[], $5::int4[], $6::int8[], $7::int4[], $8::int8)"
	sctx, cancel := context.WithTimeout(ctx, max(opts.Timeout, setupTimeout))
	err := b.setup(sctx)
	cancel()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		b.ready.Store(true)
	case errors.Is(err, errRefused) || errors.As(err, &pgErr):
		return nil, err // the database answered: no
	default:
		// Down at start: the store works once the database answers (a
		// check then sets the table up first, in the background); until
		// then each rule's on_failure decides, and Health says why.
		s.b.setupErr.Store(&err)
		s.StartFailed(fmt.Errorf("pgstore: PostgreSQL did not answer at start (%w): start it, or fix the pool's address", err))
	}
	return s, nil
}

// setupTimeout bounds New's own setup, and each background one.
const setupTimeout = 10 * time.Second

// errRefused wraps the errors of a setup the database answered with a no (a
// reserved table name, NoCreate with the table or its functions missing).
var errRefused = errors.New("refused")

// setup checks the table's name against the server's reserved words, then
// creates the table and functions, or (NoCreate) checks that they are there.
func (s *backend) setup(ctx context.Context) error {
	// A reserved word (user, order, …) would need quoting in every statement:
	// the server's own list says which are.
	var reserved []string
	if err := s.pool.QueryRow(ctx, "SELECT coalesce(array_agg(word), '{}') FROM pg_get_keywords() WHERE catcode IN ('R', 'T') AND word = ANY($1)",
		strings.Split(s.table, ".")).Scan(&reserved); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	if len(reserved) > 0 {
		return fmt.Errorf("pgstore: %w: table name %q: %q is a reserved word in PostgreSQL (every statement would need it quoted); choose another, such as limitgen_%[3]s", errRefused, s.table, reserved[0])
	}
	return s.create(ctx, s.noCreate)
}

// ensure is nil once the table and functions are there. Before (the store
// was made while the database was down), it starts a setup in the background,
// at most one at a time and one a second, with a timeout of its own (a
// check's is too short for creating functions under the creation lock), and
// fails the call: the rule's failure setting decides it, as for any call the
// store could not answer.
func (s *backend) ensure() error {
	if s.ready.Load() {
		return nil
	}
	now := int64(atomicbucket.Now())
	if last := s.tried.Load(); !s.closed.Load() && now-last >= int64(time.Second) && s.tried.CompareAndSwap(last, now) && s.setting.CompareAndSwap(false, true) {
		s.sweeps.Add(1)
		go func() {
			defer s.sweeps.Done()
			defer s.setting.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
			defer cancel()
			if err := s.setup(ctx); err != nil {
				s.setupErr.Store(&err)
			} else {
				s.ready.Store(true)
			}
		}()
	}
	if err := s.setupErr.Load(); err != nil {
		return fmt.Errorf("%w (the last attempt: %w)", errNotSetUp, *err)
	}
	return errNotSetUp
}

// Ping asks the database whether it answers (shared.Pinger), setting its
// table up first when the store was made while the database was down: so a
// store made then decides as soon as a ping after the database came up sets
// it up, not only when a check's background setup (at most one a second)
// does.
func (s *backend) Ping(ctx context.Context, _ string) error {
	if !s.ready.Load() {
		sctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if s.setting.CompareAndSwap(false, true) {
			err := s.setup(sctx)
			s.setting.Store(false)
			if err != nil {
				s.setupErr.Store(&err)
				return err
			}
			s.ready.Store(true)
		} else {
			return errNotSetUp // a check's background setup is under way
		}
	}
	_, err := s.pool.Exec(ctx, "SELECT 1")
	return err
}

// errNotSetUp fails a call made before the store's table is set up.
var errNotSetUp = errors.New("pgstore: the table is not set up yet: PostgreSQL did not answer when the store was made, and has not since")

// create creates the table and functions, or (noCreate) checks that they
// are there.
func (s *backend) create(ctx context.Context, noCreate bool) error {
	pool := s.pool
	if noCreate {
		var table, fn, tier, each *string
		var numbers bool
		err := pool.QueryRow(ctx, "SELECT to_regclass($1)::text, to_regprocedure($2)::text, to_regprocedure($3)::text, to_regprocedure($4)::text,"+
			" EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'n' AND NOT attisdropped)",
			s.table, s.fn+"(text, bytea, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, int, bigint, bigint, bigint, bigint, bigint)",
			s.fn+"_tier(text[], bytea[], int[], bigint[], int, bigint)",
			s.fn+"_each(text[], bytea[], int[], bigint[], int[], bigint[], int[], bigint)").Scan(&table, &fn, &tier, &each, &numbers)
		if err != nil {
			return fmt.Errorf("pgstore: %w", err)
		}
		if table == nil || fn == nil || tier == nil || each == nil {
			return fmt.Errorf("pgstore: %w: NoCreate, but table %s or its functions %s, %[3]s_tier and %[3]s_each are missing: run Store.Schema's SQL first", errRefused, s.table, s.fn)
		}
		if !numbers {
			return fmt.Errorf("pgstore: %w: NoCreate, but table %s has no column n (the numbers a bucket was written with, added by this version): run Store.Schema's SQL, which adds it and replaces the functions", errRefused, s.table)
		}
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, 0)", s.class); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	for _, stmt := range s.statements() {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("pgstore: creating %s: %w", s.table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	return nil
}

// Schema is the SQL that creates the store's table and check functions, for
// a migration of your own (then pass Options.NoCreate).
func (s *Store) Schema() string {
	return strings.Join(s.b.statements(), ";\n\n") + ";\n"
}

func (s *backend) statements() []string { return schema(s.table, s.fn, s.unlog) }

// Table is the store's table.
func (s *Store) Table() string { return s.b.table }

var ruleName = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,200}$`)

// NewRule computes the numbers of a shared rule named name (letters, digits,
// and _ . : / -), or says why the store cannot hold it.
func NewRule(name string, l atomicbucket.Limit) (*shared.StoreRule, error) {
	r, err := shared.NewStoreRule(name, l)
	if err == nil {
		err = checkName(name)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w: %w", shared.ErrInvalidRule, err)
	}
	return r, nil
}

func checkName(name string) error {
	if !ruleName.MatchString(name) {
		return fmt.Errorf("name %q: want 1 to 200 letters, digits, _ . : / or -", name)
	}
	return nil
}

func (s *backend) Name() string { return "pgstore" }

// Slots is how many statements go to the pool at once (shared.Slotted):
// Options.Concurrency, at most the pool's MaxConns, so that a check waits for
// its turn in the engine, where the wait is no failure of the database's.
func (s *backend) Slots() int { return s.slots }

// CheckRule refuses a name the r column does not take.
func (s *backend) CheckRule(r *shared.StoreRule) error { return checkName(r.Name()) }

// Place: every bucket is in the one database.
func (s *backend) Place(shared.Call) (uint32, string) { return 0, "" }

// Forget deletes c's bucket's row (shared.Backend: a Reset).
func (s *backend) Forget(ctx context.Context, c shared.Call) error {
	if err := s.ensure(); err != nil {
		return err
	}
	q, qm := "DELETE FROM "+s.table+" WHERE r = $1 AND k = $2", s.queryMode()
	_, err := s.pool.Exec(ctx, q, qm, s.ns+c.Rule.Name(), rowKey(c.Key))
	if s.unprepared(qm, err) {
		_, err = s.pool.Exec(ctx, q, execMode, s.ns+c.Rule.Name(), rowKey(c.Key))
	}
	return err
}

// values appends the 8 values of the function's v for c.
func values(dst []int64, c shared.Call) []int64 {
	n := c.Rule.Integers()
	if n.Interval {
		return append(dst, 2, 1, n.Tau, n.Debt, n.Period, n.Tokens, n.Phase(c.Key), c.Cost)
	}
	return append(dst, 1, n.Emit, n.Tau, n.Debt, n.PerSecond, n.PerMicro, 0, c.Cost)
}

// boxedValues are values(nil, c) as interface values for a statement's
// arguments, the rule's integers boxed once, with its numbers (shared.Args):
// boxed at every check, they were an allocation each.
func boxedValues(c shared.Call) [8]any {
	n := c.Rule.Integers()
	x := n.Args()
	if n.Interval {
		return [8]any{int64(2), int64(1), x.Tau, x.Debt, x.Period, x.Tokens, n.Phase(c.Key), c.Cost}
	}
	return [8]any{int64(1), x.Emit, x.Tau, x.Debt, x.PerSecond, x.PerMicro, int64(0), c.Cost}
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

// execMode is how the store's statements go once a pooler has shown it
// keeps no prepared statements: the extended protocol with an unnamed
// statement, one round trip, nothing kept on the connection. Until then they
// go as the pool says; pgx's default caches prepared statements per
// connection, parsed and planned by the server once (a single caller's
// check was about 1.6× as fast as unprepared in one run here), but a pooler in transaction mode
// hands a connection's prepared statements to other clients ("prepared
// statement … already exists", or "… does not exist").
const execMode = pgx.QueryExecModeExec

// queryMode is the mode of the store's next statement.
func (s *backend) queryMode() pgx.QueryExecMode {
	if s.pooled.Load() {
		return execMode
	}
	return s.mode
}

// unprepared reports whether err, a statement's in mode, is a pooler's
// mixing of prepared statements between connections, which fails before the
// statement runs: then the store sends every statement unprepared from now
// on, and the caller sends this one again.
func (s *backend) unprepared(mode pgx.QueryExecMode, err error) bool {
	if err == nil || mode == execMode {
		return false
	}
	return s.mixedUp(err)
}

// mixedUp is unprepared's look at an error (apart, so that a statement
// without one allocates nothing for it).
func (s *backend) mixedUp(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42P05", "26000": // duplicate_prepared_statement, invalid_sql_statement_name
		s.pooled.Store(true)
		return true
	}
	return false
}

// Tier runs a check function over calls in mode: the one-bucket function
// for one call, the tier function for more.
func (s *backend) Tier(ctx context.Context, calls []shared.Call, mode shared.Mode) (shared.Reply, error) {
	return s.tierAt(ctx, calls, mode, nil)
}

// tierAt is Tier at the server's time or, for tests, at *at (Unix µs).
func (s *backend) tierAt(ctx context.Context, calls []shared.Call, mode shared.Mode, at *int64) (shared.Reply, error) {
	var res []int64
	var err error
	switch {
	case mode == shared.ModeOwe:
		res, err = s.exec(ctx, calls[0], 4, at, calls[0].Rule.Integers().OweBound(), shared.Settlement{}) // the function's mode 4 (3 is a lease)
		if err == nil && (len(res) != 6 || res[5] != 4) {
			return shared.Reply{}, fmt.Errorf("pgstore: the function %s answered %v to a settlement: it is an earlier version's, which cannot owe a debt; run Store.Schema's SQL (or make the store without NoCreate) to replace it", s.fn, res)
		}
		if err == nil {
			res = res[:5]
		}
	case len(calls) == 1:
		res, err = s.exec(ctx, calls[0], int32(mode), at, 0, shared.Settlement{})
	default:
		res, err = s.execTier(ctx, calls, int32(mode), at)
	}
	if err != nil {
		return shared.Reply{}, err
	}
	return shared.TierReply(res, len(calls))
}

// OwnDeadlines: the engine's calls end by their context's deadline through
// their connection's (onConn).
func (s *backend) OwnDeadlines() {}

// onConn runs fn, one call of the engine's (a Backend method's), on a
// connection of the pool, ending by ctx's deadline without a timer of its
// own: the connection's deadline is set to it, as pgx's own context watcher
// sets it when a context ends (the statement fails with a timeout, and pgx
// closes the connection). The wait for the connection has a timer: the pool
// may have to make one, or wait for a closed one's slot
// (TestStoppedServerBoundsEveryCheck: 15 s without it). A connection had
// after the deadline goes back unused.
func (s *backend) onConn(ctx context.Context, fn func(c *pgx.Conn) error) error {
	at, ok := ctx.Deadline()
	if !ok { // not the engine's: ctx bounds it
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		return fn(c.Conn())
	}
	actx, cancel := context.WithDeadline(ctx, at)
	c, err := s.pool.Acquire(actx)
	cancel()
	if err != nil {
		return err
	}
	defer c.Release()
	nc := c.Conn().PgConn().Conn()
	if !time.Now().Before(at) {
		return fmt.Errorf("pgstore: a connection only at the call's deadline: %w", context.DeadlineExceeded)
	}
	if err := nc.SetDeadline(at); err != nil {
		return err
	}
	defer func() { // before Release: a pooled connection keeps no deadline of a call's
		if !c.Conn().IsClosed() {
			_ = nc.SetDeadline(time.Time{}) // a closed connection's is its own
		}
	}()
	return fn(c.Conn())
}

// exec runs the one-bucket function on c in mode (0 decide, 1 take, 2
// refund, 3 lease), with a lease's want and previous grant.
func (s *backend) exec(ctx context.Context, c shared.Call, mode int32, at *int64, want int64, prev shared.Settlement) ([]int64, error) {
	if err := s.ensure(); err != nil {
		return nil, err
	}
	v := boxedValues(c)
	var res []int64
	name, key := s.ns+c.Rule.Name(), rowKey(c.Key)
	qm := s.queryMode()
	err := s.onConn(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, s.one, qm, name, key,
			v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], mode, at, want, prev.Second, prev.Size, prev.Unspent).Scan(&res)
		if s.unprepared(qm, err) {
			err = c.QueryRow(ctx, s.one, execMode, name, key,
				v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], mode, at, want, prev.Second, prev.Size, prev.Unspent).Scan(&res)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s.maybeSweep()
	return res, nil
}

// execTier runs the tier function over calls in mode.
func (s *backend) execTier(ctx context.Context, calls []shared.Call, mode int32, at *int64) ([]int64, error) {
	if err := s.ensure(); err != nil {
		return nil, err
	}
	names := make([]string, len(calls))
	keys := make([][]byte, len(calls))
	ord := make([]int32, len(calls))
	v := make([]int64, 0, 8*len(calls))
	for i, c := range calls {
		names[i] = s.ns + c.Rule.Name()
		keys[i] = rowKey(c.Key)
		ord[i] = int32(i + 1)
		v = values(v, c)
	}
	sortRows(ord, names, keys)
	var res []int64
	qm := s.queryMode()
	err := s.onConn(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, s.tier, qm, names, keys, ord, v, mode, at).Scan(&res)
		if s.unprepared(qm, err) {
			err = c.QueryRow(ctx, s.tier, execMode, names, keys, ord, v, mode, at).Scan(&res)
		}
		return err
	})
	if err != nil {
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

// Lease runs the one-bucket function's lease mode (shared.Backend): settle
// the previous grant, then grant at least c.Cost and up to want tokens (none
// for want 0). While a grant is valid the bucket's row counts its tokens as
// held (the grants of the server's current and previous second), so all
// instances together never admit more than the shared bucket allows.
func (s *backend) Lease(ctx context.Context, c shared.Call, want int64, prev shared.Settlement) (shared.LeaseReply, error) {
	return s.leaseAt(ctx, c, want, prev, nil)
}

// leaseAt is Lease at the server's time or, for tests, at *at (Unix µs).
func (s *backend) leaseAt(ctx context.Context, c shared.Call, want int64, prev shared.Settlement, at *int64) (shared.LeaseReply, error) {
	res, err := s.exec(ctx, c, 3, at, want, prev)
	if err != nil {
		return shared.LeaseReply{}, err
	}
	return shared.LeaseReplyOf(res)
}

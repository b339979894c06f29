package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/shared"
)

// slotsSchema is the table of in-flight rules' slots and its two functions
// ({t}, {afn}, {rfn}: the table, its name with "_acquire" and "_release"). A
// row (r, k) is an in-flight rule's key: tok and e its held slots, each an
// acquisition's token and its expiry (Unix µs on the server's clock), and
// last_e the latest expiry. A row with no slot held is no row.
//
// {afn}(rr, kk, n, hold, token, at_us) locks the key's row (made first,
// when there is none, or anew when another call's was deleted before this
// one could lock it: two first calls of a key then queue on it), drops
// the slots whose expiry has come (held past their hold, never released:
// counted), and takes a slot for token, held until now + hold, when fewer
// than n are left. It returns {1 acquired or 0 denied, the slots held
// before it, the first and the last held slot's expiry − now (µs, 0: none
// held; a denial's first, when more than n are held after n was cut, the
// expiry that leaves fewer than n), the slots it found expired}. {rfn}(rr, kk, token, at_us) removes
// token's slot and returns 1 when it was held until now, 2 when its expiry
// had come, 0 when there is none. {bfn}(rr, kks, ops, toks, n, hold, at_us)
// runs a coalesced batch of both (ops 0 an acquisition, 1 a release), five
// numbers a call (a release's answer, then zeros). at_us NULL is the server's clock
// (clock_timestamp()), else the call's time, for tests. Slots.Sweep deletes
// the rows whose every slot expired 10 s ago or more.
const slotsSchema = `CREATE TABLE IF NOT EXISTS {t} (
  r text NOT NULL,
  k bytea NOT NULL,
  tok int8[] NOT NULL,
  e int8[] NOT NULL,
  last_e int8 NOT NULL,
  PRIMARY KEY (r, k)
);
CREATE OR REPLACE FUNCTION {afn}(rr text, kk bytea, n int8, hold int8, token int8, at_us int8)
RETURNS int8[] LANGUAGE plpgsql AS $$
DECLARE
  now_us int8 := coalesce(at_us, floor(extract(epoch FROM clock_timestamp()) * 1000000)::int8);
  ts int8[];
  es int8[];
  kt int8[] := '{}';
  ke int8[] := '{}';
  held int8;
  ok int8 := 0;
  first_e int8 := 0;
  last int8 := 0;
BEGIN
  -- The key's row, locked: made first when there is none. A row another
  -- call made can be gone again (its last slot released) before this one
  -- locks it: then make it anew.
  LOOP
    SELECT t.tok, t.e INTO ts, es FROM {t} t WHERE t.r = rr AND t.k = kk FOR UPDATE;
    EXIT WHEN FOUND;
    INSERT INTO {t} (r, k, tok, e, last_e) VALUES (rr, kk, '{}', '{}', 0) ON CONFLICT DO NOTHING;
  END LOOP;
  FOR i IN 1..coalesce(array_length(ts, 1), 0) LOOP
    IF es[i] > now_us THEN
      kt := kt || ts[i];
      ke := ke || es[i];
    END IF;
  END LOOP;
  held := coalesce(array_length(kt, 1), 0);
  IF held < n THEN
    kt := kt || token;
    ke := ke || (now_us + hold);
    ok := 1;
  END IF;
  IF held + ok > 0 THEN
    SELECT min(x), max(x) INTO first_e, last FROM unnest(ke) x;
    IF ok = 0 AND held > n THEN -- more held than a cut of the numbers left: under n at this expiry
      SELECT x INTO first_e FROM unnest(ke) x ORDER BY x OFFSET held - n LIMIT 1;
    END IF;
    first_e := first_e - now_us;
    last := last - now_us;
  END IF;
  IF held + ok = 0 THEN
    DELETE FROM {t} WHERE r = rr AND k = kk;
  ELSIF ok = 1 OR held < coalesce(array_length(ts, 1), 0) THEN
    UPDATE {t} SET tok = kt, e = ke, last_e = last + now_us WHERE r = rr AND k = kk;
  END IF;
  RETURN ARRAY[ok, held, first_e, last, coalesce(array_length(ts, 1), 0) - held];
END
$$;
CREATE OR REPLACE FUNCTION {rfn}(rr text, kk bytea, token int8, at_us int8)
RETURNS int8 LANGUAGE plpgsql AS $$
DECLARE
  now_us int8 := coalesce(at_us, floor(extract(epoch FROM clock_timestamp()) * 1000000)::int8);
  ts int8[];
  es int8[];
  ex int8;
BEGIN
  SELECT t.tok, t.e INTO ts, es FROM {t} t WHERE t.r = rr AND t.k = kk FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  FOR i IN 1..coalesce(array_length(ts, 1), 0) LOOP
    IF ts[i] = token THEN
      ex := es[i];
      ts := ts[1:i - 1] || ts[i + 1:];
      es := es[1:i - 1] || es[i + 1:];
      IF coalesce(array_length(ts, 1), 0) = 0 THEN
        DELETE FROM {t} WHERE r = rr AND k = kk;
      ELSE
        UPDATE {t} SET tok = ts, e = es WHERE r = rr AND k = kk;
      END IF;
      IF ex > now_us THEN
        RETURN 1;
      END IF;
      RETURN 2;
    END IF;
  END LOOP;
  RETURN 0;
END
$$;
CREATE OR REPLACE FUNCTION {bfn}(rr text, kks bytea[], ops int8[], toks int8[], n int8, hold int8, at_us int8)
RETURNS int8[] LANGUAGE plpgsql AS $$
DECLARE
  res int8[] := array_fill(0::int8, ARRAY[5 * coalesce(array_length(kks, 1), 0)]);
  r int8[];
  i int;
BEGIN
  -- Each call in turn, in the order of their keys (a key's calls in their
  -- own order): two batches lock their rows in one order, never deadlock.
  FOR i IN SELECT o FROM generate_subscripts(kks, 1) o ORDER BY kks[o], o LOOP
    IF ops[i] = 1 THEN
      res[5 * i - 4] := {rfn}(rr, kks[i], toks[i], at_us);
    ELSE
      r := {afn}(rr, kks[i], n, hold, toks[i], at_us);
      FOR j IN 1..5 LOOP
        res[5 * i - 5 + j] := r[j];
      END LOOP;
    END IF;
  END LOOP;
  RETURN res;
END
$$;`

// Slots is an in-flight rule (at most N of a key's requests at once) kept in
// PostgreSQL, on the server's clock: every instance that acquires shares one
// set of slots per key, each slot free again at its release or at its
// expiry, whichever comes first, so a dead instance's slots come back after
// the rule's hold, never before. An acquisition and a release are one
// statement each, which locks the key's row. Its methods are safe for
// concurrent use.
type Slots struct {
	pool     *pgxpool.Pool
	setupSQL string
	ready    atomic.Bool // the table and functions are there
	name     string      // the row's rule name
	nums     atomic.Pointer[shared.SlotNumbers]
	timeout  time.Duration
	acquire  string
	release  string
	batch    string
	sweep    string
	e        *shared.Engine
	at       func() time.Time // tests: the time the functions decide at
	// co, when the store coalesces, sends concurrent acquisitions and
	// releases together, one statement a batch.
	co *shared.SlotBatch
}

// Slots returns the in-flight rule named name in the store's database
// (shared.SlotStore): its rows in the table named as the store's and
// "_slots", under the store's namespace, each call bounded by the store's
// timeout. A database down or stalled now (the setup waits the store's
// timeout) is set up by the first call that reaches it.
func (s *Store) Slots(name string, rule atomicslot.Rule) (shared.SlotChecker, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout())
	defer cancel()
	if ns := strings.TrimSuffix(s.b.ns, "/"); ns != "" {
		name = ns + "/" + name
	}
	sl, err := newSlots(ctx, s.b.pool, s.b.table+"_slots", name, rule, s.Timeout())
	if err != nil {
		return nil, err
	}
	sl.e = s.Engine
	if n := s.Coalesce(); n > 0 {
		sl.co = shared.NewSlotBatch(n, sl.timeout, sl.sendBatch)
		s.b.closersMu.Lock()
		s.b.closers = append(s.b.closers, sl.co.Close)
		s.b.closersMu.Unlock()
	}
	return sl, nil
}

// sendBatch is one statement for a coalesced batch.
func (s *Slots) sendBatch(ctx context.Context, ops []shared.SlotOp) ([]int64, int64, error) {
	n := s.nums.Load()
	keys := make([][]byte, len(ops))
	kinds, toks := make([]int64, len(ops)), make([]int64, len(ops))
	for i, op := range ops {
		keys[i], toks[i] = rowKey(op.Key), int64(op.Token)
		if op.Release {
			kinds[i] = 1
		}
	}
	var res []int64
	err := s.call(ctx, ops[0].Key, func(ctx context.Context, at *int64) error {
		return s.pool.QueryRow(ctx, s.batch, s.name, keys, kinds, toks, n.Limit, n.HoldUs, at).Scan(&res)
	})
	return res, n.Limit, err
}

// newSlots is the rule named name in table, created when absent.
func newSlots(ctx context.Context, pool *pgxpool.Pool, table, name string, rule atomicslot.Rule, timeout time.Duration) (*Slots, error) {
	if err := checkTable(table, "", "Options"); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("pgstore: an in-flight rule's %w", err)
	}
	if rule.Limit() < 1 {
		return nil, fmt.Errorf("%w: an in-flight rule of no slots", atomicbucket.ErrInvalidLimit)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	s := &Slots{pool: pool, name: name, timeout: timeout}
	s.SetRule(rule)
	afn, rfn, bfn := table+"_acquire", table+"_release", table+"_batch"
	s.acquire = "SELECT " + afn + "($1::text, $2::bytea, $3::int8, $4::int8, $5::int8, $6::int8)"
	s.release = "SELECT " + rfn + "($1::text, $2::bytea, $3::int8, $4::int8)"
	s.batch = "SELECT " + bfn + "($1::text, $2::bytea[], $3::int8[], $4::int8[], $5::int8, $6::int8, $7::int8)"
	s.sweep = "DELETE FROM " + table + " WHERE r = $1 AND last_e <= floor(extract(epoch FROM clock_timestamp()) * 1000000)::int8 - 10000000"
	h := fnv.New32a()
	h.Write([]byte(table))
	s.setupSQL = fmt.Sprintf("SELECT pg_advisory_xact_lock(%d, 1);\n", int32(h.Sum32())) +
		strings.NewReplacer("{t}", table, "{afn}", afn, "{rfn}", rfn, "{bfn}", bfn).Replace(slotsSchema)
	sctx, cancel := context.WithTimeout(ctx, max(timeout, setupTimeout))
	defer cancel()
	if err := s.setup(sctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return nil, err // the database answered: no
		}
	}
	return s, nil
}

// SetRule makes rule's numbers those of every call from now
// (shared.SlotRuler): the slots held stay held, each until its expiry.
func (s *Slots) SetRule(rule atomicslot.Rule) { s.nums.Store(shared.SlotNumbersOf(rule)) }

// setup creates the slots table and its functions when absent.
func (s *Slots) setup(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, s.setupSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("pgstore: setting up the slots table: %w", err)
	}
	s.ready.Store(true)
	return nil
}

// call runs one statement within the timeout, set up first if need be, as
// one of the store's round trips when the rule is a Store's.
func (s *Slots) call(ctx context.Context, key string, fn func(ctx context.Context, at *int64) error) error {
	if err := checkSlotKey(key); err != nil {
		return err
	}
	if !s.ready.Load() {
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		err := s.setup(sctx)
		cancel()
		if err != nil {
			return err
		}
	}
	var at *int64
	if s.at != nil {
		us := s.at().UnixMicro()
		at = &us
	}
	if s.e != nil { // the round trip bounds it by the store's timeout
		return s.e.RoundTrip(ctx, func(ctx context.Context) error { return fn(ctx, at) })
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return fn(ctx, at)
}

// Acquire takes one of key's slots for token (shared.SlotChecker).
func (s *Slots) Acquire(ctx context.Context, key string, token uint64) (atomicbucket.Decision, int64, error) {
	if s.co != nil {
		if err := checkSlotKey(key); err != nil {
			return atomicbucket.Decision{}, 0, err
		}
		return s.co.Acquire(ctx, key, token)
	}
	var r []int64
	n := s.nums.Load()
	err := s.call(ctx, key, func(ctx context.Context, at *int64) error {
		return s.pool.QueryRow(ctx, s.acquire, s.name, rowKey(key), n.Limit, n.HoldUs, int64(token), at).Scan(&r)
	})
	if err != nil {
		return atomicbucket.Decision{}, 0, err
	}
	return shared.SlotReplyOf(n.Limit, r)
}

// AcquireN takes up to len(tokens) of key's slots in one statement, each
// held for hold (shared.SlotLeaser).
func (s *Slots) AcquireN(ctx context.Context, key string, tokens []uint64, hold time.Duration) ([]int64, int64, error) {
	n := s.nums.Load()
	keys := make([][]byte, len(tokens))
	kinds, toks := make([]int64, len(tokens)), make([]int64, len(tokens))
	for i, tok := range tokens {
		keys[i], toks[i] = rowKey(key), int64(tok)
	}
	holdUs := int64((hold + time.Microsecond - 1) / time.Microsecond)
	var res []int64
	err := s.call(ctx, key, func(ctx context.Context, at *int64) error {
		return s.pool.QueryRow(ctx, s.batch, s.name, keys, kinds, toks, n.Limit, holdUs, at).Scan(&res)
	})
	if err != nil {
		return nil, 0, err
	}
	return res, n.Limit, nil
}

// Release gives token's slot of key back (shared.SlotChecker).
func (s *Slots) Release(ctx context.Context, key string, token uint64) (shared.SlotRelease, error) {
	if s.co != nil {
		if err := checkSlotKey(key); err != nil {
			return shared.SlotGone, err
		}
		return s.co.Release(ctx, key, token)
	}
	var got int64
	err := s.call(ctx, key, func(ctx context.Context, at *int64) error {
		return s.pool.QueryRow(ctx, s.release, s.name, rowKey(key), int64(token), at).Scan(&got)
	})
	if err != nil {
		return shared.SlotGone, err
	}
	return shared.SlotReleaseOf(got), nil
}

// Sweep deletes the rows of the rule's keys whose every slot expired,
// unreleased, 10 s ago or more, and returns how many.
func (s *Slots) Sweep(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx, s.sweep, s.name)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func checkSlotKey(key string) error {
	if key == "" || len(key) > shared.MaxKeyLen {
		return fmt.Errorf("pgstore: an in-flight rule's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(key))
	}
	return nil
}

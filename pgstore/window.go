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
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// windowTable is the table of window rules' states, and the functions
// that check one and lease its units, and count a settlement's excess, are
// named by WindowOptions.Table ({t}, {lfn} and {ofn}: the table, and its
// name with "_lease" and "_owe"). A row (r,
// k) is a window rule's key: s and c its admissions still in the window,
// oldest first, as slots and counts, where a slot is the microsecond of the
// admissions (an exact window: N ≤ 64) or the sub-window of W/16 they fell
// in (counted), and empty_at the Unix µs from which nothing in it counts. An
// admission counts until its slot's out time, exact: slot + W + 1, counted:
// (slot + 1)·L + W (it counts as made at the end of its microsecond, or of
// its sub-window), so the functions decide as the local window and the Redis
// scripts do (see redisstore's windowPrelude).
//
// ww and wl are the window and sub-window the row was written with, g the
// generation of its slots (the µs the row was made, plus one a carry): a
// check with other numbers (another version of the rule, during a rolling
// deploy) carries each group into its own slots as made at the last
// microsecond of the writer's grain (or now, if sooner and the grain has
// begun), and counts it by its own window, as redisstore's scripts do.
//
// {lfn}(rr, kk, w, n, l, d, cost, want, pslot, psize, pback, pgen, at_us)
// locks the key's row (made first, empty, for a call that can admit, when
// there is none, or anew when a sweep or reset deleted another call's before
// this one could lock it: two first calls of a key then queue on it), settles a
// lessee's previous grant (pslot, psize, pback unspent, pgen: see
// redisstore's windowLeaseSource), drops what is out, and grants at least
// cost and up to want units when the window has room for the cost: at most
// half the room beyond it, counted at slot now + d (exact) or the first
// sub-window that begins at or after it (d 0: now's slot, a check). It
// writes the row only when it grants or settles, and returns {1 granted, 0
// denied, −1 a cost outside [0, n]; what was in the window; the units
// granted (denied: out time − now of the admission whose leaving makes
// room); out time − now of the newest (0: empty); the grant's slot, d and
// generation}, in µs. A check is {lfn} of cost and want cost with d 0 and
// no previous grant. at_us NULL is the server's clock (clock_timestamp()),
// else the call's time, for tests. Rows whose window is empty are deleted
// by Window.Sweep: an empty window is no row.
const windowTable = `CREATE TABLE IF NOT EXISTS {t} (
  r text NOT NULL,
  k bytea NOT NULL,
  s int8[] NOT NULL,
  c int8[] NOT NULL,
  empty_at int8 NOT NULL,
  ww int8 NOT NULL DEFAULT 0,
  wl int8 NOT NULL DEFAULT 0,
  PRIMARY KEY (r, k)
);
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS g int8 NOT NULL DEFAULT 0;
`

// windowHead is the start of both window functions: the key's row locked
// (made for a call of a cost from 1 to n and want 1 or more), a lessee's
// previous grant settled, a carry from other numbers, what is out dropped,
// and inw and reset computed.
const windowHead = `CREATE OR REPLACE FUNCTION {fn}(rr text, kk bytea, w int8, n int8, l int8, d int8, cost int8, want int8, pslot int8, psize int8, pback int8, pgen int8, at_us int8)
RETURNS int8[] LANGUAGE plpgsql AS $$
DECLARE
  now_us int8 := coalesce(at_us, floor(extract(epoch FROM clock_timestamp()) * 1000000)::int8);
  ss int8[];
  cs int8[];
  nn int;
  first int := 1;
  inw int8 := 0;
  slot int8;
  reset int8 := 0;
  lft int8;
  o int8;
  rw int8;
  rl int8;
  rg int8;
  ns int8[];
  nc int8[];
  e int8;
  st int8;
  m int;
  sz int8;
  dirty bool := false;
BEGIN
  SELECT t.s, t.c, t.ww, t.wl, t.g INTO ss, cs, rw, rl, rg FROM {t} t WHERE t.r = rr AND t.k = kk FOR UPDATE;
  IF NOT FOUND THEN
    IF cost >= 0 AND cost <= n AND want >= 1 THEN
      -- A row another call made can be gone again (a sweep, a reset)
      -- before this one locks it: then make it anew.
      LOOP
        INSERT INTO {t} (r, k, s, c, empty_at, ww, wl, g) VALUES (rr, kk, '{}', '{}', 0, w, l, now_us) ON CONFLICT DO NOTHING;
        SELECT t.s, t.c, t.ww, t.wl, t.g INTO ss, cs, rw, rl, rg FROM {t} t WHERE t.r = rr AND t.k = kk FOR UPDATE;
        EXIT WHEN FOUND;
      END LOOP;
    ELSE
      ss := '{}';
      cs := '{}';
      rw := w;
      rl := l;
      rg := now_us;
    END IF;
  END IF;
  IF psize > 0 AND pback > 0 AND rg = pgen THEN
    FOR i IN 1..coalesce(array_length(ss, 1), 0) LOOP
      IF ss[i] = pslot THEN
        cs[i] := cs[i] - least(pback, psize, cs[i]);
        IF cs[i] = 0 THEN
          ss := ss[1:i - 1] || ss[i + 1:];
          cs := cs[1:i - 1] || cs[i + 1:];
        END IF;
        dirty := true;
        EXIT;
      END IF;
    END LOOP;
  END IF;
  IF rl <> l THEN
    -- written by another version of the rule (another form or grain): each
    -- group carried into this one's slots, as made at the last microsecond
    -- of its grain (or now, if sooner and its grain has begun), in the next
    -- generation of slots
    ns := '{}';
    nc := '{}';
    FOR i IN 1..coalesce(array_length(ss, 1), 0) LOOP
      st := CASE WHEN rl = 0 THEN ss[i] ELSE ss[i] * rl END;
      e := CASE WHEN rl = 0 THEN ss[i] ELSE st + rl - 1 END;
      IF e > now_us AND st <= now_us THEN
        e := now_us;
      END IF;
      slot := CASE WHEN l = 0 THEN e ELSE e / l END;
      m := coalesce(array_length(ns, 1), 0);
      IF m > 0 AND ns[m] >= slot THEN
        nc[m] := nc[m] + cs[i];
      ELSE
        ns := ns || slot;
        nc := nc || cs[i];
      END IF;
    END LOOP;
    ss := ns;
    cs := nc;
    rg := rg + 1;
  END IF;
  nn := coalesce(array_length(ss, 1), 0);
  WHILE first <= nn LOOP
    o := CASE WHEN l = 0 THEN ss[first] + w + 1 ELSE (ss[first] + 1) * l + w END;
    EXIT WHEN o > now_us;
    first := first + 1;
  END LOOP;
  IF first > 1 THEN
    ss := ss[first:nn];
    cs := cs[first:nn];
    nn := coalesce(array_length(ss, 1), 0);
  END IF;
  FOR i IN 1..nn LOOP
    inw := inw + cs[i];
  END LOOP;
  IF nn > 0 THEN
    reset := (CASE WHEN l = 0 THEN ss[nn] + w + 1 ELSE (ss[nn] + 1) * l + w END) - now_us;
  END IF;
`

// windowLeaseTail is {lfn}'s end: the check and the grant.
const windowLeaseTail = `  IF cost >= 0 AND cost <= n AND inw + cost <= n THEN
    sz := greatest(cost, least(want, cost + (n - inw - cost) / 2));
    slot := CASE WHEN d = 0 AND l = 0 THEN now_us WHEN d = 0 THEN now_us / l
                 WHEN l = 0 THEN now_us + d ELSE (now_us + d + l - 1) / l END;
    IF sz > 0 THEN
      IF nn > 0 AND ss[nn] >= slot THEN
        cs[nn] := cs[nn] + sz;
        slot := ss[nn];
      ELSE
        ss := ss || slot;
        cs := cs || sz;
        nn := nn + 1;
      END IF;
      reset := (CASE WHEN l = 0 THEN slot + w + 1 ELSE (slot + 1) * l + w END) - now_us;
      dirty := true;
    END IF;
  END IF;
  IF dirty THEN
    UPDATE {t} SET s = ss, c = cs, ww = w, wl = l, g = rg,
      empty_at = CASE WHEN nn = 0 THEN 0 WHEN l = 0 THEN ss[nn] + w + 1 ELSE (ss[nn] + 1) * l + w END
      WHERE r = rr AND k = kk;
  END IF;
  IF cost < 0 OR cost > n THEN
    RETURN ARRAY[-1, inw, 0, reset, 0, 0, 0];
  END IF;
  IF inw + cost <= n THEN
    RETURN ARRAY[1, inw, sz, reset, slot, d, rg];
  END IF;
  lft := inw;
  FOR i IN 1..nn LOOP
    lft := lft - cs[i];
    IF lft + cost <= n THEN
      RETURN ARRAY[0, inw, (CASE WHEN l = 0 THEN ss[i] + w + 1 ELSE (ss[i] + 1) * l + w END) - now_us, reset, 0, 0, 0];
    END IF;
  END LOOP;
  RETURN ARRAY[0, inw, 0, reset, 0, 0, 0];
END
$$;`

// windowOweTail is {ofn}'s end: a settlement's excess (cost, at most n: the
// caller sends that much) counted at now's slot whatever the window holds,
// and {0}. A call is {ofn} of the excess as cost, want 1 (its row made),
// d 0 and no previous grant.
const windowOweTail = `  IF cost > 0 THEN
    slot := CASE WHEN l = 0 THEN now_us ELSE now_us / l END;
    IF nn > 0 AND ss[nn] >= slot THEN
      cs[nn] := cs[nn] + cost;
    ELSE
      ss := ss || slot;
      cs := cs || cost;
      nn := nn + 1;
    END IF;
    dirty := true;
  END IF;
  IF dirty THEN
    UPDATE {t} SET s = ss, c = cs, ww = w, wl = l, g = rg,
      empty_at = CASE WHEN nn = 0 THEN 0 WHEN l = 0 THEN ss[nn] + w + 1 ELSE (ss[nn] + 1) * l + w END
      WHERE r = rr AND k = kk;
  END IF;
  RETURN ARRAY[0];
END
$$;`

// windowSchema is the table and both functions: {lfn} (checks and leases)
// and {ofn} (settlements).
var windowSchema = windowTable + strings.ReplaceAll(windowHead, "{fn}", "{lfn}") + windowLeaseTail + "\n" +
	strings.ReplaceAll(windowHead, "{fn}", "{ofn}") + windowOweTail

// DefaultWindowTable is the table of window rules when WindowOptions.Table
// is empty.
const DefaultWindowTable = "limitgen_windows"

// WindowOptions configure NewWindow.
type WindowOptions struct {
	Table     string        // the table (and its function's prefix); default DefaultWindowTable
	Namespace string        // as Options.Namespace: part of every row's rule name
	Timeout   time.Duration // a check's wait; default DefaultTimeout
}

// Window is a window rule (at most N cost units in any interval of W) kept
// in PostgreSQL, on the server's clock: every instance that checks it shares
// one window per key. It decides as the local window does at microsecond
// times (atomicwindow.Window): exact up to 64 units, counted in sixteenths
// of the window beyond. A check is one statement (its function), which locks
// the key's row; it fails, with an error and a denial, when the database
// cannot answer. Its methods are safe for concurrent use.
type Window struct {
	pool                 *pgxpool.Pool
	setupSQL             string
	ready                atomic.Bool // the table and function are there
	shared.WindowNumbers             // the rule's and keys' own
	name                 string      // the row's rule name
	timeout              time.Duration
	check                string // the statement
	lease                string // the lease statement
	sweep                string
	forget               string           // deletes a key's row (Forget)
	owe                  string           // counts a settlement's excess (Settle)
	at                   func() time.Time // tests: the time the function decides at
	// e, for a window of a Store (Store.Window), is the store's Engine: each
	// statement is one of its round trips (a connection, the timeout,
	// Stats.Latency).
	e *shared.Engine
}

// run runs one statement, as a round trip of the store's when the window is
// a Store's.
func (w *Window) run(ctx context.Context, fn func(ctx context.Context) error) error {
	if w.e == nil {
		return fn(ctx)
	}
	return w.e.RoundTrip(ctx, fn)
}

// NewWindow returns the window rule named name with rule's numbers in pool's
// database, creating its table and function when absent. A counted window (a
// limit above atomicwindow.RingMax) must have sub-windows of whole
// microseconds: a window a multiple of 16 µs.
func NewWindow(ctx context.Context, pool *pgxpool.Pool, name string, rule atomicwindow.Rule, opts WindowOptions) (*Window, error) {
	if opts.Table == "" {
		opts.Table = DefaultWindowTable
	}
	if err := checkTable(opts.Table, opts.Namespace, "WindowOptions"); err != nil {
		return nil, err
	}
	if opts.Namespace != "" {
		name = opts.Namespace + "/" + name
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	w := &Window{pool: pool, name: name, timeout: opts.Timeout}
	if w.timeout <= 0 {
		w.timeout = DefaultTimeout
	}
	if err := w.SetRule(rule); err != nil {
		return nil, err
	}
	lfn, ofn := opts.Table+"_lease", opts.Table+"_owe"
	w.check = "SELECT " + lfn + "($1::text, $2::bytea, $3::int8, $4::int8, $5::int8, 0, $6::int8, $6::int8, 0, 0, 0, 0, $7::int8)"
	w.lease = "SELECT " + lfn + "($1::text, $2::bytea, $3::int8, $4::int8, $5::int8, $6::int8, $7::int8, $8::int8, $9::int8, $10::int8, $11::int8, $12::int8, $13::int8)"
	w.sweep = "DELETE FROM " + opts.Table + " WHERE r = $1 AND empty_at <= floor(extract(epoch FROM clock_timestamp()) * 1000000)::int8 - $2::int8"
	w.forget = "DELETE FROM " + opts.Table + " WHERE r = $1 AND k = $2"
	w.owe = "SELECT " + ofn + "($1::text, $2::bytea, $3::int8, $4::int8, $5::int8, 0, $6::int8, 1, 0, 0, 0, 0, $7::int8)"
	// One statement list, one implicit transaction, serialised across
	// instances by an advisory lock (two CREATE OR REPLACE FUNCTION at once
	// can fail).
	h := fnv.New32a()
	h.Write([]byte(opts.Table))
	w.setupSQL = fmt.Sprintf("SELECT pg_advisory_xact_lock(%d, 1);\n", int32(h.Sum32())) +
		strings.NewReplacer("{t}", opts.Table, "{lfn}", lfn, "{ofn}", ofn).Replace(windowSchema)
	sctx, cancel := context.WithTimeout(ctx, max(w.timeout, setupTimeout))
	defer cancel()
	if err := w.setup(sctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return nil, err // the database answered: no
		}
		// Down at start: the first check that reaches the database sets
		// the table up.
	}
	return w, nil
}

// setup creates the window table and its function when absent.
func (w *Window) setup(ctx context.Context) error {
	if _, err := w.pool.Exec(ctx, w.setupSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("pgstore: setting up the window table: %w", err)
	}
	w.ready.Store(true)
	return nil
}

// Window returns the window rule named name in the store's database
// (shared.WindowStore): its rows in the table named as the store's and
// "_windows", under the store's namespace, each check bounded by the
// store's timeout. A database down or stalled now (the setup waits the
// store's timeout) is set up by the first check that reaches it.
func (s *Store) Window(name string, rule atomicwindow.Rule) (shared.WindowChecker, error) {
	// The setup waits at most the store's timeout: a generated package binds
	// its windows in New, which a stalled database must not hold up.
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout())
	defer cancel()
	ns := strings.TrimSuffix(s.b.ns, "/")
	w, err := NewWindow(ctx, s.b.pool, name, rule, WindowOptions{Table: s.b.table + "_windows", Namespace: ns, Timeout: s.Timeout()})
	if err != nil {
		return nil, err
	}
	w.e = s.Engine
	return w, nil
}

// AllowN decides a request of cost for key in the database, counting it if
// admitted. An error (the database did not answer in time, or refused) comes
// with a denied decision that says nothing of the window.
func (w *Window) AllowN(ctx context.Context, key string, cost int64) (atomicbucket.Decision, error) {
	d, _, err := w.AllowNMark(ctx, key, cost)
	return d, err
}

// AllowNMark is AllowN, with where an admission was counted
// (shared.WindowMarker): a settlement at a lower actual gives back from it.
func (w *Window) AllowNMark(ctx context.Context, key string, cost int64) (atomicbucket.Decision, verdict.WindowMark, error) {
	var none verdict.WindowMark
	if key == "" || len(key) > shared.MaxKeyLen {
		return atomicbucket.Decision{}, none, fmt.Errorf("pgstore: a window's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(key))
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	if !w.ready.Load() {
		if err := w.setup(ctx); err != nil {
			return atomicbucket.Decision{}, none, err
		}
	}
	var at *int64
	if w.at != nil {
		us := w.at().UnixMicro()
		at = &us
	}
	var r []int64
	nm := w.NumsFor(key)
	err := w.run(ctx, func(ctx context.Context) error {
		return w.pool.QueryRow(ctx, w.check, w.name, rowKey(key), int64(nm.Rule.Window()/time.Microsecond), nm.Rule.Limit(), nm.GrainUs, cost, at).Scan(&r)
	})
	if err != nil {
		return atomicbucket.Decision{}, none, err
	}
	if len(r) != 7 {
		return atomicbucket.Decision{}, none, errors.New("pgstore: the window function answered " + fmt.Sprint(len(r)) + " numbers, want 7")
	}
	// Remaining is at least 0 (a window carried into a lower limit may hold
	// more than it), and a cost of 0, which takes nothing, is admitted
	// however full the window.
	d := atomicbucket.Decision{Remaining: max(nm.Rule.Limit()-r[1], 0), Reset: shared.WindowWait(r[3])}
	var m verdict.WindowMark
	switch {
	case r[0] == 1:
		d.Allowed, d.Remaining = true, max(d.Remaining-r[2], 0)
		if r[2] > 0 { // counted at the slot it answered, in its generation
			m = verdict.WindowMark{Slot: r[4], Gen: r[6]}
		}
	case r[0] == -1:
		d.RetryAfter = atomicbucket.Never
	case cost == 0:
		d.Allowed = true
	default:
		d.RetryAfter = shared.WindowWait(r[2])
	}
	return d, m, nil
}

// Forget deletes key's window, whatever it holds (shared.WindowForgetter:
// a Reset): its next check finds it empty. A lease's grant in it is gone
// with it: its settlement finds a new generation and gives nothing back.
func (w *Window) Forget(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	if !w.ready.Load() {
		if err := w.setup(ctx); err != nil {
			return err
		}
	}
	return w.run(ctx, func(ctx context.Context) error {
		_, err := w.pool.Exec(ctx, w.forget, w.name, rowKey(key))
		return err
	})
}

// Settle counts excess units in key's window now, beyond its limit if need
// be (a settled request's actual cost above its estimate): at most the
// limit, the rest forgiven and returned (shared.WindowSettler). One
// statement.
func (w *Window) Settle(ctx context.Context, key string, excess int64) (forgiven int64, err error) {
	if key == "" || len(key) > shared.MaxKeyLen {
		return 0, fmt.Errorf("pgstore: a window's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(key))
	}
	if excess <= 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	if !w.ready.Load() {
		if err := w.setup(ctx); err != nil {
			return 0, err
		}
	}
	var at *int64
	if w.at != nil {
		us := w.at().UnixMicro()
		at = &us
	}
	nm := w.NumsFor(key)
	c := min(excess, nm.Rule.Limit())
	var r []int64
	err = w.run(ctx, func(ctx context.Context) error {
		return w.pool.QueryRow(ctx, w.owe, w.name, rowKey(key), int64(nm.Rule.Window()/time.Microsecond), nm.Rule.Limit(), nm.GrainUs, c, at).Scan(&r)
	})
	if err != nil {
		return 0, err
	}
	if len(r) != 1 || r[0] != 0 {
		return 0, fmt.Errorf("pgstore: the window's settlement answered %v", r)
	}
	return excess - c, nil
}

// Sweep deletes the rows of the window's keys whose windows have been empty
// for a second (an empty window is no row: nothing is lost), and returns how
// many.
func (w *Window) Sweep(ctx context.Context) (int64, error) {
	tag, err := w.pool.Exec(ctx, w.sweep, w.name, int64(atomicbucket.SweepGrace/time.Microsecond))
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// Lease settles a lessee's previous grant prev of key's window and grants
// at least cost and up to want units, or none for want 0 (a release): see
// shared.WindowLeaser. A grant is spent for shared.WindowLeaseTerm of the
// window.
func (w *Window) Lease(ctx context.Context, key string, cost, want int64, prev shared.Settlement) (shared.Granted, error) {
	if key == "" || len(key) > shared.MaxKeyLen {
		return shared.Granted{}, fmt.Errorf("pgstore: a window's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(key))
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	if !w.ready.Load() {
		if err := w.setup(ctx); err != nil {
			return shared.Granted{}, err
		}
	}
	var at *int64
	if w.at != nil {
		us := w.at().UnixMicro()
		at = &us
	}
	nm := w.NumsFor(key)
	term := shared.WindowLeaseTerm(nm.Rule.Window())
	var r []int64
	err := w.run(ctx, func(ctx context.Context) error {
		return w.pool.QueryRow(ctx, w.lease, w.name, rowKey(key), int64(nm.Rule.Window()/time.Microsecond), nm.Rule.Limit(), nm.GrainUs,
			int64(term/time.Microsecond), cost, want, prev.Second, prev.Size, prev.Unspent, prev.Gen, at).Scan(&r)
	})
	if err != nil {
		return shared.Granted{}, err
	}
	return shared.WindowGranted(nm.Rule.Limit(), r)
}

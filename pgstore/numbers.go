package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/overlay"
)

// A table of numbers, the multi-tier design's rule table: a row gives a
// rule's rate and burst for every plan (plan ''), one plan, or one key (on
// every plan), while it is active. Every change to the table notifies its
// channel (a statement trigger), and the instances watching it (Numbers)
// reload the whole table and apply it all or nothing.
//
//	CREATE TABLE limitgen_numbers (
//	  id         bigserial PRIMARY KEY,
//	  rule       text NOT NULL,            -- a rule of the policy, by name
//	  plan       text NOT NULL DEFAULT '', -- '': every plan without a row of its own
//	  key        text,                     -- NULL: every key without a row of its own
//	  rate       text NOT NULL,            -- the policy's syntax: 100/s, 5 per 10s
//	  burst      bigint NOT NULL,
//	  active     boolean NOT NULL DEFAULT true,
//	  updated_at timestamptz NOT NULL DEFAULT now()
//	);

// DefaultNumbersTable is the numbers table's name unless NumbersOptions say.
const DefaultNumbersTable = "limitgen_numbers"

// DefaultNumbersRefresh is how often Numbers reloads the table without a
// notification, a safety net for one it missed (the multi-tier design's
// cache refresh: a minute).
const DefaultNumbersRefresh = time.Minute

// NumbersOptions configure Numbers.
type NumbersOptions struct {
	// Table is the numbers table (DefaultNumbersTable when empty), also the
	// name of its notification channel.
	Table string
	// Refresh is how often the table is reloaded without a notification
	// (DefaultNumbersRefresh when 0).
	Refresh time.Duration
	// NoCreate leaves the table and its trigger to the caller's migrations:
	// Numbers then fails if they are missing, instead of creating them.
	NoCreate bool
	// Report is given every reload's error (a refused table, a lost
	// connection); nil logs them with log/slog's default logger, so that
	// a source that stopped applying is never silent.
	Report func(error)
	// Applied, if set, is called after each reload that applied the table.
	Applied func(rows int)
}

var tableNameRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// numbersStatements create the numbers table, its trigger function and its
// trigger (PostgreSQL 14 or later: CREATE OR REPLACE TRIGGER).
func numbersStatements(table string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + table + ` (
  id bigserial PRIMARY KEY,
  rule text NOT NULL,
  plan text NOT NULL DEFAULT '',
  key text,
  rate text NOT NULL,
  burst bigint NOT NULL,
  active boolean NOT NULL DEFAULT true,
  updated_at timestamptz NOT NULL DEFAULT now()
)`,
		`CREATE OR REPLACE FUNCTION ` + table + `_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('` + table + `', '');
  RETURN NULL;
END $$`,
		`CREATE OR REPLACE TRIGGER ` + table + `_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON ` + table +
			` FOR EACH STATEMENT EXECUTE FUNCTION ` + table + `_notify()`,
	}
}

// CreateNumbersTable creates the numbers table and its trigger if missing
// (their statements are NumbersSchema's).
func CreateNumbersTable(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if !tableNameRe.MatchString(table) {
		return fmt.Errorf("pgstore: numbers table %q: use 1 to 63 lower-case letters, digits and _", table)
	}
	for _, s := range numbersStatements(table) {
		if _, err := pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("pgstore: creating numbers table %s: %w", table, err)
		}
	}
	return nil
}

// NumbersSchema is the SQL that creates the numbers table and its trigger,
// for migrations.
func NumbersSchema(table string) string {
	out := ""
	for _, s := range numbersStatements(table) {
		out += s + ";\n"
	}
	return out
}

// LoadNumbers reads the numbers table's active rows as a Set, each entry's
// position its row ("limitgen_numbers id 7"). A rate that does not parse is
// an error naming its row.
func LoadNumbers(ctx context.Context, pool *pgxpool.Pool, table string) (overlay.Set, error) {
	if !tableNameRe.MatchString(table) {
		return nil, fmt.Errorf("pgstore: numbers table %q: use 1 to 63 lower-case letters, digits and _", table)
	}
	rows, err := pool.Query(ctx, "SELECT id, rule, plan, key, rate, burst FROM "+table+" WHERE active ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("pgstore: reading numbers table %s: %w", table, err)
	}
	defer rows.Close()
	var set overlay.Set
	var errs []error
	for rows.Next() {
		var id, burst int64
		var rule, plan, rate string
		var key *string
		if err := rows.Scan(&id, &rule, &plan, &key, &rate, &burst); err != nil {
			return nil, fmt.Errorf("pgstore: reading numbers table %s: %w", table, err)
		}
		e := overlay.Entry{Rule: rule, Plan: plan, Pos: fmt.Sprintf("%s id %d", table, id)}
		if key != nil {
			e.Key, e.HasKey = *key, true
		}
		tokens, period, err := overlay.ParseRate(rate, false)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", e.Pos, err))
			continue
		case burst < 1:
			errs = append(errs, fmt.Errorf("%s: burst %d admits nothing; burst must be at least 1", e.Pos, burst))
			continue
		}
		e.Numbers.Tokens, e.Numbers.Period, e.Numbers.Burst = tokens, period, burst
		set = append(set, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: reading numbers table %s: %w", table, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("pgstore: %w: %w", overlay.ErrInvalid, errors.Join(errs...))
	}
	return set, nil
}

// Numbers keeps a generated package's numbers equal to the numbers table's
// active rows, applying the whole table with apply (the package's
// ApplyNumbers) at once, then on every change the table notifies, and every
// Refresh as a safety net, until ctx is done. A table that apply refuses (a
// bad row: its error names it) leaves the numbers in force as they were, and
// so does a lost connection, which is retried every second; both go to
// Report. It listens on a connection of its own from pool.
//
// Instances sharing the database converge within the time a notification
// takes to arrive and the table to be read (milliseconds); an instance that
// missed one, within Refresh.
func Numbers(ctx context.Context, pool *pgxpool.Pool, apply func(overlay.Set) error, opts NumbersOptions) error {
	if opts.Table == "" {
		opts.Table = DefaultNumbersTable
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultNumbersRefresh
	}
	if !tableNameRe.MatchString(opts.Table) {
		return fmt.Errorf("pgstore: numbers table %q: use 1 to 63 lower-case letters, digits and _", opts.Table)
	}
	if !opts.NoCreate {
		if err := CreateNumbersTable(ctx, pool, opts.Table); err != nil {
			return err
		}
	}
	report := func(err error) {
		if err == nil || ctx.Err() != nil {
			return
		}
		if opts.Report == nil {
			slog.Error(err.Error())
			return
		}
		opts.Report(err)
	}
	reload := func() {
		set, err := LoadNumbers(ctx, pool, opts.Table)
		if err == nil {
			err = apply(set)
		}
		if err != nil {
			report(fmt.Errorf("pgstore: numbers table %s not applied, the numbers in force stay: %w", opts.Table, err))
			return
		}
		if opts.Applied != nil {
			opts.Applied(len(set))
		}
	}
	for ctx.Err() == nil {
		conn, err := pool.Acquire(ctx)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+opts.Table)
			if err != nil {
				conn.Release()
			}
		}
		if err != nil {
			report(fmt.Errorf("pgstore: listening for numbers (retrying in a second): %w", err))
			reload() // the refresh still works if the pool does
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		reload() // what changed before the LISTEN took effect
		for ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, opts.Refresh)
			_, err := conn.Conn().WaitForNotification(wctx)
			cancel()
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				report(fmt.Errorf("pgstore: the numbers table's notifications stopped (listening again): %w", err))
				break
			}
			reload()
		}
		conn.Conn().Close(context.Background()) //nolint:errcheck // a LISTEN connection is not given back to the pool
		conn.Release()
	}
	return nil
}

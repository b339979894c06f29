package pgstore

import (
	"context"
	"fmt"
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
	// Report is given each change of the table's state (a refused table, a
	// lost connection: once when it happens, as overlay.WatchOptions says);
	// nil logs with log/slog's default logger, so that a source that
	// stopped applying is never silent.
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
// an entry with its Err, which ApplyNumbers refuses with every other problem.
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
	for rows.Next() {
		var id, burst int64
		var rule, plan, rate string
		var key *string
		if err := rows.Scan(&id, &rule, &plan, &key, &rate, &burst); err != nil {
			return nil, fmt.Errorf("pgstore: reading numbers table %s: %w", table, err)
		}
		set = append(set, overlay.NewEntry(fmt.Sprintf("%s id %d", table, id), rule, plan, key, rate, burst))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: reading numbers table %s: %w", table, err)
	}
	return set, nil
}

// NumbersSource is the numbers table as a source (overlay.Notifier): Load
// reads the whole table, Changes is its channel's notifications, on a
// connection of its own from the pool.
type NumbersSource struct {
	pool  *pgxpool.Pool
	table string
}

// NewNumbersSource returns the numbers table (DefaultNumbersTable when table
// is empty) on pool as a source.
func NewNumbersSource(pool *pgxpool.Pool, table string) (*NumbersSource, error) {
	if table == "" {
		table = DefaultNumbersTable
	}
	if !tableNameRe.MatchString(table) {
		return nil, fmt.Errorf("pgstore: numbers table %q: use 1 to 63 lower-case letters, digits and _", table)
	}
	return &NumbersSource{pool: pool, table: table}, nil
}

// String names the table.
func (s *NumbersSource) String() string { return "PostgreSQL numbers table " + s.table }

// Load reads the table's active rows (LoadNumbers).
func (s *NumbersSource) Load(ctx context.Context) (overlay.Set, error) {
	return LoadNumbers(ctx, s.pool, s.table)
}

// Changes listens on the table's channel on a connection of its own, and
// sends on every notification, and each time it listens again after a lost
// connection (what changed meanwhile), which it retries every second.
func (s *NumbersSource) Changes(ctx context.Context, report func(error)) <-chan struct{} {
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default: // one is waiting: it covers this one
		}
	}
	listen := func() (*pgxpool.Conn, error) {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, "LISTEN "+s.table); err != nil {
			conn.Release()
			return nil, err
		}
		return conn, nil
	}
	conn, err := listen()
	go func() {
		for ctx.Err() == nil {
			if err != nil {
				report(fmt.Errorf("listening for notifications (retrying every second; the refresh goes on): %w", err))
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				if conn, err = listen(); err == nil {
					notify() // what changed while it did not listen
				}
				continue
			}
			report(nil)
			for {
				_, werr := conn.Conn().WaitForNotification(ctx)
				if werr != nil {
					err = fmt.Errorf("the notifications stopped: %w", werr)
					break
				}
				notify()
			}
			conn.Conn().Close(context.Background()) //nolint:errcheck // a LISTEN connection is not given back to the pool
			conn.Release()
		}
	}()
	return out
}

// Numbers keeps a generated package's numbers equal to the numbers table's
// active rows: overlay.Watch of the table (creating it and its trigger
// first, unless NoCreate), with opts' Refresh (DefaultNumbersRefresh when
// 0), Report and Applied, until ctx is done. A table that apply refuses (its
// error names each bad row) and a lost connection leave the numbers in
// force, each reported once when it happens; a lost LISTEN connection is
// retried every second.
//
// Instances sharing the database converge within the time a notification
// takes to arrive and the table to be read (milliseconds); an instance that
// missed one, within Refresh.
func Numbers(ctx context.Context, pool *pgxpool.Pool, apply func(overlay.Set) error, opts NumbersOptions) error {
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultNumbersRefresh
	}
	src, err := NewNumbersSource(pool, opts.Table)
	if err != nil {
		return err
	}
	if !opts.NoCreate {
		if err := CreateNumbersTable(ctx, pool, src.table); err != nil {
			return err
		}
	}
	overlay.Watch(ctx, src, apply, overlay.WatchOptions{Refresh: opts.Refresh, Report: opts.Report, Applied: opts.Applied})
	return nil
}

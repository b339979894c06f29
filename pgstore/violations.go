package pgstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/verdict"
)

// The violation log (the multi-tier design's RateLimitViolation): every
// request a limiter did not admit, written to a table in batches with COPY,
// off the request's path. Observe only puts the event on a bounded queue
// (never blocking; what does not fit is counted as dropped), and one
// goroutine writes the queue out every Flush or every Batch events. A batch
// that cannot be written (the database down) is kept and tried again at the
// next flush; while it waits, new events queue, and what overflows is
// dropped and counted: the log never slows or blocks a request, and says
// what it lost.

// DefaultViolationsTable is the violation log's table unless
// ViolationOptions.Table says otherwise.
const DefaultViolationsTable = "limitgen_violations"

// ViolationOptions configure a ViolationLog. Zero fields take the defaults
// given.
type ViolationOptions struct {
	// Table is the table written to: default DefaultViolationsTable. It is
	// created if missing unless NoCreate (ViolationsSchema is its SQL).
	Table    string
	NoCreate bool
	// Queue is how many events may wait to be written: default 10000. An
	// event that finds the queue full is dropped (Dropped counts it).
	Queue int
	// Batch is the most events one COPY writes: default 1000.
	Batch int
	// Flush is how often waiting events are written: default 1s.
	Flush time.Duration
	// Key is what the log records for a request's key. Default: the key
	// hashed (HMAC-SHA-256 with Salt, its first 16 bytes in hex), so that
	// one client's violations can be told apart and counted without the log
	// holding who it is. RawKey records the key as it is; a function of
	// one's own may map it to an account, or return "" for none.
	Key func(e verdict.Event) string
	// Salt is the default hash's secret, at least MinSalt bytes, kept out of
	// the database: without it, keys as short as user IDs or addresses are
	// recovered by hashing guesses. NewViolationLog refuses a shorter one
	// when Key is nil.
	Salt []byte
	// Outcomes are the outcomes logged: default every one but Allowed
	// (denials, shadow denials, too costly, missing keys, degraded).
	Outcomes []verdict.Outcome
	// Report is told of each batch that could not be written (nil: logged
	// with log/slog's default logger).
	Report func(error)
}

// MinSalt is the shortest ViolationOptions.Salt the default key hash takes.
const MinSalt = 16

// RawKey records a request's key as it is (ViolationOptions.Key): a string
// key, or an integer key's decimal digits (Event.KeyInt, its bits unsigned:
// a negative int64 key reads as 2⁶⁴ less its magnitude). An Event does not
// tell an integer key 0 from no key, so both are recorded as none (NULL).
func RawKey(e verdict.Event) string {
	if e.Key == "" && e.KeyInt != 0 {
		return strconv.FormatUint(e.KeyInt, 10)
	}
	return e.Key
}

// violation is one queued event, with its time.
type violation struct {
	at time.Time
	e  verdict.Event
}

// ViolationLog is a verdict.Observer (of any door: HTTP, gRPC, Envoy's
// rate-limit service) that writes the requests a limiter did not admit to a
// PostgreSQL table, with the door that decided. Close it to write
// what is queued.
type ViolationLog struct {
	pool    *pgxpool.Pool
	opts    ViolationOptions
	table   string
	logged  [16]bool // by Outcome
	queue   chan violation
	closing chan struct{}
	done    chan struct{}
	once    sync.Once
	// counts: events written, dropped (queue full, or unwritten at Close),
	// and batches that failed to be written.
	written, dropped, failed atomic.Uint64
	closed                   atomic.Bool
	// closeCtx bounds the last writes (set by Close before closing);
	// left is what they could not write.
	closeCtx context.Context
	left     atomic.Int64
}

// NewViolationLog returns a ViolationLog writing to opts.Table on pool,
// creating the table unless opts.NoCreate, and starts its writer.
func NewViolationLog(ctx context.Context, pool *pgxpool.Pool, opts ViolationOptions) (*ViolationLog, error) {
	if opts.Table == "" {
		opts.Table = DefaultViolationsTable
	}
	if !tableNameRe.MatchString(opts.Table) {
		return nil, fmt.Errorf("pgstore: violations table %q: use 1 to 63 lower-case letters, digits and _", opts.Table)
	}
	if opts.Queue <= 0 {
		opts.Queue = 10000
	}
	if opts.Batch <= 0 {
		opts.Batch = 1000
	}
	if opts.Flush <= 0 {
		opts.Flush = time.Second
	}
	if opts.Key == nil {
		if len(opts.Salt) < MinSalt {
			return nil, fmt.Errorf("pgstore: violation log: the default key hash needs a secret Salt of at least %d bytes (got %d): without one, short keys are recovered from their hashes by guessing; set Key: pgstore.RawKey to record keys as they are", MinSalt, len(opts.Salt))
		}
		mac := hmac.New(sha256.New, opts.Salt)
		var mu sync.Mutex // the writer's goroutine alone calls Key; the lock keeps mac safe for any other caller
		opts.Key = func(e verdict.Event) string {
			k := RawKey(e)
			if k == "" && e.KeyInt == 0 {
				return ""
			}
			mu.Lock()
			defer mu.Unlock()
			mac.Reset()
			mac.Write([]byte(k))
			return hex.EncodeToString(mac.Sum(nil)[:16])
		}
	}
	if opts.Outcomes == nil {
		opts.Outcomes = []verdict.Outcome{verdict.Denied, verdict.ShadowDenied, verdict.TooCostly,
			verdict.MissingKey, verdict.DegradedAllowed, verdict.DegradedDenied}
	}
	if opts.Report == nil {
		opts.Report = func(err error) { slog.Error("pgstore: violation log", "err", err) }
	}
	if !opts.NoCreate {
		if _, err := pool.Exec(ctx, violationsStatement(opts.Table)); err != nil {
			return nil, fmt.Errorf("pgstore: creating violations table %s: %w", opts.Table, err)
		}
	}
	v := &ViolationLog{pool: pool, opts: opts, table: opts.Table,
		queue: make(chan violation, opts.Queue), closing: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts.Outcomes {
		if int(o) < len(v.logged) {
			v.logged[o] = true
		}
	}
	go v.write()
	return v, nil
}

func violationsStatement(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
	at timestamptz NOT NULL,
	door text NOT NULL DEFAULT '',
	route text NOT NULL,
	tier text NOT NULL,
	rule text NOT NULL,
	key text,
	cost bigint NOT NULL,
	outcome text NOT NULL,
	retry_after_ms bigint NOT NULL,
	store_error text NOT NULL
);
ALTER TABLE ` + table + ` ADD COLUMN IF NOT EXISTS door text NOT NULL DEFAULT ''`
}

// ViolationsSchema is the SQL that creates the violations table, for
// migrations.
func ViolationsSchema(table string) string { return violationsStatement(table) + ";\n" }

// Observe queues e if its outcome is logged; it never blocks: when the
// queue is full, e is dropped and counted. Safe from any goroutine.
func (v *ViolationLog) Observe(e verdict.Event) {
	if int(e.Outcome) >= len(v.logged) || !v.logged[e.Outcome] {
		return
	}
	if v.closed.Load() {
		v.dropped.Add(1)
		return
	}
	select {
	case v.queue <- violation{at: time.Now(), e: e}:
	default:
		v.dropped.Add(1)
	}
}

// Stats are the events written, the events dropped (the queue full, or
// still unwritten at Close), and the batches that failed to be written
// (each tried again).
func (v *ViolationLog) Stats() (written, dropped, failedBatches uint64) {
	return v.written.Load(), v.dropped.Load(), v.failed.Load()
}

// Close stops taking events and writes what is queued, trying until ctx is
// done; what is left then is counted as dropped, and the error says how
// many.
func (v *ViolationLog) Close(ctx context.Context) error {
	v.once.Do(func() {
		v.closeCtx = ctx
		v.closed.Store(true)
		close(v.closing)
	})
	<-v.done // the writer gives up at ctx's end (see write)
	if n := v.left.Load(); n > 0 {
		return fmt.Errorf("pgstore: violation log closed with %d events unwritten", n)
	}
	return nil
}

// write is the writer: it gathers events into a batch and copies it out
// every Flush or when it is full.
func (v *ViolationLog) write() {
	defer close(v.done)
	tick := time.NewTicker(v.opts.Flush)
	defer tick.Stop()
	var batch []violation
	flush := func(ctx context.Context) {
		for len(batch) > 0 {
			n := min(len(batch), v.opts.Batch)
			if err := v.copy(ctx, batch[:n]); err != nil {
				v.failed.Add(1)
				v.opts.Report(fmt.Errorf("writing %d violations to %s (kept, tried again): %w", n, v.table, err))
				return
			}
			v.written.Add(uint64(n))
			batch = batch[n:]
		}
		batch = nil
	}
	take := func(e violation) {
		if len(batch) >= v.opts.Queue { // a batch kept through failures is bounded too
			v.dropped.Add(1)
			return
		}
		batch = append(batch, e)
	}
	for {
		select {
		case e := <-v.queue:
			take(e)
			if len(batch) >= v.opts.Batch {
				flush(context.Background())
			}
		case <-tick.C:
			flush(context.Background())
		case <-v.closing:
			for {
				select {
				case e := <-v.queue:
					take(e)
					continue
				default:
				}
				break
			}
			for len(batch) > 0 && v.closeCtx.Err() == nil {
				if flush(v.closeCtx); len(batch) > 0 {
					select { // the database is failing: wait a little before the next try
					case <-time.After(100 * time.Millisecond):
					case <-v.closeCtx.Done():
					}
				}
			}
			v.left.Store(int64(len(batch)))
			v.dropped.Add(uint64(len(batch)))
			return
		}
	}
}

// copy writes events with one COPY.
func (v *ViolationLog) copy(ctx context.Context, events []violation) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows := make([][]any, len(events))
	for i, ev := range events {
		e := ev.e
		var key any
		if k := v.opts.Key(e); k != "" {
			key = k
		}
		rows[i] = []any{ev.at, e.Door, e.Route, e.Tier, e.Rule, key, e.Cost, e.Outcome.String(), e.RetryAfter.Milliseconds(), e.StoreError}
	}
	n, err := v.pool.CopyFrom(ctx, pgx.Identifier{v.table},
		[]string{"at", "door", "route", "tier", "rule", "key", "cost", "outcome", "retry_after_ms", "store_error"}, pgx.CopyFromRows(rows))
	if err == nil && n != int64(len(rows)) {
		err = errors.New("COPY wrote " + strconv.FormatInt(n, 10) + " rows of " + strconv.Itoa(len(rows)))
	}
	return err
}

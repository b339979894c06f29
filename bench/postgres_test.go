package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/bench/sharedlimits"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
)

// The shared limit every PostgreSQL implementation checks: 1e6 a second in
// bursts of 1e6 a key, so that every check is admitted and the benchmark
// measures a decision's path, not denials.
const pgRate = 1_000_000

// pgKeys are the key sets: one hot key, and 1e4 keys drawn at random.
var pgKeys = []int{1, 10_000}

// pgImpls builds each implementation's check of a key over a pool.
var pgImpls = []struct {
	name string
	make func(b *testing.B, pool *pgxpool.Pool) func(ctx context.Context, key string) (bool, error)
}{
	{"limitgen", func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) (bool, error) {
		return generatedOnPostgres(b, pool, 0)
	}},
	{"limitgen-coalesced", func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) (bool, error) {
		return generatedOnPostgres(b, pool, 256)
	}},
	{"seed-for-update", func(b *testing.B, pool *pgxpool.Pool) func(context.Context, string) (bool, error) {
		s := newSeedLimiter(b, pool, 1, time.Microsecond, pgRate) // 1 token a µs, 1e6 at most
		return func(ctx context.Context, key string) (bool, error) {
			return s.limit(ctx, "bench", key, 1)
		}
	}},
}

// generatedOnPostgres is limitgen as a service uses it: the generated package
// (bench/sharedlimits, rule Hot) bound to a store over pool, coalescing at
// most coalesce checks a statement (0: none). A check the store did not
// decide counts as an error.
func generatedOnPostgres(b *testing.B, pool *pgxpool.Pool, coalesce int) func(context.Context, string) (bool, error) {
	if coalesce == 0 {
		coalesce = -1 // a statement a check (the store's default coalesces)
	}
	st, err := pgstore.New(context.Background(), pool, pgstore.Options{SweepEvery: -1, Coalesce: coalesce})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	watchBreakers(b, st)
	lims := sharedlimits.New(sharedlimits.WithStore(st))
	if err := lims.SharedErr(); err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) (bool, error) {
		res := lims.Hot.AllowN(ctx, key, 1)
		return res.Allowed, res.Err
	}
}

// seedLimiter is the PostgreSQL limiter of the project's seed documents as
// they describe it: a row of tokens and last_refill a key; a check is a
// transaction that makes sure the row exists (INSERT … ON CONFLICT DO
// NOTHING), locks it (SELECT … FOR UPDATE), computes the refill in the
// application, on the application's clock, and writes the new count and
// last_refill = now only when the request is admitted; then COMMIT.
type seedLimiter struct {
	pool     *pgxpool.Pool
	refill   int64         // tokens added each interval
	interval time.Duration // the refill interval
	max      int64         // the bucket's size
}

func newSeedLimiter(b *testing.B, pool *pgxpool.Pool, refill int64, interval time.Duration, maxTokens int64) *seedLimiter {
	_, err := pool.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS rate_limit_ephemeral (
		prefix text NOT NULL, key text NOT NULL, tokens bigint NOT NULL,
		last_refill bigint NOT NULL, expires_at bigint NOT NULL, PRIMARY KEY (prefix, key))`)
	if err != nil {
		b.Fatal(err)
	}
	return &seedLimiter{pool: pool, refill: refill, interval: interval, max: maxTokens}
}

func (s *seedLimiter) limit(ctx context.Context, prefix, key string, cost int64) (ok bool, err error) {
	now := time.Now().UnixMicro()
	iv := s.interval.Microseconds()
	ttl := s.max / s.refill * iv
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			tx.Rollback(context.Background()) //nolint:errcheck // the error is err
		}
	}()
	if _, err = tx.Exec(ctx, `INSERT INTO rate_limit_ephemeral (prefix, key, tokens, last_refill, expires_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (prefix, key) DO NOTHING`, prefix, key, s.max, now, now+ttl); err != nil {
		return false, err
	}
	var tokens, last, expires int64
	if err = tx.QueryRow(ctx, `SELECT tokens, last_refill, expires_at FROM rate_limit_ephemeral
		WHERE prefix = $1 AND key = $2 FOR UPDATE`, prefix, key).Scan(&tokens, &last, &expires); err != nil {
		return false, err
	}
	refilled := max(now-last, 0) / iv * s.refill
	left := min(tokens+refilled, s.max) - cost
	if left >= 0 {
		if _, err = tx.Exec(ctx, `INSERT INTO rate_limit_ephemeral (prefix, key, tokens, last_refill, expires_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (prefix, key) DO UPDATE
			SET tokens = excluded.tokens, last_refill = excluded.last_refill, expires_at = excluded.expires_at`,
			prefix, key, left, now, now+ttl); err != nil {
			return false, err
		}
	}
	if err = tx.Commit(ctx); err != nil {
		return false, err
	}
	return left >= 0, nil
}

// BenchmarkPostgres is one shared check on a PostgreSQL server started for
// the run (package pgtest: 127.0.0.1, fsync off, the machine's 2 cores shared
// with the Go process), every check admitted, on one hot key or on 1e4 keys
// drawn at random, from 1, 16 and 64 concurrent callers with a connection
// each. limitgen is the generated package (bench/sharedlimits) on pgstore,
// one statement a check, as a service checks a shared rule; limitgen-coalesced
// is the same with the store's Options.Coalesce: 256 (the checks that wait
// meanwhile go together, each decided on its own); seed-for-update is the seed documents' transaction (five round
// trips, the row locked across three). Metrics as BenchmarkRedis's:
// decisions/s, p50-µs, p99-µs, errors/op and denied/op (0 on a quiet
// machine: see reportMisses).
func BenchmarkPostgres(b *testing.B) {
	srv := pgtest.StartOnDisk(b)
	for _, keys := range pgKeys {
		for _, callers := range callerCounts {
			for _, impl := range pgImpls {
				b.Run(fmt.Sprintf("keys=%d/callers=%d/impl=%s", keys, callers, impl.name), func(b *testing.B) {
					runPostgres(b, srv, keys, callers, impl.make)
				})
			}
		}
	}
}

// BenchmarkPostgresDurable is BenchmarkPostgres's hot key at 16 callers on a
// server with fsync on (and synchronous_commit, the default): every commit
// waits for the disk, and a hot key's row is locked until its commit is
// durable, so the disk sets the pace of checks that commit one by one.
func BenchmarkPostgresDurable(b *testing.B) {
	srv := pgtest.StartOnDisk(b, "-c", "fsync=on")
	for _, impl := range pgImpls {
		b.Run("keys=1/callers=16/impl="+impl.name, func(b *testing.B) {
			runPostgres(b, srv, 1, 16, impl.make)
		})
	}
}

// runPostgres runs an implementation's checks of keys keys from callers
// callers, a pool connection each.
func runPostgres(b *testing.B, srv *pgtest.Server, keys, callers int, newCheck func(*testing.B, *pgxpool.Pool) func(context.Context, string) (bool, error)) {
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = int32(callers), int32(callers)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	check := newCheck(b, pool)
	names := make([]string, keys)
	for i := range names {
		names[i] = "user-" + strconv.Itoa(i)
	}
	runCallers(b, callers, func(ctx context.Context) (bool, error) {
		return check(ctx, names[rand.IntN(keys)])
	}, func() {}, func() {})
}

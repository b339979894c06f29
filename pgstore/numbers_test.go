package pgstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/storetest"
)

// The numbers table on one database, watched by eight instances
// (storetest.SourceConvergence).
func TestNumbersTable(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	admin := srv.Pool(t)
	if err := pgstore.CreateNumbersTable(ctx, admin, pgstore.DefaultNumbersTable); err != nil {
		t.Fatal(err)
	}
	exec := func(t *testing.T, sql string, args ...any) {
		t.Helper()
		if _, err := admin.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	put := func(t *testing.T, id int, r storetest.Row) {
		exec(t, `INSERT INTO limitgen_numbers (id, rule, plan, key, rate, burst, active) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (id) DO UPDATE SET rule = $2, plan = $3, key = $4, rate = $5, burst = $6, active = $7, updated_at = now()`,
			id, r.Rule, r.Plan, r.Key, r.Rate, r.Burst, r.Active)
	}
	const refresh = 500 * time.Millisecond
	src := storetest.Source{
		Refresh: refresh,
		Instance: func(t *testing.T, report func(error)) *sharedlimits.Limits {
			pool := srv.Pool(t)
			st, err := pgstore.New(ctx, pool, pgstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			l := sharedlimits.New(sharedlimits.WithStore(st))
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := pgstore.Numbers(wctx, pool, l.ApplyNumbers, pgstore.NumbersOptions{Refresh: refresh, Report: report}); err != nil {
					report(err)
				}
			}()
			t.Cleanup(func() { cancel(); <-done })
			return l
		},
		Put: put,
		PutQuietly: func(t *testing.T, id int, r storetest.Row) {
			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // committed below
			// A session that fires no trigger: the write is not notified.
			if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO limitgen_numbers (id, rule, plan, key, rate, burst, active) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
				id, r.Rule, r.Plan, r.Key, r.Rate, r.Burst, r.Active); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		},
		Delete:  func(t *testing.T, id int) { exec(t, "DELETE FROM limitgen_numbers WHERE id = $1", id) },
		RowName: func(id int) string { return "limitgen_numbers id " + strconv.Itoa(id) },
	}
	f := storetest.SourceConvergence(t, src)
	t.Logf("PostgreSQL numbers table: %v", f)
}

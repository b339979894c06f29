package redisstore_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The numbers hash on one redis-server, watched by eight instances
// (storetest.SourceConvergence).
func TestNumbersHash(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	row := func(r storetest.Row) redisstore.NumbersRow {
		return redisstore.NumbersRow{Rule: r.Rule, Plan: r.Plan, Key: r.Key, Rate: r.Rate, Burst: r.Burst, Active: r.Active}
	}
	const refresh = 500 * time.Millisecond
	src := storetest.Source{
		Refresh: refresh,
		Instance: func(t *testing.T, report func(error)) *sharedlimits.Limits {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			st, err := redisstore.New(ctx, c, redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			l := sharedlimits.New(sharedlimits.WithStore(st))
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := redisstore.Numbers(wctx, c, l.ApplyNumbers, redisstore.NumbersOptions{Refresh: refresh, Report: report}); err != nil {
					report(err)
				}
			}()
			t.Cleanup(func() { cancel(); <-done })
			return l
		},
		Put: func(t *testing.T, id int, r storetest.Row) {
			if err := redisstore.PutNumbers(ctx, admin, "", strconv.Itoa(id), row(r)); err != nil {
				t.Fatal(err)
			}
		},
		PutQuietly: func(t *testing.T, id int, r storetest.Row) {
			v, err := json.Marshal(row(r))
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.HSet(ctx, redisstore.DefaultNumbersHash, strconv.Itoa(id), v).Err(); err != nil {
				t.Fatal(err)
			}
		},
		Delete: func(t *testing.T, id int) {
			if err := redisstore.DeleteNumbers(ctx, admin, "", strconv.Itoa(id)); err != nil {
				t.Fatal(err)
			}
		},
		RowName: func(id int) string { return redisstore.DefaultNumbersHash + " field " + strconv.Itoa(id) },
	}
	f := storetest.SourceConvergence(t, src)
	t.Logf("Redis numbers hash: %v", f)
}

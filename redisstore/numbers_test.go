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
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	f := storetest.SourceConvergence(t, numbersSource(admin, func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	}))
	t.Logf("Redis numbers hash: %v", f)
}

// The numbers hash on a Cluster of three masters: PutNumbers's transaction
// (HSET and PUBLISH) runs on the hash's master, the message reaches
// subscribers on every node, and eight instances with Cluster clients
// converge as on one server.
func TestNumbersHashCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { admin.Close() })
	f := storetest.SourceConvergence(t, numbersSource(admin, func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	}))
	t.Logf("Redis Cluster numbers hash: %v", f)
}

// numbersSource is the numbers hash as storetest.SourceConvergence drives
// it: rows written through admin, instances on clients newClient makes.
func numbersSource(admin redis.UniversalClient, newClient func() redis.UniversalClient) storetest.Source {
	ctx := context.Background()
	row := func(r storetest.Row) redisstore.NumbersRow {
		return redisstore.NumbersRow{Rule: r.Rule, Plan: r.Plan, Key: r.Key, Rate: r.Rate, Burst: r.Burst, Active: r.Active}
	}
	const refresh = 500 * time.Millisecond
	return storetest.Source{
		Refresh: refresh,
		Instance: func(t *testing.T, report func(error)) *sharedlimits.Limits {
			c := newClient()
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
}

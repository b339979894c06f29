package redisstore_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/overlay"
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

// A numbers hash that is gone (FLUSHALL: a Redis restarted without its data)
// after a reload found it leaves the numbers in force and is reported at
// every reload until it is written again; a hash whose last row was deleted
// with DeleteNumbers keeps its marker and is applied as empty, on purpose.
// The marker is no row id.
func TestNumbersHashGone(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	var mu sync.Mutex
	var applied []int // the size of each Set applied
	var reports []string
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		redisstore.Numbers(wctx, c, func(s overlay.Set) error { //nolint:errcheck // returns nil when ctx ends
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, len(s))
			return nil
		}, redisstore.NumbersOptions{Refresh: 20 * time.Millisecond, Report: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, err.Error())
		}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	last := func() (size, n int, said []string) {
		mu.Lock()
		defer mu.Unlock()
		if len(applied) > 0 {
			size = applied[len(applied)-1]
		}
		return size, len(applied), slices.Clone(reports)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				size, n, said := last()
				t.Fatalf("not within 5 s: %s (last Set applied of %d entries, %d applied, reports %q)", what, size, n, said)
			}
		}
	}
	row := redisstore.NumbersRow{Rule: "PerUser", Rate: "5/min", Burst: 5, Active: true}
	put := func(id string) {
		t.Helper()
		if err := redisstore.PutNumbers(ctx, c, "", id, row); err != nil {
			t.Fatal(err)
		}
	}
	put("1")
	waitFor("row 1 applied", func() bool { size, _, _ := last(); return size == 1 })
	if err := redisstore.DeleteNumbers(ctx, c, "", "1"); err != nil {
		t.Fatal(err)
	}
	waitFor("the emptied hash applied", func() bool { size, _, _ := last(); return size == 0 })
	put("1")
	waitFor("row 1 applied again", func() bool { size, _, _ := last(); return size == 1 })
	_, before, _ := last()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor("the gone hash reported twice", func() bool {
		_, _, said := last()
		return len(said) >= 2 && strings.Contains(said[1], "is gone")
	})
	if size, n, said := last(); size != 1 || n != before {
		t.Fatalf("after FLUSHALL: %d Sets applied since (last of %d entries), reports %q; want none, the numbers kept", n-before, size, said)
	}
	put("2")
	waitFor("row 2 applied after the hash was written again", func() bool { size, n, _ := last(); return n > before && size == 1 })
	for _, err := range []error{
		redisstore.PutNumbers(ctx, c, "", redisstore.NumbersMarker, row),
		redisstore.DeleteNumbers(ctx, c, "", redisstore.NumbersMarker),
	} {
		if err == nil || !strings.Contains(err.Error(), "marker") {
			t.Errorf("the marker as a row id: %v", err)
		}
	}
}

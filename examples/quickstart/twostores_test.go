package main

import (
	"context"
	"strings"
	"testing"

	"example.com/quickstart/twostores"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestTwoStores runs twostores.yaml's package with its rules on two real
// stores at once: Checkouts on a redis-server (the default store), Invoices
// and the InvoiceQuota window on PostgreSQL (the store named billing), both
// started here on 127.0.0.1. Two instances share both. The Checkout tier
// (PerInstance, local; Checkouts; Invoices) is all or nothing across the
// process and the two stores; each bucket lives on its own store only; a
// package given no billing store says so and checks nothing there.
func TestTwoStores(t *testing.T) {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: startRedis(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	rs, err := redisstore.New(ctx, client, redisstore.Options{Coalesce: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	pool := pgtest.Start(t).Pool(t)
	ps, err := pgstore.New(ctx, pool, pgstore.Options{Coalesce: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ps.Close)
	instance := func() *twostores.Limits {
		l := twostores.New(twostores.WithStore(rs), twostores.WithStoreFor(twostores.StoreBilling, ps))
		if err := l.SharedErr(); err != nil {
			t.Fatalf("SharedErr with both stores: %v", err)
		}
		return l
	}
	a, b := instance(), instance()

	// Invoices allows 2 for ann across both instances; the third and fourth
	// checkouts are denied by it, on PostgreSQL, after Checkouts took on
	// Redis: Checkouts gets them back.
	var got []string
	for i := range 4 {
		res := []*twostores.Limits{a, b}[i%2].Checkout(ctx, "ann", "ann", "ann")
		if res.Degraded || res.Err != nil {
			t.Fatalf("checkout %d degraded: %v", i, res.Err)
		}
		if res.Allowed {
			got = append(got, "ok")
		} else {
			got = append(got, res.DeniedBy.String())
		}
	}
	if s, want := strings.Join(got, " "), "ok ok Invoices Invoices"; s != want {
		t.Fatalf("checkouts: %s; want %s", s, want)
	}
	if res := b.Checkouts.AllowN(ctx, "ann", 1); !res.Allowed || res.Remaining != 0 {
		t.Errorf("Checkouts on Redis after 2 admitted and 2 given back: %+v; want exactly 1 left", res)
	}

	// Each bucket is on its store: Redis holds Checkouts' and no Invoices';
	// PostgreSQL holds Invoices' and no Checkouts'.
	keys := func(pattern string) int {
		ks, err := client.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(ks)
	}
	rows := func(like string) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM limitgen_buckets WHERE r LIKE $1", like).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if keys("*Checkouts*") == 0 || keys("*Invoices*") != 0 || rows("%Invoices%") == 0 || rows("%Checkouts%") != 0 {
		t.Errorf("buckets: Redis %d Checkouts, %d Invoices; PostgreSQL %d Invoices, %d Checkouts rows; want each rule on its store only",
			keys("*Checkouts*"), keys("*Invoices*"), rows("%Invoices%"), rows("%Checkouts%"))
	}

	// The window on billing: 4 an hour for ann across both instances.
	admitted := 0
	for i := range 6 {
		if []*twostores.Limits{a, b}[i%2].InvoiceQuota.Allow(ctx, "ann") {
			admitted++
		}
	}
	var windows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM limitgen_buckets_windows").Scan(&windows); err != nil {
		t.Fatal(err)
	}
	if admitted != 4 || windows == 0 || keys("*InvoiceQuota*") != 0 {
		t.Errorf("InvoiceQuota: %d of 6 admitted, %d window rows on PostgreSQL, %d keys on Redis; want 4, on PostgreSQL only", admitted, windows, keys("*InvoiceQuota*"))
	}

	// Without the billing store, New says which is missing, and the shared
	// rules decide in this process (each result saying so).
	c := twostores.New(twostores.WithStore(rs))
	if err := c.SharedErr(); err == nil || !strings.Contains(err.Error(), `"billing"`) {
		t.Errorf("SharedErr without the billing store: %v; want it named", err)
	}
	if res := c.Checkout(ctx, "bob", "bob", "bob"); res.Err == nil {
		t.Errorf("a checkout without the billing store: %+v; want its Err set", res)
	}
}

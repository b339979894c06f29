package limitgrpc_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/limitgrpc/internal/grpclimits"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func list(t *testing.T, c healthpb.HealthClient, tenant string, md ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), append([]string{"x-tenant", tenant}, md...)...), 10*time.Second)
	defer cancel()
	_, err := c.List(ctx, &healthpb.HealthListRequest{})
	return err
}

// TestSharedOnStore: List's rule, Tenants (burst 4, shared, on_failure
// deny, keyed by a tenant and a region), is decided by a PostgreSQL server
// the test starts: two instances, each a gRPC server with its own Limits over
// one store, admit 4 calls of a tenant and region between them, whichever
// they reach. With the server stopped, every
// call is denied (degraded) and counted so. An instance given no store
// decides the rule in its own process with the whole limit, as the
// generated package documents, and says so: SharedErr wraps
// shared.ErrNoStore, and each decision's event carries "no_store".
func TestSharedOnStore(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	pool := srv.Pool(t)
	st, err := pgstore.New(ctx, pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	a := start(t, grpclimits.New(grpclimits.WithStore(st)), nil, nil)
	b := start(t, grpclimits.New(grpclimits.WithStore(st)), nil, nil)
	ca, cb := a.client(t, ""), b.client(t, "")
	allowed := 0
	for i := range 10 {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		switch err := list(t, c, "acme"); status.Code(err) {
		case codes.OK:
			allowed++
		case codes.ResourceExhausted:
		default:
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if allowed != 4 {
		t.Errorf("tenant acme: %d of 10 calls admitted over two instances, want 4 (the shared burst)", allowed)
	}
	if err := list(t, cb, "globex"); err != nil {
		t.Errorf("another tenant: %v", err)
	}
	// Its key is composite: (tenant, region), the region from x-region or
	// else the method. Acme in region eu is a key of its own: 4 more.
	allowed = 0
	for i := range 6 {
		if list(t, []healthpb.HealthClient{ca, cb}[i%2], "acme", "x-region", "eu") == nil {
			allowed++
		}
	}
	if allowed != 4 {
		t.Errorf("tenant acme in region eu: %d of 6 calls admitted, want 4", allowed)
	}
	if err := list(t, ca, ""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no tenant: %v, want Unauthenticated", err)
	}

	srv.Stop()
	for i := range 3 {
		err := list(t, ca, "initech")
		if status.Code(err) != codes.Unavailable {
			t.Errorf("store down, call %d: %v, want Unavailable (on_failure: deny: an outage, not a quota)", i, err)
			continue
		}
		var retry *errdetails.RetryInfo
		for _, d := range status.Convert(err).Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				retry = d
			case *errdetails.QuotaFailure:
				t.Errorf("store down, call %d: a QuotaFailure (%v) on an outage", i, d)
			}
		}
		if retry == nil || retry.RetryDelay.AsDuration() <= 0 {
			t.Errorf("store down, call %d: RetryInfo %v, want a wait", i, retry)
		}
	}
	if n := degraded(a); n != 3 {
		t.Errorf("instance a: %d degraded denials counted, want 3", n)
	}

	var mu sync.Mutex // the observer runs on the server's goroutines
	var classes []string
	none := start(t, grpclimits.New(), nil, func(g *grpclimits.GRPC) {
		g.Config.Observer = verdict.ObserverFunc(func(e verdict.Event) {
			mu.Lock()
			classes = append(classes, e.StoreError)
			mu.Unlock()
		})
	})
	if err := none.lims.SharedErr(); !errors.Is(err, shared.ErrNoStore) {
		t.Errorf("no store: SharedErr %v, want ErrNoStore", err)
	}
	c := none.client(t, "")
	allowed = 0
	for range 6 {
		if list(t, c, "acme") == nil {
			allowed++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if allowed != 4 || !slices.Equal(classes, []string{"no_store", "no_store", "no_store", "no_store", "no_store", "no_store"}) {
		t.Errorf("no store: %d of 6 admitted, store errors %q; want 4, each no_store", allowed, classes)
	}
}

func degraded(s *service) uint64 {
	for _, c := range s.g.Config.Counters.Snapshot() {
		if c.Route == "/grpc.health.v1.Health/List" {
			return c.Outcomes[verdict.DegradedDenied]
		}
	}
	return 0
}

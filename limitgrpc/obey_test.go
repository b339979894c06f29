package limitgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitgrpc"
	"github.com/limitgen/limitgen/limitgrpc/internal/grpclimits"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// obeyed serves Checks at tokens a second (burst burst) on the real clock,
// with the RateLimit metadata on every call (testdata/policy.yaml's
// metadata: all) or on denials only, and returns a client whose
// interceptors are an Obey's, and the server's admitted and denied counts.
func obeyed(t *testing.T, tokens, burst int64, style limitgrpc.MetadataStyle) (healthpb.HealthClient, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	lims := grpclimits.New()
	if err := lims.Checks.SetNumbers(grpclimits.PlanFree, atomicbucket.Numbers{Tokens: tokens, Period: time.Second, Burst: burst}, atomicbucket.CarryAsIs); err != nil {
		t.Fatal(err)
	}
	var admitted, denied atomic.Int64
	s := start(t, lims, nil, func(g *grpclimits.GRPC) {
		g.Config.Metadata = style
		g.Config.Observer = verdict.ObserverFunc(func(e verdict.Event) {
			switch e.Outcome {
			case verdict.Allowed:
				admitted.Add(1)
			case verdict.Denied:
				denied.Add(1)
			}
		})
	})
	o := &limitgrpc.Obey{}
	cc, err := grpc.NewClient(s.addr, append(o.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc), &admitted, &denied
}

// TestObeyPacesGRPC: a client with Obey's interceptors calls as fast as it
// can for 2 s a method limited to 10 a second (burst 20) whose answers carry
// the RateLimit metadata: none of its calls is denied, and at least 95% of
// what the limit allows in that time is admitted.
func TestObeyPacesGRPC(t *testing.T) {
	t.Parallel() // it waits on the real clock, as the others that do
	c, admitted, denied := obeyed(t, 10, 20, limitgrpc.MetadataAll)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "pacer")
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	quota := 20 + int64(10*took.Seconds())
	if denied.Load() != 0 || admitted.Load() < quota*95/100 {
		t.Errorf("in %v: %d admitted, %d denied; want 0 denied and at least 95%% of %d", took, admitted.Load(), denied.Load(), quota)
	}
	t.Logf("in %v: %d admitted of %d admissible, %d denied", took, admitted.Load(), quota, denied.Load())
}

// TestObeyRetriesGRPC: with the fields on denials only (the default), the
// client learns of the limit from its first denial; Obey waits the
// pushback and sends the call again, so every call succeeds, at the limit's
// rate (5 a second, burst 3, the most a Check may cost: 8 calls in about
// 1 s).
func TestObeyRetriesGRPC(t *testing.T) {
	t.Parallel() // it waits on the real clock, as the others that do
	c, admitted, denied := obeyed(t, 5, 3, limitgrpc.MetadataDenials)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "retrier")
	start := time.Now()
	for i := range 8 {
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	took := time.Since(start)
	if admitted.Load() != 8 || took < 900*time.Millisecond || took > 3*time.Second {
		t.Errorf("8 calls: %d admitted, %d denied, in %v; want 8 admitted in about 1 s", admitted.Load(), denied.Load(), took)
	}
	t.Logf("8 calls in %v, %d denials waited out", took, denied.Load())
}

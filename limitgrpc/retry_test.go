package limitgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitgrpc/internal/grpclimits"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// retryConfig is a service config whose retry policy retries
// RESOURCE_EXHAUSTED, as a grpc-go user writes one: up to 5 attempts, with
// backoffs far shorter than the limit's wait, so that only the server's
// pushback can space the attempts right.
const retryConfig = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
  "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s", "maxBackoff": "0.002s",
    "backoffMultiplier": 2, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`

// TestGRPCRetryObeysPushback: grpc-go's own retry policy, given a service
// config that retries RESOURCE_EXHAUSTED, succeeds through a limit of 5 a
// second (burst 3): each denial is trailers-only with
// grpc-retry-pushback-ms, which grpc-go waits before the next attempt. 12
// calls in a row all succeed, in about 9/5 s, and the server denies each
// call at most once (a retry is never early), where without the pushback the
// attempts' millisecond backoffs would spend all 5 attempts at once.
func TestGRPCRetryObeysPushback(t *testing.T) {
	t.Parallel() // it waits on the real clock, as the others that do
	lims := grpclimits.New()
	// Burst 3: the most a Check may cost (x-cost up to 3), below which the
	// numbers are refused.
	if err := lims.Checks.SetNumbers(grpclimits.PlanFree, atomicbucket.Numbers{Tokens: 5, Period: time.Second, Burst: 3}, atomicbucket.CarryAsIs); err != nil {
		t.Fatal(err)
	}
	var denials atomic.Int64
	s := start(t, lims, nil, func(g *grpclimits.GRPC) {
		g.Config.Metadata = 0 // the default: the fields on denials, in their trailers
		g.Config.Observer = verdict.ObserverFunc(func(e verdict.Event) {
			if e.Outcome == verdict.Denied {
				denials.Add(1)
			}
		})
	})
	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(retryConfig))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	c := healthpb.NewHealthClient(cc)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "retrier")
	const calls = 12
	start := time.Now()
	for i := range calls {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v (grpc-go did not retry after the pushback)", i+1, err)
		}
	}
	took := time.Since(start)
	// The first three calls take the burst; each later one waits 200 ms.
	if took < (calls-3)*200*time.Millisecond-50*time.Millisecond || took > 10*time.Second {
		t.Errorf("%d calls took %v, want about %v", calls, took, (calls-3)*200*time.Millisecond)
	}
	if d := denials.Load(); d > calls {
		t.Errorf("%d denials for %d calls: a retry came before the pushback's wait", d, calls)
	}
	t.Logf("%d calls in %v, %d denials retried", calls, took, denials.Load())
}

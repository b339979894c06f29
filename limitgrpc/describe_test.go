package limitgrpc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitgrpc"
	"github.com/limitgen/limitgen/limitgrpc/internal/grpclimits"
	"github.com/limitgen/limitgen/limithttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A QuotaFailure says what the policy says: its rate and burst, not the
// RateLimit fields' quota over a window ("10 per 20 s" for 30/min, burst 10).
func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		l    atomicbucket.Limit
		want string
	}{
		{atomicbucket.Limit{Tokens: 30, Period: time.Minute, Burst: 10}, "30/min, burst 10"},
		{atomicbucket.Limit{Tokens: 5, Period: 10 * time.Second, Burst: 5}, "5 per 10s, burst 5"},
		{atomicbucket.Limit{Tokens: 100, Period: 24 * time.Hour, Burst: 100}, "100/d, burst 100"},
		{atomicbucket.Limit{Tokens: 2000, Period: time.Second, Burst: 4000}, "2000/s, burst 4000"},
	} {
		if got := limitgrpc.Describe(c.l); got != c.want {
			t.Errorf("Describe(%+v) = %q, want %q", c.l, got, c.want)
		}
	}
}

// A hook's key longer than MaxKeyLen is no key, as metadata's is: the call
// ends with the policy's missing_key code, and no bucket is made.
func TestHookKeyTooLong(t *testing.T) {
	lims := grpclimits.New()
	g, err := grpclimits.NewGRPC(lims, grpclimits.GRPCHooks{
		UserID: func(context.Context) (string, bool) { return strings.Repeat("u", limithttp.MaxKeyLen+1), true },
		PlanOf: func(context.Context) (grpclimits.Plan, bool) { return grpclimits.PlanFree, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	g.Config.Observer = nil
	called := false
	_, err = g.UnaryInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"},
		func(context.Context, any) (any, error) { called = true; return nil, nil })
	if status.Code(err) != codes.Unauthenticated || called {
		t.Errorf("a %d-byte key from the hook: %v (handler called: %v), want Unauthenticated (missing_key)", limithttp.MaxKeyLen+1, err, called)
	}
	if n := lims.Checks.Len(); n != 0 {
		t.Errorf("%d Checks buckets made for an over-long key", n)
	}
}

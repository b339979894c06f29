package limitgrpc_test

import (
	"context"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/limitgrpc/internal/grpclimits"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A hook's key longer than MaxKeyLen is no key, as metadata's is: the call
// ends with the policy's missing_key code, and no bucket is made.
func TestHookKeyTooLong(t *testing.T) {
	lims := grpclimits.New()
	g, err := grpclimits.NewGRPC(lims, grpclimits.GRPCHooks{
		UserID: func(context.Context) (string, bool) { return strings.Repeat("u", verdict.MaxKeyLen+1), true },
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
		t.Errorf("a %d-byte key from the hook: %v (handler called: %v), want Unauthenticated (missing_key)", verdict.MaxKeyLen+1, err, called)
	}
	if n := lims.Checks.Len(); n != 0 {
		t.Errorf("%d Checks buckets made for an over-long key", n)
	}
}

package main

import (
	"context"
	"net"
	"testing"
	"time"

	"example.com/quickstart/limits"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestGRPC serves the health service as -grpc does, on 127.0.0.1, and calls
// it as a client would: alice (free plan) gets 10 checks, each with the
// RateLimit metadata, then ResourceExhausted with a RetryInfo; bob (pro)
// is not affected; a call without a token is Unauthenticated.
func TestGRPC(t *testing.T) {
	srv, err := newGRPC(limits.New())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := healthpb.NewHealthClient(cc)
	check := func(token string) (metadata.MD, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		var hdr metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		return hdr, err
	}
	for n := range 10 { // PerUser's free burst
		hdr, err := check("token-alice")
		if err != nil {
			t.Fatalf("alice's call %d: %v", n+1, err)
		}
		if p := hdr.Get("ratelimit-policy"); len(p) != 1 || p[0] != `"PerUser";q=10;w=60, "Global";q=2000;w=2` {
			t.Errorf("ratelimit-policy %q", p)
		}
	}
	_, err = check("token-alice")
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("alice's 11th call: %v, want ResourceExhausted", err)
	}
	var retry time.Duration
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.RetryDelay.AsDuration()
		}
	}
	// 10/min: a token 6 s after the first call (less the time the calls
	// took), jitter up to 50%, to the millisecond.
	if retry < 5*time.Second || retry > 9*time.Second || retry%time.Millisecond != 0 {
		t.Errorf("RetryInfo %v, want 5 s to 9 s in whole milliseconds", retry)
	}
	if _, err := check("token-bob"); err != nil {
		t.Errorf("bob: %v", err)
	}
	if _, err := check(""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v, want Unauthenticated", err)
	}
}

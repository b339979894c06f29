package limitgrpc_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitgrpc"
	"github.com/limitgen/limitgen/limitgrpc/internal/slotlimits"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// slowHealth is a health service whose Check waits until release is closed,
// and whose Watch sends one answer and then waits until the stream ends.
type slowHealth struct {
	healthpb.UnimplementedHealthServer
	release chan struct{}
	running chan struct{}
}

func (h *slowHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.running <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *slowHealth) Watch(_ *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	h.running <- struct{}{}
	if err := ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	<-ss.Context().Done()
	return nil
}

// slotService serves slowHealth on 127.0.0.1 behind the interceptors
// generated from testdata/slots.yaml, with their clock standing at now.
func slotService(t *testing.T) (*slotlimits.Limits, *slotlimits.GRPC, *slowHealth, healthpb.HealthClient, atomicbucket.Time) {
	t.Helper()
	lims := slotlimits.New()
	g, err := slotlimits.NewGRPC(lims)
	if err != nil {
		t.Fatal(err)
	}
	now := atomicbucket.Time(time.Hour)
	g.Clock = func() atomicbucket.Time { return now }
	h := &slowHealth{release: make(chan struct{}), running: make(chan struct{}, 8)}
	srv := grpc.NewServer(g.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return lims, g, h, healthpb.NewHealthClient(cc), now
}

func user(u string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-user", u)
}

// TestSlotsUnary: a user's third Check while two run is ended
// ResourceExhausted, with the wait until the first reaches max_hold in its
// RetryInfo and trailers; the slots come back when the calls end.
func TestSlotsUnary(t *testing.T) {
	lims, g, h, client, now := slotService(t)
	done := make(chan error, 3)
	for range 2 {
		go func() {
			_, err := client.Check(user("alice"), &healthpb.HealthCheckRequest{})
			done <- err
		}()
		<-h.running
	}
	var trailer metadata.MD
	_, err := client.Check(user("alice"), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	var retry time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.RetryDelay.AsDuration()
		}
	}
	if st.Code() != codes.ResourceExhausted || retry != time.Minute ||
		first(trailer, "grpc-retry-pushback-ms") != "60000" || first(trailer, "retry-after") != "60" || first(trailer, "ratelimit") != "" {
		t.Fatalf("a third Check: %v, RetryInfo %v, trailer %v; want ResourceExhausted, 1m, pushback 60000, retry-after 60, no RateLimit", err, retry, trailer)
	}
	go func() {
		_, err := client.Check(user("bob"), &healthpb.HealthCheckRequest{})
		done <- err
	}()
	<-h.running // bob has slots of his own
	close(h.release)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// The calls have ended; the interceptor released their slots when the
	// handlers returned, before the responses were sent.
	if d := lims.Checks.PeekAt("alice", now); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after alice's calls ended, a peek: %+v, want both slots free", d)
	}
	for range 2 {
		if _, err := client.Check(user("alice"), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("a Check after the first two ended: %v", err)
		}
		<-h.running
	}
	// Alice's fifth admitted Check would need a fifth CheckRate token: the
	// third, refused by its slot, took none. The rate refuses it, and its
	// slot comes back at once.
	_, err = client.Check(user("alice"), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(first(trailer, "ratelimit"), "CheckRate") {
		t.Fatalf("alice's Check with her CheckRate tokens spent: %v, trailer %v; want ResourceExhausted by CheckRate", err, trailer)
	}
	if d := lims.Checks.PeekAt("alice", now); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after a Check the rate refused, alice's slots: %+v, want both free", d)
	}
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a Check without a user: %v, want Unauthenticated", err)
	}
	counted := false
	for _, c := range g.Config.Counters.Snapshot() {
		if c.Rule == "Checks" {
			counted = true
			if c.Outcomes[verdict.Allowed] != 6 || c.Outcomes[verdict.Denied] != 1 || c.Outcomes[verdict.MissingKey] != 1 {
				t.Fatalf("Checks' counts: %v, want 6 allowed (5 ran, 1 given back when the rate refused), 1 denied, 1 without a key", c.Outcomes)
			}
		}
	}
	if !counted {
		t.Fatal("no series for Checks")
	}
}

// TestSlotsStream: a Watch stream holds the one slot while it is open; a
// second is refused, and once the first ends a new one opens.
func TestSlotsStream(t *testing.T) {
	lims, _, h, client, now := slotService(t)
	ctx, cancel := context.WithCancel(context.Background())
	w1, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w1.Recv(); err != nil {
		t.Fatal(err)
	}
	<-h.running
	w2, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w2.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second Watch while one is open: %v, want ResourceExhausted", err)
	}
	cancel() // the first stream ends: its handler returns
	for deadline := time.Now().Add(5 * time.Second); !lims.Watches.PeekAt(now).Allowed; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first Watch ended and its slot did not come back")
		}
	}
	ctx3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	w3, err := client.Watch(ctx3, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w3.Recv(); err != nil {
		t.Fatalf("a Watch after the first ended: %v", err)
	}
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// TestHoldOutage: an acquisition a shared in-flight rule's outage denied
// (its store down, on_failure: deny) ends the call Unavailable, with a
// RetryInfo and no QuotaFailure (an outage, not a quota), counted
// degraded_denied; a degraded admission lets the call on, counted
// degraded_allowed.
func TestHoldOutage(t *testing.T) {
	c := limitgrpc.Config{}
	c.Counters = verdict.NewCounters(verdict.Series{Route: "/x.v1.X/Run", Rule: "Running"})
	ev := verdict.Event{Route: "/x.v1.X/Run", Rule: "Running", Series: 0, Cost: 1}
	down := &verdict.Result{Decision: atomicbucket.Decision{RetryAfter: time.Second}, Degraded: true, Outage: true, Err: errors.New("store down")}
	err := c.Hold(context.Background(), verdict.Enforce, down, "quota message", ev)
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || strings.Contains(st.Message(), "quota message") {
		t.Fatalf("an outage's denial: %v", err)
	}
	var retry bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d.RetryDelay.AsDuration() == time.Second
		case *errdetails.QuotaFailure:
			t.Errorf("an outage's denial carries a QuotaFailure: %v", d)
		}
	}
	if !retry {
		t.Errorf("an outage's denial without a RetryInfo of 1s: %v", st.Details())
	}
	if err := c.Hold(context.Background(), verdict.Enforce, &verdict.Result{Decision: atomicbucket.Decision{Allowed: true}, Degraded: true}, "m", ev); err != nil {
		t.Fatalf("a degraded admission: %v", err)
	}
	o := c.Counters.Snapshot()[0].Outcomes
	if o[verdict.DegradedDenied] != 1 || o[verdict.DegradedAllowed] != 1 || o[verdict.Denied] != 0 {
		t.Errorf("counts: %v, want 1 degraded_denied and 1 degraded_allowed", o)
	}
}

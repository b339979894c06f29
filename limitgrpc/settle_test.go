package limitgrpc_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitgrpc"
	"github.com/limitgen/limitgen/limitgrpc/internal/settlelimits"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// usingHealth reports the tokens a call "used" as its x-use metadata says,
// in the trailer x-tokens-used: Check with grpc.SetTrailer on its context,
// Watch with the stream's SetTrailer after its one answer. No x-use: no
// trailer.
type usingHealth struct {
	healthpb.UnimplementedHealthServer
}

func used(ctx context.Context) (metadata.MD, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-use"); len(v) > 0 {
		return metadata.Pairs("x-tokens-used", v[0]), true
	}
	return nil, false
}

func (usingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if md, ok := used(ctx); ok {
		grpc.SetTrailer(ctx, md)
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// List reports the tokens it used through its context (verdict.ReportCost),
// as x-use says.
func (usingHealth) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-use"); len(v) > 0 {
		n, _ := strconv.ParseInt(v[0], 10, 64)
		if !verdict.ReportCost(ctx, n) {
			return nil, status.Error(codes.Internal, "ReportCost found no cell")
		}
	}
	return &healthpb.HealthListResponse{}, nil
}

func (usingHealth) Watch(_ *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	if err := ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	if md, ok := used(ss.Context()); ok {
		ss.SetTrailer(md)
	}
	return nil
}

// TestSettle: testdata/settle.yaml's entries on a gRPC server on loopback,
// its clock standing still: Check admitted at x-max-tokens and settled from
// the trailer its handler set with grpc.SetTrailer (a refund; no trailer,
// which keeps the estimate; a debt, which refuses the next call), and
// Watch, a server stream admitted at 50 and settled from the trailer set on
// the stream.
func TestSettle(t *testing.T) {
	lims := settlelimits.New()
	g, err := settlelimits.NewGRPC(lims)
	if err != nil {
		t.Fatal(err)
	}
	now := atomicbucket.Time(time.Hour)
	g.Clock = func() atomicbucket.Time { return now }
	srv := grpc.NewServer(g.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, usingHealth{})
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
	client := healthpb.NewHealthClient(cc)
	held := func() int64 { return lims.Tokens.PeekAt("ann", now, 0).Remaining }
	check := func(kv ...string) error {
		ctx := metadata.AppendToOutgoingContext(context.Background(), append([]string{"x-user", "ann"}, kv...)...)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check("x-max-tokens", "1000", "x-use", "100"); err != nil {
		t.Fatal(err)
	}
	if got := held(); got != 900 {
		t.Fatalf("after a call of 1000 that used 100: %d held, want 900", got)
	}
	if err := check("x-max-tokens", "300"); err != nil { // no trailer: the estimate stays taken
		t.Fatal(err)
	}
	if got := held(); got != 600 {
		t.Fatalf("after a call of 300 with no trailer: %d held, want 600", got)
	}
	// Watch: 50 at its opening, 10 used.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "ann", "x-use", "10")
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if got := stream.Trailer().Get("x-tokens-used"); len(got) != 1 || got[0] != "10" {
		t.Fatalf("the client's trailer: %v", got)
	}
	if got := held(); got != 590 {
		t.Fatalf("after a stream of 50 that used 10: %d held, want 590", got)
	}
	// 590 held: a call of 500 leaves 90, and using 600 owes 10.
	if err := check("x-max-tokens", "500", "x-use", "600"); err != nil {
		t.Fatal(err)
	}
	err = check("x-max-tokens", "1")
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("in debt: %v, want ResourceExhausted", err)
	}
	if d := lims.Tokens.PeekAt("ann", now, 1); d.RetryAfter != 11*time.Second {
		t.Fatalf("in debt by 10: a token in %v, want 11s", d.RetryAfter)
	}
	if st := g.SettleStats(); st != (verdict.SettleStats{Settled: 3, Kept: 1}) {
		t.Fatalf("settle stats %+v, want 3 settled and 1 kept", st)
	}
	// List settles from what its handler reports through its context.
	now = now.Add(time.Hour) // bob's bucket full
	list := func(kv ...string) error {
		ctx := metadata.AppendToOutgoingContext(context.Background(), append([]string{"x-user", "bob"}, kv...)...)
		_, err := client.List(ctx, &healthpb.HealthListRequest{})
		return err
	}
	if err := list("x-max-tokens", "800", "x-use", "30"); err != nil {
		t.Fatal(err)
	}
	if got := lims.Tokens.PeekAt("bob", now, 0).Remaining; got != 970 {
		t.Fatalf("after a List of 800 that reported 30: %d held, want 970", got)
	}
	// The tier's window of the day gives back from what it counted at the
	// check: the door carried the check's time to the settlement.
	if got := lims.Daily.PeekAt("bob", now, 0).Remaining; got != 5000-30 {
		t.Fatalf("the day's window after a List of 800 that reported 30: %d left, want %d", got, 5000-30)
	}
	if st := g.SettleStats(); st != (verdict.SettleStats{Settled: 4, Kept: 1}) {
		t.Fatalf("settle stats %+v, want 4 settled and 1 kept", st)
	}
}

func TestTrailerCost(t *testing.T) {
	for _, c := range []struct {
		md   metadata.MD
		want int64
		ok   bool
	}{
		{metadata.Pairs("x-used", "42"), 42, true},
		{metadata.Pairs("x-used", "0"), 0, true},
		{metadata.Pairs("x-used", "-1"), 0, false},
		{metadata.Pairs("x-other", "7"), 0, false},
		{nil, 0, false},
	} {
		if got, ok := limitgrpc.TrailerCost(c.md, "x-used"); got != c.want || ok != c.ok {
			t.Errorf("TrailerCost(%v) = %d, %v; want %d, %v", c.md, got, ok, c.want, c.ok)
		}
	}
}

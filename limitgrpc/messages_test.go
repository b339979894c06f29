package limitgrpc_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitgrpc/internal/msglimits"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// messageServer serves grpc's health and reflection services behind the
// interceptors generated from testdata/messages.yaml, on 127.0.0.1; now,
// when set, is their clock. denials counts the denied decisions.
func messageServer(t *testing.T, now *atomicbucket.Time, denials *atomic.Int64) (*health.Server, *grpc.ClientConn) {
	t.Helper()
	g, err := msglimits.NewGRPC(msglimits.New())
	if err != nil {
		t.Fatal(err)
	}
	g.Config.Observer = verdict.ObserverFunc(func(e verdict.Event) {
		if e.Outcome == verdict.Denied {
			denials.Add(1)
		}
	})
	if now != nil {
		g.Clock = func() atomicbucket.Time { return atomicbucket.Time(atomic.LoadInt64((*int64)(now))) }
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(g.ServerOptions()...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return hs, cc
}

// TestStreamMessagesEnd: Watch counts the messages it sends (Updates: burst
// 3, a minute a token, on a fixed clock): the stream's opening takes a
// token, its first two status messages the other two; the third ends the
// stream with ResourceExhausted, a RetryInfo of the wait (a minute: the
// clock does not move) and the pushback, and is never sent.
func TestStreamMessagesEnd(t *testing.T) {
	var now atomicbucket.Time
	var denials atomic.Int64
	hs, cc := messageServer(t, &now, &denials)
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-user", "u"), 10*time.Second)
	defer cancel()
	st, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first message: %v, %v", m, err)
	}
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
	if m, err := st.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("second message: %v, %v", m, err)
	}
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	m, err := st.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third message: %v, %v; want the stream ended with ResourceExhausted", m, err)
	}
	if ri, _ := details(t, err); ri == nil || ri.RetryDelay.AsDuration() != time.Minute {
		t.Errorf("RetryInfo %v, want a minute", ri)
	}
	if pb := st.Trailer().Get("grpc-retry-pushback-ms"); len(pb) != 1 || pb[0] != "60000" {
		t.Errorf("trailer %v, want grpc-retry-pushback-ms 60000", st.Trailer())
	}
	if d := denials.Load(); d != 1 {
		t.Errorf("%d denials observed, want 1", d)
	}
}

// TestStreamMessagesPace: the reflection service counts the requests it
// receives and paces them (Lookups: 20 a second, burst 2, the real clock):
// 12 requests on one stream are all answered, none denied, in about the
// time the rate allows ((12+1−2)/20 s: the opening takes a token too).
func TestStreamMessagesPace(t *testing.T) {
	t.Parallel() // it waits on the real clock, as the others that do
	var denials atomic.Int64
	_, cc := messageServer(t, nil, &denials)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-user", "u"), 10*time.Second)
	defer cancel()
	start := time.Now()
	st, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	for i := range n {
		if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
	}
	took := time.Since(start)
	if want := (n + 1 - 2) * 50 * time.Millisecond; took < want-20*time.Millisecond || took > 5*time.Second {
		t.Errorf("%d paced requests took %v, want about %v", n, took, want)
	}
	if d := denials.Load(); d != 0 {
		t.Errorf("%d denials observed: a paced message is not a denial", d)
	}
}

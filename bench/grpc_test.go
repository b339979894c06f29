package bench

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/limitgen/limitgen/bench/grpclimits"
	"github.com/limitgen/limitgen/limitgrpc"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// keyedLimiter is go-grpc-middleware's ratelimit.Limiter as a service keys
// it per user: an x/time/rate limiter per x-user value, made on first use and
// kept in a sync.Map.
type keyedLimiter struct {
	limit rate.Limit
	burst int
	m     sync.Map // string → *rate.Limiter
}

var errLimited = errors.New("rate limit exceeded")

func (k *keyedLimiter) Limit(ctx context.Context) error {
	user := metadata.ValueFromIncomingContext(ctx, "x-user")
	if len(user) == 0 {
		return errors.New("no user")
	}
	l, ok := k.m.Load(user[0])
	if !ok {
		l, _ = k.m.LoadOrStore(user[0], rate.NewLimiter(k.limit, k.burst))
	}
	if !l.(*rate.Limiter).Allow() {
		return errLimited
	}
	return nil
}

// grpcCase is what every interceptor enforces per user: a limit so high that
// every call is admitted (bench/grpcpolicy.yaml: PerUser, on Check), or one
// of a call an hour whose first call takes the only token (Tight, on List).
type grpcCase struct {
	name   string
	method string
	limit  rate.Limit
	burst  int
	code   codes.Code
}

var grpcCases = []grpcCase{
	{"allowed", "/grpc.health.v1.Health/Check", 1e9, 1e9, codes.OK},
	{"denied", "/grpc.health.v1.Health/List", rate.Every(time.Hour), 1, codes.ResourceExhausted},
}

// grpcImpls are the unary interceptors measured: none (the handler alone),
// limitgen's with its default (the RateLimit fields on denials, in their
// trailers, with the pushback), with the fields on every call (metadata:
// all), without them (metadata: none: the pushback and RetryInfo alone),
// the lean denial (metadata: lean: the status and the pushback alone), and
// go-grpc-middleware's ratelimit interceptor over keyedLimiter.
var grpcImpls = []struct {
	name string
	make func(b testing.TB, c grpcCase) grpc.UnaryServerInterceptor
}{
	{"bare", func(testing.TB, grpcCase) grpc.UnaryServerInterceptor { return nil }},
	{"limitgen", func(b testing.TB, c grpcCase) grpc.UnaryServerInterceptor {
		g, err := grpclimits.NewGRPC(grpclimits.New())
		if err != nil {
			b.Fatal(err)
		}
		return g.UnaryInterceptor()
	}},
	{"limitgen-all", func(b testing.TB, c grpcCase) grpc.UnaryServerInterceptor {
		g, err := grpclimits.NewGRPC(grpclimits.New())
		if err != nil {
			b.Fatal(err)
		}
		g.Config.Metadata = limitgrpc.MetadataAll
		return g.UnaryInterceptor()
	}},
	{"limitgen-nometadata", func(b testing.TB, c grpcCase) grpc.UnaryServerInterceptor {
		g, err := grpclimits.NewGRPC(grpclimits.New())
		if err != nil {
			b.Fatal(err)
		}
		g.Config.Metadata = limitgrpc.MetadataNone
		return g.UnaryInterceptor()
	}},
	{"limitgen-lean", func(b testing.TB, c grpcCase) grpc.UnaryServerInterceptor {
		g, err := grpclimits.NewGRPC(grpclimits.New())
		if err != nil {
			b.Fatal(err)
		}
		g.Config.Metadata = limitgrpc.MetadataLean
		return g.UnaryInterceptor()
	}},
	{"grpc-middleware", func(b testing.TB, c grpcCase) grpc.UnaryServerInterceptor {
		return ratelimit.UnaryServerInterceptor(&keyedLimiter{limit: c.limit, burst: c.burst})
	}},
}

// serverStream is what a gRPC server puts in a call's context for
// grpc.SetHeader: it joins the metadata set as grpc's own transport stream
// does (metadata.Join), and is reset for every call.
type serverStream struct {
	method          string
	header, trailer metadata.MD
}

func (s *serverStream) Method() string { return s.method }
func (s *serverStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *serverStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *serverStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md) // as grpc's stream joins it
	return nil
}

// grpcHandler is the handler behind every interceptor: it does nothing.
func grpcHandler(context.Context, any) (any, error) { return nil, nil }

// BenchmarkGRPC is one unary call through each interceptor on the same
// limit, from a warmed user: allowed, or denied. The call's context is what
// a server gives its handler (incoming metadata with x-user, the peer, a
// transport stream that keeps the header metadata set), made once; the
// stream's header is cleared before every call. bare is the handler alone,
// and an interceptor's overhead is its ns/op less bare's.
func BenchmarkGRPC(b *testing.B) {
	for _, c := range grpcCases {
		b.Run("case="+c.name, func(b *testing.B) {
			for _, impl := range rotated(grpcImpls) {
				b.Run("impl="+impl.name, func(b *testing.B) {
					ic := impl.make(b, c)
					st := &serverStream{method: c.method}
					ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", "alice"))
					ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51234}})
					ctx = grpc.NewContextWithServerTransportStream(ctx, st)
					info := &grpc.UnaryServerInfo{FullMethod: c.method}
					call := func() error {
						if ic == nil {
							_, err := grpcHandler(ctx, nil)
							return err
						}
						_, err := ic(ctx, nil, info, grpcHandler)
						return err
					}
					call() // warm the key (and take the only token of a denied case)
					if err := call(); impl.name != "bare" && status.Code(err) != c.code {
						b.Fatalf("%s: %v, want %v", impl.name, err, c.code)
					}
					b.ReportAllocs()
					for b.Loop() {
						st.header, st.trailer = nil, nil
						call()
					}
				})
			}
		})
	}
}

// BenchmarkGRPCLoopback is one unary Check through a real server on
// 127.0.0.1 and a client on one connection, with each interceptor (allowed):
// what the interceptor's overhead is beside a call's.
func BenchmarkGRPCLoopback(b *testing.B) {
	c := grpcCases[0]
	for _, impl := range rotated(grpcImpls) {
		if impl.name == "limitgen-nometadata" {
			continue
		}
		b.Run("impl="+impl.name, func(b *testing.B) {
			var opts []grpc.ServerOption
			if ic := impl.make(b, c); ic != nil {
				opts = append(opts, grpc.UnaryInterceptor(ic))
			}
			client := loopback(b, opts...)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")
			if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// loopback serves grpc's health service on 127.0.0.1 with opts and returns a
// client of it; both end with the benchmark.
func loopback(b testing.TB, opts ...grpc.ServerOption) healthpb.HealthClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	b.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// TestGRPCImplsDecide checks what each interceptor answers over a real
// server: the allowed case's call passes; the denied case's second call is
// ResourceExhausted, and limitgen's carries RetryInfo and, in its trailers,
// the fields and the pushback (its allowed calls carry nothing: the
// default).
func TestGRPCImplsDecide(t *testing.T) {
	for _, c := range grpcCases {
		for _, impl := range grpcImpls[1:] {
			client := loopback(t, grpc.UnaryInterceptor(impl.make(t, c)))
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")
			call := func() (metadata.MD, metadata.MD, error) {
				var hdr, tr metadata.MD
				var err error
				if c.name == "allowed" {
					_, err = client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&tr))
				} else {
					_, err = client.List(ctx, &healthpb.HealthListRequest{}, grpc.Header(&hdr), grpc.Trailer(&tr))
				}
				return hdr, tr, err
			}
			hdr, tr, err := call()
			if c.code != codes.OK {
				hdr, tr, err = call()
			}
			if status.Code(err) != c.code {
				t.Errorf("%s %s: %v, want %v", c.name, impl.name, err, c.code)
			}
			if impl.name == "limitgen" && (len(hdr.Get("ratelimit")) != 0 || (c.code != codes.OK) != (len(tr.Get("ratelimit")) == 1 && len(tr.Get("grpc-retry-pushback-ms")) == 1)) {
				t.Errorf("%s limitgen: header %v, trailer %v; want the fields and the pushback in a denial's trailers only", c.name, hdr, tr)
			}
			if impl.name == "limitgen" && c.code != codes.OK && len(status.Convert(err).Details()) != 2 {
				t.Errorf("limitgen's denial: details %v, want RetryInfo and QuotaFailure", status.Convert(err).Details())
			}
		}
	}
}

// BenchmarkGRPCPaired is one unary call over a real transport (bufconn: gRPC's
// HTTP/2 framing and encoding, in memory) through each interceptor, measured
// in one process in 1 ms slices (paired): allowed (Check, every call
// admitted) and denied (List, every call after the first denied), from a
// warmed user. Each implementation has its own server and client on one
// connection, and its figures are its call's over bare's: the cost of its
// decision and of what it puts on the wire. bare is, allowed, a server
// without an interceptor; denied, one whose interceptor ends every call with
// the same ResourceExhausted status and nothing else (the transport's cost
// of a denial, which no limiter can go below). Denied, wire-lean and
// wire-default send limitgen's lean and default denials, made once, without
// deciding anything (replayDenial): what their content costs the transport.
func BenchmarkGRPCPaired(b *testing.B) {
	for _, c := range grpcCases {
		b.Run("case="+c.name, func(b *testing.B) {
			var impls []pairedImpl
			all := grpcImpls
			if c.code != codes.OK {
				all = append(slices.Clone(grpcImpls), []struct {
					name string
					make func(b testing.TB, c grpcCase) grpc.UnaryServerInterceptor
				}{
					{"wire-lean", func(b testing.TB, c grpcCase) grpc.UnaryServerInterceptor {
						return replayDenial(b, c, limitgrpc.MetadataLean)
					}},
					{"wire-default", func(b testing.TB, c grpcCase) grpc.UnaryServerInterceptor {
						return replayDenial(b, c, limitgrpc.MetadataDenials)
					}},
				}...)
			}
			for _, im := range all {
				var opts []grpc.ServerOption
				if ic := im.make(b, c); ic != nil {
					opts = append(opts, grpc.UnaryInterceptor(ic))
				} else if c.code != codes.OK {
					opts = append(opts, grpc.UnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
						return nil, errBareDenial
					}))
				}
				client := bufconnClient(b, opts...)
				ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")
				call := func() error {
					if c.name == "allowed" {
						_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
						return err
					}
					_, err := client.List(ctx, &healthpb.HealthListRequest{})
					return err
				}
				call() // warm the user (a denied case's first call takes the only token)
				if err := call(); status.Code(err) != c.code {
					b.Fatalf("%s: %v, want %v", im.name, err, c.code)
				}
				impls = append(impls, pairedImpl{im.name, func() { call() }})
			}
			paired(b, impls, "limitgen")
		})
	}
}

// replayDenial is the wire's share of limitgen's denial with metadata style:
// an interceptor that ends every call with the status error and trailer
// metadata limitgen's interceptor gave a denied call, made once, deciding
// nothing. limitgen's overhead over it is what its decision costs; its own
// over bare's is what that denial's content costs the transport, both ends.
func replayDenial(b testing.TB, c grpcCase, style limitgrpc.MetadataStyle) grpc.UnaryServerInterceptor {
	g, err := grpclimits.NewGRPC(grpclimits.New())
	if err != nil {
		b.Fatal(err)
	}
	g.Config.Metadata = style
	ic := g.UnaryInterceptor()
	st := &serverStream{method: c.method}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", "alice"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, st)
	info := &grpc.UnaryServerInfo{FullMethod: c.method}
	ic(ctx, nil, info, grpcHandler) //nolint:errcheck // takes the only token
	st.trailer = nil
	_, denial := ic(ctx, nil, info, grpcHandler)
	if status.Code(denial) != c.code || len(st.trailer) == 0 {
		b.Fatalf("limitgen's denial (%v): %v with trailer %v", style, denial, st.trailer)
	}
	trailer := st.trailer
	return func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		_ = grpc.SetTrailer(ctx, trailer)
		return nil, denial
	}
}

// errBareDenial is the denied case's baseline: a denial with nothing to say.
var errBareDenial = status.Error(codes.ResourceExhausted, "rate limited")

// bufconnClient serves grpc's health service in memory (bufconn) with opts
// and returns a client of it on one connection; both end with the
// benchmark.
func bufconnClient(b testing.TB, opts ...grpc.ServerOption) healthpb.HealthClient {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	b.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

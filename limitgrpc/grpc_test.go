package limitgrpc_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitgrpc"
	"github.com/limitgen/limitgen/limitgrpc/internal/grpclimits"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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

// service is a gRPC server on 127.0.0.1 serving grpc's health service (and
// reflection) behind the interceptors generated from testdata/policy.yaml.
type service struct {
	lims *grpclimits.Limits
	g    *grpclimits.GRPC
	srv  *grpc.Server
	addr string
}

// hooks: the user is what an authentication interceptor would have put in
// the context; here the x-auth metadata stands for a verified token. "bob"
// is on the pro plan.
func hooks() grpclimits.GRPCHooks {
	return grpclimits.GRPCHooks{
		UserID: func(ctx context.Context) (string, bool) {
			return limitgrpc.MetadataKey(ctx, "x-auth")
		},
		PlanOf: func(ctx context.Context) (grpclimits.Plan, bool) {
			u, _ := limitgrpc.MetadataKey(ctx, "x-auth")
			return grpclimits.PlanPro, u == "bob"
		},
	}
}

// start serves on 127.0.0.1; now, when set, is the interceptors' clock.
func start(t *testing.T, lims *grpclimits.Limits, now *atomicbucket.Time, setup func(*grpclimits.GRPC)) *service {
	t.Helper()
	g, err := grpclimits.NewGRPC(lims, hooks())
	if err != nil {
		t.Fatal(err)
	}
	g.Config.Observer = nil // no denial log in the test's output
	if now != nil {
		g.Clock = func() atomicbucket.Time { return *now }
	}
	if setup != nil {
		setup(g)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(g.ServerOptions()...)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return &service{lims: lims, g: g, srv: srv, addr: lis.Addr().String()}
}

// client dials s, from the local address from when it is not "".
func (s *service) client(t *testing.T, from string) healthpb.HealthClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if from != "" {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}))
	}
	cc, err := grpc.NewClient(s.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// call is one unary Check with metadata kv, and what came back.
type call struct {
	err             error
	header, trailer metadata.MD
}

func check(t *testing.T, c healthpb.HealthClient, kv ...string) call {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...)), 10*time.Second)
	defer cancel()
	var hdr, tr metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&tr))
	return call{err, hdr, tr}
}

func (c call) code() codes.Code { return status.Code(c.err) }

// field is the value of metadata name: an allowed call's header, or a
// denial's trailer.
func (c call) field(name string) string {
	md := c.header
	if c.err != nil {
		md = c.trailer
	}
	if v := md.Get(name); len(v) == 1 {
		return v[0]
	}
	return ""
}

// details are the RetryInfo and QuotaFailure of a denial.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// TestUnary: Check is limited per user (the hook's, else x-user), 3 on the
// free plan and 6 on pro, with a fixed clock: each allowed call carries the
// RateLimit fields as header metadata (metadata: all); the 4th is
// ResourceExhausted, trailers-only, with the fields, retry-after and
// grpc-retry-pushback-ms in its trailers, a RetryInfo of the whole wait and a
// QuotaFailure naming the rule; counters count each outcome.
func TestUnary(t *testing.T) {
	now := atomicbucket.Time(0)
	s := start(t, grpclimits.New(), &now, nil)
	c := s.client(t, "")
	// Rate 1/min, burst 3: after n calls r = 3−n, and t (limithttp's
	// package doc) is the longer of the time to refill and the time r takes
	// to pace out (2 min, 2 min), or at r = 0 the wait for the next call's
	// token (1 min).
	for n := 1; n <= 3; n++ {
		got := check(t, c, "x-auth", "alice")
		if got.err != nil {
			t.Fatalf("call %d: %v", n, got.err)
		}
		wantRL := `"Checks";r=` + string(rune('0'+3-n)) + ";t=" + []string{"", "120", "120", "60"}[n]
		if p, rl := got.field("ratelimit-policy"), got.field("ratelimit"); p != `"Checks";q=3;w=180` || rl != wantRL {
			t.Errorf("call %d: ratelimit-policy %q, ratelimit %q; want %q, %q", n, p, rl, `"Checks";q=3;w=180`, wantRL)
		}
	}
	denied := check(t, c, "x-auth", "alice")
	if denied.code() != codes.ResourceExhausted {
		t.Fatalf("4th call: %v, want ResourceExhausted", denied.err)
	}
	if ra, rl, pb := denied.field("retry-after"), denied.field("ratelimit"), denied.field("grpc-retry-pushback-ms"); ra != "60" || rl != `"Checks";r=0;t=60` || pb != "60000" {
		t.Errorf("denial's trailers: retry-after %q, ratelimit %q, grpc-retry-pushback-ms %q", ra, rl, pb)
	}
	if len(denied.header) != 0 {
		t.Errorf("the denial sent header metadata %v: not trailers-only, so grpc-go would not retry it", denied.header)
	}
	ri, qf := details(t, denied.err)
	if ri == nil || ri.RetryDelay.AsDuration() != time.Minute {
		t.Errorf("RetryInfo %v, want a minute", ri)
	}
	if qf == nil || len(qf.Violations) != 1 || qf.Violations[0].Subject != "rule:Checks" || qf.Violations[0].Description != "Checks: 1/min, burst 3" {
		t.Errorf("QuotaFailure %v, want rule:Checks, \"Checks: 1/min, burst 3\" (the policy's words)", qf)
	}
	// A second denial of the same wait: the same answer (the status is kept).
	if again := check(t, c, "x-auth", "alice"); again.code() != codes.ResourceExhausted || status.Convert(again.err).Message() != status.Convert(denied.err).Message() {
		t.Errorf("5th call: %v, want %v", again.err, denied.err)
	}
	// Another user has a bucket of its own; x-user is read when the hook
	// has no user; bob is on pro (6).
	if got := check(t, c, "x-user", "carol"); got.err != nil || got.field("ratelimit") != `"Checks";r=2;t=120` {
		t.Errorf("carol by x-user: %v, %q", got.err, got.field("ratelimit"))
	}
	allowed := 0
	for range 8 {
		if check(t, c, "x-auth", "bob").err == nil {
			allowed++
		}
	}
	if allowed != 6 {
		t.Errorf("bob (pro, burst 6): %d of 8 allowed", allowed)
	}
	// A minute later alice has one token again.
	now += atomicbucket.Time(time.Minute)
	if got := check(t, c, "x-auth", "alice"); got.err != nil {
		t.Errorf("a minute later: %v", got.err)
	}
	counts := map[string]uint64{}
	for _, cnt := range s.g.Config.Counters.Snapshot() {
		for o, n := range cnt.Outcomes {
			counts[cnt.Route+" "+verdict.Outcome(o).String()] += n
		}
	}
	for k, want := range map[string]uint64{
		"/grpc.health.v1.Health/Check allowed": 3 + 1 + 6 + 1,
		"/grpc.health.v1.Health/Check denied":  2 + 2,
	} {
		if counts[k] != want {
			t.Errorf("%s: %d, want %d (all: %v)", k, counts[k], want, counts)
		}
	}
}

// TestHostileMetadata: a call without a key, with an empty one, or with one
// longer than a key may be ends Unauthenticated (the policy's missing_key)
// and takes nothing; the first of several values is the key; a declared cost
// above the source's maximum is InvalidArgument, an unreadable one the default.
func TestHostileMetadata(t *testing.T) {
	now := atomicbucket.Time(0)
	s := start(t, grpclimits.New(), &now, nil)
	c := s.client(t, "")
	for name, kv := range map[string][]string{
		"no key":    nil,
		"empty key": {"x-user", ""},
		"long key":  {"x-user", strings.Repeat("k", verdict.MaxKeyLen+1)},
	} {
		got := check(t, c, kv...)
		if got.code() != codes.Unauthenticated || !strings.Contains(status.Convert(got.err).Message(), "no key for rule Checks") {
			t.Errorf("%s: %v, want Unauthenticated naming the rule", name, got.err)
		}
	}
	if got := check(t, c, "x-user", strings.Repeat("k", verdict.MaxKeyLen)); got.err != nil {
		t.Errorf("a key of MaxKeyLen bytes: %v", got.err)
	}
	// Two values: the first keys the call. dave spends 3 (x-cost), then
	// anything more is denied; eve is untouched.
	if got := check(t, c, "x-user", "dave", "x-user", "eve", "x-cost", "3"); got.err != nil || got.field("ratelimit") != `"Checks";r=0;t=180` {
		t.Fatalf("dave, cost 3: %v, %q", got.err, got.field("ratelimit"))
	}
	if got := check(t, c, "x-user", "eve"); got.err != nil || got.field("ratelimit") != `"Checks";r=2;t=120` {
		t.Errorf("eve after dave's call listing her second: %v, %q", got.err, got.field("ratelimit"))
	}
	for _, cost := range []string{"4", "99999999999999999999999"} {
		got := check(t, c, "x-user", "frank", "x-cost", cost)
		if got.code() != codes.InvalidArgument || !strings.Contains(status.Convert(got.err).Message(), "above the most a call may cost") {
			t.Errorf("cost %s: %v, want InvalidArgument", cost, got.err)
		}
	}
	for _, cost := range []string{"-1", "0", "1e3", " 2", "abc"} { // unreadable: the default, 1
		if got := check(t, c, "x-user", "grace-"+cost, "x-cost", cost); got.err != nil || got.field("ratelimit") != `"Checks";r=2;t=120` {
			t.Errorf("cost %q: %v, %q; want the default cost 1", cost, got.err, got.field("ratelimit"))
		}
	}
	// frank's refused calls took nothing.
	if got := check(t, c, "x-user", "frank", "x-cost", "3"); got.err != nil {
		t.Errorf("frank after refused costs: %v", got.err)
	}
}

// TestStream: Watch is limited per client address when the stream opens:
// two streams from 127.0.0.1, the third ResourceExhausted on its first
// receive. A call from the trusted proxy 127.0.0.2 is keyed by the client
// its x-forwarded-for names; the same header from an untrusted peer is
// ignored.
func TestStream(t *testing.T) {
	now := atomicbucket.Time(0)
	s := start(t, grpclimits.New(), &now, nil)
	watch := func(c healthpb.HealthClient, kv ...string) (metadata.MD, error) {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...)), 10*time.Second)
		t.Cleanup(cancel)
		st, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return nil, err
		}
		_, err = st.Recv()
		hdr, _ := st.Header()
		return hdr, err
	}
	direct := s.client(t, "")
	for n := range 2 {
		hdr, err := watch(direct)
		if err != nil {
			t.Fatalf("stream %d: %v", n+1, err)
		}
		if got := hdr.Get("ratelimit"); len(got) != 1 || !strings.HasPrefix(got[0], `"Watches";r=`+string(rune('1'-n))) {
			t.Errorf("stream %d: ratelimit %q", n+1, got)
		}
	}
	if _, err := watch(direct, "x-forwarded-for", "198.51.100.7"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("3rd stream from 127.0.0.1, a forwarded address it may not set: %v, want ResourceExhausted", err)
	}
	proxy := s.client(t, "127.0.0.2")
	for n := range 2 {
		if _, err := watch(proxy, "x-forwarded-for", "6.6.6.6, 198.51.100.7"); err != nil {
			t.Fatalf("stream %d through the proxy for 198.51.100.7: %v", n+1, err)
		}
	}
	if _, err := watch(proxy, "x-forwarded-for", "198.51.100.7"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("3rd stream for 198.51.100.7: %v, want ResourceExhausted", err)
	}
	if _, err := watch(proxy, "x-forwarded-for", "198.51.100.8"); err != nil {
		t.Errorf("another client through the proxy: %v", err)
	}
}

// TestShadowAndCoverage: the reflection service's entry is in shadow mode:
// past its burst its calls are counted as shadow_denied and go on; Coverage
// names the served methods no entry covers (v1alpha reflection) and no
// stale entry.
func TestShadowAndCoverage(t *testing.T) {
	now := atomicbucket.Time(0)
	s := start(t, grpclimits.New(), &now, nil)
	unlimited, stale := s.g.Coverage(s.srv)
	if want := []string{"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}; !slices.Equal(unlimited, want) || len(stale) != 0 {
		t.Errorf("Coverage: unlimited %v, stale %v; want %v and none", unlimited, stale, want)
	}
	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rc := reflectionpb.NewServerReflectionClient(cc)
	for n := range 102 { // PerMethod's burst is 100
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := rc.ServerReflectionInfo(ctx)
		if err == nil {
			err = st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		}
		if err == nil {
			_, err = st.Recv()
		}
		cancel()
		if err != nil {
			t.Fatalf("reflection stream %d (shadow: never denied): %v", n+1, err)
		}
	}
	var shadow, allowed uint64
	for _, cnt := range s.g.Config.Counters.Snapshot() {
		if cnt.Route == "grpc.reflection.v1.ServerReflection" && cnt.Rule == "PerMethod" {
			shadow += cnt.Outcomes[verdict.ShadowDenied]
			allowed += cnt.Outcomes[verdict.Allowed]
		}
	}
	if allowed != 100 || shadow != 2 {
		t.Errorf("reflection: %d allowed, %d shadow-denied; want 100 and 2", allowed, shadow)
	}
}

// TestNoMetadata: with Config.Metadata MetadataNone no call carries
// RateLimit metadata, and a denial still has its RetryInfo and
// grpc-retry-pushback-ms; with MetadataDenials (the default) only the
// denial carries the fields, in its trailers; with MetadataLean a denial is
// its status and grpc-retry-pushback-ms alone.
func TestNoMetadata(t *testing.T) {
	now := atomicbucket.Time(0)
	s := start(t, grpclimits.New(), &now, func(g *grpclimits.GRPC) { g.Config.Metadata = limitgrpc.MetadataNone })
	c := s.client(t, "")
	for range 3 {
		if got := check(t, c, "x-user", "u"); got.err != nil || got.field("ratelimit") != "" || got.field("ratelimit-policy") != "" {
			t.Fatalf("allowed: %v, metadata %v", got.err, got.header)
		}
	}
	got := check(t, c, "x-user", "u")
	if ri, _ := details(t, got.err); got.code() != codes.ResourceExhausted || ri == nil {
		t.Errorf("denied: %v, RetryInfo %v", got.err, ri)
	}
	if got.field("grpc-retry-pushback-ms") != "60000" || got.field("ratelimit") != "" || got.field("retry-after") != "" {
		t.Errorf("denied: trailers %v, want grpc-retry-pushback-ms 60000 and no RateLimit fields", got.trailer)
	}

	s = start(t, grpclimits.New(), &now, func(g *grpclimits.GRPC) { g.Config.Metadata = limitgrpc.MetadataDenials })
	c = s.client(t, "")
	for range 3 {
		if got := check(t, c, "x-user", "u"); got.err != nil || got.field("ratelimit") != "" || got.field("ratelimit-policy") != "" {
			t.Fatalf("allowed: %v, header %v; want no RateLimit fields", got.err, got.header)
		}
	}
	got = check(t, c, "x-user", "u")
	if got.code() != codes.ResourceExhausted || len(got.header) != 0 || got.field("ratelimit") != `"Checks";r=0;t=60` ||
		got.field("retry-after") != "60" || got.field("grpc-retry-pushback-ms") != "60000" {
		t.Errorf("denied: %v, header %v, trailer %v; want the fields and the pushback in the trailer alone", got.err, got.header, got.trailer)
	}

	// MetadataLean: the denial is its status and the pushback, nothing else.
	s = start(t, grpclimits.New(), &now, func(g *grpclimits.GRPC) { g.Config.Metadata = limitgrpc.MetadataLean })
	c = s.client(t, "")
	for range 3 {
		if got := check(t, c, "x-user", "u"); got.err != nil || got.field("ratelimit") != "" || got.field("ratelimit-policy") != "" || got.field("grpc-retry-pushback-ms") != "" {
			t.Fatalf("allowed: %v, header %v, trailer %v; want nothing of the limiter's", got.err, got.header, got.trailer)
		}
	}
	got = check(t, c, "x-user", "u")
	if st := status.Convert(got.err); got.code() != codes.ResourceExhausted || len(st.Details()) != 0 || !strings.Contains(st.Message(), "retry in 1m0s") {
		t.Errorf("lean denial: %v, details %v; want ResourceExhausted saying when, without details", got.err, st.Details())
	}
	tr := got.trailer.Copy()
	delete(tr, "content-type") // a trailers-only response's, as every denial's
	if len(tr) != 1 || got.field("grpc-retry-pushback-ms") != "60000" {
		t.Errorf("lean denial: trailer %v; want grpc-retry-pushback-ms 60000 alone", got.trailer)
	}
}

// TestConcurrentExact: 8 clients × 40 calls for one user at once, through
// the interceptors of one server with a fixed clock: exactly the burst is
// admitted.
func TestConcurrentExact(t *testing.T) {
	now := atomicbucket.Time(0)
	s := start(t, grpclimits.New(), &now, nil)
	var ok, denied atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		c := s.client(t, "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				switch got := check(t, c, "x-auth", "bob"); got.code() {
				case codes.OK:
					ok.Add(1)
				case codes.ResourceExhausted:
					denied.Add(1)
				default:
					t.Errorf("unexpected: %v", got.err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 6 || denied.Load() != 8*40-6 {
		t.Errorf("%d admitted, %d denied; want 6 (pro's burst) and %d", ok.Load(), denied.Load(), 8*40-6)
	}
}

// TestNewGRPCRefusesNilHooks: a hook the policy names must be given.
func TestNewGRPCRefusesNilHooks(t *testing.T) {
	h := hooks()
	h.UserID = nil
	if _, err := grpclimits.NewGRPC(nil, h); err == nil || !strings.Contains(err.Error(), "GRPCHooks.UserID is nil") {
		t.Errorf("NewGRPC without UserID: %v", err)
	}
}

// TestCoverageStale: a server that serves only the health service leaves
// the reflection entry stale; a server given only the unary interceptor
// serves Watch, a stream, unchecked, and Coverage says so until the stream
// interceptor is made too.
func TestCoverageStale(t *testing.T) {
	g, err := grpclimits.NewGRPC(nil, hooks())
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(g.UnaryInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	unlimited, stale := g.Coverage(srv)
	if !slices.Equal(unlimited, []string{"/grpc.health.v1.Health/Watch"}) || !slices.Equal(stale, []string{"grpc.reflection.v1.ServerReflection"}) {
		t.Errorf("unary interceptor only: unlimited %v, stale %v; want Watch, and the reflection entry", unlimited, stale)
	}
	g.StreamInterceptor()
	if unlimited, _ := g.Coverage(srv); len(unlimited) != 0 {
		t.Errorf("both interceptors: unlimited %v, want none", unlimited)
	}
}

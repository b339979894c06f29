package limitrls_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitrls"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// edge is a hand-written Decider over two tables, as a generated one would
// be: domain "edge"; [remote_address] checks PerIP by the address;
// [generic_key=api, user] checks PerUser by the user, enforced, and
// [generic_key=trial, user] the same rule in shadow mode; [down] is a rule
// whose store could not decide and denies (an outage).
type edge struct {
	perIP, perUser *atomicbucket.Table[string]
	ipPolicy       verdict.Policy
	userPolicy     verdict.Policy
}

func newEdge() *edge {
	ip := atomicbucket.Limit{Tokens: 5, Period: time.Second, Burst: 2}
	user := atomicbucket.Limit{Tokens: 100, Period: time.Minute, Burst: 3}
	return &edge{
		perIP:      atomicbucket.NewTable[string](atomicbucket.MustRule(ip), atomicbucket.TableOptions{MaxKeys: 1000}),
		perUser:    atomicbucket.NewTable[string](atomicbucket.MustRule(user), atomicbucket.TableOptions{MaxKeys: 1000}),
		ipPolicy:   verdict.MustPolicy("PerIP", ip),
		userPolicy: verdict.MustPolicy("PerUser", user),
	}
}

func (e *edge) decide(_ context.Context, domain string, d *rlv3.RateLimitDescriptor, cost int64, now atomicbucket.Time) (limitrls.Decision, error) {
	var dec limitrls.Decision
	if domain != "edge" {
		return dec, nil
	}
	en := d.Entries
	switch {
	case len(en) == 1 && en[0].Key == "remote_address":
		dec.Result = verdict.Result{Decision: e.perIP.AllowNAt(en[0].Value, now, cost), Policy: &e.ipPolicy, Policies: e.ipPolicy.Item, Cost: cost, Route: "edge remote_address"}
		dec.Key, dec.Found = en[0].Value, true
	case len(en) == 2 && en[0].Key == "generic_key" && (en[0].Value == "api" || en[0].Value == "trial") && en[1].Key == "user":
		dec.Result = verdict.Result{Decision: e.perUser.AllowNAt(en[1].Value, now, cost), Policy: &e.userPolicy, Policies: e.userPolicy.Item, Cost: cost, Route: "edge user"}
		dec.Key, dec.Found = en[1].Value, true
		if en[0].Value == "trial" {
			dec.Mode = verdict.Shadow
		}
	case len(en) == 1 && en[0].Key == "down":
		dec.Result = verdict.Result{Decision: atomicbucket.Decision{RetryAfter: time.Second}, Policy: &e.ipPolicy, Policies: e.ipPolicy.Item, Cost: cost, Outage: true, Degraded: true}
		dec.Found = true
	}
	return dec, nil
}

// serve starts the service on 127.0.0.1 with a fixed clock and returns a
// client of it.
func serve(t *testing.T, cfg *limitrls.Config, e *edge, now *atomicbucket.Time) rlsv3.RateLimitServiceClient {
	t.Helper()
	return serveService(t, &limitrls.Service{Config: cfg, Decide: e.decide, Clock: func() atomicbucket.Time { return *now }})
}

// serveService serves svc on 127.0.0.1 over gRPC and returns a client of it;
// both end with the test.
func serveService(t *testing.T, svc rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

func entries(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestShouldRateLimit: over a real gRPC connection, a descriptor's statuses
// say the rule's limit (5 a SECOND), what is left and the time until the
// bucket is full; past the burst the descriptor and the request are
// OVER_LIMIT with the wait to the millisecond, and the IETF fields go in
// response_headers_to_add; a shadow route's denial is OK; a descriptor no
// rule matches is OK and counted; an outage is Unavailable, not OVER_LIMIT.
func TestShouldRateLimit(t *testing.T) {
	var now atomicbucket.Time
	var denials atomic.Int64
	cfg := &limitrls.Config{Headers: true, Judge: verdict.Judge{Observer: verdict.ObserverFunc(func(e verdict.Event) {
		if e.Outcome == verdict.Denied && e.Door == verdict.DoorRLS {
			denials.Add(1)
		}
	})}}
	c := serve(t, cfg, newEdge(), &now)
	ctx := context.Background()
	ask := func(ds ...*rlv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
		return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
	}
	for n, left := range []uint32{1, 0} {
		resp, err := ask(entries("remote_address", "192.0.2.1"))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.Statuses[0]
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != left ||
			st.CurrentLimit.GetRequestsPerUnit() != 5 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || st.CurrentLimit.GetName() != "PerIP" {
			t.Errorf("call %d: %v", n+1, resp)
		}
		if got := st.DurationUntilReset.AsDuration(); got != time.Duration(n+1)*200*time.Millisecond {
			t.Errorf("call %d: duration until reset %v, want %v", n+1, got, time.Duration(n+1)*200*time.Millisecond)
		}
	}
	now += atomicbucket.Time(50 * time.Millisecond)
	resp, err := ask(entries("remote_address", "192.0.2.1"), entries("generic_key", "api", "user", "ann"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[0].DurationUntilReset.AsDuration() != 150*time.Millisecond || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
		t.Errorf("third call with a second descriptor: %v; want the first OVER_LIMIT for 150 ms, the second OK", resp)
	}
	headers := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	if headers["RateLimit"] != `"PerIP";r=0;t=1` || headers["Retry-After"] != "1" || headers["RateLimit-Policy"] != `"PerIP";q=2;w=1, "PerUser";q=3;w=2` {
		t.Errorf("headers %v", headers)
	}
	// Shadow: over its burst, still OK; the enforced route's key is ann's.
	for range 3 {
		ask(entries("generic_key", "trial", "user", "bob")) //nolint:errcheck // the 4th is the one checked
	}
	if resp, err := ask(entries("generic_key", "trial", "user", "bob")); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("shadow route past its burst: %v, %v; want OK", resp, err)
	}
	// A cost above the burst on the shadow route: reported, not enforced.
	if resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 9, Descriptors: []*rlv3.RateLimitDescriptor{entries("generic_key", "trial", "user", "carl")}}); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("shadow route, a cost above the burst: %v, %v; want OK", resp, err)
	}
	if resp, err := ask(entries("path", "/nothing")); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil || cfg.Unmatched() != 1 {
		t.Errorf("unmatched: %v, %v, %d counted", resp, err, cfg.Unmatched())
	}
	if _, err := ask(entries("down", "x")); status.Code(err) != codes.Unavailable {
		t.Errorf("an outage: %v, want Unavailable", err)
	}
	if d := denials.Load(); d != 1 {
		t.Errorf("%d RLS denials observed, want 1", d)
	}
}

// TestBadRequests: what a proxy (or anyone who reaches the port) sends that
// cannot be read ends with InvalidArgument, and takes nothing: the key's
// burst is all there after.
func TestBadRequests(t *testing.T) {
	var now atomicbucket.Time
	c := serve(t, &limitrls.Config{}, newEdge(), &now)
	ctx := context.Background()
	many := &rlv3.RateLimitDescriptor{}
	for range 10_000 {
		many.Entries = append(many.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: "192.0.2.9"})
	}
	huge := strings.Repeat("v", 1<<20)
	var lots []*rlv3.RateLimitDescriptor
	for range 5000 {
		lots = append(lots, entries("remote_address", "192.0.2.9"))
	}
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"no domain":          {Descriptors: []*rlv3.RateLimitDescriptor{entries("remote_address", "192.0.2.9")}},
		"no descriptors":     {Domain: "edge"},
		"5000 descriptors":   {Domain: "edge", Descriptors: lots},
		"10000 entries":      {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{many}},
		"a 1 MB value":       {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{entries("remote_address", huge)}},
		"a 1 MB key":         {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{entries(huge, "x")}},
		"an empty key":       {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{entries("", "x")}},
		"negative hits":      {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries("remote_address", "192.0.2.9").Entries, HitsAddend: wrapperspb.UInt64(1), IsNegativeHits: true}}},
		"huge hits":          {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries("remote_address", "192.0.2.9").Entries, HitsAddend: wrapperspb.UInt64(1 << 62)}}},
		"huge request hits":  {Domain: "edge", HitsAddend: 1<<31 + 7, Descriptors: []*rlv3.RateLimitDescriptor{entries("remote_address", "192.0.2.9")}},
		"a limit override":   {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries("remote_address", "192.0.2.9").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1 << 30}}}},
		"a nil descriptor":   {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{nil}},
		"a 1 MB domain name": {Domain: huge, Descriptors: []*rlv3.RateLimitDescriptor{entries("remote_address", "192.0.2.9")}},
	} {
		if _, err := c.ShouldRateLimit(ctx, req, grpc.MaxCallSendMsgSize(64<<20)); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	for n := range 2 {
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{entries("remote_address", "192.0.2.9")}})
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("request %d after the refused ones: %v, %v; the burst of 2 was touched", n+1, resp, err)
		}
	}
	// A cost above the burst is over the limit for good: OVER_LIMIT, nothing taken.
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{entries("remote_address", "192.0.2.10")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a cost of 3 on a burst of 2: %v, %v; want OVER_LIMIT", resp, err)
	}
}

// TestPeek: a descriptor's hits_addend 0 asks, as envoyproxy/ratelimit
// reads it, how the limit stands without adding to it: OK with what
// remains, however often, on a burst of 2 as on an empty bucket; the burst
// is all there after, and once it is taken a peek still says OK with 0
// remaining (nothing is over the limit until a request is).
func TestPeek(t *testing.T) {
	var now atomicbucket.Time
	c := serve(t, &limitrls.Config{}, newEdge(), &now)
	ctx := context.Background()
	peek := func() *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: entries("remote_address", "192.0.2.20").Entries, HitsAddend: wrapperspb.UInt64(0)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for range 50 {
		if resp := peek(); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("a peek of a full burst of 2: %v", resp)
		}
	}
	for n := range 3 {
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{entries("remote_address", "192.0.2.20")}})
		if want := n < 2; err != nil || (resp.OverallCode == rlsv3.RateLimitResponse_OK) != want {
			t.Fatalf("request %d after 50 peeks: %v, %v; want OK %v", n+1, resp, err, want)
		}
	}
	if resp := peek(); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("a peek of an empty bucket: %v, want OK with 0 remaining", resp)
	}
}

func TestCurrentLimit(t *testing.T) {
	for _, c := range []struct {
		l    atomicbucket.Limit
		n    uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
		mult uint32
	}{
		{atomicbucket.Limit{Tokens: 5, Period: time.Second, Burst: 5}, 5, rlsv3.RateLimitResponse_RateLimit_SECOND, 0},
		{atomicbucket.Limit{Tokens: 5, Period: 10 * time.Second, Burst: 5}, 5, rlsv3.RateLimitResponse_RateLimit_SECOND, 10},
		{atomicbucket.Limit{Tokens: 100, Period: 24 * time.Hour, Burst: 100}, 100, rlsv3.RateLimitResponse_RateLimit_DAY, 0},
		{atomicbucket.Limit{Tokens: 7, Period: 90 * time.Minute, Burst: 7}, 7, rlsv3.RateLimitResponse_RateLimit_MINUTE, 90},
		{atomicbucket.Limit{Tokens: 1, Period: 500 * time.Millisecond, Burst: 1}, 1, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0},
	} {
		p := verdict.MustPolicy("R", c.l)
		got := limitrls.CurrentLimit(&p)
		if got.RequestsPerUnit != c.n || got.Unit != c.unit || got.GetUnitMultiplier().GetValue() != c.mult || got.Name != "R" {
			t.Errorf("%+v: %v", c.l, got)
		}
	}
}

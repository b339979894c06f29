package limitgrpc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestService(t *testing.T) {
	for method, want := range map[string]string{
		"/grpc.health.v1.Health/Check": "grpc.health.v1.Health",
		"/a/b":                         "a",
		"/Svc/M":                       "Svc",
		"grpc.health.v1.Health/Check":  "", // no leading slash
		"/grpc.health.v1.Health/":      "", // no method
		"/Check":                       "",
		"//M":                          "",
		"":                             "",
		"/":                            "",
	} {
		if got := Service(method); got != want {
			t.Errorf("Service(%q) = %q, want %q", method, got, want)
		}
	}
}

// stream is a grpc.ServerTransportStream that keeps the header and trailer
// metadata set on it, as grpc's joins them.
type stream struct {
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (s *stream) Method() string { return "/t.T/M" }
func (s *stream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *stream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *stream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// TestRespondAnswersAsMade: 4 × 3,000 random decisions of two policies and two
// entries' policy lists, in three rounds (the kept metadata and statuses
// are reused and replaced), each answered with the metadata and status
// strconv-formatted values give: the kept ones are never another decision's.
// Run by 4 goroutines at once (under -race in make test).
func TestRespondAnswersAsMade(t *testing.T) {
	pols := []*verdict.Policy{
		ptr(verdict.MustPolicy("Fast", atomicbucket.Limit{Tokens: 100, Period: time.Second, Burst: 100})),
		ptr(verdict.MustPolicy("Slow", atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 7})),
	}
	c := Config{Metadata: MetadataAll}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 3000 {
				p := pols[rng.IntN(2)]
				lists := []string{p.Item, p.Item + ", other"}
				res := verdict.Result{Policy: p, Policies: lists[rng.IntN(2)], Cost: 1}
				res.Decision.Allowed = rng.IntN(3) > 0
				res.Decision.Remaining = int64(rng.IntN(8))
				// Waits over a day: the table's slots are filled by many
				// decisions that differ only in t or the retry.
				res.Decision.Reset = time.Duration(rng.IntN(100_000)) * time.Second
				if !res.Decision.Allowed {
					res.Decision.Remaining = 0
					res.Decision.RetryAfter = time.Duration(1 + rng.Int64N(100_000*int64(time.Second)))
				}
				st := &stream{}
				ctx := grpc.NewContextWithServerTransportStream(context.Background(), st)
				err := c.Respond(ctx, verdict.Enforce, &res, "k")
				v := (&verdict.Judge{}).Verdict(verdict.Enforce, &verdict.Result{Decision: res.Decision, Policy: p, Cost: 1}, "")
				r, tt := v.R, v.T
				md := st.header // an allowed call's fields are its header's
				if !res.Decision.Allowed {
					md = st.trailer // a denial's its trailers'
					if len(st.header) != 0 {
						t.Errorf("denial with header metadata %v", st.header)
						return
					}
				}
				if got := md.Get(KeyRateLimit); len(got) != 1 || got[0] != fmt.Sprintf("\"%s\";r=%d;t=%d", p.Name, r, tt) {
					t.Errorf("ratelimit %q, want r=%d t=%d of %s", got, r, tt, p.Name)
					return
				}
				if got := md.Get(KeyPolicy); len(got) != 1 || got[0] != res.Policies {
					t.Errorf("ratelimit-policy %q, want %q", got, res.Policies)
					return
				}
				if res.Decision.Allowed {
					if err != nil || len(md.Get(KeyRetryAfter)) != 0 || len(st.trailer) != 0 {
						t.Errorf("allowed: %v, retry-after %q, trailer %v", err, md.Get(KeyRetryAfter), st.trailer)
						return
					}
					continue
				}
				wait := v.Wait // to the ms, three digits from a second up
				secs := int64((wait + time.Second - 1) / time.Second)
				want := fmt.Sprintf("rate limited by rule %s; retry in %v", p.Name, wait)
				s := status.Convert(err)
				if s.Code() != codes.ResourceExhausted || s.Message() != want {
					t.Errorf("denied: %v, want %q", err, want)
					return
				}
				var delay time.Duration
				for _, d := range s.Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						delay = ri.RetryDelay.AsDuration()
					}
				}
				if delay != wait {
					t.Errorf("RetryInfo %v, want %v (the decision's %v as verdict says it)", delay, wait, res.Decision.RetryAfter)
					return
				}
				if got := md.Get(KeyRetryAfter); len(got) != 1 || got[0] != fmt.Sprint(secs) {
					t.Errorf("retry-after %q, want %d", got, secs)
					return
				}
				if got := md.Get(KeyPushback); len(got) != 1 || got[0] != fmt.Sprint(int64(wait/time.Millisecond)) {
					t.Errorf("grpc-retry-pushback-ms %q, want %d", got, wait/time.Millisecond)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func ptr[T any](v T) *T { return &v }

// fakeServerStream is a grpc.ServerStream whose messages go nowhere.
type fakeServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *fakeServerStream) Context() context.Context { return s.ctx }
func (s *fakeServerStream) SendMsg(any) error        { return nil }
func (s *fakeServerStream) RecvMsg(any) error        { return nil }

// A message check refused unchecked on a Shadow route (no key: Reject
// recorded it and returned nil, and no decision) lets the message through,
// and does not judge an empty decision.
func TestCountMessagesShadowRefusal(t *testing.T) {
	var observed int
	c := Config{Judge: verdict.Judge{Observer: verdict.ObserverFunc(func(verdict.Event) { observed++ })}}
	ss := CountMessages(&fakeServerStream{ctx: context.Background()}, &c, Messages{Mode: verdict.Shadow, Recv: true, Send: true,
		Check: func(context.Context) (verdict.Result, string, error) { return verdict.Result{}, "", nil }})
	if err := ss.SendMsg(nil); err != nil {
		t.Errorf("SendMsg: %v", err)
	}
	if err := ss.RecvMsg(nil); err != nil {
		t.Errorf("RecvMsg: %v", err)
	}
	if observed != 0 {
		t.Errorf("%d decisions observed for messages refused unchecked (Reject observes those)", observed)
	}
}

// A window rule's denial describes it as a window ("at most 40 in any
// 24h0m0s, sliding"), not as the interval bucket its fields are computed
// from ("40/d, burst 40", which a client would read as a bucket refilling).
func TestQuotaFailureDescribesWindows(t *testing.T) {
	for _, c := range []struct {
		p    verdict.Policy
		want string
	}{
		{verdict.MustPolicy("Daily", atomicbucket.Limit{Tokens: 40, Period: 24 * time.Hour, Burst: 40, Refill: atomicbucket.Interval}), "Daily: 40/d, burst 40"},
		{func() verdict.Policy {
			p := verdict.MustPolicy("Daily", atomicbucket.Limit{Tokens: 40, Period: 24 * time.Hour, Burst: 40, Refill: atomicbucket.Interval})
			p.Sliding = true
			return p
		}(), "Daily: at most 40 in any 24h0m0s, sliding"},
	} {
		st := status.Convert(denialError(codes.ResourceExhausted, &c.p, time.Second, 1, false))
		var got string
		for _, d := range st.Details() {
			if qf, ok := d.(*errdetails.QuotaFailure); ok && len(qf.Violations) == 1 {
				got = qf.Violations[0].Description
			}
		}
		if got != c.want {
			t.Errorf("sliding %v: QuotaFailure %q, want %q", c.p.Sliding, got, c.want)
		}
	}
}

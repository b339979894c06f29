package limitrls_test

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitrls/internal/rlslimits"
)

// TestReportedUsage: testdata/policy.yaml's Tokens (1,000 tokens, one a
// second) checked by the llm descriptor before a request and charged by
// the llm_usage descriptor (report: true) with the tokens a response used,
// as a proxy reports them after the response: a report is always OK and is
// owed as debt, which the next check sees, across the same service; a
// report far beyond the debt bound owes one burst, no more.
func TestReportedUsage(t *testing.T) {
	now := atomicbucket.Time(time.Hour)
	s := rlslimits.NewRLS(rlslimits.New())
	s.Clock = func() atomicbucket.Time { return now }
	c := serveService(t, s.Service())
	ask := func(key string, hits uint32) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits,
			Descriptors: []*rlv3.RateLimitDescriptor{entries("generic_key", key, "api_key", "k1")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	if r := ask("llm", 1); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 999 {
		t.Fatalf("the first check: %v", r)
	}
	// The response used 1,500 tokens: reported, OK, and 501 owed.
	if r := ask("llm_usage", 1500); r.OverallCode != ok || r.Statuses[0].Code != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("the usage report: %v, want OK with 0 remaining", r)
	}
	r := ask("llm", 1)
	if r.OverallCode != over || r.Statuses[0].DurationUntilReset.AsDuration() != 502*time.Second {
		t.Fatalf("in debt by 501: %v, want OVER_LIMIT for 502s", r)
	}
	// 502 seconds on, the debt is repaid and a token is back.
	now = now.Add(502 * time.Second)
	if r := ask("llm", 1); r.OverallCode != ok {
		t.Fatalf("when the debt is repaid: %v", r)
	}
	// A report far beyond the bound owes one burst below empty, no more.
	if r := ask("llm_usage", 1<<30); r.OverallCode != ok {
		t.Fatalf("a huge report: %v", r)
	}
	if d := s.Config.Unmatched(); d != 0 {
		t.Fatalf("%d descriptors unmatched", d)
	}
	// 1,000 owed and a token: 1,001 seconds (the status's wait shown to
	// three significant digits, rounded up: 1,010).
	r = ask("llm", 1)
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); r.OverallCode != over || d < 1001*time.Second || d > 1010*time.Second ||
		r.ResponseHeadersToAdd[1].Value != `"Tokens";r=0;t=1001` {
		t.Fatalf("at the debt bound: %v, want OVER_LIMIT for 1,001s", r)
	}
}

package limitrls_test

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitrls/internal/rlslimits"
	"github.com/limitgen/limitgen/verdict"
)

// TestGeneratedService: the service generated from testdata/policy.yaml's
// rls: section, over a real gRPC connection on 127.0.0.1, on a fixed clock:
// the edge domain's remote_address descriptor checks PerIP (burst 2); the
// api pattern checks the API tier by a numeric user_id, and a user_id that
// is not a number is OVER_LIMIT (counted missing_key), never one shared
// bucket; the trial pattern is shadow (OK past its burst); the internal
// domain's pattern is off; unknown domains and descriptors are OK and
// counted; counters count by door, pattern and rule.
func TestGeneratedService(t *testing.T) {
	var now atomicbucket.Time
	s := rlslimits.NewRLS(rlslimits.New(rlslimits.WithStart(0))) // global buckets start at the test clock's 0
	s.Clock = func() atomicbucket.Time { return now }
	c := serveService(t, s.Service())
	ask := func(domain string, ds ...*rlv3.RateLimitDescriptor) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for n, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
		if got := ask("edge", entries("remote_address", "192.0.2.1")); got != want {
			t.Errorf("remote_address call %d: %v, want %v", n+1, got, want)
		}
	}
	if got := ask("edge", entries("remote_address", "192.0.2.2")); got != ok {
		t.Errorf("another address: %v", got)
	}
	for n, want := range []rlsv3.RateLimitResponse_Code{ok, ok, ok, over} {
		if got := ask("edge", entries("generic_key", "api", "user_id", "42")); got != want {
			t.Errorf("user 42 call %d: %v, want %v", n+1, got, want)
		}
	}
	// On the pro plan (the descriptor's plan entry), the burst is 6; an
	// unknown plan is the default, free (3).
	for n, want := range []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok, ok, over} {
		if got := ask("edge", entries("generic_key", "api", "plan", "pro", "user_id", "77")); got != want {
			t.Errorf("pro user 77 call %d: %v, want %v", n+1, got, want)
		}
	}
	for n, want := range []rlsv3.RateLimitResponse_Code{ok, ok, ok, over} {
		if got := ask("edge", entries("generic_key", "api", "plan", "platinum", "user_id", "78")); got != want {
			t.Errorf("user 78 of an unknown plan, call %d: %v, want %v (free's burst)", n+1, got, want)
		}
	}
	// A composite key: (tenant, user) pairs are keys apart, whatever bytes
	// the tenant holds; a pair without its tenant is refused.
	for _, c := range []struct {
		tenant, user string
		want         []rlsv3.RateLimitResponse_Code
	}{
		{"acme", "7", []rlsv3.RateLimitResponse_Code{ok, ok, over}},
		{"acme", "8", []rlsv3.RateLimitResponse_Code{ok, ok, over}},
		{"globex", "7", []rlsv3.RateLimitResponse_Code{ok, ok, over}},
		{"acme,7", "7", []rlsv3.RateLimitResponse_Code{ok, ok, over}},
		{"acme%2C7", "7", []rlsv3.RateLimitResponse_Code{ok, ok, over}},
		{"", "7", []rlsv3.RateLimitResponse_Code{over}},
		{"acme", "-1", []rlsv3.RateLimitResponse_Code{over}},
	} {
		for n, want := range c.want {
			if got := ask("edge", entries("generic_key", "tenants", "tenant", c.tenant, "user_id", c.user)); got != want {
				t.Errorf("tenant %q, user %s, call %d: %v, want %v", c.tenant, c.user, n+1, got, want)
			}
		}
	}
	if got := ask("edge", entries("generic_key", "api", "user_id", "not-a-number")); got != over {
		t.Errorf("a user_id that is not a number: %v, want OVER_LIMIT", got)
	}
	for n := range 5 {
		if got := ask("edge", entries("generic_key", "trial", "user_id", "7")); got != ok {
			t.Errorf("trial call %d: %v, want OK (shadow)", n+1, got)
		}
	}
	for range 5 {
		if got := ask("internal", entries("remote_address", "192.0.2.1")); got != ok {
			t.Errorf("internal (off): %v", got)
		}
	}
	if ask("other", entries("remote_address", "192.0.2.1")) != ok || ask("edge", entries("path", "/x")) != ok || s.Config.Unmatched() != 2 {
		t.Errorf("unmatched: %d counted, want 2", s.Config.Unmatched())
	}
	// A second later the address has its tokens again (5/s, burst 2).
	now += atomicbucket.Time(time.Second)
	if got := ask("edge", entries("remote_address", "192.0.2.1")); got != ok {
		t.Errorf("a second later: %v", got)
	}
	counts := map[string]uint64{}
	for _, cnt := range s.Config.Counters.Snapshot() {
		for o, n := range cnt.Outcomes {
			if n > 0 {
				counts[cnt.Route+" "+cnt.Rule+" "+verdict.Outcome(o).String()] += n
			}
		}
	}
	for k, want := range map[string]uint64{
		"edge: remote_address PerIP allowed":                                   4,
		"edge: remote_address PerIP denied":                                    1,
		"edge: generic_key=api, user_id PerUser allowed":                       3,
		"edge: generic_key=api, user_id PerUser denied":                        1,
		"edge: generic_key=api, user_id PerUser missing_key":                   1,
		"edge: generic_key=trial, user_id PerUser allowed":                     3,
		"edge: generic_key=trial, user_id PerUser shadow_denied":               2,
		"edge: generic_key=tenants, tenant, user_id PerTenantUser allowed":     10,
		"edge: generic_key=tenants, tenant, user_id PerTenantUser denied":      5,
		"edge: generic_key=tenants, tenant, user_id PerTenantUser missing_key": 2,
	} {
		if counts[k] != want {
			t.Errorf("%s: %d, want %d (all: %v)", k, counts[k], want, counts)
		}
	}
}

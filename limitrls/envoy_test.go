package limitrls_test

import (
	"context"
	"math"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitrls/internal/envoylimits"
)

// TestTranslatedEnvoyConfig: the service generated from the policy `gen
// envoy` translated testdata/envoy/rl.yaml into behaves as envoyproxy/
// ratelimit documents that configuration: a descriptor without a value in
// the configuration limits each value apart (100 a minute per destination,
// 10 a second per address); one with a value limits that value (bar: 1 a
// minute), before the descriptor without one; unlimited is never limited;
// shadow_mode reports OK past the limit; a descriptor the configuration does
// not name is OK. And where envoyproxy/ratelimit's fixed window admits twice
// its limit across a window's edge, the translation never admits more than
// the limit in any one unit.
func TestTranslatedEnvoyConfig(t *testing.T) {
	var now atomicbucket.Time
	s := envoylimits.NewRLS(envoylimits.New())
	s.Clock = func() atomicbucket.Time { return now }
	s.Config.Observer = nil // no denial log in the test's output
	svc := s.Service()
	ask := func(ds ...*rlv3.RateLimitDescriptor) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	admitted := func(n int, d *rlv3.RateLimitDescriptor) int {
		got := 0
		for range n {
			if ask(d) == ok {
				got++
			}
		}
		return got
	}
	if got := admitted(150, entries("source_cluster", "proxy", "destination_cluster", "foo")); got != 100 {
		t.Errorf("destination foo: %d of 150 admitted in a minute, want 100", got)
	}
	if got := admitted(150, entries("source_cluster", "proxy", "destination_cluster", "baz")); got != 100 {
		t.Errorf("destination baz (its own limit): %d of 150, want 100", got)
	}
	if got := admitted(5, entries("source_cluster", "proxy", "destination_cluster", "bar")); got != 1 {
		t.Errorf("destination bar (its value's limit first): %d of 5, want 1", got)
	}
	if got := admitted(20, entries("remote_address", "192.0.2.1")); got != 10 {
		t.Errorf("an address: %d of 20 in a second, want 10", got)
	}
	if got := admitted(1000, entries("generic_key", "health")); got != 1000 {
		t.Errorf("unlimited: %d of 1000", got)
	}
	if got := admitted(10, entries("generic_key", "reports")); got != 10 {
		t.Errorf("shadow_mode: %d of 10 OK, want all", got)
	}
	// A limit per pair of values (tenant, then user, neither with a value):
	// a composite key, 2 a minute for each pair.
	for _, pair := range [][2]string{{"acme", "u1"}, {"acme", "u2"}, {"globex", "u1"}, {"acme,u1", "u1"}} {
		if got := admitted(4, entries("tenant", pair[0], "user", pair[1])); got != 2 {
			t.Errorf("tenant %s, user %s: %d of 4 admitted, want 2", pair[0], pair[1], got)
		}
	}
	if ask(entries("source_cluster", "other", "destination_cluster", "x")) != ok {
		t.Error("a source the configuration does not name is limited")
	}
	// Across a window's edge: an address's 10 at the end of a second and
	// 10 more at the start of the next is what a fixed window admits; the
	// translation admits 10 in any one second.
	now = atomicbucket.Time(10*time.Second - time.Millisecond)
	first := admitted(10, entries("remote_address", "192.0.2.2"))
	now = atomicbucket.Time(10*time.Second + time.Millisecond)
	second := admitted(10, entries("remote_address", "192.0.2.2"))
	if first != 10 || second > 0 {
		t.Errorf("across a second's edge: %d then %d admitted within 2 ms, want 10 then 0 (a fixed window admits 20)", first, second)
	}
	if ask(entries("remote_address", "192.0.2.2")) != over {
		t.Error("past the limit, not OVER_LIMIT")
	}
	// From idle, an address asking 3 times every 50 ms for 4 s: at most 10
	// in any one second, sliding (the token bucket the translation made
	// before admitted 19 or 20 in a second from idle: its burst, then its
	// refill), and the limit's 10 in each second all the same.
	var times []atomicbucket.Time
	for step := range 80 {
		now = atomicbucket.Time(20*time.Second + time.Duration(step)*50*time.Millisecond)
		for range 3 {
			if ask(entries("remote_address", "192.0.2.3")) == ok {
				times = append(times, now)
			}
		}
	}
	for i := range times {
		in := 0
		for _, u := range times[i:] {
			if u < times[i]+atomicbucket.Time(time.Second) {
				in++
			}
		}
		if in > 10 {
			t.Fatalf("%d admitted in the second from %v, want at most 10", in, time.Duration(times[i]))
		}
	}
	if len(times) != 40 {
		t.Errorf("%d admitted in 4 s, want 40 (10 in each second)", len(times))
	}
	// Unlimited answers as envoyproxy/ratelimit answers it: OK, no limit,
	// the most remaining a status can say.
	resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*rlv3.RateLimitDescriptor{entries("generic_key", "health")}})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Statuses[0]; st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
		t.Errorf("unlimited: %v, want OK, no current limit, limit_remaining %d", st, uint32(math.MaxUint32))
	}
}

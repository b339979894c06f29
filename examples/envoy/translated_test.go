package envoy

import (
	"context"
	"math"
	"os/exec"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestTranslatedShared takes over an envoyproxy/ratelimit configuration as
// a team would: translated/ratelimit.yaml through gen envoy, the ready server
// generated from the translation, two instances on one store (as two
// envoyproxy/ratelimit instances share one Redis), on Redis and on
// PostgreSQL. The limits hold across both: 10 a second per address (a
// window: 10 of 20 asked at once), 3 a minute per tenant and user; a
// descriptor's hits_addend 0 peeks; unlimited answers as
// envoyproxy/ratelimit does. Without a store the server refuses to start,
// and with its Redis down a limited descriptor is UNAVAILABLE (Envoy's
// failure_mode_deny decides, as for envoyproxy/ratelimit), never OK.
func TestTranslatedShared(t *testing.T) {
	bin := binary(t, "./translated/cmd/ratelimit")
	for _, store := range []struct {
		name  string
		flags func(t *testing.T) []string
	}{
		{"redis", func(t *testing.T) []string { return []string{"-redis", redistest.Start(t).Addr} }},
		{"postgres", func(t *testing.T) []string { return []string{"-postgres", pgtest.Start(t).URL()} }},
	} {
		t.Run(store.name, func(t *testing.T) {
			flags := store.flags(t)
			translatedShared(t, []*instance{startServer(t, bin, "rl", flags...), startServer(t, bin, "rl", flags...)})
		})
	}

	out, err := exec.Command(bin, "-listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the policy's shared rules (RlRemoteAddress, RlTenantUser) are kept in a store every instance shares") {
		t.Errorf("without a store: %v\n%s", err, out)
	}

	down := redistest.Prepare(t) // nothing listening
	in := startServer(t, bin, "rl", "-redis", down.Addr, "-store-timeout", "100ms")
	resp, err := in.ask(t, "remote_address", "203.0.113.10")
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Redis down: %v, %v; want UNAVAILABLE", resp, err)
	}
}

// translatedShared holds two instances of the translated server on one
// store to the configuration's limits.
func translatedShared(t *testing.T, both []*instance) {
	if got := admitted(t, 20, both, "remote_address", "203.0.113.9"); got != 10 {
		t.Errorf("an address: %d of 20 admitted across both instances, want 10 (one shared limit)", got)
	}
	// A descriptor's hits_addend 0 asks how the limit stands and takes
	// nothing, on the store as in memory.
	for i := range 30 {
		resp, err := both[i%2].ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.11"}}, HitsAddend: wrapperspb.UInt64(0),
		}}})
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 10 {
			t.Fatalf("peek %d of an address's window: %v, %v; want OK with 10 remaining", i+1, resp, err)
		}
	}
	if got := admitted(t, 12, both, "remote_address", "203.0.113.11"); got != 10 {
		t.Errorf("an address after 30 peeks: %d of 12 admitted, want 10", got)
	}
	for _, pair := range [][2]string{{"acme", "u1"}, {"acme", "u2"}} {
		if got := admitted(t, 5, both, "tenant", pair[0], "user", pair[1]); got != 3 {
			t.Errorf("tenant %s, user %s: %d of 5 admitted across both, want 3", pair[0], pair[1], got)
		}
	}
	for i := range 20 {
		resp, err := both[i%2].ask(t, "generic_key", "health")
		if err != nil {
			t.Fatal(err)
		}
		if st := resp.Statuses[0]; resp.OverallCode != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
			t.Fatalf("unlimited health, call %d: %v; want OK, no limit, limit_remaining %d", i, resp, uint32(math.MaxUint32))
		}
	}
}

package storetest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/shared"
)

// probeMargin is what RecoversIdle allows beyond shared.ProbeEvery for the
// ping's round trip and a busy machine's scheduling.
const probeMargin = 750 * time.Millisecond

// RecoversIdle: what operators watch tells the truth, for buckets and
// windows alike, on one store.
//
//   - A shared window's checks are the store's calls: counted in Stats.Calls
//     and Stats.Latency as the buckets' are (they once counted nothing).
//   - Windows and buckets share the store's breaker: window checks that fail
//     with the server stopped open it, and a bucket check then finds it open
//     (ErrCircuitOpen) instead of paying its own timeouts.
//   - Once the server answers again, with no check at all (an idle instance
//     behind a readiness probe), the store probes the server itself:
//     SharedErr is nil and every breaker closed within shared.ProbeEvery
//     (and a margin), where before they stayed "not answering" until some
//     request checked.
func RecoversIdle(t *testing.T, store Instance, stop, restart func()) {
	ctx := context.Background()
	lims := sharedlimits.New(sharedlimits.WithStore(store))
	if err := lims.SharedErr(); err != nil {
		t.Fatal(err)
	}
	before := store.Stats()
	for i := range 4 {
		if res := lims.Quota.AllowN(ctx, "idle-"+strconv.Itoa(i), 1); res.Degraded || !res.Allowed {
			t.Fatalf("window check %d: %+v", i, res)
		}
		if res := lims.Exports.AllowN(ctx, uint64(100+i), 1); res.Degraded || !res.Allowed {
			t.Fatalf("bucket check %d: %+v", i, res)
		}
	}
	after := store.Stats()
	if calls := after.Calls - before.Calls; calls != 8 {
		t.Errorf("8 checks (4 window, 4 bucket) made %d calls in Stats, want 8", calls)
	}
	if n := after.Latency.Count - before.Latency.Count; n < 8 {
		t.Errorf("8 checks recorded %d round trips in Stats.Latency, want 8 (a window's round trips too)", n)
	}

	stop()
	for i := range shared.BreakerFailures {
		if res := lims.Quota.AllowN(ctx, "idle-down", 1); !res.Degraded {
			t.Fatalf("window check %d with the server stopped: %+v, want degraded", i, res)
		}
	}
	open := false
	for _, b := range store.Breakers() {
		open = open || b.Open
	}
	if !open {
		t.Errorf("after %d window checks failed: breakers %+v, want one open (the store's, which its windows share)", shared.BreakerFailures, store.Breakers())
	}
	if res := lims.Exports.AllowN(ctx, 200, 1); !res.Degraded || !errors.Is(res.Err, shared.ErrCircuitOpen) {
		t.Errorf("a bucket check after the windows opened the breaker: %+v, want degraded by the open circuit, no call of its own", res)
	}
	if got := store.Stats().Degraded - after.Degraded; got < int64(shared.BreakerFailures)+1 {
		t.Errorf("Stats.Degraded counted %d of the %d degraded checks", got, shared.BreakerFailures+1)
	}
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) {
		t.Fatalf("SharedErr with the server stopped: %v, want ErrUnhealthy", err)
	}

	restart()
	up := time.Now()
	for lims.SharedErr() != nil && time.Since(up) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(up)
	if err := lims.SharedErr(); err != nil {
		t.Fatalf("no check for %v after the server came back: SharedErr %v, want nil (the store probes it itself)", took, err)
	}
	for _, b := range store.Breakers() {
		if b.Open || b.Failures > 0 {
			t.Errorf("the server answers: breaker %+v, want closed with no failures", b)
		}
	}
	if within := shared.ProbeEvery + probeMargin; took > within {
		t.Errorf("SharedErr was nil %v after the server came back, with no check; want within %v (a probe interval and a margin)", took, within)
	}
	t.Logf("idle: SharedErr nil %v after the server came back", took)
	if res := lims.Quota.AllowN(ctx, "idle-up", 1); res.Degraded || !res.Allowed {
		t.Errorf("a window check once recovered: %+v", res)
	}
}

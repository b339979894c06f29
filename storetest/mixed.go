package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// Refund: what an allowed check took goes back to the bucket with
// Bound.Refund (a mixed tier's give-back when a local window denies after
// the store allowed), never beyond full. A bucket of burst 5: three taken,
// two given back, then exactly four more; a full bucket given tokens still
// holds its burst and no more.
func Refund(t *testing.T, st shared.Store) {
	ctx := context.Background()
	b, err := st.Bind([]shared.Rule{{Namespace: "refund", Name: "PerKey",
		Limit: atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	step := func(key string, cost int64) verdict.Result {
		t.Helper()
		res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: key, Cost: cost})
		if res.Degraded {
			t.Fatalf("degraded: %v", res.Err)
		}
		return res
	}
	for i := range 3 {
		if !step("k", 1).Allowed {
			t.Fatalf("check %d of a full bucket of 5 denied", i+1)
		}
	}
	if err := b.Refund(ctx, []shared.Step{{Rule: 0, Key: "k", Cost: 2}}); err != nil {
		t.Fatal(err)
	}
	if res := step("k", 4); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("after 3 taken and 2 given back, a cost of 4: %+v; want allowed with 0 left", res.Decision)
	}
	if step("k", 1).Allowed {
		t.Fatal("a bucket of 5 gave a sixth")
	}
	if err := b.Refund(ctx, []shared.Step{{Rule: 0, Key: "full", Cost: 3}}); err != nil {
		t.Fatal(err)
	}
	if step("full", 5).Allowed == false || step("full", 1).Allowed {
		t.Fatal("a refund to a full bucket filled it beyond its burst")
	}
}

// GeneratedMixedTier: a generated tier of local and shared rules (Seat:
// SeatLocal, 3 a user in each instance; SeatShared, 5 a user on the store;
// SeatDay, a local window of 3 an hour) across instances, all or nothing,
// each part at its own key. A request a local rule denies never reaches the
// store; one the store denies gives the local bucket back what it took and
// counts in no local window; each denial names its rule.
func GeneratedMixedTier(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b, c := instance(), instance(), instance()
	run := func(l *sharedlimits.Limits, local, store string, day func(int) string, n int) string {
		t.Helper()
		return outcomes(t, n, func(i int) sharedlimits.TierResult { return l.Seat(ctx, local, store, day(i)) })
	}
	same := func(k string) func(int) string { return func(int) string { return k } }
	// a: the local window (3 an hour) denies the 4th and 5th before anything
	// is taken; the store took 3.
	if got, want := run(a, "ann", "ann", same("ann"), 5), "ok ok ok SeatDay SeatDay"; got != want {
		t.Fatalf("instance a: %s; want %s", got, want)
	}
	// b: the store holds 5 − 3 = 2 for ann: 2 admitted, then the store denies.
	if got, want := run(b, "ann", "ann", same("ann"), 4), "ok ok SeatShared SeatShared"; got != want {
		t.Fatalf("instance b: %s; want %s (the store's 5 less a's 3)", got, want)
	}
	// b's bucket gave back what the store-denied requests took (3 − 2 = 1
	// left), and its window counted only the 2 admitted (3 − 2 = 1 left).
	if !b.SeatLocal.Peek("ann", 1).Allowed || b.SeatLocal.Peek("ann", 2).Allowed {
		t.Errorf("b's SeatLocal after 2 admitted and 2 denied by the store: want exactly 1 left")
	}
	if !b.SeatDay.Peek("ann", 1).Allowed || b.SeatDay.Peek("ann", 2).Allowed {
		t.Errorf("b's SeatDay counted requests the store denied: want exactly 1 of 3 left")
	}
	if a.SeatShared.Allow(ctx, "ann") {
		t.Errorf("the store admitted a sixth for ann")
	}
	// c: a fresh window key each time, so the local bucket (3) denies the 4th
	// and 5th: they take nothing from the store, which holds 5 − 3 = 2.
	fresh := func(i int) string { return fmt.Sprint("cy-day-", i) }
	if got, want := run(c, "cy", "cy-store", fresh, 5), "ok ok ok SeatLocal SeatLocal"; got != want {
		t.Fatalf("instance c: %s; want %s", got, want)
	}
	if res := c.SeatShared.AllowN(ctx, "cy-store", 2); !res.Allowed || res.Remaining != 0 {
		t.Errorf("the store after 3 admitted and 2 denied by the local bucket: %+v; want exactly 2 left", res)
	}
	if c.SeatShared.Allow(ctx, "cy-store") {
		t.Errorf("the store admitted beyond its burst of 5")
	}
}

// GeneratedMeteredTier: a generated tier of a bucket and a window on the store
// (Metered: MeterShared, 5 a user; MeterWindow, 3 an hour a user) across two
// instances, all or nothing: the buckets are asked first, then the window;
// a request the window denies gives the bucket back what it took, and one
// the bucket denies is never counted by the window.
func GeneratedMeteredTier(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	run := func(l *sharedlimits.Limits, bucket string, window func(int) string, n int) string {
		t.Helper()
		return outcomes(t, n, func(i int) sharedlimits.TierResult { return l.Metered(ctx, bucket, window(i)) })
	}
	same := func(k string) func(int) string { return func(int) string { return k } }
	if got, want := run(a, "mo", same("mo"), 4), "ok ok ok MeterWindow"; got != want {
		t.Fatalf("instance a: %s; want %s", got, want)
	}
	if got, want := run(b, "mo", same("mo"), 1), "MeterWindow"; got != want {
		t.Fatalf("instance b: %s; want %s (the window holds 3 across instances)", got, want)
	}
	// The bucket gave back what the two window denials took: 5 − 3 = 2.
	if res := a.MeterShared.AllowN(ctx, "mo", 2); !res.Allowed || res.Remaining != 0 {
		t.Errorf("MeterShared after 3 admitted and 2 denied by the window: %+v; want exactly 2 left", res)
	}
	// A bucket denial counts in no window: "nb" admits 5 (fresh windows), the
	// sixth is denied by the bucket, and its window "wz" is untouched.
	fresh := func(i int) string {
		if i == 5 {
			return "wz"
		}
		return fmt.Sprint("w-", i)
	}
	if got, want := run(b, "nb", fresh, 6), "ok ok ok ok ok MeterShared"; got != want {
		t.Fatalf("instance b, bucket nb: %s; want %s", got, want)
	}
	if res := a.MeterWindow.AllowN(ctx, "wz", 3); !res.Allowed || res.Remaining != 0 {
		t.Errorf("the window of a request the bucket denied: %+v; want its whole 3", res)
	}
}

// outcomes runs n tier checks and lists their outcomes: ok, or the rule that
// denied. A degraded check fails the test.
func outcomes(t *testing.T, n int, check func(i int) sharedlimits.TierResult) string {
	t.Helper()
	var out []string
	for i := range n {
		res := check(i)
		if res.Degraded || res.Err != nil {
			t.Fatalf("check %d degraded: %v", i, res.Err)
		}
		if res.Allowed {
			out = append(out, "ok")
		} else {
			out = append(out, res.DeniedBy.String())
		}
	}
	return strings.Join(out, " ")
}

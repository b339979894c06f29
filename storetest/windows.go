package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/verdict"
)

// GeneratedWindows: two instances of the generated service checking its
// shared window rules on one server: Quota (at most 5 in any hour per user,
// exact) admits 5 of 8 alternating checks, then tells the sixth how long
// until its first admission leaves; QuotaWide (100 in any 16 minutes,
// counted) takes costs up to exactly 100 across both; a service without a
// store decides on its own window and says why (Err).
func GeneratedWindows(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	lims := []*sharedlimits.Limits{a, b}
	admitted := 0
	for i := range 8 {
		res := lims[i%2].Quota.AllowN(ctx, "alice", 1)
		if res.Degraded || res.Err != nil {
			t.Fatalf("check %d degraded: %+v", i, res)
		}
		if res.Allowed {
			admitted++
			continue
		}
		if res.RetryAfter <= 0 || res.RetryAfter > time.Hour+time.Second {
			t.Errorf("check %d denied with RetryAfter %v, want until the first admission leaves, within the hour", i, res.RetryAfter)
		}
	}
	if admitted != 5 {
		t.Errorf("two instances admitted %d of 8 for alice; the window holds 5", admitted)
	}
	if res := b.Quota.AllowN(ctx, "bob", 5); !res.Allowed || res.Remaining != 0 {
		t.Errorf("bob has a window of his own: %+v", res)
	}
	for i, c := range []struct {
		lim   *sharedlimits.Limits
		cost  int64
		allow bool
		left  int64
	}{{a, 30, true, 70}, {b, 30, true, 40}, {a, 30, true, 10}, {b, 30, false, 10}, {b, 10, true, 0}, {a, 1, false, 0}} {
		res := c.lim.QuotaWide.AllowN(ctx, 7, c.cost)
		if res.Degraded || res.Allowed != c.allow || res.Remaining != c.left {
			t.Errorf("QuotaWide check %d (cost %d): %+v, want allowed %v with %d left", i, c.cost, res, c.allow, c.left)
		}
	}
	// QuotaLeased (10 an hour per user, leases of at most 4): two instances
	// alternating admit exactly 10 of 16 (what one holds, it spends on its
	// turns; what is granted is all the window holds).
	admitted = 0
	for i := range 16 {
		res := lims[i%2].QuotaLeased.AllowN(ctx, "dave", 1)
		if res.Degraded {
			t.Fatalf("QuotaLeased check %d degraded: %+v", i, res)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("two instances leasing admitted %d of 16 for dave; the window holds 10", admitted)
	}
	for _, c := range []struct {
		plan sharedlimits.Plan
		want int
	}{{sharedlimits.PlanFree, 2}, {sharedlimits.PlanPro, 4}} {
		got := 0
		for i := range 6 {
			res := lims[i%2].QuotaPlan.AllowN(ctx, c.plan, "carol", 1)
			if res.Degraded || res.Err != nil {
				t.Fatalf("QuotaPlan on %v, check %d degraded: %+v", c.plan, i, res)
			}
			if res.Allowed {
				got++
			}
		}
		if got != c.want {
			t.Errorf("QuotaPlan on %v: %d of 6 admitted across two instances, want %d (a window per plan)", c.plan, got, c.want)
		}
	}
	if res := a.QuotaPlan.AllowN(ctx, 7, "carol", 1); res.Allowed || res.RetryAfter != atomicbucket.Never {
		t.Errorf("QuotaPlan on a plan outside the constants: %+v", res)
	}
	alone := sharedlimits.New()
	if res := alone.Quota.AllowN(ctx, "alice", 1); !res.Allowed || res.Remaining != 4 || res.Err == nil {
		t.Errorf("without a store, Quota decides on its own window, saying why: %+v", res)
	}
	// Numbers at run time (an overlay Set on every instance): Quota raised to
	// 8 an hour while alice's window holds 5 on the store: 3 more across the
	// instances, then none; a key's own numbers on a window with plans are
	// refused.
	for _, l := range lims {
		if err := l.ApplyNumbers(overlay.Set{overlay.NewEntry("test", "Quota", "", nil, "8/h", 8)}); err != nil {
			t.Fatalf("Quota raised to 8/h: %v", err)
		}
	}
	more := 0
	for i := range 6 {
		if res := lims[i%2].Quota.AllowN(ctx, "alice", 1); res.Allowed {
			more++
		}
	}
	if more != 3 {
		t.Errorf("Quota raised to 8 an hour while holding 5: %d of 6 more admitted, want 3", more)
	}
	key := "alice"
	if err := a.ApplyNumbers(overlay.Set{overlay.NewEntry("test", "QuotaPlan", "pro", &key, "9/h", 9)}); err == nil {
		t.Error("a key's own numbers for a shared window with plans were accepted")
	}
	if err := alone.ApplyNumbers(overlay.Set{overlay.NewEntry("test", "Quota", "", nil, "8/h", 8)}); err != nil {
		t.Errorf("numbers without a store (the local window's): %v", err)
	}
	// A window with plans: pro raised to 6 an hour while carol's pro window
	// holds 4: 2 more on pro, none on free (still 2, holding 2).
	for _, l := range lims {
		if err := l.ApplyNumbers(overlay.Set{overlay.NewEntry("test", "QuotaPlan", "pro", nil, "6/h", 6)}); err != nil {
			t.Fatalf("QuotaPlan's pro plan raised to 6/h: %v", err)
		}
	}
	for _, c := range []struct {
		plan sharedlimits.Plan
		want int
	}{{sharedlimits.PlanFree, 0}, {sharedlimits.PlanPro, 2}} {
		got := 0
		for i := range 4 {
			if res := lims[i%2].QuotaPlan.AllowN(ctx, c.plan, "carol", 1); res.Allowed {
				got++
			}
		}
		if got != c.want {
			t.Errorf("QuotaPlan on %v after pro's change: %d of 4 more admitted, want %d", c.plan, got, c.want)
		}
	}
}

// GeneratedWindowReset: a customer's quota given back after a refund, on
// the store, for every instance. alice fills Quota (5 in any hour) through
// two instances; one resets her window; both then admit her 5 again, and
// bob's window is untouched. A counted window (QuotaWide) and a leased one
// (QuotaLeased: the resetting instance's lease gives back and is dropped;
// the other's may still spend what it holds, at most 4) likewise; a window
// per plan (QuotaPlan) on every plan.
func GeneratedWindowReset(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	count := func(n int, check func(i int) verdict.Result) int {
		t.Helper()
		got := 0
		for i := range n {
			res := check(i)
			if res.Degraded {
				t.Fatalf("check %d degraded: %+v", i, res)
			}
			if res.Allowed {
				got++
			}
		}
		return got
	}
	lims := []*sharedlimits.Limits{a, b}
	quota := func(i int) verdict.Result { return lims[i%2].Quota.AllowN(ctx, "alice", 1) }
	if got := count(7, quota); got != 5 {
		t.Fatalf("alice before the reset: %d of 7, want 5", got)
	}
	if got := count(1, func(int) verdict.Result { return b.Quota.AllowN(ctx, "bob", 4) }); got != 1 {
		t.Fatalf("bob's 4: %d", got)
	}
	if err := b.Quota.Reset(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if got := count(7, quota); got != 5 {
		t.Errorf("alice after a reset on one instance: %d of 7 across both, want 5 again", got)
	}
	if res := a.Quota.AllowN(ctx, "bob", 2); res.Allowed || res.Remaining != 1 {
		t.Errorf("bob, whose window was not reset, asking 2 of the 1 left: %+v", res)
	}
	wide := func(i int) verdict.Result { return lims[i%2].QuotaWide.AllowN(ctx, 9, 30) }
	if got := count(4, wide); got != 3 {
		t.Fatalf("QuotaWide before the reset: %d of 4 costs of 30, want 3 (100 in the window)", got)
	}
	if err := a.QuotaWide.Reset(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if got := count(4, wide); got != 3 {
		t.Errorf("QuotaWide after a reset: %d of 4 costs of 30, want 3 again", got)
	}
	for _, plan := range []sharedlimits.Plan{sharedlimits.PlanFree, sharedlimits.PlanPro} {
		for range 5 {
			a.QuotaPlan.AllowN(ctx, plan, "carol", 1)
		}
	}
	if err := b.QuotaPlan.Reset(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	if got := count(6, func(int) verdict.Result { return a.QuotaPlan.AllowN(ctx, sharedlimits.PlanPro, "carol", 1) }); got != 4 {
		t.Errorf("QuotaPlan on pro after a reset of every plan: %d of 6, want 4", got)
	}
	leased := func(i int) verdict.Result { return lims[i%2].QuotaLeased.AllowN(ctx, "dave", 1) }
	before := count(14, leased)
	if err := a.QuotaLeased.Reset(ctx, "dave"); err != nil {
		t.Fatal(err)
	}
	after := count(14, leased)
	// b's lease may still hold up to 4 granted before the reset, which it
	// spends after it: at most 10 + 4, at least the 10 less what a's and
	// b's new leases hold unspent.
	if before > 10 || after > 10+4 || after < 10-2*4 {
		t.Errorf("QuotaLeased: %d of 14 before a reset, %d of 14 after, want at most 10, then 2 to 14", before, after)
	}
}

// GeneratedWindowKeyNumbers: a generated keyed shared window's key given
// numbers of its own on two instances (as every instance must be) is checked
// by them on the store across both, while other keys keep the rule's; taken
// away, the key is back on the rule's numbers holding what it held.
func GeneratedWindowKeyNumbers(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	lims := []*sharedlimits.Limits{a, b}
	count := func(key string, n int) int {
		t.Helper()
		got := 0
		for i := range n {
			res := lims[i%2].Quota.AllowN(ctx, key, 1)
			if res.Degraded {
				t.Fatalf("%s, check %d degraded: %+v", key, i, res)
			}
			if res.Allowed {
				got++
			}
		}
		return got
	}
	two := atomicbucket.Numbers{Tokens: 2, Period: time.Hour, Burst: 2}
	for _, l := range lims {
		if err := l.Quota.SetKeyNumbers(ctx, "carol", two); err != nil {
			t.Fatal(err)
		}
	}
	if got := count("carol", 6); got != 2 {
		t.Errorf("carol, 2 an hour of her own on both instances: %d of 6 admitted", got)
	}
	if got := count("dave", 7); got != 5 {
		t.Errorf("dave, on the rule's 5 an hour: %d of 7 admitted", got)
	}
	if err := a.Quota.SetKeyNumbers(ctx, "", two); err == nil {
		t.Error("the empty key: given numbers of its own")
	}
	if err := a.Quota.SetKeyNumbers(ctx, "carol", atomicbucket.Numbers{Tokens: 2, Period: time.Hour, Burst: 3}); err == nil {
		t.Error("a burst other than the limit: accepted")
	}
	for _, l := range lims {
		l.Quota.ClearKeyNumbers(ctx, "carol")
	}
	if got := count("carol", 6); got != 3 {
		t.Errorf("carol back on the rule's 5 an hour, holding 2: %d of 6 admitted, want 3", got)
	}
	// The same through an overlay Set, as a numbers file gives it.
	erin := "erin"
	for _, l := range lims {
		if err := l.ApplyNumbers(overlay.Set{overlay.NewEntry("numbers.yaml:3", "Quota", "", &erin, "1/h", 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := count("erin", 3); got != 1 {
		t.Errorf("erin, 1 an hour of her own from a Set: %d of 3 admitted", got)
	}
	for _, l := range lims {
		if err := l.ApplyNumbers(overlay.Set{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := count("erin", 6); got != 4 {
		t.Errorf("erin after an empty Set, back on 5 an hour holding 1: %d of 6 admitted, want 4", got)
	}
}

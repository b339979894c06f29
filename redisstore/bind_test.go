package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
)

var _ shared.Store = (*Store)(nil)

// Through the seam a generated package uses: Bind refuses what Redis cannot
// hold, Check decides single rules and tiers on Redis, and with Redis gone a
// tier falls to its rules' failure settings, all or nothing.
func TestBindAndCheck(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Bind([]shared.Rule{{Name: "x", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1}},
		{Name: "x", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1}}}); err == nil || !strings.Contains(err.Error(), "two shared rules") {
		t.Errorf("two rules with one name: %v", err)
	}
	if _, err := st.Bind([]shared.Rule{{Name: "tiny", Limit: atomicbucket.Limit{Tokens: 1, Period: 10 * time.Nanosecond, Burst: 1}}}); err == nil {
		t.Error("a period finer than Redis's clock was bound")
	}
	if _, err := st.Bind([]shared.Rule{{Name: "share", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1},
		Failure: shared.Failure{Mode: shared.FailLocal, Share: 1.5}}}); err == nil {
		t.Error("a local share above 1 was bound")
	}
	b, err := st.Bind([]shared.Rule{
		{Name: "PerUser", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 3}, Failure: shared.Failure{Mode: shared.FailLocal, Share: 0.5}},
		{Name: "Global", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 100}, Global: true, Failure: shared.Failure{Mode: shared.FailAllow}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tier := []shared.Step{{Rule: 0, Key: "alice", Cost: 1}, {Rule: 1, Key: "", Cost: 1}}
	for i := range 4 {
		res, idx := b.Check(ctx, tier)
		if res.Degraded || res.Allowed != (i < 3) || (i == 3 && idx != 0) {
			t.Fatalf("tier request %d on Redis: %+v from %d", i, res, idx)
		}
	}
	if res, _ := b.Check(ctx, []shared.Step{{Rule: 1, Key: "", Cost: 1}}); !res.Allowed || res.Remaining != 96 {
		t.Fatalf("Global after three tier requests: %+v", res)
	}
	if res, idx := b.Check(ctx, []shared.Step{{Rule: 5, Key: "", Cost: 1}}); res.Allowed || res.Err == nil || idx != 0 {
		t.Errorf("a step naming no rule: %+v", res)
	}

	srv.Stop()
	// Redis gone: PerUser decides on its local half (burst 1), Global allows.
	res, _ := b.Check(ctx, tier)
	if !res.Degraded || !res.Allowed {
		t.Fatalf("first tier request without Redis: %+v", res)
	}
	res, idx := b.Check(ctx, tier)
	if !res.Degraded || res.Allowed || idx != 0 {
		t.Fatalf("second tier request without Redis: %+v from %d (the local share of PerUser holds 1)", res, idx)
	}
}

// Leased rules through the seam: two instances share a leased per-user rule
// and a leased global one as a tier; together they admit no more than the
// burst, with far fewer Redis calls than checks; a tier denied by its second
// step gives the first its tokens back; beyond maxLeases keys, checks go to
// Redis one by one; with Redis gone, a lease spends what it holds and then
// the failure setting decides.
func TestBindLeased(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rules := []shared.Rule{
		{Name: "LeasedUser", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 40}, Lease: 10},
		{Name: "LeasedGlobal", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 1000}, Global: true, Lease: 100,
			Failure: shared.Failure{Mode: shared.FailAllow}},
		{Name: "SmallGlobal", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 5}, Global: true, Lease: 5},
	}
	var stores []*Store
	var bounds []*shared.Binding
	for range 2 {
		st, err := New(context.Background(), srv.Client(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Bind(rules)
		if err != nil {
			t.Fatal(err)
		}
		stores, bounds = append(stores, st), append(bounds, b.(*shared.Binding))
	}
	start := time.Now()
	tier := []shared.Step{{Rule: 0, Key: "alice", Cost: 1}, {Rule: 1, Key: "", Cost: 1}}
	admitted := 0
	for i := range 200 {
		res, _ := bounds[i%2].Check(ctx, tier)
		if res.Degraded {
			t.Fatalf("check %d degraded: %v", i, res.Err)
		}
		if res.Allowed {
			admitted++
		}
	}
	calls := stores[0].Stats().Calls + stores[1].Stats().Calls
	envelope := 40 + int(time.Since(start)/time.Minute)
	t.Logf("two instances, 200 tier checks: %d admitted (envelope %d), %d Redis calls", admitted, envelope, calls)
	if admitted > envelope || admitted < 20 {
		t.Errorf("%d admitted across two instances; the burst is 40", admitted)
	}
	if calls > 60 {
		t.Errorf("%d Redis calls for 200 leased checks", calls)
	}

	// SmallGlobal (5) behind LeasedUser: the sixth request is denied by the
	// second step, and the first step's lease gets its token back.
	b := bounds[0]
	small := []shared.Step{{Rule: 0, Key: "bob", Cost: 1}, {Rule: 2, Key: "", Cost: 1}}
	for i := range 5 {
		if res, _ := b.Check(ctx, small); !res.Allowed {
			t.Fatalf("request %d: %+v", i, res)
		}
	}
	bob, _ := b.Leases().Lookup(0, "bob")
	held := bob.Held()
	if res, idx := b.Check(ctx, small); res.Allowed || idx != 1 {
		t.Fatalf("the sixth request: %+v from step %d, want a denial from step 1", res, idx)
	}
	if bob.Held() != held {
		t.Errorf("bob's lease holds %d after a tier denied by its second step, %d before", bob.Held(), held)
	}

	// No room for another lease: a new key is checked on Redis per request.
	kept := b.Leases().Len()
	b.Leases().SetMax(kept) // and no sweep for a second: both leases are in use
	before := stores[0].Stats().Calls
	for i := range 3 {
		if res, _ := b.Check(ctx, []shared.Step{{Rule: 0, Key: "carol", Cost: 1}}); !res.Allowed || res.Degraded {
			t.Fatalf("carol's check %d: %+v", i, res)
		}
	}
	if _, ok := b.Leases().Lookup(0, "carol"); ok || b.Leases().Len() != kept {
		t.Errorf("carol got a lease beyond the most kept (%d kept, room for %d)", b.Leases().Len(), kept)
	}
	if got := stores[0].Stats().Calls - before; got != 3 {
		t.Errorf("carol's 3 checks made %d Redis calls, want 3 (per request)", got)
	}

	// Redis gone: dave's lease spends what it holds, then LeasedUser's
	// failure setting (deny) decides.
	b.Leases().SetMax(shared.MaxLeases)
	dave := []shared.Step{{Rule: 0, Key: "dave", Cost: 1}}
	for range 4 { // batches of 1, then 2: dave's lease holds tokens
		if res, _ := b.Check(ctx, dave); !res.Allowed {
			t.Fatalf("dave: %+v", res)
		}
	}
	lease, _ := b.Leases().Lookup(0, "dave")
	if lease.Held() == 0 {
		t.Fatal("dave's lease holds nothing after 4 checks")
	}
	srv.Stop()
	for n := lease.Held(); n > 0; n-- {
		if res, _ := b.Check(ctx, dave); !res.Allowed || res.Degraded {
			t.Fatalf("dave with %d held and Redis gone: %+v", n, res)
		}
	}
	if res, _ := b.Check(ctx, dave); res.Allowed || !res.Degraded {
		t.Errorf("dave with nothing held and Redis gone: %+v, want a degraded denial", res)
	}
}

// A service shutting down gives back what its leases hold: after Close, the
// bucket in Redis holds the burst minus what was spent, for another instance.
func TestCloseReleasesLeases(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	st, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Bind([]shared.Rule{{Name: "Closing", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 100}, Lease: 50}})
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		if res := b.CheckStep(ctx, shared.Step{Rule: 0, Key: "k", Cost: 1}); !res.Allowed || res.Degraded {
			t.Fatalf("%+v", res)
		}
	}
	other, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := NewRule("Closing", atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 100})
	before, _ := other.PeekN(ctx, r, "k", 0)
	st.Close()
	after, _ := other.PeekN(ctx, r, "k", 0)
	if before.Remaining >= 88 || after.Remaining != 88 {
		t.Errorf("another instance sees %d tokens before the lessee closes and %d after; want fewer than 88, then 100 − 12 spent", before.Remaining, after.Remaining)
	}
}

// A nil *Store given to a generated package's WithStore is reported by
// SharedErr, not a panic inside New (before: a nil pointer dereference in
// Bind).
func TestTypedNilStore(t *testing.T) {
	var st *Store
	l := sharedlimits.New(sharedlimits.WithStore(st))
	if err := l.SharedErr(); err == nil || !strings.Contains(err.Error(), "nil *redisstore.Store") {
		t.Errorf("SharedErr = %v, want it to name the nil *redisstore.Store", err)
	}
}

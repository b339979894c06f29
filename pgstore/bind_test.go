package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/shared"
)

var _ shared.Store = (*Store)(nil)

// Through the seam a generated package uses, two instances on one database:
// Bind refuses what the store cannot hold; a tier of a per-user rule and a
// global one is all or nothing; leased rules admit no more than the burst
// between the instances with far fewer statements than checks, and Close
// gives back what the leases hold.
func TestBind(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	_, st := open(t, srv, 4, Options{})
	one := atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1}
	if _, err := st.Bind([]shared.Rule{{Name: "x", Limit: one}, {Name: "x", Limit: one}}); err == nil || !strings.Contains(err.Error(), "two shared rules") {
		t.Errorf("two rules with one name: %v", err)
	}
	if _, err := st.Bind([]shared.Rule{{Name: "tiny", Limit: atomicbucket.Limit{Tokens: 1, Period: 10 * time.Nanosecond, Burst: 1}}}); err == nil {
		t.Error("a period finer than the server's clock was bound")
	}
	if _, err := st.Bind([]shared.Rule{{Name: "bad name", Limit: one}}); err == nil {
		t.Error("a rule name with a space was bound")
	}
	rules := []shared.Rule{
		{Name: "PerUser", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 3}},
		{Name: "Global", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 100}, Global: true},
		{Name: "LeasedUser", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 40}, Lease: 10},
		{Name: "LeasedGlobal", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 1000}, Global: true, Lease: 100},
	}
	b, err := st.Bind(rules)
	if err != nil {
		t.Fatal(err)
	}
	tier := []shared.Step{{Rule: 0, Key: "alice", Cost: 1}, {Rule: 1, Key: "", Cost: 1}}
	for i := range 4 {
		if res, idx := b.Check(ctx, tier); res.Degraded || res.Allowed != (i < 3) || (i == 3 && idx != 0) {
			t.Fatalf("tier request %d: %+v from %d", i, res, idx)
		}
	}
	if res := b.CheckStep(ctx, shared.Step{Rule: 1, Key: "", Cost: 1}); !res.Allowed || res.Remaining != 96 {
		t.Fatalf("Global after three tier requests: %+v", res)
	}
	if res, idx := b.Check(ctx, []shared.Step{{Rule: 9, Key: "", Cost: 1}}); res.Allowed || res.Err == nil || idx != 0 {
		t.Errorf("a step naming no rule: %+v", res)
	}

	_, other := open(t, srv, 4, Options{})
	b2, err := other.Bind(rules)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	leased := []shared.Step{{Rule: 2, Key: "bob", Cost: 1}, {Rule: 3, Key: "", Cost: 1}}
	admitted := 0
	for i := range 200 {
		res, _ := []shared.Bound{b, b2}[i%2].Check(ctx, leased)
		if res.Degraded {
			t.Fatalf("leased check %d degraded: %v", i, res.Err)
		}
		if res.Allowed {
			admitted++
		}
	}
	calls := st.Stats().Calls + other.Stats().Calls
	envelope := 40 + int(time.Since(start)/time.Minute)
	t.Logf("two instances, 200 leased tier checks: %d admitted (envelope %d), %d statements", admitted, envelope, calls)
	if admitted > envelope || admitted < 20 || calls > 60 {
		t.Fatalf("%d admitted of a burst of 40, in %d statements", admitted, calls)
	}
	// Close gives back what the leases hold: the bucket then shows only what
	// was spent taken.
	carol := shared.Step{Rule: 2, Key: "carol", Cost: 1}
	for range 5 {
		if res := b.CheckStep(ctx, carol); !res.Allowed {
			t.Fatalf("carol: %+v", res)
		}
	}
	r := mustRule(t, "LeasedUser", rules[2].Limit)
	if d, err := st.PeekN(ctx, r, "carol", 1); err != nil || d.Remaining >= 40-5-1 {
		t.Fatalf("carol's bucket before Close: %+v, %v; her lease should hold some", d, err)
	}
	st.Close()
	other.Close()
	_, probe := open(t, srv, 1, Options{})
	if d, err := probe.PeekN(ctx, r, "carol", 1); err != nil || d.Remaining != 40-5-1 {
		t.Fatalf("carol's bucket after Close: %+v, %v; want %d left (5 spent, and the peek's 1)", d, err, 40-5-1)
	}
}

// A rule generated with other units than this version computes is refused
// (regenerate); a tier naming one bucket twice is refused without a
// statement, and without counting as a failure of the database's.
func TestRefusals(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	_, st := open(t, srv, 2, Options{})
	l := atomicbucket.Limit{Tokens: 7, Period: 3 * time.Second, Burst: 10}
	u, _ := shared.MicroUnits(l)
	if _, err := st.Bind([]shared.Rule{{Name: "current", Limit: l, Units: u}}); err != nil {
		t.Fatalf("this version's units: %v", err)
	}
	u.Emit++
	if _, err := st.Bind([]shared.Rule{{Name: "stale", Limit: l, Units: u}}); !errors.Is(err, shared.ErrStaleUnits) {
		t.Fatalf("stale units: %v", err)
	}
	r := mustRule(t, "twice", l)
	before := st.Stats().Calls
	if res, i := st.CheckTier(ctx, []shared.Call{{Rule: r, Key: "k", Cost: 1}, {Rule: r, Key: "j", Cost: 1}, {Rule: r, Key: "k", Cost: 1}}); res.Allowed || res.Degraded || res.Err == nil || i != 2 {
		t.Fatalf("a tier naming a bucket twice: %+v from %d", res, i)
	}
	if st.Stats().Calls != before {
		t.Error("a tier naming a bucket twice went to the database")
	}
}

package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// MultiStore: rules on two stores of one package (shared.Stores: PerUser and
// Global on the default store, Billing on the store named billing; open
// makes a store of the server under a namespace of its own, so the two hold
// separate buckets). A tier over both is all or nothing: when Billing
// denies, PerUser gets back what it took; a rule's bucket is on its own
// store only; numbers change on the right store; a rule naming a store
// Stores lacks is refused at Bind.
func MultiStore(t *testing.T, open func(t *testing.T, namespace string) shared.Store) {
	ctx := context.Background()
	a, b := open(t, "multi-a"), open(t, "multi-b")
	hour := func(burst int64) atomicbucket.Limit {
		return atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: burst}
	}
	rules := []shared.Rule{
		{Namespace: "multi", Name: "PerUser", Limit: hour(3)},
		{Namespace: "multi", Name: "Billing", Limit: hour(2), Store: "billing"},
		{Namespace: "multi", Name: "Global", Limit: hour(100), Global: true},
	}
	if _, err := (shared.Stores{Default: a}).Bind(rules); !errors.Is(err, shared.ErrStoreMissing) {
		t.Fatalf("Bind without the billing store: %v; want ErrStoreMissing", err)
	}
	bound, err := shared.Stores{Default: a, Named: map[string]shared.Store{"billing": b}}.Bind(rules)
	if err != nil {
		t.Fatal(err)
	}
	tier := []shared.Step{{Rule: 0, Key: "u", Cost: 1}, {Rule: 2, Cost: 1}, {Rule: 1, Key: "u", Cost: 1}}
	var got []int
	for range 4 {
		res, i := bound.Check(ctx, tier)
		if res.Degraded {
			t.Fatalf("degraded: %v", res.Err)
		}
		if res.Allowed {
			got = append(got, -1)
		} else {
			got = append(got, i)
		}
	}
	// Billing's 2, then Billing denies (step 2) twice.
	if want := []int{-1, -1, 2, 2}; !equalInts(got, want) {
		t.Fatalf("tier over two stores: %v (−1 allowed, else the denying step); want %v", got, want)
	}
	// Alone on each store: PerUser on a holds 3 − 2 = 1 (the denied tiers gave
	// theirs back); Global on a 100 − 2; Billing on b is empty, and a's
	// Billing (no rule of the policy puts it there) is untouched.
	alone := func(st shared.Store, r shared.Rule) shared.Bound {
		r.Store = ""
		bd, err := st.Bind([]shared.Rule{r})
		if err != nil {
			t.Fatal(err)
		}
		return bd
	}
	check := func(bd shared.Bound, key string, cost int64) bool {
		return bd.CheckStep(ctx, shared.Step{Rule: 0, Key: key, Cost: cost}).Allowed
	}
	if pu := alone(a, rules[0]); !check(pu, "u", 1) || check(pu, "u", 1) {
		t.Error("PerUser on the default store: want exactly 1 left after 2 admitted and 2 given back")
	}
	if g := alone(a, rules[2]); !check(g, "", 98) || check(g, "", 1) {
		t.Error("Global on the default store: want exactly 98 left")
	}
	if check(alone(b, rules[1]), "u", 1) {
		t.Error("Billing on the billing store still admits: its 2 were taken elsewhere")
	}
	if !check(alone(a, rules[1]), "u", 2) {
		t.Error("Billing's bucket on the default store was touched: the rule is on billing")
	}
	// CheckStep and numbers reach the rule's store.
	if bound.CheckStep(ctx, shared.Step{Rule: 1, Key: "v", Cost: 2}).Allowed != true {
		t.Error("Billing for a new key: want its burst of 2")
	}
	nb, ok := bound.(shared.Numbered)
	if !ok {
		t.Fatalf("%T is no shared.Numbered", bound)
	}
	if err := nb.SetNumbers(1, atomicbucket.Numbers{Tokens: 1, Period: time.Hour, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	if n, origin := nb.NumbersFor(1, "w"); n.Burst != 5 || origin == atomicbucket.FromPolicy {
		t.Errorf("Billing's numbers after SetNumbers: %v (%v)", n, origin)
	}
	if n, _ := nb.NumbersFor(0, "w"); n.Burst != 3 {
		t.Errorf("PerUser's numbers changed with Billing's: %v", n)
	}
	if !bound.CheckStep(ctx, shared.Step{Rule: 1, Key: "w", Cost: 5}).Allowed {
		t.Error("Billing under its new burst of 5 refused 5")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Namespaces: one rule name, Global, bound by two services (the policies'
// namespaces billing and search) on one store, and by billing again on a
// store of another namespace (Options.Namespace: staging) on the same
// server: three buckets, each admitting its own burst of 3. Before, keys
// were limitgen:{key}:Rule, and two services' Global rules shared a bucket.
func Namespaces(t *testing.T, open func(t *testing.T, namespace string) shared.Store) {
	ctx := context.Background()
	bind := func(st shared.Store, ns string) shared.Bound {
		b, err := st.Bind([]shared.Rule{{Namespace: ns, Name: "Global", Global: true,
			Limit: atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 3}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	prod, staging := open(t, ""), open(t, "staging")
	for _, c := range []struct {
		what  string
		bound shared.Bound
	}{
		{"billing", bind(prod, "billing")},
		{"search", bind(prod, "search")},
		{"billing on staging", bind(staging, "billing")},
	} {
		admitted := 0
		for range 5 {
			res := c.bound.CheckStep(ctx, shared.Step{Rule: 0, Cost: 1})
			if res.Degraded {
				t.Fatalf("%s: degraded: %v", c.what, res.Err)
			}
			if res.Allowed {
				admitted++
			}
		}
		if admitted != 3 {
			t.Errorf("%s: %d of 5 admitted; its own bucket holds 3 (another namespace's checks took from it)", c.what, admitted)
		}
	}
	if err := shared.CheckNamespace("Bad/ns"); err == nil {
		t.Error("a namespace with a slash and capitals was accepted")
	}
	if _, err := prod.Bind([]shared.Rule{{Namespace: "a}b", Name: "R", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 3}}}); err == nil {
		t.Error("Bind took a namespace a key cannot carry")
	}
}

package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

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

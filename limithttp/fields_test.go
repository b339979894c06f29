package limithttp

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// The fields Respond sets parse as the draft's grammar says, names
// round-tripped however they are spelt, with the legacy fields' integers and
// Retry-After's delay-seconds.
func TestFieldsParseAsStructuredFields(t *testing.T) {
	names := []string{"PerUser", `a"b\c`, " spaced name ", "~!@#$%^&*()_+{}|:<>?", "x"}
	var ps []*verdict.Policy
	for i, name := range names {
		p, err := verdict.NewPolicy(name, atomicbucket.Limit{Tokens: int64(i + 1), Period: time.Second, Burst: int64(10 * (i + 1))})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, &p)
	}
	for _, p := range ps {
		b := atomicbucket.NewBucketAt(atomicbucket.MustRule(p.Limit), 0)
		cfg := Config{Headers: HeadersLegacy}
		for i := range 3 {
			w := httptest.NewRecorder()
			res := verdict.Result{Decision: b.AllowNAt(0, p.Quota/2+1), Policy: p, Policies: p.Item, Cost: p.Quota/2 + 1}
			cfg.Respond(w, httptest.NewRequest("GET", "/", nil), verdict.Enforce, &res, "k")
			v := (&verdict.Judge{}).Verdict(verdict.Enforce, &res, "")
			rv, tv := v.R, v.T
			item, err := httpsfv.UnmarshalItem(w.Header().Values("RateLimit"))
			if err != nil {
				t.Fatalf("request %d: RateLimit %q: %v", i, w.Header().Values("RateLimit"), err)
			}
			checkItem(t, item, p.Name, map[string]int64{"r": rv, "t": tv})
			if ra := w.Header().Values("Retry-After"); res.Decision.Allowed != (len(ra) == 0) {
				t.Errorf("request %d: Retry-After %q on decision %+v", i, ra, res.Decision)
			} else if len(ra) == 1 {
				if _, err := strconv.ParseUint(ra[0], 10, 63); err != nil {
					t.Errorf("Retry-After %q is not delay-seconds", ra[0])
				}
			}
			for _, legacy := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
				if _, err := strconv.ParseUint(w.Header().Get(legacy), 10, 63); err != nil {
					t.Errorf("%s = %q", legacy, w.Header().Get(legacy))
				}
			}
		}
	}
}

func checkItem(t *testing.T, item httpsfv.Item, name string, params map[string]int64) {
	t.Helper()
	if item.Value != name {
		t.Errorf("item %v: name %q, want %q", item.Value, item.Value, name)
	}
	if got := item.Params.Names(); len(got) != len(params) {
		t.Errorf("%q: parameters %v, want %d", name, got, len(params))
	}
	for k, want := range params {
		v, ok := item.Params.Get(k)
		if !ok || v != want {
			t.Errorf("%q: %s = %v (%T), want %d", name, k, v, v, want)
		}
	}
}

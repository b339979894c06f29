package limithttp

import (
	"net/http"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Counters made from series count each series apart, and give each back
// with its route, tier and rule; an index out of range counts nothing.
func TestSeriesCounters(t *testing.T) {
	series := []Series{
		{Route: "GET /a", Rule: "R"},
		{Route: "/v1/", Tier: "API", Rule: "R"},
		{Route: "/v1/", Tier: "API", Rule: "Global"},
	}
	c := NewSeriesCounters(series...)
	series[0].Route = "changed" // the Counters keep their own copy
	for i, n := range []int{3, 5, 7} {
		for range n {
			c.Add(i, Denied)
		}
	}
	c.Add(1, Allowed)
	c.Add(3, Allowed)
	c.Add(-1, Allowed)
	got := c.Snapshot()
	want := []struct {
		s       Series
		allowed uint64
		denied  uint64
	}{
		{Series{Route: "GET /a", Rule: "R"}, 0, 3},
		{Series{Route: "/v1/", Tier: "API", Rule: "R"}, 1, 5},
		{Series{Route: "/v1/", Tier: "API", Rule: "Global"}, 0, 7},
	}
	if len(got) != len(want) {
		t.Fatalf("%d series, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Series != w.s || got[i].Outcomes[Allowed] != w.allowed || got[i].Outcomes[Denied] != w.denied {
			t.Errorf("series %d: %+v, want %+v with %d allowed and %d denied", i, got[i], w.s, w.allowed, w.denied)
		}
	}
	if r := NewCounters("A", "B").Snapshot(); r[1].Series != (Series{Rule: "B"}) {
		t.Errorf("NewCounters' second series: %+v", r[1].Series)
	}
}

// A hand-wired middleware over NewCounters sets a Result's Rule (and an
// Event's RuleIndex), not its Series: Config counts those by the rule.
func TestRuleCountersCountByRule(t *testing.T) {
	c := &Config{Counters: NewCounters("A", "B")}
	p := MustPolicy("B", atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1})
	res := Result{Decision: atomicbucket.Decision{Allowed: true}, Policy: &p, Policies: p.Item, Cost: 1, Rule: 1}
	c.Respond(&mapWriter{h: http.Header{}}, nil, Enforce, &res, "k")
	c.Reject(&mapWriter{h: http.Header{}}, Enforce, 400, "{}", Event{RuleIndex: 1, Outcome: MissingKey})
	got := c.Counters.Snapshot()
	if got[1].Outcomes[Allowed] != 1 || got[1].Outcomes[MissingKey] != 1 || got[0].Outcomes != ([numOutcomes]uint64{}) {
		t.Errorf("counts %+v, want B's allowed and missing_key at 1, A's at 0", got)
	}
}

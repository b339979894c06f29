package limithttp

import "testing"

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

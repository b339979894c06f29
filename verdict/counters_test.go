package verdict

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
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
	c := NewCounters(series...)
	series[0].Route = "changed" // the Counters keep their own copy
	for i, n := range []int{3, 5, 7} {
		for range n {
			c.add(i, Denied)
		}
	}
	c.add(1, Allowed)
	c.add(3, Allowed)
	c.add(-1, Allowed)
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
	if r := NewCounters(Series{Rule: "A"}, Series{Rule: "B"}).Snapshot(); r[1].Series != (Series{Rule: "B"}) {
		t.Errorf("NewCounters' second series: %+v", r[1].Series)
	}
}

// A hand-wired door with a series for each rule sets a Result's (and an
// Event's) Series to the rule's index: the Judge counts by it.
func TestRuleCountersCountBySeries(t *testing.T) {
	j := &Judge{Counters: NewCounters(Series{Rule: "A"}, Series{Rule: "B"})}
	p := MustPolicy("B", atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1})
	res := Result{Decision: atomicbucket.Decision{Allowed: true}, Policy: &p, Policies: p.Item, Cost: 1, Rule: 1, Series: 1}
	j.Verdict(Enforce, &res, "k")
	j.Record(Event{RuleIndex: 1, Series: 1, Outcome: MissingKey})
	got := j.Counters.Snapshot()
	if got[1].Outcomes[Allowed] != 1 || got[1].Outcomes[MissingKey] != 1 || got[0].Outcomes != ([numOutcomes]uint64{}) {
		t.Errorf("counts %+v, want B's allowed and missing_key at 1, A's at 0", got)
	}
}

func TestCounters(t *testing.T) {
	c := NewCounters(Series{Rule: "A"}, Series{Rule: "B"})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 * int(numOutcomes) { // 100 of each outcome
				c.add(g%2, Outcome(i%int(numOutcomes)))
			}
		}()
	}
	wg.Wait()
	c.add(2, Allowed)  // out of range: ignored
	c.add(-1, Allowed) // likewise
	for _, n := range c.Snapshot() {
		for o, v := range n.Outcomes {
			if v != 4*100 { // four goroutines a rule
				t.Errorf("%s %v: %d, want %d", n.Rule, Outcome(o), v, 4*100)
			}
		}
	}
}

func TestDenialLog(t *testing.T) {
	var buf bytes.Buffer
	log := NewDenialLog(slog.New(slog.NewTextHandler(&buf, nil)), 2)
	for range 10 {
		log.Observe(Event{Route: "GET /x", Rule: "PerUser", Outcome: Denied, Cost: 1})
	}
	log.Observe(Event{Outcome: Allowed})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 { // a burst of 2, then silence for the rest of the second
		t.Fatalf("logged %d lines, want 2:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"level=WARN", `msg="rate limit"`, "outcome=denied", "route=\"GET /x\"", "rule=PerUser", "cost=1", "suppressed=0"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line %q lacks %s", lines[0], want)
		}
	}
	// A request no wait can admit says "never", not 2562047h47m16.85s, and a
	// decision made by its cost alone names no store error.
	buf.Reset()
	log = NewDenialLog(slog.New(slog.NewTextHandler(&buf, nil)), 2)
	cfg := Judge{Observer: log}
	p := MustPolicy("PerUser", atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 5})
	res := Result{Decision: atomicbucket.Decision{RetryAfter: atomicbucket.Never}, Policy: &p, Cost: 9, Err: errors.New("no store")}
	cfg.Verdict(Enforce, &res, "k")
	for _, want := range []string{"outcome=too_costly", "retry_after=never", `store_error=""`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("line %q lacks %s", buf.String(), want)
		}
	}
	// A request without a key is not a limit at work: logged at Info, as such.
	buf.Reset()
	log = NewDenialLog(slog.New(slog.NewTextHandler(&buf, nil)), 2)
	log.Observe(Event{Route: "GET /x", Rule: "PerUser", Outcome: MissingKey})
	for _, want := range []string{"level=INFO", `msg="rate limit key missing"`, "outcome=missing_key"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("line %q lacks %s", buf.String(), want)
		}
	}
}

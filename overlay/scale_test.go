package overlay_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/overlay/yamlfile"
)

// TestScaleNumbers: a factor multiplies what is in force — a Set's numbers,
// plans' and keys' alike, and the policy's where the Set gives none — and a
// later Set is scaled by it; factors do not compound; 1 and 1 take it away.
func TestScaleNumbers(t *testing.T) {
	l := limits.New()
	policy := numbersOf(l)
	set, err := yamlfile.Parse("numbers.yaml", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ApplyNumbers(set); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		rule        string
		rate, burst overlay.Factor
	}{{"PerUser", 500, 500}, {"Login", 250, overlay.One}, {"Global", 537, overlay.One}, {"PerEndpoint", 300, 300}} {
		if err := l.ScaleNumbers(s.rule, s.rate, s.burst); err != nil {
			t.Fatalf("ScaleNumbers(%s, %v, %v): %v", s.rule, s.rate, s.burst, err)
		}
	}
	// The numbers written out by hand from goodFile and the policy.
	want := map[string]string{
		"PerUser free":            "10 per 1s, burst 50 (override)",
		"PerUser free acme":       "2500 per 1s, burst 5000 (key override)",
		"PerUser pro":             "100 per 1s, burst 500 (override)",
		"PerUser pro acme":        "2500 per 1s, burst 5000 (key override)",
		"PerUser enterprise":      "10 per 1s, burst 50 (override)",
		"PerUser enterprise acme": "2500 per 1s, burst 5000 (key override)",
		"PerEndpoint 42":          "15 per 1s, burst 18 (key override)", // 50/s, burst 60, from the Set
		"PerEndpoint 7":           "300 per 1m0s, burst 60 (override)",  // the policy's 1000/min, burst 200
		"Login":                   "3 per 10s, burst 10 (override)",     // 10 per 10s: an interval rule's tokens, rounded
		"Global":                  "1611 per 1s, burst 6000 (override)", // 3000/s · 0.537
	}
	if got := numbersOf(l); !equalMaps(got, want) {
		t.Errorf("scaled:\n got %v\nwant %v", got, want)
	}
	if s := l.ScaledNumbers("PerUser"); s != (overlay.Scaled{Rate: 500, Burst: 500}) {
		t.Errorf("ScaledNumbers(PerUser) = %+v", s)
	}
	// The scaled numbers decide: endpoint 42 holds 18 at once.
	now := atomicbucket.Now()
	if !l.PerEndpoint.AllowNAt(42, now, 18).Allowed || l.PerEndpoint.AllowAt(42, now) {
		t.Error("endpoint 42 scaled to a burst of 18: not 18 and no more at once")
	}

	// Factors do not compound.
	if err := l.ScaleNumbers("PerUser", 500, 500); err != nil {
		t.Fatal(err)
	}
	if got := numbersOf(l)["PerUser pro"]; got != want["PerUser pro"] {
		t.Errorf("the same factor again: PerUser pro %s, want %s", got, want["PerUser pro"])
	}

	// A later Set is scaled by the factors in force; what it no longer gives
	// is the policy's numbers, scaled.
	if err := l.ApplyNumbers(overlay.Set{{Rule: "PerUser", Plan: "pro", Numbers: per(300, time.Second, 900), Pos: "q"}}); err != nil {
		t.Fatal(err)
	}
	later := map[string]string{
		"PerUser free":            "5 per 1s, burst 25 (override)", // the policy's 10/s, burst 50
		"PerUser pro":             "150 per 1s, burst 450 (override)",
		"PerUser pro acme":        "150 per 1s, burst 450 (override)",
		"PerUser enterprise":      "500 per 1s, burst 1000 (override)",
		"PerEndpoint 42":          "300 per 1m0s, burst 60 (override)",
		"Global":                  "1074 per 1s, burst 4000 (override)", // 2000/s · 0.537
		"Login":                   "1 per 10s, burst 5 (override)",      // 5 per 10s · 0.25 = 1.25
		"PerUser free acme":       "5 per 1s, burst 25 (override)",
		"PerUser enterprise acme": "500 per 1s, burst 1000 (override)",
		"PerEndpoint 7":           "300 per 1m0s, burst 60 (override)",
	}
	if got := numbersOf(l); !equalMaps(got, later) {
		t.Errorf("a Set under factors:\n got %v\nwant %v", got, later)
	}

	// 1 and 1 take a factor away: the Set's numbers, then the policy's.
	for _, rule := range []string{"PerUser", "Login", "Global", "PerEndpoint"} {
		if err := l.ScaleNumbers(rule, overlay.One, overlay.One); err != nil {
			t.Fatal(err)
		}
	}
	want = maps(policy)
	want["PerUser pro"] = "300 per 1s, burst 900 (override)"
	want["PerUser pro acme"] = "300 per 1s, burst 900 (override)"
	if got := numbersOf(l); !equalMaps(got, want) {
		t.Errorf("factors taken away:\n got %v\nwant %v", got, want)
	}
	if err := l.ApplyNumbers(nil); err != nil {
		t.Fatal(err)
	}
	if got := numbersOf(l); !equalMaps(got, policy) {
		t.Errorf("no Set and no factor: %v, want the policy's %v", got, policy)
	}

	// A scaled burst keeps what a request may cost: Upload's cost 10 by
	// default, and its route, POST /v1/upload, admits a declared 1000: the
	// burst stays at 1000 however far the factor cuts it, while the rate
	// goes down.
	if err := l.ScaleNumbers("Upload", 500, 1); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.Upload.NumbersFor("k"); n.Burst != 1000 || n.Tokens != 50 || n.Period != time.Second {
		t.Errorf("Upload (100 per 1s, burst 1000) scaled by 0.5 and 0.001: %v, want 50 per 1s, burst 1000 (the route's most)", n)
	}
}

// TestScaleRefused: bad factors and factors whose numbers a rule refuses
// change nothing and say why.
func TestScaleRefused(t *testing.T) {
	l := limits.New()
	if err := l.ApplyNumbers(overlay.Set{{Rule: "Global", Numbers: per(1, 24*time.Hour, 1000), Pos: "g"}}); err != nil {
		t.Fatal(err)
	}
	before := numbersOf(l)
	for _, c := range []struct {
		rule        string
		rate, burst overlay.Factor
		msg         string
	}{
		{"Nope", 500, overlay.One, `no rule "Nope" in the policy (its rules: ChatTokens, DailyExport, DailyTokens, ExportSlots, Global, Login, PerEndpoint, PerUser, ReportSlots, TenantUser, Upload)`},
		{"Global", 0, overlay.One, "rate factor 0 thousandths: a factor is at least 1 thousandth"},
		{"Global", -1, overlay.One, "rate factor -1 thousandths"},
		{"Global", overlay.One, 1000001, "burst factor 1000001 thousandths"},
		// From a Set's 1 per day, burst 1000: a burst of 100000 days does
		// not fit the rule's fixed point.
		{"Global", overlay.One, 100 * overlay.One, "rule Global: 1 per 24h0m0s, burst 1000 scaled by 1 (rate) and 100 (burst): atomicbucket: invalid limit: rate 1 per 24h0m0s with burst 100000 does not fit"},
	} {
		err := l.ScaleNumbers(c.rule, c.rate, c.burst)
		if !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ScaleNumbers(%s, %v, %v) = %v, want %q", c.rule, c.rate, c.burst, err, c.msg)
		}
	}
	if got := numbersOf(l); !equalMaps(got, before) {
		t.Errorf("refused factors changed the numbers: %v", got)
	}

	// A good Set whose numbers the factor in force makes ones the rule
	// refuses is refused whole.
	if err := l.ApplyNumbers(nil); err != nil {
		t.Fatal(err)
	}
	if err := l.ScaleNumbers("Global", overlay.One, 100*overlay.One); err != nil {
		t.Fatal(err)
	}
	before = numbersOf(l)
	if before["Global"] != "2000 per 1s, burst 400000 (override)" {
		t.Errorf("Global scaled by 1 and 100: %s", before["Global"])
	}
	err := l.ApplyNumbers(overlay.Set{{Rule: "Global", Numbers: per(1, 24*time.Hour, 1000), Pos: "g"}, {Rule: "Login", Numbers: per(9, 10*time.Second, 9), Pos: "h"}})
	if !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), "the Set is good, but scaled by the factors in force") ||
		!strings.Contains(err.Error(), "burst 100000 does not fit") {
		t.Errorf("a Set the factor in force makes too large: %v", err)
	}
	if got := numbersOf(l); !equalMaps(got, before) {
		t.Errorf("a refused Set changed the numbers: %v", got)
	}
}

// FactorOf takes a factor to thousandths, rounded to the nearest, and
// refuses what no factor can be, naming the resolution.
func TestFactorOf(t *testing.T) {
	for f, want := range map[float64]overlay.Factor{0.537: 537, 1: overlay.One, 0.0005: 1, 0.0015: 2, 1000: 1000 * overlay.One} {
		if got, err := overlay.FactorOf(f); err != nil || got != want {
			t.Errorf("FactorOf(%v) = %v, %v; want %d thousandths", f, got, err, want)
		}
	}
	for _, c := range []struct {
		f   float64
		msg string
	}{
		{0, "factor 0: a factor is above 0"},
		{-1, "factor -1"},
		{math.NaN(), "factor NaN"},
		{math.Inf(1), "factor +Inf"},
		{1001, "factor 1001"},
		{0.0001, "factor 0.0001 is below the resolution of factors, 0.001"},
		{0.00049, "factor 0.00049 is below the resolution of factors, 0.001"},
	} {
		if _, err := overlay.FactorOf(c.f); !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("FactorOf(%v) = %v, want %q", c.f, err, c.msg)
		}
	}
	if s := overlay.Factor(537).String(); s != "0.537" {
		t.Errorf("537 thousandths print as %q", s)
	}
}

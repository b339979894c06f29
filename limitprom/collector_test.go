package limitprom_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/limitprom"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/verdict"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// scrape fetches url over HTTP and returns the value of each sample line,
// by its name and labels as the exposition writes them.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	out := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^(limitgen_[^{ ]+(?:\{.*\})?) ([^ \n]+)$`).FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", m[0], err)
		}
		out[m[1]] = v
	}
	return out
}

// A service generated from storetest/sharedpolicy.yaml, its shared
// rules on a PostgreSQL server the test starts, its middleware counting
// decisions; the collector registered, and /metrics served on 127.0.0.1 and
// scraped over HTTP: the middleware's decisions by rule and outcome, a local
// rule's table, the store's checks, round trips and breaker; then the server
// is stopped, and the degraded decisions, the store's failures and its open
// breaker show.
func TestScrape(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	pool := srv.Pool(t)
	st, err := pgstore.New(ctx, pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	lims := sharedlimits.New(sharedlimits.WithStore(st))
	mw, err := sharedlimits.NewMiddleware(lims, sharedlimits.Hooks{
		UserID: func(r *http.Request) (string, bool) { return r.Header.Get("X-User"), r.Header.Get("X-User") != "" },
		PlanOf: func(*http.Request) (sharedlimits.Plan, bool) { return sharedlimits.PlanFree, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	mw.Config.Observer = nil // no denial log in the test's output
	app := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	hello := func(user string) int {
		r := httptest.NewRequest("GET", "/hello", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		w := httptest.NewRecorder()
		app.ServeHTTP(w, r)
		return w.Code
	}
	for range 25 { // PerUser's free burst is 20
		hello("alice")
	}
	hello("") // no key
	for _, k := range []string{"a", "b", "c"} {
		lims.PerInstance.Allow(k)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(limitprom.New(limitprom.Options{
		Doors:  map[string]*verdict.Counters{verdict.DoorHTTP: mw.Config.Counters},
		Tables: map[string]limitprom.Table{"PerInstance": lims.PerInstance},
		Stores: map[string]limitprom.Store{"postgres": st},
		// Envoy's rate-limit service's descriptors no pattern matched
		// (limitrls.Config.Unmatched; the ready server's own is tested in
		// examples/quickstart).
		Unmatched: map[string]func() uint64{verdict.DoorRLS: func() uint64 { return 7 }},
		// The middleware's settled costs (POST /chat settles ChatTokens).
		Settlements: map[string]func() verdict.SettleStats{verdict.DoorHTTP: mw.SettleStats},
		// A shared in-flight rule: its releases the store did not take.
		Slots: map[string]limitprom.Slots{"Running": lims.Running},
	}))
	metrics := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(metrics.Close)

	got := scrape(t, metrics.URL)
	for name, want := range map[string]float64{
		`limitgen_decisions_total{door="http",outcome="allowed",route="GET /hello",rule="PerUser",tier=""}`:         20,
		`limitgen_decisions_total{door="http",outcome="denied",route="GET /hello",rule="PerUser",tier=""}`:          5,
		`limitgen_decisions_total{door="http",outcome="missing_key",route="GET /hello",rule="PerUser",tier=""}`:     1,
		`limitgen_decisions_total{door="http",outcome="degraded_denied",route="GET /hello",rule="PerUser",tier=""}`: 0,
		`limitgen_decisions_total{door="http",outcome="allowed",route="GET /api/",rule="PerUser",tier="Request"}`:   0,
		`limitgen_unmatched_total{door="rls"}`:                                 7,
		`limitgen_table_keys{rule="PerInstance"}`:                              3,
		`limitgen_table_cap_refusals_total{rule="PerInstance"}`:                0,
		`limitgen_store_checks_total{store="postgres"}`:                        25,
		`limitgen_store_degraded_total{store="postgres"}`:                      0,
		`limitgen_store_round_trip_seconds_count{store="postgres"}`:            25,
		`limitgen_store_round_trip_seconds_bucket{store="postgres",le="+Inf"}`: 25,
		`limitgen_store_breaker_open{node="",store="postgres"}`:                0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if got[`limitgen_store_round_trip_seconds_sum{store="postgres"}`] <= 0 {
		t.Errorf("round trips took no time: %v", got)
	}

	// Settled costs: two chats settled (one of them far beyond the debt
	// bound: tokens forgiven), one that reported nothing (kept).
	chat := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-Test-Used"); u != "" {
			w.Header().Set("X-Tokens-Used", u)
		}
	}))
	for _, used := range []string{"50", "", "99999999"} {
		r := httptest.NewRequest("POST", "/chat", nil)
		r.Header.Set("X-User", "dora")
		r.Header.Set("X-Max-Tokens", "100")
		r.Header.Set("X-Test-Used", used)
		chat.ServeHTTP(httptest.NewRecorder(), r)
	}
	got = scrape(t, metrics.URL)
	for name, want := range map[string]float64{
		`limitgen_settlements_total{door="http",outcome="settled"}`: 2,
		`limitgen_settlements_total{door="http",outcome="kept"}`:    1,
		`limitgen_settlements_total{door="http",outcome="failed"}`:  0,
	} {
		if v := got[name]; v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := got[`limitgen_settle_forgiven_tokens_total{door="http"}`]; v <= 0 {
		t.Errorf("forgiven tokens: %v, want some", v)
	}

	// A route that checks a tier: its decisions are counted by the route,
	// the tier and the rule that decided (PerUser: fewer tokens left than
	// Global's).
	for range 3 {
		r := httptest.NewRequest("GET", "/api/items", nil)
		r.Header.Set("X-User", "carol")
		app.ServeHTTP(httptest.NewRecorder(), r)
	}
	got = scrape(t, metrics.URL)
	if v := got[`limitgen_decisions_total{door="http",outcome="allowed",route="GET /api/",rule="PerUser",tier="Request"}`]; v != 3 {
		t.Errorf("tier Request on GET /api/: %v allowed decisions by PerUser, want 3", v)
	}
	if v := got[`limitgen_decisions_total{door="http",outcome="allowed",route="GET /hello",rule="PerUser",tier=""}`]; v != 20 {
		t.Errorf("GET /hello: %v allowed after requests to another route, want 20", v)
	}

	// A run holds a slot on the store when the store goes: its release is
	// not taken, and is counted.
	slot, res := lims.Running.Acquire(ctx, "erin")
	if !res.Allowed || res.Degraded {
		t.Fatalf("a run on the store: %+v", res)
	}
	srv.Stop() // the store's server is gone: PerUser's on_failure (local) decides
	for range 10 {
		hello("bob")
	}
	got = scrape(t, metrics.URL)
	degraded := got[`limitgen_decisions_total{door="http",outcome="degraded_allowed",route="GET /hello",rule="PerUser",tier=""}`] +
		got[`limitgen_decisions_total{door="http",outcome="degraded_denied",route="GET /hello",rule="PerUser",tier=""}`]
	if degraded != 10 || got[`limitgen_store_degraded_total{store="postgres"}`] != 10 {
		t.Errorf("after the server stopped, %v degraded decisions and %v degraded checks, want 10 and 10", degraded, got[`limitgen_store_degraded_total{store="postgres"}`])
	}
	if got[`limitgen_store_breaker_open{node="",store="postgres"}`] != 1 {
		t.Errorf("the breaker of a stopped server is not open: %v", got[`limitgen_store_breaker_open{node="",store="postgres"}`])
	}
	slot.Release()
	if v := scrape(t, metrics.URL)[`limitgen_slots_release_failed_total{rule="Running"}`]; v != 1 {
		t.Errorf("a release the stopped store did not take: %v counted, want 1", v)
	}
	// Never a per-key label: no series names a key that made requests.
	for series := range got {
		for _, key := range []string{"alice", "bob", "carol", `"a"`, `"b"`, `"c"`} {
			if strings.Contains(series, key) {
				t.Errorf("series %s carries the key %s", series, key)
			}
		}
	}
}

// TestGRPCDecisions: the gRPC interceptors' counters (as the generated GRPC
// makes them: a series per method entry and rule) are scraped as
// limitgen_decisions_total with door "grpc" and the entry as label route,
// apart from the middleware's (door "http").
func TestGRPCDecisions(t *testing.T) {
	grpc := verdict.NewCounters(
		verdict.Series{Route: "/grpc.health.v1.Health/Check", Rule: "Checks"},
		verdict.Series{Route: "shop.v1.Cart", Tier: "API", Rule: "PerUser"},
	)
	(&verdict.Judge{Counters: grpc}).Record(verdict.Event{Series: 0, Outcome: verdict.Allowed})
	(&verdict.Judge{Counters: grpc}).Record(verdict.Event{Series: 0, Outcome: verdict.Denied})
	(&verdict.Judge{Counters: grpc}).Record(verdict.Event{Series: 0, Outcome: verdict.Denied})
	(&verdict.Judge{Counters: grpc}).Record(verdict.Event{Series: 1, Outcome: verdict.DegradedDenied})
	http := verdict.NewCounters(verdict.Series{Route: "GET /hello", Rule: "PerUser"})
	(&verdict.Judge{Counters: http}).Record(verdict.Event{Series: 0, Outcome: verdict.Allowed})
	reg := prometheus.NewRegistry()
	reg.MustRegister(limitprom.New(limitprom.Options{Doors: map[string]*verdict.Counters{verdict.DoorGRPC: grpc, verdict.DoorHTTP: http}}))
	metrics := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(metrics.Close)
	got := scrape(t, metrics.URL)
	for name, want := range map[string]float64{
		`limitgen_decisions_total{door="grpc",outcome="allowed",route="/grpc.health.v1.Health/Check",rule="Checks",tier=""}`: 1,
		`limitgen_decisions_total{door="grpc",outcome="denied",route="/grpc.health.v1.Health/Check",rule="Checks",tier=""}`:  2,
		`limitgen_decisions_total{door="grpc",outcome="degraded_denied",route="shop.v1.Cart",rule="PerUser",tier="API"}`:     1,
		`limitgen_decisions_total{door="grpc",outcome="allowed",route="shop.v1.Cart",rule="PerUser",tier="API"}`:             0,
		`limitgen_decisions_total{door="http",outcome="allowed",route="GET /hello",rule="PerUser",tier=""}`:                  1,
		`limitgen_decisions_total{door="http",outcome="denied",route="GET /hello",rule="PerUser",tier=""}`:                   0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	for name := range got {
		if strings.HasPrefix(name, "limitgen_decisions_total") && strings.Contains(name, `route="GET /hello"`) != strings.Contains(name, `door="http"`) {
			t.Errorf("a decision counted under another door: %s", name)
		}
	}
}

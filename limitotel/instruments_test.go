package limitotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/limitotel"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/verdict"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// collect reads every instrument through the manual reader and returns each
// data point's value by the instrument's name and its attributes
// ("name{k=v,…}", attributes sorted), and each instrument's unit.
func collect(t *testing.T, reader *sdkmetric.ManualReader) (points map[string]float64, units map[string]string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points, units = map[string]float64{}, map[string]string{}
	name := func(n string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		sort.Strings(kv)
		return n + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					points[name(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					points[name(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					points[name(m.Name, p.Attributes)] = float64(p.Value)
				}
			default:
				t.Fatalf("%s: data of type %T", m.Name, m.Data)
			}
		}
	}
	return points, units
}

// A service generated from storetest/sharedpolicy.yaml, its shared
// rules on a PostgreSQL server the test starts, read through the
// OpenTelemetry SDK's manual reader: the middleware's decisions by rule and
// outcome, a local rule's table, the store's checks and round trips and its
// breaker; then the server is stopped, and the degraded decisions and the
// open breaker show.
func TestManualReader(t *testing.T) {
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
	hello := func(user string) {
		r := httptest.NewRequest("GET", "/hello", nil)
		r.Header.Set("X-User", user)
		app.ServeHTTP(httptest.NewRecorder(), r)
	}
	for range 23 { // PerUser's free burst is 20
		hello("alice")
	}
	lims.PerInstance.Allow("a")
	lims.PerInstance.Allow("b")

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { provider.Shutdown(ctx) })
	reg, err := limitotel.Register(provider.Meter("limitgen"), limitotel.Options{
		Doors:  map[string]*verdict.Counters{verdict.DoorHTTP: mw.Config.Counters},
		Tables: map[string]limitotel.Table{"PerInstance": lims.PerInstance},
		Stores: map[string]limitotel.Store{"postgres": st},
		// Envoy's rate-limit service's descriptors no pattern matched
		// (limitrls.Config.Unmatched).
		Unmatched: map[string]func() uint64{verdict.DoorRLS: func() uint64 { return 7 }},
		// The middleware's settled costs (POST /chat settles ChatTokens).
		Settlements: map[string]func() verdict.SettleStats{verdict.DoorHTTP: mw.SettleStats},
		// A shared in-flight rule: its releases the store did not take.
		Slots: map[string]limitotel.Slots{"Running": lims.Running},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Unregister() })

	got, units := collect(t, reader)
	for name, want := range map[string]float64{
		"limitgen.decisions{door=http,outcome=allowed,route=GET /hello,rule=PerUser,tier=}":         20,
		"limitgen.decisions{door=http,outcome=denied,route=GET /hello,rule=PerUser,tier=}":          3,
		"limitgen.decisions{door=http,outcome=degraded_denied,route=GET /hello,rule=PerUser,tier=}": 0,
		"limitgen.decisions{door=http,outcome=allowed,route=GET /api/,rule=PerUser,tier=Request}":   0,
		"limitgen.unmatched{door=rls}":                      7,
		"limitgen.table.keys{rule=PerInstance}":             2,
		"limitgen.table.cap_refusals{rule=PerInstance}":     0,
		"limitgen.store.checks{store=postgres}":             23,
		"limitgen.store.degraded{store=postgres}":           0,
		"limitgen.store.round_trips{store=postgres}":        23,
		"limitgen.store.breaker.open{node=,store=postgres}": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if got["limitgen.store.round_trip.time{store=postgres}"] <= 0 || units["limitgen.store.round_trip.time"] != "s" {
		t.Errorf("round trips took %v %s", got["limitgen.store.round_trip.time{store=postgres}"], units["limitgen.store.round_trip.time"])
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
	got, _ = collect(t, reader)
	for name, want := range map[string]float64{
		"limitgen.settlements{door=http,outcome=settled}": 2,
		"limitgen.settlements{door=http,outcome=kept}":    1,
		"limitgen.settlements{door=http,outcome=failed}":  0,
	} {
		if v := got[name]; v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := got["limitgen.settle.forgiven{door=http}"]; v <= 0 {
		t.Errorf("forgiven tokens: %v, want some", v)
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
	got, _ = collect(t, reader)
	degraded := got["limitgen.decisions{door=http,outcome=degraded_allowed,route=GET /hello,rule=PerUser,tier=}"] + got["limitgen.decisions{door=http,outcome=degraded_denied,route=GET /hello,rule=PerUser,tier=}"]
	if degraded != 10 || got["limitgen.store.degraded{store=postgres}"] != 10 {
		t.Errorf("after the server stopped, %v degraded decisions and %v degraded checks, want 10 and 10", degraded, got["limitgen.store.degraded{store=postgres}"])
	}
	if got["limitgen.store.breaker.open{node=,store=postgres}"] != 1 {
		t.Errorf("the breaker of a stopped server is not open: %v", got["limitgen.store.breaker.open{node=,store=postgres}"])
	}
	slot.Release()
	if got, _ := collect(t, reader); got["limitgen.slots.release_failed{rule=Running}"] != 1 {
		t.Errorf("a release the stopped store did not take: %v counted, want 1", got["limitgen.slots.release_failed{rule=Running}"])
	}
	// Never a per-key attribute: no point names a key that made requests.
	for point := range got {
		for _, key := range []string{"alice", "bob", "=a,", "=b,", "=a}", "=b}"} {
			if strings.Contains(point, key) {
				t.Errorf("point %s carries the key %s", point, key)
			}
		}
	}
}

// TestGRPCDecisions: the gRPC interceptors' counters (as the generated GRPC
// makes them: a series per method entry and rule) are read as
// limitgen.decisions with door grpc and the entry as attribute route, apart
// from the middleware's (door http).
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
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	reg, err := limitotel.Register(meter, limitotel.Options{Doors: map[string]*verdict.Counters{verdict.DoorGRPC: grpc, verdict.DoorHTTP: http}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	points, units := collect(t, reader)
	for name, want := range map[string]float64{
		"limitgen.decisions{door=grpc,outcome=allowed,route=/grpc.health.v1.Health/Check,rule=Checks,tier=}": 1,
		"limitgen.decisions{door=grpc,outcome=denied,route=/grpc.health.v1.Health/Check,rule=Checks,tier=}":  2,
		"limitgen.decisions{door=grpc,outcome=degraded_denied,route=shop.v1.Cart,rule=PerUser,tier=API}":     1,
		"limitgen.decisions{door=grpc,outcome=allowed,route=shop.v1.Cart,rule=PerUser,tier=API}":             0,
		"limitgen.decisions{door=http,outcome=allowed,route=GET /hello,rule=PerUser,tier=}":                  1,
		"limitgen.decisions{door=http,outcome=denied,route=GET /hello,rule=PerUser,tier=}":                   0,
	} {
		if v, ok := points[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if units["limitgen.decisions"] != "{decision}" {
		t.Errorf("unit %q", units["limitgen.decisions"])
	}
	for name := range points {
		if strings.HasPrefix(name, "limitgen.decisions{") && strings.Contains(name, "route=GET /hello") != strings.Contains(name, "door=http") {
			t.Errorf("a decision counted under another door: %s", name)
		}
	}
}

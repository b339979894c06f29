package limitprom_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/limitprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestSlotsMetrics scrapes an in-flight rule's table and gate: the slots
// held now, those that expired unreleased, the table's keys.
func TestSlotsMetrics(t *testing.T) {
	r, err := atomicslot.NewRule(3, time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	tab := atomicslot.NewTable[string](r, atomicbucket.TableOptions{})
	tab.AcquireAt("a", 0) // expires at once: the next acquisition of its word counts it
	long, err := atomicslot.NewRule(3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tab.Acquire("a")
	tab.Acquire("b")
	gate := atomicslot.NewGate(long)
	gate.Acquire()
	s, _ := gate.Acquire()
	s.Release()
	reg := prometheus.NewRegistry()
	reg.MustRegister(limitprom.New(limitprom.Options{Slots: map[string]limitprom.Slots{"Exports": tab, "Inference": gate}}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	got := scrape(t, srv.URL)
	// The table's slots last a microsecond: by the scrape, none is held.
	for name, want := range map[string]float64{
		`limitgen_slots_held{rule="Exports"}`:            0,
		`limitgen_slots_expired_total{rule="Exports"}`:   1,
		`limitgen_table_keys{rule="Exports"}`:            2,
		`limitgen_slots_held{rule="Inference"}`:          1,
		`limitgen_slots_expired_total{rule="Inference"}`: 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if _, ok := got[`limitgen_table_keys{rule="Inference"}`]; ok {
		t.Errorf("a gate (no keys) has a keys gauge: %v", got)
	}
}

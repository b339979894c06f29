package limitotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/limitotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestSlotsInstruments reads an in-flight rule's table and gate through the
// SDK's manual reader: the slots held now, those that expired unreleased,
// the table's keys.
func TestSlotsInstruments(t *testing.T) {
	short, err := atomicslot.NewRule(3, time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	long, err := atomicslot.NewRule(3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tab := atomicslot.NewTable[string](short, atomicbucket.TableOptions{})
	tab.AcquireAt("a", 0) // expires at once: the next acquisition of its word counts it
	tab.Acquire("a")
	tab.Acquire("b")
	gate := atomicslot.NewGate(long)
	gate.Acquire()
	s, _ := gate.Acquire()
	s.Release()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { provider.Shutdown(context.Background()) })
	reg, err := limitotel.Register(provider.Meter("limitgen"), limitotel.Options{Slots: map[string]limitotel.Slots{"Exports": tab, "Inference": gate}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Unregister() })
	got, units := collect(t, reader)
	for name, want := range map[string]float64{
		"limitgen.slots.held{rule=Exports}":      0, // a microsecond's hold: none left by now
		"limitgen.slots.expired{rule=Exports}":   1,
		"limitgen.table.keys{rule=Exports}":      2,
		"limitgen.slots.held{rule=Inference}":    1,
		"limitgen.slots.expired{rule=Inference}": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if units["limitgen.slots.held"] != "{slot}" {
		t.Errorf("limitgen.slots.held's unit: %q", units["limitgen.slots.held"])
	}
}

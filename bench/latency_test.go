package bench

import (
	"testing"
	"time"
)

// The benchmarks' latency histogram returns each duration within 3%, exact
// below 64 ns, and the quantiles of a known spread.
func TestLatencies(t *testing.T) {
	for _, ns := range []uint64{0, 1, 63, 64, 65, 100, 1000, 12345, 1e6, 1e9, 1 << 62} {
		var h latencies
		h.add(time.Duration(ns))
		got := uint64(h.quantile(0.5))
		if ns < 64 && got != ns || ns >= 64 && (float64(got) < 0.97*float64(ns) || float64(got) > 1.03*float64(ns)) {
			t.Errorf("%d ns comes back as %d", ns, got)
		}
	}
	var h, other latencies
	for i := 1; i <= 100; i++ { // 1 µs to 100 µs, half in each histogram
		d := time.Duration(i) * time.Microsecond
		if i%2 == 0 {
			h.add(d)
		} else {
			other.add(d)
		}
	}
	h.merge(&other)
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Microsecond}, {0.99, 99 * time.Microsecond}, {1, 100 * time.Microsecond}, {0.01, time.Microsecond}} {
		if got := h.quantile(c.q); got < c.want*97/100 || got > c.want*103/100 {
			t.Errorf("quantile %g = %v, want %v within 3%%", c.q, got, c.want)
		}
	}
}

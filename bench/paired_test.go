package bench

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// pairedImpl is one implementation in a paired benchmark: op sends it one
// request (or call), as a server would, and returns nothing the harness
// needs.
type pairedImpl struct {
	name string
	op   func()
}

// pairedSlice is how long an implementation runs before the next one takes
// over: short enough that the machine's drift (another process, the CPU's
// clock) falls on every implementation alike, long enough that the clock
// reads around it cost nothing (two reads per millisecond).
const pairedSlice = time.Millisecond

// paired measures impls in one process, in turn, in slices of about
// pairedSlice each, so that they are measured under the same conditions
// (the paired design: a ratio from one run is worth more than two figures
// from two). impls[0] is the baseline (the handler alone); every other
// implementation's overhead is its time per request less the baseline's, and
// likewise its bytes and allocations (from runtime.MemStats over a pass of
// its own, outside the timed slices). Each b.Loop iteration is one round:
// every implementation runs one slice, in an order rotated every round.
//
// The collector is off while the slices run, and collects between rounds,
// outside them: with it on, the garbage one implementation makes is
// collected during the slices of the others (on 2 cores the background
// marking takes a quarter of the CPU), which charges an implementation that
// allocates nothing for its neighbours' garbage. Off, no implementation pays
// for collection at all, which flatters those that allocate: their bytes and
// allocations are reported beside their time.
//
// It reports, for each implementation but the baseline, <name>-ns (overhead
// per request, ns), <name>-B and <name>-allocs (per request, above the
// baseline's), and, for each implementation but focus, <name>/<focus>: its
// overhead over focus's, the ratio the targets are stated in. ns/op is
// focus's overhead.
func paired(b *testing.B, impls []pairedImpl, focus string) {
	b.Helper()
	warm := 2000
	if testing.Short() {
		warm = 50
	}
	// Warm each implementation and size its slice.
	k := make([]int, len(impls))
	for i, im := range impls {
		for range warm {
			im.op()
		}
		start := time.Now()
		for range warm {
			im.op()
		}
		per := max(time.Since(start)/time.Duration(warm), 1)
		k[i] = max(int(pairedSlice/per), 1)
	}
	// Bytes and allocations, a pass each.
	bytes := make([]float64, len(impls))
	allocs := make([]float64, len(impls))
	var before, after runtime.MemStats
	for i, im := range impls {
		n := max(k[i], warm)
		runtime.ReadMemStats(&before)
		for range n {
			im.op()
		}
		runtime.ReadMemStats(&after)
		bytes[i] = float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
		allocs[i] = float64(after.Mallocs-before.Mallocs) / float64(n)
	}
	// The timed rounds.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	ns := make([]time.Duration, len(impls))
	ops := make([]int, len(impls))
	round := 0
	for b.Loop() {
		runtime.GC()
		for j := range impls {
			i := (j + round) % len(impls)
			op := impls[i].op
			start := time.Now()
			for range k[i] {
				op()
			}
			ns[i] += time.Since(start)
			ops[i] += k[i]
		}
		round++
	}
	per := func(i int) float64 { return float64(ns[i]) / float64(ops[i]) }
	overhead := make([]float64, len(impls))
	for i := range impls {
		overhead[i] = per(i) - per(0)
	}
	f := -1
	for i, im := range impls {
		if im.name == focus {
			f = i
		}
	}
	for i, im := range impls[1:] {
		i++
		b.ReportMetric(overhead[i], im.name+"-ns")
		b.ReportMetric(bytes[i]-bytes[0], im.name+"-B")
		b.ReportMetric(allocs[i]-allocs[0], im.name+"-allocs")
		if f > 0 && i != f && overhead[f] > 0 {
			b.ReportMetric(overhead[i]/overhead[f], im.name+"/"+focus)
		}
	}
	if f > 0 {
		b.ReportMetric(overhead[f], "ns/op")
	}
}

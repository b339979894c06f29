package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/limitgen/limitgen/bench
cpu: Test CPU
BenchmarkSingle/case=allow/impl=limitgen-2   	 100	        10.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSingle/case=allow/impl=xrate-2      	 100	        40.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSingle/case=allow/impl=limitgen-2   	 100	        30.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSingle/case=allow/impl=xrate-2      	 100	        60.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSingle/case=allow/impl=limitgen-2   	 100	        20.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSingle/case=allow/impl=xrate-2      	 100	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSingle/case=allow/impl=xrate-2      	 100	        70.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeyed/keys=1e+06/impl=limitgen-2    	 100	       800 ns/op	        46.16 B/key
BenchmarkKeyed/keys=1e+06/impl=bare-2        	 100	         1 ns/op	        0 B/key
BenchmarkKeyed/keys=1e+06/impl=throttled-2   	 100	      1200 ns/op	        79.76 B/key
BenchmarkHTTPPaired/case=denied/keys=1-2     	 100	       900 ns/op	       700.0 limitgen-ns	       0 limitgen-allocs	      3500 httprate-ns	        13.00 httprate-allocs	         5.000 httprate/limitgen
BenchmarkNumbers/case=keyed/numbers=policy-2 	 100	        25.0 ns/op
BenchmarkNumbers/case=keyed/numbers=plan-2   	 100	        30.0 ns/op
PASS
`

func TestPageFromSample(t *testing.T) {
	r := Parse(sample)
	if r.CPU != "Test CPU" || r.OS != "linux" || r.Arch != "amd64" || len(r.Groups) != 4 {
		t.Fatalf("parsed %+v with %d groups, want Test CPU linux/amd64 and 4", r, len(r.Groups))
	}
	md := r.Markdown(Meta{Go: "go1.x", When: "then", Source: "results/bench.txt"}, "performance.svg")
	for _, want := range []string{
		"Test CPU, linux/amd64, go1.x",
		"median of up to 4 runs",
		"| ns/op | limitgen | xrate |",
		"| case=allow | 20 | 55 (2.75×) |", // medians 20 (of 10, 30, 20) and 55 (of 40..70)
		"B/op: 0 everywhere.",
		"| keys=1e+06 | 46.16 | 0 (0.00×) | 79.76 (1.73×) |", // bare, a baseline, is no peer of the figure's
		"| ns/op | policy | plan |",
		"| case=keyed | 25 | 30 (1.20×) |", // no limitgen column: the first is the base
		"| ns/op | limitgen | httprate |",
		"| case=denied/keys=1 | 700 | 3500 (5.00×) |", // paired: a column per implementation
		"| allocs/op | limitgen | httprate |",
		"| case=denied/keys=1 | 0 | 13 |",
		"![The fastest peer's time over limitgen's, per benchmark](performance.svg)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("page lacks %q:\n%s", want, md)
		}
	}
	bars := r.Bars()
	if len(bars) != 3 || bars[0].Label != "Single/case=allow" || bars[0].Ratio != 2.75 || bars[1].Ratio != 1.5 || bars[1].Peer != "throttled" || bars[2].Ratio != 5 {
		t.Fatalf("bars %+v, want Single/case=allow 2.75, Keyed 1.5 (throttled), HTTPPaired 5 (httprate)", bars)
	}
	svg := r.SVG()
	if !strings.Contains(svg, ">2.75× (xrate)</text>") || !strings.Contains(svg, ">1.50× (throttled)</text>") || strings.Count(svg, "<rect") != 4 {
		t.Fatalf("figure does not show the two bars:\n%s", svg)
	}
}

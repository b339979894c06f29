package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Result is what a benchmark output holds: the machine and, in the order they
// first appear, its benchmarks.
type Result struct {
	CPU, OS, Arch string
	Groups        []*Group
}

// Group is one benchmark case (its name without the implementation) and the
// samples each implementation reported for it, by unit.
type Group struct {
	Family string // the top-level benchmark, without "Benchmark"
	Case   string // the rest of the name without the column element; "" when none
	Cols   []string
	Units  []string
	s      map[string]map[string][]float64 // column → unit → samples
}

// Meta is what the page says about its own making.
type Meta struct{ Go, When, Source string }

// colKeys are the name elements whose value is a column: the implementation,
// or (BenchmarkNumbers) the case of numbers.
var colKeys = []string{"impl=", "numbers="}

// Parse reads `go test -bench` output.
func Parse(out string) *Result {
	r := &Result{}
	byName := map[string]*Group{}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "cpu: "); ok {
			r.CPU = v
		}
		if v, ok := strings.CutPrefix(line, "goos: "); ok {
			r.OS = v
		}
		if v, ok := strings.CutPrefix(line, "goarch: "); ok {
			r.Arch = v
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 && allDigits(name[i+1:]) {
			name = name[:i] // -GOMAXPROCS
		}
		family, rest, _ := strings.Cut(name, "/")
		col, cs := "value", []string{}
		for _, e := range strings.Split(rest, "/") {
			if e == "" {
				continue
			}
			if k := colKey(e); k != "" {
				col = strings.TrimPrefix(e, k)
				continue
			}
			cs = append(cs, e)
		}
		id := family + "/" + strings.Join(cs, "/")
		g := byName[id]
		if g == nil {
			g = &Group{Family: family, Case: strings.Join(cs, "/"), s: map[string]map[string][]float64{}}
			byName[id] = g
			r.Groups = append(r.Groups, g)
		}
		if g.s[col] == nil && !paired(f) {
			g.s[col] = map[string][]float64{}
			g.Cols = append(g.Cols, col)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			c, u := col, f[i+1]
			if strings.Contains(u, "/limitgen") {
				continue // a ratio the page computes itself
			}
			if impl, metric, ok := pairedUnit(u); ok && col == "value" {
				c, u = impl, metric // a paired benchmark's per-implementation metric
			} else if paired(f) {
				continue // the paired loop's own time: every implementation's together
			}
			if g.s[c] == nil {
				g.s[c] = map[string][]float64{}
				g.Cols = append(g.Cols, c)
			}
			if !slices.Contains(g.Units, u) {
				g.Units = append(g.Units, u)
			}
			g.s[c][u] = append(g.s[c][u], v)
		}
	}
	return r
}

// pairedUnit reads a paired benchmark's unit, "<impl>-ns", "<impl>-B" or
// "<impl>-allocs" (every implementation measured in one process), as the
// implementation's column and the unit of the others.
func pairedUnit(u string) (impl, metric string, ok bool) {
	i := strings.LastIndexByte(u, '-')
	if i <= 0 {
		return "", "", false
	}
	switch u[i+1:] {
	case "ns":
		return u[:i], "ns/op", true
	case "B":
		return u[:i], "B/op", true
	case "allocs":
		return u[:i], "allocs/op", true
	}
	return "", "", false
}

// paired reports whether a benchmark line reports per-implementation units,
// so that its own name's column ("value") holds only what is left.
func paired(f []string) bool {
	for i := 3; i < len(f); i += 2 {
		if _, _, ok := pairedUnit(f[i]); ok {
			return true
		}
	}
	return false
}

func colKey(e string) string {
	for _, k := range colKeys {
		if strings.HasPrefix(e, k) {
			return k
		}
	}
	return ""
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Median is the median of col's samples in unit, and how many there were.
func (g *Group) Median(col, unit string) (float64, int) {
	v := slices.Clone(g.s[col][unit])
	if len(v) == 0 {
		return math.NaN(), 0
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2], n
	}
	return (v[n/2-1] + v[n/2]) / 2, n
}

// base is the column others are compared with: limitgen's, else the first.
func (g *Group) base() string {
	if slices.Contains(g.Cols, "limitgen") {
		return "limitgen"
	}
	return g.Cols[0]
}

// ours reports whether a column is limitgen's own or a baseline, not a peer:
// limitgen and its variants, the generated code and the runtime under it,
// its rule kinds and metrics collectors, and the baselines that measure the
// harness itself (floor, core, bare, a Redis PING).
func ours(col string) bool {
	switch col {
	case "floor", "core", "bare", "runtime", "generated", "local-rule", "value", "bucket", "window-exact",
		"window-counted", "noop", "no-collector", "prometheus", "otel", "ping-autopipeline":
		return true
	}
	return strings.HasPrefix(col, "limitgen") || strings.HasPrefix(col, "lease")
}

// num formats v with three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "–"
	case a == 0:
		return "0"
	case a >= 1000 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// families groups the benchmarks by top-level name, in order.
func (r *Result) families() (names []string, by map[string][]*Group) {
	by = map[string][]*Group{}
	for _, g := range r.Groups {
		if by[g.Family] == nil {
			names = append(names, g.Family)
		}
		by[g.Family] = append(by[g.Family], g)
	}
	return names, by
}

// Markdown is the page.
func (r *Result) Markdown(m Meta, figure string) string {
	var b strings.Builder
	runs := 0
	for _, g := range r.Groups {
		for _, c := range g.Cols {
			if _, n := g.Median(c, "ns/op"); n > runs {
				runs = n
			}
		}
	}
	fmt.Fprintf(&b, "# Performance\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (`bench/cmd/perfpage`) from `bench/%s` on %s: %s, %s/%s, %s; "+
		"each figure is the median of up to %d runs, interleaved so that the machine's drift falls on every "+
		"implementation alike. Ratios are against limitgen's figure in the same run (`1.50×`: the peer takes 1.5 "+
		"times limitgen's time or memory). Do not edit this page: run `make bench` (what each benchmark measures "+
		"is in [benchmarks.md](benchmarks.md)).\n\n", m.Source, m.When, orUnknown(r.CPU), r.OS, r.Arch, m.Go, runs)
	fmt.Fprintf(&b, "![The fastest peer's time over limitgen's, per benchmark](%s)\n\n", figure)
	names, by := r.families()
	for _, f := range names {
		gs := by[f]
		fmt.Fprintf(&b, "## %s\n\n", f)
		var cols, units []string
		for _, g := range gs {
			for _, c := range g.Cols {
				if !slices.Contains(cols, c) {
					cols = append(cols, c)
				}
			}
			for _, u := range g.Units {
				if !slices.Contains(units, u) {
					units = append(units, u)
				}
			}
		}
		for _, u := range units {
			if allZero(gs, cols, u) {
				fmt.Fprintf(&b, "%s: 0 everywhere.\n\n", u)
				continue
			}
			fmt.Fprintf(&b, "| %s | %s |\n|---|%s\n", u, strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
			for _, g := range gs {
				row := []string{caseName(g.Case)}
				base, _ := g.Median(g.base(), u)
				for _, c := range cols {
					v, n := g.Median(c, u)
					cell := num(v)
					if n == 0 {
						cell = "–"
					} else if c != g.base() && base > 0 && !math.IsNaN(base) {
						cell += fmt.Sprintf(" (%.2f×)", v/base)
					}
					row = append(row, cell)
				}
				fmt.Fprintf(&b, "| %s |\n", strings.Join(row, " | "))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed CPU"
	}
	return s
}

func caseName(c string) string {
	if c == "" {
		return "—"
	}
	return c
}

func allZero(gs []*Group, cols []string, u string) bool {
	for _, g := range gs {
		for _, c := range cols {
			for _, v := range g.s[c][u] {
				if v != 0 {
					return false
				}
			}
		}
	}
	return true
}

// Bar is one benchmark case of the figure: the fastest peer's median time
// over limitgen's fastest (limitgen, or a variant of it such as the coalesced
// store).
type Bar struct {
	Label      string
	Ratio      float64
	Ours, Peer string
}

// Bars are the figure's bars: every case with a limitgen column and a peer.
func (r *Result) Bars() []Bar {
	var bars []Bar
	for _, g := range r.Groups {
		best := func(want bool) (string, float64) {
			col, t := "", math.Inf(1)
			for _, c := range g.Cols {
				if ours(c) != want || (want && !strings.HasPrefix(c, "limitgen")) {
					continue
				}
				if v, n := g.Median(c, "ns/op"); n > 0 && v < t {
					col, t = c, v
				}
			}
			return col, t
		}
		o, ot := best(true)
		p, pt := best(false)
		if o == "" || p == "" || ot <= 0 {
			continue
		}
		label := g.Family
		if g.Case != "" {
			label += "/" + g.Case
		}
		bars = append(bars, Bar{Label: label, Ratio: pt / ot, Ours: o, Peer: p})
	}
	return bars
}

// SVG is the figure: one bar per case, the fastest peer's time over limitgen's,
// on a log scale around 1× (right of the line: limitgen is faster).
func (r *Result) SVG() string {
	bars := r.Bars()
	const left, width, rowH, top = 330.0, 360.0, 22.0, 40.0
	lo, hi := 0.5, 2.0
	for _, b := range bars {
		lo, hi = math.Min(lo, b.Ratio), math.Max(hi, b.Ratio)
	}
	llo, lhi := math.Log(lo), math.Log(hi)
	x := func(v float64) float64 { return left + (math.Log(v)-llo)/(lhi-llo)*width }
	h := top + rowH*float64(len(bars)) + 30
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", left+width+110, h)
	fmt.Fprintf(&s, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&s, `<text x="10" y="20" font-size="14">Fastest peer's time ÷ limitgen's (median ns/op, one run of make bench; log scale)</text>`+"\n")
	for i, b := range bars {
		y := top + rowH*float64(i)
		x0, x1 := x(1), x(b.Ratio)
		fill := "#2b7bb9"
		if b.Ratio < 1 {
			fill = "#c0504d"
		}
		fmt.Fprintf(&s, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+14, html.EscapeString(b.Label))
		fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s vs %s</title></rect>`+"\n",
			math.Min(x0, x1), y+3, math.Max(math.Abs(x1-x0), 1), rowH-6, fill, html.EscapeString(b.Ours), html.EscapeString(b.Peer))
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f">%.2f× (%s)</text>`+"\n", math.Max(x0, x1)+4, y+14, b.Ratio, html.EscapeString(b.Peer))
	}
	fmt.Fprintf(&s, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="black"/>`+"\n", x(1), top, x(1), h-25)
	fmt.Fprintf(&s, `<text x="%.1f" y="%.0f" text-anchor="middle">1× (as fast)</text>`+"\n", x(1), h-10)
	s.WriteString("</svg>\n")
	return s.String()
}

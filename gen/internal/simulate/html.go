package simulate

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// A picture's series are kept at a resolution that coarsens as the log
// runs on (the log is streamed, never held): at most maxSlots slots a rule,
// merged when a request falls past them, the resolution going from a
// millisecond to a second, a minute, an hour, a day, then ten times as
// long each time. The picture's bins are a round width (binWidths) that is a
// whole number of slots, so binning the slots again is exact: a request's
// bin is (its time − the first request's) ÷ the bin's width, whatever the
// resolution was when it came.
const (
	maxSlots    = 4096
	pictureBins = 60
)

var resolutions = []time.Duration{time.Millisecond, time.Second, time.Minute, time.Hour, 24 * time.Hour}

// binWidths are the widths a picture's bins may take, each a whole number
// of every resolution not longer than it.
var binWidths = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 28 * 24 * time.Hour,
}

// picture gathers what gen simulate -html draws: per rule, the cost admitted
// and denied over time; the run-time changes of numbers; per rule, the keys
// that hit their limit (simRule.denied).
type picture struct {
	first      int64 // the first request's time (Unix ns)
	started    bool
	resolution int64 // ns a slot
	slots      int64 // slots in use: the last request's slot + 1
	// admitted and denied cost by rule, then by slot. In a tier a request
	// the tier admitted counts as admitted on every rule, and a denied one
	// on the rule that denied it (simulate's denied_by).
	admitted, denied [][]int64
	changes          []pictureChange
	notes            []string // said under the heading
}

// pictureChange is a number change (an event line: set, clear, reset, or an
// adaptive controller's health row) at its time.
type pictureChange struct {
	wall int64
	what string
}

func newPicture(rules int) *picture {
	return &picture{resolution: int64(resolutions[0]), admitted: make([][]int64, rules), denied: make([][]int64, rules)}
}

// slot is the slot of a time at or after the first request's, coarsening the
// resolution until it fits.
func (p *picture) slot(wall int64) int64 {
	if !p.started {
		p.started, p.first = true, wall
	}
	d := max(wall-p.first, 0) // a log out of order: drawn at its start
	for d/p.resolution >= maxSlots {
		p.coarsen()
	}
	s := d / p.resolution
	p.slots = max(p.slots, s+1)
	for i := range p.admitted {
		for int64(len(p.admitted[i])) <= s {
			p.admitted[i] = append(p.admitted[i], 0)
			p.denied[i] = append(p.denied[i], 0)
		}
	}
	return s
}

// coarsen takes the next resolution, merging slots.
func (p *picture) coarsen() {
	next := p.resolution * 10
	for _, r := range resolutions {
		if int64(r) > p.resolution {
			next = int64(r)
			break
		}
	}
	f := next / p.resolution
	p.resolution = next
	p.slots = (p.slots + f - 1) / f
	for _, series := range [][][]int64{p.admitted, p.denied} {
		for i, s := range series {
			merged := make([]int64, (int64(len(s))+f-1)/f)
			for j, v := range s {
				merged[int64(j)/f] += v
			}
			series[i] = merged
		}
	}
}

// request records a decision: admitted on every rule, or denied by rule at
// (its cost as each rule counted it).
func (p *picture) request(wall int64, costs []int64, allowed bool, at int) {
	s := p.slot(wall)
	if allowed {
		for i, c := range costs {
			p.admitted[i][s] += c
		}
		return
	}
	p.denied[at][s] += costs[at]
}

func (p *picture) change(wall int64, what string) {
	p.changes = append(p.changes, pictureChange{wall, what})
}

// bins are the picture's bins: their width, the least of binWidths (or of
// ten times the last of them, and so on) that is a whole number of slots and
// draws the log in at most pictureBins bins, and their count.
func (p *picture) bins() (width int64, n int) {
	span := max(p.slots*p.resolution, 1)
	for scale := int64(1); ; scale *= 10 {
		for _, w := range binWidths {
			w := int64(w) * scale
			if w >= p.resolution && w%p.resolution == 0 && (span+w-1)/w <= pictureBins {
				return w, int((span + w - 1) / w)
			}
		}
	}
}

// binned is a series by the picture's bins.
func (p *picture) binned(series []int64) []int64 {
	width, n := p.bins()
	per := width / p.resolution
	out := make([]int64, n)
	for s, v := range series {
		out[int64(s)/per] += v
	}
	return out
}

// writeHTML writes the picture as one self-contained page: a section a rule,
// each with its numbers, an inline SVG of the cost admitted and denied in
// each bin (every bin's numbers are in its data- attributes and its
// tooltip), the number changes as marked lines, and the keys that hit the
// rule's limit. The page is well-formed XML as well as HTML, so that tools
// (and the tests) can read its series back.
func (s *simulation) writeHTML(w io.Writer, p *picture) error {
	width, n := p.bins()
	var b strings.Builder
	esc := pageText
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>limitgen simulate: %s</title>\n", esc(s.name))
	b.WriteString("<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:60em}svg{background:#fafafa;border:1px solid #ddd}" +
		".adm{fill:#3a7d44}.den{fill:#c0392b}.chg{stroke:#1f4e99;stroke-dasharray:4 3}table{border-collapse:collapse}" +
		"td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}td.n{text-align:right}</style>\n</head>\n<body>\n")
	kind := "rule"
	if s.tier {
		kind = "tier"
	}
	fmt.Fprintf(&b, "<h1>%s %s</h1>\n", kind, esc(s.name))
	fmt.Fprintf(&b, "<p>From %s to %s, in %d bins of %v. Green: cost admitted; red: cost denied; blue dashed lines: numbers changed at run time.</p>\n",
		esc(time.Unix(0, p.first).UTC().Format(time.RFC3339Nano)), esc(time.Unix(0, p.first+p.slots*p.resolution).UTC().Format(time.RFC3339Nano)), n, time.Duration(width))
	for _, note := range p.notes {
		fmt.Fprintf(&b, "<p>%s</p>\n", esc(note))
	}
	for i, r := range s.rules {
		s.ruleSection(&b, p, i, r, width, n)
	}
	if len(p.changes) > 0 {
		b.WriteString("<h2>Number changes</h2>\n<table class=\"changes\">\n<tr><th>time</th><th>change</th></tr>\n")
		for _, c := range p.changes {
			fmt.Fprintf(&b, "<tr data-time=\"%d\"><td>%s</td><td>%s</td></tr>\n", c.wall, esc(time.Unix(0, c.wall).UTC().Format(time.RFC3339Nano)), esc(c.what))
		}
		b.WriteString("</table>\n")
	}
	b.WriteString("</body>\n</html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// The chart's geometry, in SVG units.
const (
	chartW, chartH      = 720, 200
	chartLeft, chartTop = 56, 12
	plotW, plotH        = chartW - chartLeft - 8, chartH - chartTop - 28
)

func (s *simulation) ruleSection(b *strings.Builder, p *picture, i int, r *simRule, width int64, n int) {
	esc := pageText
	adm, den := p.binned(p.admitted[i]), p.binned(p.denied[i])
	numbers := (&verdict.Policy{Limit: atomicbucket.Limit{Tokens: r.limit.Tokens, Period: time.Duration(r.limit.PeriodNs), Burst: r.limit.Burst}}).Describe()
	if r.limit.Window {
		numbers = fmt.Sprintf("at most %d in any %v (a sliding window)", r.limit.Tokens, time.Duration(r.limit.PeriodNs))
	}
	if r.limit.Interval {
		numbers += ", interval"
	}
	if r.limit.Cost != 1 {
		numbers += fmt.Sprintf(", cost %d", r.limit.Cost)
	}
	var top int64 = 1
	for j := range adm {
		top = max(top, adm[j]+den[j])
	}
	fmt.Fprintf(b, "<section class=\"rule\" data-rule=\"%s\">\n<h2>%s: %s</h2>\n", esc(r.rule.Name), esc(r.rule.Name), esc(numbers))
	fmt.Fprintf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" data-start=\"%d\" data-width=\"%d\" data-bins=\"%d\">\n",
		chartW, chartH, chartW, chartH, p.first, width, n)
	fmt.Fprintf(b, "<title>%s: cost admitted and denied per %v</title>\n", esc(r.rule.Name), time.Duration(width))
	// Axes: the cost at the top, the start and end times.
	fmt.Fprintf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#999\"/>\n", chartLeft, chartTop+plotH, chartLeft+plotW, chartTop+plotH)
	fmt.Fprintf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"11\">%d</text>\n", chartLeft-4, chartTop+10, top)
	fmt.Fprintf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"11\">0</text>\n", chartLeft-4, chartTop+plotH)
	fmt.Fprintf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\">+0</text>\n", chartLeft, chartH-8)
	fmt.Fprintf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"11\">+%v</text>\n", chartLeft+plotW, chartH-8, time.Duration(width*int64(n)))
	barW := float64(plotW) / float64(n)
	for j := range n {
		x := float64(chartLeft) + float64(j)*barW
		ha := float64(adm[j]) / float64(top) * plotH
		hd := float64(den[j]) / float64(top) * plotH
		fmt.Fprintf(b, "<g class=\"bin\" data-bin=\"%d\" data-admitted=\"%d\" data-denied=\"%d\"><title>+%v: %d admitted, %d denied</title>", j, adm[j], den[j], time.Duration(width*int64(j)), adm[j], den[j])
		fmt.Fprintf(b, "<rect class=\"adm\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", x, float64(chartTop+plotH)-ha, max(barW-1, 0.5), ha)
		fmt.Fprintf(b, "<rect class=\"den\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></g>\n", x, float64(chartTop+plotH)-ha-hd, max(barW-1, 0.5), hd)
	}
	span := float64(width) * float64(n)
	for _, c := range p.changes {
		x := float64(chartLeft) + float64(c.wall-p.first)/span*plotW
		if x < chartLeft || x > chartLeft+plotW {
			continue // before the first request: in force from its start
		}
		fmt.Fprintf(b, "<line class=\"chg\" data-time=\"%d\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"><title>%s</title></line>\n", c.wall, x, chartTop, x, chartTop+plotH, esc(c.what))
	}
	b.WriteString("</svg>\n")
	// The keys that hit the limit: most denials first.
	type hit struct {
		key             string
		allowed, denied int
	}
	var hits []hit
	for k, d := range r.denied {
		if d > 0 {
			hits = append(hits, hit{k, r.allowed[k], d})
		}
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if a.denied != b.denied {
			return b.denied - a.denied
		}
		return strings.Compare(a.key, b.key)
	})
	if len(hits) == 0 {
		b.WriteString("<p>No key hit the limit.</p>\n</section>\n")
		return
	}
	fmt.Fprintf(b, "<p>%d keys hit the limit", len(hits))
	if len(hits) > 20 {
		b.WriteString("; the 20 denied most")
		hits = hits[:20]
	}
	b.WriteString(":</p>\n<table class=\"keys\">\n<tr><th>key</th><th>allowed</th><th>denied</th></tr>\n")
	for _, h := range hits {
		key := h.key
		if key == "" {
			key = "(global)"
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td class=\"n\">%d</td><td class=\"n\">%d</td></tr>\n", esc(key), h.allowed, h.denied)
	}
	b.WriteString("</table>\n</section>\n")
}

// pageText is s as the page's text or attribute value: HTML-escaped, and
// what XML 1.0 forbids even escaped (control characters but tab, newline and
// carriage return; U+FFFE and U+FFFF; invalid UTF-8) written as Go writes it
// in a string literal (\x01, \ufffe; a backslash as \\), so that a hostile key
// still leaves the page well-formed and shows what it was, unambiguously.
func pageText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r':
			fmt.Fprintf(&b, `\x%02x`, r)
		case r == 0xFFFE || r == 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		case r == '\\':
			b.WriteString(`\\`) // so that \x01 shown is the byte, never the text
		default:
			b.WriteString(html.EscapeString(s[i : i+size]))
		}
		i += size
	}
	return b.String()
}

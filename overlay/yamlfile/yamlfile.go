// Package yamlfile reads an overlay file, the policy's syntax for numbers
// only, as a source of a generated package's numbers (overlay.Source):
//
//	rules:
//	  PerUser:                          # a rule of the policy, by name
//	    rate: 20/min                    # its numbers on every plan without its own
//	    burst: 20
//	    plans:
//	      pro: {rate: 200/min, burst: 200}
//	    keys:                           # a key's own numbers, on every plan
//	      acme: {rate: 1000/min, burst: 1000}
//	  Global: {rate: 2000/s, burst: 4000}
//
// Each entry gives a rate (rate:, tokens_per_second: or rps:, read as the
// policy reads them) and a burst; an in-flight rule's may give in_flight:
// and max_hold: instead (ExportSlots: {in_flight: 2, max_hold: 5m}). A file must say rules: — `rules: {}` takes
// every number back to the policy's — so that an empty file (one caught half
// written, or emptied by mistake) is refused rather than clearing every
// override.
//
// It is a package of its own so that a service that reads no file links no
// YAML parser: generated packages import only package overlay.
package yamlfile

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/limitgen/limitgen/overlay"
	"go.yaml.in/yaml/v3"
)

// maxFileBytes bounds an overlay file, as the policy's is bounded.
const maxFileBytes = 16 << 20

// Parse reads an overlay file named name. A problem of the whole file (not
// YAML, empty, no rules:, too large) is an error wrapping overlay.ErrInvalid;
// every other problem is in the Set, an entry with its Err at its line and
// column, so that ApplyNumbers (or overlay.Check) refuses the Set naming each
// problem of each entry at once, beside the policy's own checks.
func Parse(name string, src []byte) (overlay.Set, error) {
	if len(src) > maxFileBytes {
		return nil, fmt.Errorf("%s: %w: the file has %d bytes, at most %d", name, overlay.ErrInvalid, len(src), maxFileBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w: not valid YAML: %s", name, overlay.ErrInvalid, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	p := parser{name: name}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: %w: the file is empty (written half, or emptied by mistake?); `rules: {}` takes every number back to the policy's", name, overlay.ErrInvalid)
	}
	root := doc.Content[0]
	top := p.mapping(root, "the file", "rules")
	rules := top["rules"]
	if rules == nil {
		if len(p.set) == 0 {
			return nil, fmt.Errorf("%s:%d:%d: %w: no rules: (`rules: {}` takes every number back to the policy's)", name, root.Line, root.Column, overlay.ErrInvalid)
		}
		return p.set, nil
	}
	if rules.Kind == yaml.ScalarNode && rules.Tag == "!!null" {
		return p.set, nil // rules: with nothing: the policy's numbers everywhere
	}
	for _, rn := range p.pairs(rules, "rules") {
		name, n := rn[0], rn[1]
		if name.Value == "" {
			p.problem(name, "rules: a rule's name is empty")
			continue
		}
		f := p.mapping(n, "rule "+name.Value, "rate", "tokens_per_second", "rps", "burst", "in_flight", "max_hold", "plans", "keys")
		p.entry(n, f, "rule "+name.Value, overlay.Entry{Rule: name.Value})
		if f["plans"] != nil {
			for _, pn := range p.pairs(f["plans"], "rule "+name.Value+"'s plans") {
				what := fmt.Sprintf("rule %s, plan %s", name.Value, pn[0].Value)
				if pn[0].Value == "" {
					p.problem(pn[0], "rule %s's plans: a plan's name is empty", name.Value)
					continue
				}
				p.entry(pn[1], p.mapping(pn[1], what, "rate", "tokens_per_second", "rps", "burst", "in_flight", "max_hold"), what, overlay.Entry{Rule: name.Value, Plan: pn[0].Value})
			}
		}
		if f["keys"] != nil {
			for _, kn := range p.pairs(f["keys"], "rule "+name.Value+"'s keys") {
				what := fmt.Sprintf("rule %s, key %q", name.Value, kn[0].Value)
				p.entry(kn[1], p.mapping(kn[1], what, "rate", "tokens_per_second", "rps", "burst", "in_flight", "max_hold"), what, overlay.Entry{Rule: name.Value, Key: kn[0].Value, HasKey: true})
			}
		}
	}
	return p.set, nil
}

// parser collects a file's entries, and its problems as entries with an Err.
type parser struct {
	name string
	set  overlay.Set
}

func (p *parser) pos(n *yaml.Node) string { return fmt.Sprintf("%s:%d:%d", p.name, n.Line, n.Column) }

// problem records a problem of the file's form at n.
func (p *parser) problem(n *yaml.Node, format string, args ...any) {
	p.set = append(p.set, overlay.Entry{Pos: p.pos(n), Err: fmt.Errorf(format, args...)})
}

// pairs are a mapping's key and value nodes, in order.
func (p *parser) pairs(n *yaml.Node, what string) [][2]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		p.problem(n, "%s must be a mapping", what)
		return nil
	}
	var out [][2]*yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode {
			p.problem(k, "%s: a name must be a plain scalar", what)
			continue
		}
		if seen[k.Value] {
			p.problem(k, "%s: %q is given twice", what, k.Value)
			continue
		}
		seen[k.Value] = true
		out = append(out, [2]*yaml.Node{k, n.Content[i+1]})
	}
	return out
}

// mapping reads a mapping's fields, refusing the ones not in known.
func (p *parser) mapping(n *yaml.Node, what string, known ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	for _, kv := range p.pairs(n, what) {
		if !slices.Contains(known, kv[0].Value) {
			p.problem(kv[0], "%s: unknown field %q; an overlay gives numbers only: %s", what, kv[0].Value, strings.Join(known, ", "))
			continue
		}
		out[kv[0].Value] = kv[1]
	}
	return out
}

// entry reads one entry's rate and burst into e, unless n gives neither (a
// rule with only plans or keys). A problem reading them is the entry's Err,
// at the node it is about; whether the numbers are good is the rule's check.
func (p *parser) entry(n *yaml.Node, f map[string]*yaml.Node, what string, e overlay.Entry) {
	var rates []string
	for _, k := range []string{"rate", "tokens_per_second", "rps"} {
		if f[k] != nil {
			rates = append(rates, k)
		}
	}
	slots := f["in_flight"] != nil || f["max_hold"] != nil
	if len(rates) == 0 && f["burst"] == nil && !slots {
		return
	}
	e.Pos = p.pos(n)
	fail := func(at *yaml.Node, format string, args ...any) {
		if e.Err == nil {
			e.Pos, e.Err = p.pos(at), fmt.Errorf(format, args...)
		}
	}
	if slots { // an in-flight rule's: its slots and their maximum hold
		e.InFlight = true
		p.slotEntry(n, f, rates, fail, &e)
		p.set = append(p.set, e)
		return
	}
	switch {
	case len(rates) > 1:
		fail(f[rates[1]], "give the rate once: %s and %s both set it", rates[0], rates[1])
	case len(rates) == 0:
		fail(n, "no rate: an overlay entry gives both a rate and a burst")
	default:
		v := f[rates[0]]
		var err error
		if rates[0] == "rate" {
			e.Numbers.Tokens, e.Numbers.Period, err = overlay.ReadRate(v.Value)
		} else {
			e.Numbers.Tokens, e.Numbers.Period, err = overlay.ReadPerSecond(v.Value)
		}
		if err != nil {
			fail(v, "%v", err)
		}
	}
	b := f["burst"]
	if b == nil {
		fail(n, "no burst: an overlay entry gives both a rate and a burst")
	} else if v, err := strconv.ParseInt(strings.ReplaceAll(b.Value, "_", ""), 10, 64); b.Kind != yaml.ScalarNode || err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			fail(b, "burst %s is too large: at most %d", b.Value, int64(1<<63-1))
		} else {
			fail(b, "burst %q is not a whole number", b.Value)
		}
	} else {
		e.Numbers.Burst = v
	}
	p.set = append(p.set, e)
}

// slotEntry reads an in-flight rule's entry (in_flight: 4, max_hold: 10m)
// into e's numbers as the rule takes them: the slots as Tokens and Burst,
// the hold as Period.
func (p *parser) slotEntry(n *yaml.Node, f map[string]*yaml.Node, rates []string, fail func(*yaml.Node, string, ...any), e *overlay.Entry) {
	switch {
	case len(rates) > 0 || f["burst"] != nil:
		at := f["burst"]
		if len(rates) > 0 {
			at = f[rates[0]]
		}
		fail(at, "an entry gives in_flight and max_hold (an in-flight rule's) or a rate and a burst, not both")
	case f["in_flight"] == nil:
		fail(n, "no in_flight: an in-flight rule's entry gives both in_flight and max_hold")
	case f["max_hold"] == nil:
		fail(n, "no max_hold: an in-flight rule's entry gives both in_flight and max_hold")
	}
	if v := f["in_flight"]; v != nil {
		k, err := strconv.ParseInt(strings.ReplaceAll(v.Value, "_", ""), 10, 64)
		if v.Kind != yaml.ScalarNode || err != nil {
			fail(v, "in_flight %q is not a whole number", v.Value)
		}
		e.Numbers.Tokens, e.Numbers.Burst = k, k
	}
	if v := f["max_hold"]; v != nil {
		d, err := overlay.ParseWindow(v.Value)
		if v.Kind != yaml.ScalarNode || err != nil {
			fail(v, "max_hold %q: %v", v.Value, err)
		}
		e.Numbers.Period = d
	}
}

// File is an overlay file as a source of numbers (overlay.Source), for
// overlay.Watch, which reads it every Refresh (a second is a good one for a
// file).
//
// Write the file whole (a temporary file renamed over it): Watch reads it
// while it may be being written, so a new content is taken only once two
// reads in a row have found it (a file's first read is taken at once), and an
// empty file is refused (Parse).
type File struct {
	path string

	mu      sync.Mutex
	have    bool // a content was taken
	sum     [32]byte
	set     overlay.Set
	err     error
	pending [32]byte // a new content read once, to be read again before it is taken
	pends   bool
}

// New returns the overlay file at path.
func New(path string) *File { return &File{path: path} }

// String is the file's path.
func (f *File) String() string { return f.path }

// Load reads the file: its Set, or why it cannot be read or parsed. A
// content that differs from the one taken last is taken only when the next
// Load finds it again; until then Load returns overlay.ErrSettling.
func (f *File) Load(context.Context) (overlay.Set, error) {
	src, err := os.ReadFile(f.path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(src)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.have && sum != f.sum {
		if !f.pends || sum != f.pending {
			f.pending, f.pends = sum, true // new: taken if the next read finds it again
			return nil, overlay.ErrSettling
		}
	}
	f.pends = false
	if !f.have || sum != f.sum {
		f.have, f.sum = true, sum
		f.set, f.err = Parse(f.path, src)
	}
	return f.set, f.err
}

// Apply reads the file now, whatever was read before, and applies it with
// apply (a generated package's ApplyNumbers): at a service's start, to know
// at once whether its numbers are in force. Its error names the file.
func (f *File) Apply(apply func(overlay.Set) error) error {
	f.mu.Lock()
	f.have, f.pends = false, false
	f.mu.Unlock()
	set, err := f.Load(context.Background())
	if err == nil {
		err = apply(set)
	}
	if err != nil {
		return fmt.Errorf("overlay: %s: %w; the numbers in force stay", f.path, err)
	}
	return nil
}

// Package policy is the generator's first two steps: it parses a policy file
// (YAML, keeping every value's position) and validates its meaning into a
// model.Model (package model), with every number computed exactly and every
// problem reported as file:line:col with what would be right. Compile is its
// entry point; package emit prints what it builds.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The policy as written: every field keeps the YAML node it came from, so that
// validation can say where a problem is. Parsing only checks shape (a mapping
// where a mapping belongs, known field names); validate.go checks meaning.

type policyDoc struct {
	pkg   *yaml.Node
	ns    *yaml.Node // namespace
	plans *yaml.Node
	rules []*ruleDoc
	tiers []*tierDoc
	http  *yaml.Node
	grpc  *yaml.Node
	rls   *yaml.Node
	node  *yaml.Node
}

type ruleDoc struct {
	node   *yaml.Node
	fields map[string]*yaml.Node // field name → value node
	keys   map[string]*yaml.Node // field name → key node (for positions)
	plans  []*planDoc
}

type planDoc struct {
	name   *yaml.Node
	fields map[string]*yaml.Node
	keys   map[string]*yaml.Node
}

type tierDoc struct {
	node   *yaml.Node
	fields map[string]*yaml.Node
	keys   map[string]*yaml.Node
}

var (
	topFields  = []string{"package", "namespace", "plans", "rules", "tiers", "http", "grpc", "rls"}
	ruleFields = []string{"name", "key", "rate", "tokens_per_second", "rps", "limit", "window", "burst", "refill", "aligned", "initial", "cost", "max_keys", "at_cap", "plans", "shared", "on_failure", "local_share", "lease", "store", "in_flight", "max_hold", "wait"}
	planFields = []string{"rate", "tokens_per_second", "rps", "limit", "window", "burst", "initial", "cost", "in_flight", "max_hold", "wait"}
	tierFields = []string{"name", "rules"}
)

// parser reads one policy file and collects the problems it meets.
type parser struct {
	file  string
	diags Diags
	// broken are the rules (by name) and plans ("plan " and its name) given
	// with a mistake of their own, already reported: what names them (a
	// tier, a rule's plans:) says nothing more about them.
	broken map[string]bool
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	d := Diag{File: p.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		d.Line, d.Col = n.Line, n.Column
	}
	p.diags = append(p.diags, d)
}

// maxPolicyBytes bounds the policy file. The largest policy the counts below
// allow is far smaller; the bound keeps a hostile or mistaken input (a 50 MB
// name) from costing gigabytes before validation can say what is wrong.
const maxPolicyBytes = 1 << 20

// parse reads the YAML document into a policyDoc.
func (p *parser) parse(src []byte) *policyDoc {
	if len(src) > maxPolicyBytes {
		p.errorf(nil, "the policy is %d bytes; a policy may be at most %d (1 MiB): split it, or shorten what is long", len(src), maxPolicyBytes)
		return nil
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(src))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		p.diags = append(p.diags, p.yamlDiag(err, src))
		return nil
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		p.errorf(nil, "the policy is empty; it needs at least package and rules")
		return nil
	}
	var second yaml.Node
	switch err := dec.Decode(&second); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.diags = append(p.diags, p.yamlDiag(err, src))
		return nil
	default:
		p.errorf(&second, "a second YAML document (after ---): a policy is one document; merge them, or keep each in a file of its own")
		return nil
	}
	if !p.resolveAliases(&root, map[*yaml.Node]bool{}) {
		return nil
	}
	top := root.Content[0]
	if top.Kind != yaml.MappingNode {
		p.errorf(top, "the policy must be a mapping with package, rules and optionally plans and tiers")
		return nil
	}
	doc := &policyDoc{node: top}
	fields, _ := p.mapping(top, topFields, "the policy")
	doc.pkg = fields["package"]
	doc.ns = fields["namespace"]
	doc.plans = fields["plans"]
	doc.http = fields["http"]
	doc.grpc = fields["grpc"]
	doc.rls = fields["rls"]
	if n := fields["rules"]; n != nil {
		for _, item := range p.sequence(n, "rules") {
			doc.rules = append(doc.rules, p.ruleDoc(item))
		}
	}
	if n := fields["tiers"]; n != nil {
		for _, item := range p.sequence(n, "tiers") {
			f, k := p.mapping(item, tierFields, "a tier")
			doc.tiers = append(doc.tiers, &tierDoc{node: item, fields: f, keys: k})
		}
	}
	return doc
}

// resolveAliases replaces every alias (*name) in n's subtree by the node its
// anchor (&name) marks, keeping the alias's position, so that validation reads
// the anchored value and not the anchor's name. Merge keys (<<: *base) are
// refused: they would make fields appear that the policy does not show where
// they apply. Each node is visited once, so aliases cost no expansion.
func (p *parser) resolveAliases(n *yaml.Node, seen map[*yaml.Node]bool) bool {
	if seen[n] {
		return true
	}
	seen[n] = true
	ok := true
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 && c.Kind == yaml.ScalarNode && c.Tag == "!!merge" {
			p.errorf(c, "merge keys (<<) are not supported; write the fields out, or use an anchor for a whole value (burst: *standard)")
			ok = false
			continue
		}
		if c.Kind == yaml.AliasNode {
			target := c.Alias
			for target != nil && target.Kind == yaml.AliasNode {
				target = target.Alias
			}
			if target == nil {
				p.errorf(c, "alias *%s has no anchor &%s before it", c.Value, c.Value)
				ok = false
				continue
			}
			r := *target
			r.Line, r.Column = c.Line, c.Column
			n.Content[i] = &r
			continue
		}
		ok = p.resolveAliases(c, seen) && ok
	}
	return ok
}

// yamlDiag reports a YAML syntax error at the line the YAML library names
// ("yaml: line 3: did not find expected ','"); it names no column. The library
// names no line for a problem on the first line (it counts lines from 0 and
// omits line 0). A policy indented with tabs (which YAML does not allow) is
// told so, at the first tab in a line's indentation.
func (p *parser) yamlDiag(err error, src []byte) Diag {
	for i, line := range strings.Split(string(src), "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " \t"))
		if col := strings.IndexByte(line[:indent], '\t'); col >= 0 && indent < len(line) {
			return Diag{File: p.file, Line: i + 1, Col: col + 1,
				Msg: "indented with a tab: YAML indents with spaces only; replace the tabs at the start of this line (and any others) with spaces"}
		}
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	d := Diag{File: p.file, Line: 1, Msg: "not valid YAML: " + msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil && line > 0 {
				d.Line, d.Msg = line, "not valid YAML: "+after
			}
		}
	}
	return d
}

func (p *parser) ruleDoc(n *yaml.Node) *ruleDoc {
	f, k := p.mapping(n, ruleFields, "a rule")
	r := &ruleDoc{node: n, fields: f, keys: k}
	if pl := f["plans"]; pl != nil {
		if pl.Kind != yaml.MappingNode {
			p.errorf(pl, "plans of a rule must be a mapping from plan name to rate and burst")
		} else {
			for i := 0; i+1 < len(pl.Content); i += 2 {
				pf, pk := p.mapping(pl.Content[i+1], planFields, "a plan's limit")
				r.plans = append(r.plans, &planDoc{name: pl.Content[i], fields: pf, keys: pk})
			}
		}
	}
	return r
}

// mapping returns the fields of a mapping node by name, reporting unknown and
// repeated fields.
func (p *parser) mapping(n *yaml.Node, known []string, what string) (fields, keys map[string]*yaml.Node) {
	fields, keys = map[string]*yaml.Node{}, map[string]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping of fields (%s)", what, strings.Join(known, ", "))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		if !contains(known, name) {
			if s := didYouMean(name, known); s != "" {
				p.errorf(k, "unknown field %q in %s; did you mean %q?", name, what, s)
			} else {
				p.errorf(k, "unknown field %q in %s; the fields are %s", name, what, strings.Join(known, ", "))
			}
			continue
		}
		if prev, dup := keys[name]; dup {
			p.errorf(k, "field %q given twice in %s (first at line %d)", name, what, prev.Line)
			continue
		}
		fields[name], keys[name] = v, k
	}
	return
}

func (p *parser) sequence(n *yaml.Node, what string) []*yaml.Node {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list", what)
		return nil
	}
	return n.Content
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

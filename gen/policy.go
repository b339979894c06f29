package main

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The policy as written: every field keeps the YAML node it came from, so that
// validation can say where a problem is. Parsing only checks shape (a mapping
// where a mapping belongs, known field names); validate.go checks meaning.

type policyDoc struct {
	pkg   *yaml.Node
	plans *yaml.Node
	rules []*ruleDoc
	tiers []*tierDoc
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
	topFields  = []string{"package", "plans", "rules", "tiers"}
	ruleFields = []string{"name", "key", "rate", "tokens_per_second", "rps", "burst", "refill", "aligned", "initial", "cost", "max_keys", "at_cap", "plans"}
	planFields = []string{"rate", "tokens_per_second", "rps", "burst", "initial", "cost"}
	tierFields = []string{"name", "rules"}
)

// parser reads one policy file and collects the problems it meets.
type parser struct {
	file  string
	diags diags
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	d := diag{file: p.file, msg: fmt.Sprintf(format, args...)}
	if n != nil {
		d.line, d.col = n.Line, n.Column
	}
	p.diags = append(p.diags, d)
}

// parse reads the YAML document into a policyDoc.
func (p *parser) parse(src []byte) *policyDoc {
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		p.diags = append(p.diags, diag{file: p.file, msg: yamlError(err)})
		return nil
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		p.errorf(nil, "the policy is empty; it needs at least package and rules")
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
	doc.plans = fields["plans"]
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

// yamlError keeps the YAML library's message, which carries the line.
func yamlError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return "not valid YAML: " + msg
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

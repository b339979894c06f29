package policy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/limitgen/limitgen/gen/internal/model"
	"go.yaml.in/yaml/v3"
)

// keyKind is a key source a door offers, as a policy writes it: its kind
// ("ip", "header"), whether it takes a name (header:X-Tenant), which key
// types it gives, and how a reader is told where a key came from.
type keyKind struct {
	kind string
	// name, for a named kind, checks the name and returns it as the door
	// reads it (canonical, lower case), or the reason it is refused. Nil
	// for a kind without a name.
	name func(string) (string, string)
	// gives is what the source gives: "string", "integer" (a route's
	// number) or "any" (a func: hook of the rule's own key type).
	gives string
	// describe says where the key comes from, for refusals' bodies.
	describe func(name string) string
}

// door is one door's key sources, in the order its errors list them.
type door struct {
	name    string // the policy's section: http, grpc
	example string // a key source or two, for errors
	// route is what the door calls the thing a route key numbers (route,
	// entry), and byName the string kind that keys by it (pattern, method).
	route, byName string
	kinds         []keyKind
	// wrong are kinds other doors offer, with what to write here instead.
	wrong map[string]func(name string) string
}

// doors is the one table of what each door offers as key sources.
var doors = map[string]*door{
	"http": {
		name: "http", example: "ip, header:X-Tenant or func:UserID", route: "route", byName: "pattern",
		kinds: []keyKind{
			{kind: "ip", gives: "string", describe: func(string) string { return "the client address" }},
			{kind: "header", gives: "string", name: headerName, describe: func(n string) string { return "the header " + n }},
			{kind: "query", gives: "string", name: paramName("query"), describe: func(n string) string { return "the query " + n }},
			{kind: "path", gives: "string", name: paramName("path"), describe: func(n string) string { return "the path " + n }},
			{kind: "pattern", gives: "string", describe: func(string) string { return "the route" }},
			{kind: "route", gives: "integer", describe: func(string) string { return "the route" }},
			{kind: "func", gives: "any", describe: func(string) string { return "the caller's identity, as the service establishes it" }},
		},
		wrong: map[string]func(string) string{
			"metadata": func(n string) string { return "an HTTP request has headers, not metadata: header:" + n },
			"method":   func(string) string { return "an HTTP route keys by its pattern: pattern" },
		},
	},
	"grpc": {
		name: "grpc", example: "ip, metadata:x-tenant or func:UserID", route: "entry", byName: "method",
		kinds: []keyKind{
			{kind: "ip", gives: "string", describe: func(string) string { return "the client address" }},
			{kind: "metadata", gives: "string", name: metadataKey, describe: func(n string) string { return "metadata " + n }},
			{kind: "method", gives: "string", describe: func(string) string { return "the method" }},
			{kind: "route", gives: "integer", describe: func(string) string { return "the method" }},
			{kind: "func", gives: "any", describe: func(string) string { return "the caller's identity, as the service establishes it" }},
		},
		wrong: map[string]func(string) string{
			"header": func(n string) string { return "a gRPC call has metadata, not headers: metadata:" + strings.ToLower(n) },
		},
	},
}

// kind is d's key kind named k, or nil.
func (d *door) kind(k string) *keyKind {
	for i := range d.kinds {
		if d.kinds[i].kind == k {
			return &d.kinds[i]
		}
	}
	return nil
}

// list is d's kinds as a policy writes them, for errors: ip, header:Name, ...
func (d *door) list() string {
	var out []string
	for _, k := range d.kinds {
		s := k.kind
		if k.name != nil {
			s += ":name"
		}
		if k.kind == "func" {
			s = "func:Name"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// describe says where a source's key comes from.
func (d *door) describe(s model.KeySource) string {
	if k := d.kind(s.Kind); k != nil {
		return k.describe(s.Name)
	}
	return s.Kind + " " + s.Name
}

// from says where a rule's key comes from, for refusals' bodies: its
// sources in order ("the header X-Tenant, then the client address"), for a
// composite key each field's ("tenant from the header X-Tenant; user from
// ...").
func (d *door) from(r model.Rule, srcs []model.KeySource) string {
	if !r.Composite() {
		var from []string
		for _, s := range srcs {
			from = append(from, d.describe(s))
		}
		return strings.Join(from, ", then ")
	}
	var fields []string
	for fi, f := range r.Fields {
		var from []string
		for _, s := range srcs {
			if s.Field == fi {
				from = append(from, d.describe(s))
			}
		}
		fields = append(fields, f.Name+" from "+strings.Join(from, ", then "))
	}
	return strings.Join(fields, "; ")
}

// keySource reads one of door d's key sources ("ip", "header:X-Tenant",
// "func:UserID", ...) for rule r, checking that it can give r's key type.
func (p *parser) keySource(d *door, n *yaml.Node, r model.Rule, what string, addHook func(*yaml.Node, string, string) bool) (model.KeySource, bool) {
	kind, name, hasName := strings.Cut(n.Value, ":")
	bad := func(format string, args ...any) (model.KeySource, bool) {
		p.errorf(n, "%s: rule %q: key source %q: "+format, append([]any{what, r.Name, n.Value}, args...)...)
		return model.KeySource{}, false
	}
	if n.Kind != yaml.ScalarNode {
		return bad("a key source is a string, such as %s", d.example)
	}
	k := d.kind(kind)
	if k == nil {
		msg := "use one of " + d.list()
		var names []string
		for _, k := range d.kinds {
			names = append(names, k.kind)
		}
		if w := d.wrong[kind]; w != nil {
			msg = w(name)
		} else if s := didYouMean(kind, names); s != "" {
			msg = fmt.Sprintf("did you mean %s? (%s)", s, msg)
		}
		return bad("%s", msg)
	}
	integer := r.KeyType != "string"
	switch {
	case k.kind == "func":
		if !addHook(n, name, r.KeyType) {
			return model.KeySource{}, false
		}
		return model.KeySource{Kind: kind, Name: name}, true
	case k.name == nil && hasName:
		return bad("%s takes no name", kind)
	case k.gives == "integer" && !integer:
		return bad("%s keys by the %s's number, for integer keys; use %s for a string key", kind, d.route, d.byName)
	case k.gives == "string" && integer && k.name == nil:
		return bad("%s gives a string, but the rule's key is %s", kind, r.KeyType)
	}
	if k.name != nil {
		canon, msg := k.name(name)
		if msg != "" {
			return bad("%s", msg)
		}
		name = canon
	}
	return model.KeySource{Kind: kind, Name: name}, true
}

// headerName checks an HTTP field name (an RFC 9110 token) and returns it in
// canonical form, as net/http's Header keys it.
func headerName(s string) (string, string) {
	if !validHeaderName(s) {
		return "", fmt.Sprintf("%q is not a header name", s)
	}
	return http.CanonicalHeaderKey(s), ""
}

// paramName is the check of a query or path parameter's name.
func paramName(kind string) func(string) (string, string) {
	return func(s string) (string, string) {
		if s == "" {
			return "", fmt.Sprintf("name the %s parameter, such as %s:id", kind, kind)
		}
		return s, ""
	}
}

// metadataKey checks a gRPC metadata key and returns it in lower case, as
// grpc-go keys incoming metadata.
func metadataKey(s string) (string, string) {
	if msg := metadataName(s); msg != "" {
		return "", msg
	}
	return strings.ToLower(s), ""
}

// keySourceFunc reads a key source of rule r for what (a route, an entry).
type keySourceFunc func(n *yaml.Node, r model.Rule, what string) (model.KeySource, bool)

// doorKeys reads what the http: and grpc: sections share: the plan source,
// the key sources (with the hooks they name, collected into hooks, of the
// generated type hooksType) and the keys the section's routes default to.
func (p *parser) doorKeys(f map[string]*yaml.Node, m *model.Model, door, hooksType string, hooks *[]model.Hook) (model.PlanSource, keySourceFunc, map[int][]model.KeySource) {
	addHook := p.hookSet(door, hooksType, hooks)
	var plan model.PlanSource
	if v := f["plan"]; v != nil {
		plan = p.planSource(v, m, door, addHook)
	}
	source := func(s *yaml.Node, r model.Rule, what string) (model.KeySource, bool) {
		return p.keySource(doors[door], s, r, what, addHook)
	}
	defaults := map[int][]model.KeySource{}
	if v := f["keys"]; v != nil {
		defaults = p.keyMap(v, m, door+": keys", source)
	}
	p.fieldPolicies(m)
	return plan, source, defaults
}

// doorItems is the list of a door section's routes (field, of section n):
// none, with an error saying how to write them (how), when it is missing or
// longer than maxRoutes.
func (p *parser) doorItems(n, list *yaml.Node, door, field, how string) ([]*yaml.Node, bool) {
	if list == nil {
		p.errorf(n, "%s: no %s; %s", door, field, how)
		return nil, false
	}
	items := p.sequence(list, door+": "+field)
	if len(items) > maxRoutes {
		p.errorf(items[maxRoutes], "%s: %d %s; at most %d", door, len(items), field, maxRoutes)
		return nil, false
	}
	return items, true
}

// routeKeysOf is what a door adds to routeKeys: its name and what it calls
// a route (unit), its own check of a source (nil: none), what it makes of a
// route's sources (adapt; nil: they are used as they are), and the body of
// the refusal of a request without a rule's key, read from sources (from).
type routeKeysOf struct {
	door, unit string
	check      func(rule model.Rule, s model.KeySource) bool
	adapt      func(srcs []model.KeySource) []model.KeySource
	missing    func(rule model.Rule, from string) string
}

// routeKeys sets the key sources of each of route r's rules (the route's own
// keys in f, else the section's defaults) and the body of the refusal of a
// request without the key, reporting errors at at; it reports whether every
// keyed rule has valid sources.
func (p *parser) routeKeys(at *yaml.Node, f map[string]*yaml.Node, m *model.Model, r *model.Route, what string, ordinal int,
	defaults map[int][]model.KeySource, source keySourceFunc, d routeKeysOf) bool {
	own := map[int][]model.KeySource{}
	if v := f["keys"]; v != nil {
		own = p.keyMap(v, m, what+": keys", source)
	}
	valid := true
	for _, ri := range r.Rules {
		rule := m.Rules[ri]
		if rule.KeyType == "" {
			r.Keys = append(r.Keys, nil)
			r.MissingBodies = append(r.MissingBodies, "")
			continue
		}
		srcs, ok := own[ri]
		if !ok {
			srcs, ok = defaults[ri]
		}
		if len(srcs) == 0 && ok { // its sources were refused, each with its reason
			valid = false
			continue
		}
		if len(srcs) == 0 {
			p.errorf(at, "%s: rule %q is keyed (%s) but has no key source; add it under %s: keys or the %s's keys, such as %s: [func:UserID]", what, rule.Name, rule.KeyType, d.door, d.unit, rule.Name)
			valid = false
			continue
		}
		for _, s := range srcs {
			if d.check != nil && !d.check(rule, s) {
				valid = false
			}
			if s.Kind == "route" && !routeFits(ordinal, rule.FieldType(s.Field)) {
				p.errorf(at, "%s: %s number %d does not fit rule %q's %s key", what, d.unit, ordinal, rule.Name, rule.FieldType(s.Field))
				valid = false
			}
		}
		if d.adapt != nil {
			srcs = d.adapt(srcs)
		}
		r.Keys = append(r.Keys, srcs)
		r.MissingBodies = append(r.MissingBodies, d.missing(rule, doors[d.door].from(rule, srcs)))
	}
	return valid
}

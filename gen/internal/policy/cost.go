package policy

import (
	"net/http"
	"strings"

	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/verdict"
	"go.yaml.in/yaml/v3"
)

// costFrom is where a door reads a declared cost from: the spelling its
// from: takes (hint), what it calls a request (noun), and read, which returns
// the kind and name of a source, or why from: names none.
type costFrom struct {
	hint, noun string
	read       func(kind, name string) (string, string, string)
}

// httpCost reads an HTTP route's declared cost from a header or the query.
var httpCost = costFrom{hint: "header:Name or query:name", noun: "request", read: func(kind, name string) (string, string, string) {
	switch {
	case kind == "header" && validHeaderName(name):
		return kind, http.CanonicalHeaderKey(name), ""
	case kind == "query" && name != "":
		return kind, name, ""
	}
	return "", "", "use header:Name or query:name"
}}

// routeCost reads a route's (or entry's) cost: a number, or {from, default,
// max}, from reading where a declared one comes from.
func (p *parser) routeCost(n *yaml.Node, r *model.Route, m *model.Model, what string, from costFrom) bool {
	if n.Kind == yaml.ScalarNode {
		c, ok := p.int(n, what, "cost", 1)
		if ok && !p.costAdmitted(n, m, r, what, "cost", c) {
			return false
		}
		if ok {
			r.CostKind, r.CostFixed = "fixed", c
		}
		return ok
	}
	f, _ := p.mapping(n, costFields, what+": cost")
	src, def, most := f["from"], f["default"], f["max"]
	if src == nil || def == nil || most == nil {
		p.errorf(n, "%s: cost needs from (%s), default (for an absent or unreadable value) and max (the most a %s may declare)", what, from.hint, from.noun)
		return false
	}
	kind, name, _ := strings.Cut(src.Value, ":")
	kind, name, msg := from.read(kind, name)
	if msg != "" {
		p.errorf(src, "%s: cost from %q: %s", what, src.Value, msg)
		return false
	}
	r.CostKind, r.CostName = kind, name
	d, ok1 := p.int(def, what, "cost default", 1)
	x, ok2 := p.int(most, what, "cost max", 1)
	if !ok1 || !ok2 {
		return false
	}
	if d > x {
		p.errorf(def, "%s: cost default %d is above max %d", what, d, x)
		return false
	}
	if !p.costAdmitted(def, m, r, what, "cost default", d) {
		return false
	}
	if top, plan := routeBurst(m, r, false); x > top {
		p.errorf(most, "%s: cost max %d: no %s can cost more than %d here (the burst%s), so a declared cost above it is refused for good, not limited; lower max to %d", what, x, from.noun, top, plan, top)
		return false
	}
	r.CostFixed, r.CostMax = d, x
	return true
}

// costAdmitted reports whether c, a cost every request (or every request that
// declares none) of route r pays, is within the burst of each rule it checks
// on every plan; otherwise it says so at n. Above a burst such a request is
// refused for good (400), never admitted: a policy mistake, refused as a rule's
// own cost above its burst is.
func (p *parser) costAdmitted(n *yaml.Node, m *model.Model, r *model.Route, what, name string, c int64) bool {
	least, plan := routeBurst(m, r, true)
	if c > least {
		p.errorf(n, "%s: %s %d is above the burst %d%s: every such request would be refused for good, never admitted; lower the %s to at most %d or raise the burst", what, name, c, least, plan, name, least)
		return false
	}
	return true
}

// routeBurst is the most a request to route r can cost and still pass: the
// least burst of the rules it checks, on the plan where that is least (least)
// or most (!least), with words naming the rule and plan.
func routeBurst(m *model.Model, r *model.Route, least bool) (int64, string) {
	plans := max(len(m.Plans), 1)
	var best int64 = -1
	words := ""
	for pl := range plans {
		var b int64 = -1
		w := ""
		for _, ri := range r.Rules {
			rule := m.Rules[ri]
			l := rule.Limits[0]
			planned := rule.Planned && pl < len(rule.Limits)
			if planned {
				l = rule.Limits[pl]
			}
			if b < 0 || l.Burst < b {
				b, w = l.Burst, " of rule "+rule.Name
				if planned {
					w += " on plan " + m.Plans[pl].Name
				}
			}
		}
		if best < 0 || least && b < best || !least && b > best {
			best, words = b, w
		}
	}
	return best, words
}

// routeSettle reads a route's (a gRPC entry's) settle: where its actual
// cost is read after the handler returns, "header:Name" or "trailer:Name"
// (both read the response's header map then, where a trailer is too), or
// for door grpc "trailer:name" (its trailer metadata). The route's cost is
// the estimate, so it must have one. A bucket gives a difference back or
// owes it; a window gives back from what it counted at the check, or counts
// an excess; a shared rule settles on its store.
func (p *parser) routeSettle(n, cost *yaml.Node, r *model.Route, m *model.Model, what, door string) bool {
	kind, name, _ := strings.Cut(n.Value, ":")
	switch {
	case n.Kind == yaml.ScalarNode && n.Value == "context":
		r.SettleContext = true // the handler calls verdict.ReportCost
	case door == "grpc":
		key, msg := metadataKey(name)
		if n.Kind != yaml.ScalarNode || kind != "trailer" || msg != "" {
			p.errorf(n, "%s: settle %q: say where the actual cost is read when the handler returns, trailer:name (trailer metadata the handler sets with grpc.SetTrailer), or context (the handler calls verdict.ReportCost)", what, n.Value)
			return false
		}
		name = key
	case n.Kind != yaml.ScalarNode || kind != "header" && kind != "trailer" || !validHeaderName(name):
		p.errorf(n, "%s: settle %q: say where the actual cost is read when the handler returns, header:Name or trailer:Name (a response header or trailer the handler sets), or context (the handler calls verdict.ReportCost)", what, n.Value)
		return false
	default:
		name = http.CanonicalHeaderKey(name)
	}
	if r.Mode == "Shadow" {
		p.errorf(n, "%s: settle on a shadow route: a request its rule denies goes on having taken nothing, and settling it would give back tokens it never took; enforce the route, or drop settle while it is in shadow", what)
		return false
	}
	if cost == nil {
		p.errorf(n, "%s: settle needs the route's cost: the estimate a request is admitted at (a number, or {from, default, max}), settled when its actual is known", what)
		return false
	}
	windows := 0
	for _, ri := range r.Rules {
		if x := m.Rules[ri]; x.Shared && x.IsWindow() {
			windows++
		}
	}
	if windows > verdict.MaxWindowMarks {
		p.errorf(n, "%s: settle on a route of %d shared window rules: a settlement gives back to at most %d of them (what each store counted is carried from the check to the settlement, verdict.MaxWindowMarks); split the tier", what, windows, verdict.MaxWindowMarks)
		return false
	}
	if !r.SettleContext {
		r.SettleName = name
	}
	return true
}

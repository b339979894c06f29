package emit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

// vd is a name of package verdict: what every door shares.
func vd(name string) *jen.Statement { return jen.Qual(verdictPath, name) }

// resField is a field of a route's verdict.Result and its value. The Result
// is declared and then set field by field: a composite literal around the
// check's call was built aside and copied whole (152 bytes, a tenth of an
// allowed request's overhead).
type resField struct {
	name string
	v    jen.Code
}

func setField(name string, v jen.Code) resField { return resField{name, v} }

// door is what a front door's generated checks differ in: the HTTP
// middleware's routes and the gRPC interceptors' method entries are made by
// the same code (emitRoute, emitKey, emitSeries, emitPlanOf).
type door struct {
	recv, typ string        // the receiver and its type: m *Middleware, g *GRPC
	prefix    string        // of the tables' names: http, grpc
	routes    []model.Route // the routes, or method entries
	plan      model.PlanSource
	params    []jen.Code // an entry's parameters after the receiver
	result    jen.Code   // an entry's result type
	ctx       jen.Code   // the call's context, for a shared rule's store
	req       jen.Code   // what hooks and the plan take: r, ctx
	respond   []jen.Code // Respond's arguments before mode
	reject    []jen.Code // Reject's arguments before mode
	missing   jen.Code   // the status of a call without a key
	tooCostly jen.Code   // the status of a declared cost above the source's maximum
	entryName func(int) string
	ip        jen.Code // the ip key source's call
	// source is a named key source's expression, (value, found) or (key, ok),
	// for header, query, path and metadata sources.
	source func(model.KeySource) jen.Code
	cost   func(model.Route) jen.Code // (cost, status) of a declared cost
	// message makes an entry's check of one of its stream's messages: it
	// returns the decision unanswered (verdict.Result, the jitter's key)
	// for limitgrpc.CountMessages to answer, or the status of a refusal.
	message bool
	// nowParam: the check's now is a parameter (the request's one clock
	// read, for all its descriptors), not read in the check.
	nowParam bool
	now      string // the receiver's method that reads the clock once
}

func (d *door) r() *jen.Statement { return jen.Id(d.recv) }

// acquireName is the name of route (or entry) i's acquisition of its slots.
func (d *door) acquireName(i int) string {
	if d.prefix == "http" {
		return "acquire" + strconv.Itoa(i+1)
	}
	return "acquireEntry" + strconv.Itoa(i+1)
}

// seriesVar is the name of route i's series by RuleName (a tier's route).
func (d *door) seriesVar(i int) string {
	if d.prefix == "http" {
		return "httpSeriesRoute" + strconv.Itoa(i+1)
	}
	return d.prefix + "SeriesEntry" + strconv.Itoa(i+1)
}

func req() *jen.Statement { return jen.Op("*").Qual("net/http", "Request") }

// seriesBases is, by route, the index of its first series in the Counters:
// a route checked (not Off) has a series for each rule it checks, in the
// order of its Rules; -1 for an Off route.
func seriesBases(routes []model.Route) []int {
	bases := make([]int, len(routes))
	n := 0
	for i, r := range routes {
		if r.Mode == "Off" {
			bases[i] = -1
			continue
		}
		bases[i] = n
		n += len(r.Rules) + len(r.Slots)
	}
	return bases
}

// emitSeries is httpSeries, the Counters' series (a route, its tier, a rule),
// and for each route that checks a tier its series by RuleName.
func emitSeries(m *model.Model, d *door, bases []int) jen.Code {
	var lits []jen.Code
	g := jen.Null()
	for i, r := range d.routes {
		if bases[i] < 0 {
			continue
		}
		tier := ""
		if r.Tier >= 0 {
			tier = m.Tiers[r.Tier].Name
		}
		var byRule []jen.Code
		for j, ri := range r.Rules {
			kv := []jen.Code{field("Route", jen.Lit(r.Pattern))}
			if tier != "" {
				kv = append(kv, field("Tier", jen.Lit(tier)))
			}
			kv = append(kv, field("Rule", jen.Lit(m.Rules[ri].Name)))
			lits = append(lits, jen.Values(kv...))
			byRule = append(byRule, jen.Id(m.Rules[ri].RuleConst()).Op(":").Lit(bases[i]+j))
		}
		for k, sl := range r.Slots { // after the rate rules: what the route acquires
			kv := []jen.Code{field("Route", jen.Lit(r.Pattern))}
			if tier != "" {
				kv = append(kv, field("Tier", jen.Lit(tier)))
			}
			kv = append(kv, field("Rule", jen.Lit(m.Rules[sl.Rule].Name)))
			lits = append(lits, jen.Values(kv...))
			byRule = append(byRule, jen.Id(m.Rules[sl.Rule].RuleConst()).Op(":").Lit(bases[i]+len(r.Rules)+k))
		}
		if r.Tier >= 0 && checkRoute(r) { // what its check reads
			g.Add(jen.Comment(fmt.Sprintf("%s are the series of %s's rules in the Counters, by RuleName.", d.seriesVar(i), r.Pattern)).Line().
				Var().Id(d.seriesVar(i)).Op("=").Index(jen.Op("...")).Int().Values(byRule...).Line().Line())
		}
	}
	what := "middleware's Counters: each route checked"
	if d.prefix != "http" {
		what = "interceptors' Counters: each method entry checked"
	}
	return jen.Line().
		Comment(d.prefix + "Series are the rows of the " + what + ", the tier it checks, and").Line().
		Comment("each of its rules, in policy order (a decision's Series is its index here).").Line().
		Var().Id(d.prefix + "Series").Op("=").Index(jen.Op("...")).Add(vd("Series")).Values(lits...).Line().Line().
		Add(g)
}

// emitRouteLists is every route's (or method entry's) RateLimit-Policy value
// per plan.
func emitRouteLists(m *model.Model, d *door) jen.Code {
	if !anyChecked(d.routes, checkRoute) {
		return jen.Null() // every route Off, or of an in-flight rule: no check reads them
	}
	dim := max(len(m.Plans), 1)
	var lists []jen.Code
	for _, r := range d.routes {
		var perPlan []jen.Code
		for pl := range dim {
			perPlan = append(perPlan, jen.Lit(r.PolicyLists[min(pl, len(r.PolicyLists)-1)]))
		}
		lists = append(lists, jen.Values(perPlan...))
	}
	what := "routes' RateLimit-Policy values, by route"
	if d.prefix != "http" {
		what = "method entries' RateLimit-Policy values, by entry"
	}
	return jen.Line().
		Comment(d.prefix + "Routes are the " + what + " (in policy order) and plan.").Line().
		Var().Id(d.prefix + "Routes").Op("=").Index(jen.Op("...")).Index(plansDim(m)).String().Values(lists...).Line()
}

// fieldLimit is the limit rule r's Policy describes for its j-th limit: its
// LimitVar, or for a window the interval bucket of its numbers
// (model.Limit.FieldLimit).
func fieldLimit(r model.Rule, j int) jen.Code {
	if !r.IsWindow() {
		return limitRef(r, j)
	}
	l := r.Limits[j]
	l.Window, l.Interval, l.Burst = false, true, l.Tokens
	return limitValue(l)
}

// policyVar is the variable holding rule r's Policy for its j-th limit.
func policyVar(m *model.Model, r model.Rule, j int) string {
	if r.Planned {
		return "httpPolicy" + r.GoName + m.Plans[j].GoName
	}
	return "httpPolicy" + r.GoName
}

// limitValue is an atomicbucket.Limit literal.
func limitValue(l model.Limit) jen.Code {
	if l.Window {
		panic("emit: a window rule's limit as a token bucket's")
	}
	refill := "Greedy"
	if l.Interval {
		refill = "Interval"
	}
	kv := []jen.Code{
		field("Tokens", lit(l.Tokens)),
		field("Period", duration(l.PeriodNs)),
		field("Burst", lit(l.Burst)),
		field("Refill", rt(refill)),
	}
	if l.Aligned {
		kv = append(kv, field("Aligned", jen.True()))
	}
	if l.InitialSet {
		kv = append(kv, field("Initial", lit(l.Initial)), field("InitialSet", jen.True()))
	}
	return rt("Limit").Add(fields(kv...))
}

// hookUses lists, for each hook, the rules whose keys it gives.
func hookUses(m *model.Model, routes []model.Route, name string) []string {
	var out []string
	for _, r := range routes {
		for i, srcs := range r.Keys {
			for _, s := range srcs {
				n := m.Rules[r.Rules[i]].Name
				if s.Kind == "func" && s.Name == name && !contains(out, n) {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// keyType facts for integer key sources.
func intBits(t string) (unsigned bool, bits int) {
	unsigned = strings.HasPrefix(t, "uint")
	n := strings.TrimPrefix(strings.TrimPrefix(t, "u"), "int")
	if n == "" {
		return unsigned, 0
	}
	bits, _ = strconv.Atoi(n)
	return unsigned, bits
}

// emitKey is the statements that set k (and ok) from a rule's key sources, in
// order, for a key of type t.
func emitKey(d *door, k, ok string, t string, srcs []model.KeySource, ord int, pattern string) []jen.Code {
	if len(srcs) == 1 && t == "string" { // one source whose call gives (key, ok): declared by it
		switch s := srcs[0]; s.Kind {
		case "ip":
			return []jen.Code{jen.List(jen.Id(k), jen.Id(ok)).Op(":=").Add(d.ip)}
		case "header", "query", "path", "metadata":
			return []jen.Code{jen.List(jen.Id(k), jen.Id(ok)).Op(":=").Add(d.source(s))}
		}
	}
	var out []jen.Code
	out = append(out, jen.Var().Id(k).Id(t), jen.Var().Id(ok).Bool())
	for i, s := range srcs {
		var set []jen.Code
		var src jen.Code
		switch s.Kind {
		case "ip":
			set = append(set, jen.List(jen.Id(k), jen.Id(ok)).Op("=").Add(d.ip))
		case "pattern":
			set = append(set, jen.List(jen.Id(k), jen.Id(ok)).Op("=").List(jen.Lit(pattern), jen.True()))
		case "method":
			set = append(set, jen.List(jen.Id(k), jen.Id(ok)).Op("=").List(jen.Id("method"), jen.True()))
		case "route":
			set = append(set, jen.List(jen.Id(k), jen.Id(ok)).Op("=").List(jen.Lit(ord), jen.True()))
		case "func":
			set = append(set, jen.List(jen.Id(k), jen.Id(ok)).Op("=").Add(d.r()).Dot("hooks").Dot(s.Name).Call(d.req))
			if t == "string" {
				// A hook's key is held to what the other sources' are: an
				// empty key, or one longer than MaxKeyLen, is none.
				set = append(set, jen.Id(ok).Op("=").Id(ok).Op("&&").Id(k).Op("!=").Lit("").Op("&&").Len(jen.Id(k)).Op("<=").Add(vd("MaxKeyLen")))
			}
		default:
			src = d.source(s)
		}
		if src != nil {
			if t == "string" {
				set = append(set, jen.List(jen.Id(k), jen.Id(ok)).Op("=").Add(src))
			} else {
				unsigned, bits := intBits(t)
				parse, wide := "IntKey", "int64"
				if unsigned {
					parse, wide = "UintKey", "uint64"
				}
				conv := jen.Id(k).Op("=").Id(t).Call(jen.Id("n"))
				if t == wide {
					conv = jen.Id(k).Op("=").Id("n")
				}
				set = append(set, jen.Block(
					jen.List(jen.Id("v"), jen.Id("found")).Op(":=").Add(src),
					jen.Var().Id("n").Id(wide),
					jen.List(jen.Id("n"), jen.Id(ok)).Op("=").Add(gi(parse)).Call(jen.Id("v"), jen.Id("found"), jen.Lit(bits)),
					conv,
				))
			}
		}
		if i == 0 {
			out = append(out, set...)
		} else {
			out = append(out, jen.If(jen.Op("!").Id(ok)).Block(set...))
		}
	}
	return out
}

// emitRoute is the check of one route (or method entry) i of d, whose first
// series in the Counters is base.
func emitRoute(m *model.Model, d *door, i int, r model.Route, base int) jen.Code {
	mode := vd(r.Mode)
	recv := d.r
	// A settled route's check returns its mark for the settlement
	// (verdict.Mark): the time its local rules read.
	marked := markedRoute(d, r)
	event := func(rule int, outcome string, cost jen.Code) jen.Code {
		kv := []jen.Code{
			field("Route", jen.Lit(r.Pattern)),
		}
		if r.Tier >= 0 {
			kv = append(kv, field("Tier", jen.Lit(m.Tiers[r.Tier].Name)))
		}
		kv = append(kv,
			field("Rule", jen.Lit(m.Rules[rule].Name)),
			field("RuleIndex", jen.Int().Call(jen.Id(m.Rules[rule].RuleConst()))),
			field("Series", jen.Lit(base+slices.Index(r.Rules, rule))),
			field("Outcome", vd(outcome)),
		)
		if cost != nil {
			kv = append(kv, field("Cost", cost))
		}
		return vd("Event").Values(kv...)
	}
	reject := func(status, body jen.Code, ev jen.Code) jen.Code {
		args := append(slices.Clone(d.reject), mode, status, body, ev)
		if d.prefix == "rls" { // a descriptor's status has neither code nor message
			args = append(slices.Clone(d.reject), mode, ev)
		}
		switch {
		case d.message:
			return jen.Return(vd("Result").Values(), jen.Lit(""), recv().Dot("Config").Dot("Reject").Call(args...))
		case marked && d.prefix == "http":
			return jen.Return(recv().Dot("Config").Dot("Reject").Call(args...), vd("Mark").Values())
		case marked:
			return jen.Return(vd("Mark").Values(), recv().Dot("Config").Dot("Reject").Call(args...))
		}
		return jen.Return(recv().Dot("Config").Dot("Reject").Call(args...))
	}
	var body []jen.Code
	// Keys, in rule order; the first key seeds the jitter.
	var keyArgs []jen.Code
	seed := []resField{}
	keyArg := jen.Lit("")
	compositeKey := "" // the first key, when it is composite: its text form, built only when read
	for j, ri := range r.Rules {
		rule := m.Rules[ri]
		if rule.KeyType == "" {
			continue
		}
		read, k := emitRuleKey(m, d, r, j, reject(d.missing, jen.Lit(r.MissingBodies[j]), event(ri, "MissingKey", nil)))
		body = append(body, read...)
		keyArgs = append(keyArgs, jen.Id(k))
		if len(seed) == 0 && len(keyArgs) == 1 {
			switch {
			case rule.Composite():
				compositeKey, keyArg = k, jen.Id("key")
			case rule.KeyType == "string":
				keyArg = jen.Id(k)
			default:
				seed = append(seed, setField("SeedInt", jen.Uint64().Call(jen.Id(k))))
			}
		}
	}
	planned := false
	for _, ri := range r.Rules {
		planned = planned || m.Rules[ri].Planned
	}
	// Rules that do not differ by plan have the same numbers in every plan's
	// column of the tables: the route reads column 0 and asks for no plan.
	planIdx := jen.Lit(0)
	if planned {
		body = append(body, jen.Id("plan").Op(":=").Add(recv()).Dot("plan").Call(d.req))
		planIdx = jen.Id("plan")
	}
	// The cost.
	firstRule := r.Rules[0]
	switch r.CostKind {
	case "", "hits": // the rule's cost, or (hits: an RLS descriptor's) the cost parameter
	case "fixed":
		body = append(body, jen.Id("cost").Op(":=").Add(jen.Int64().Call(lit(r.CostFixed))))
	default: // declared by the request: header, query, metadata
		body = append(body,
			jen.List(jen.Id("cost"), jen.Id("costOK")).Op(":=").Add(d.cost(r)),
			jen.If(jen.Op("!").Id("costOK")).Block(reject(d.tooCostly, jen.Lit(r.CostBody), event(firstRule, "TooCostly", jen.Id("cost")))))
	}
	sharedRoute := r.Rule >= 0 && m.Rules[r.Rule].Shared || r.Tier >= 0 && m.Tiers[r.Tier].Shared
	mark := vd("Mark").Values()
	if !sharedRoute && !d.nowParam { // a shared rule or tier is decided on the store's clock
		body = append(body, jen.Id("now").Op(":=").Add(recv()).Dot(d.now).Call())
		mark = vd("Mark").Values(jen.Dict{jen.Id("At"): jen.Id("now")})
	}
	routes := d.prefix + "Routes"
	res := []resField{}
	if r.Rule >= 0 {
		rule := m.Rules[r.Rule]
		if r.CostKind == "" {
			body = append(body, jen.Id("cost").Op(":=").Id("httpCosts").Index(jen.Id(rule.RuleConst())).Index(planIdx))
		}
		var args []jen.Code
		if rule.Shared {
			args = append(args, d.ctx)
		}
		if rule.Planned {
			args = append(args, jen.Id("plan"))
		}
		args = append(args, keyArgs...)
		decision := recv().Dot("limits").Dot(rule.GoName).Dot("AllowNAt").Call(append(args, jen.Id("now"), jen.Id("cost"))...)
		switch {
		case r.Report && rule.Shared:
			// Usage reported after the response: owed on the store as debt,
			// always OK; a store that cannot take it is a degraded answer.
			charge := []jen.Code{jen.Lit(0), jen.Id("cost")}
			if rule.IsWindow() { // a charge: no admission to give back to
				charge = append([]jen.Code{vd("WindowMark").Values()}, charge...)
			}
			body = append(body,
				jen.List(jen.Id("_"), jen.Id("serr")).Op(":=").Add(recv()).Dot("limits").Dot(rule.GoName).Dot("Settle").Call(append(slices.Clone(args), charge...)...)) // args begin with the context
			decision = rt("Decision").Values(jen.Dict{jen.Id("Allowed"): jen.True()})
			res = append(res, setField("Degraded", jen.Id("serr").Op("!=").Nil()), setField("Err", jen.Id("serr")))
		case r.Report:
			// Usage reported after the response: owed as debt (the
			// bucket may go below empty, bounded), always OK, with what is
			// left.
			limiter := recv().Dot("limits").Dot(rule.GoName)
			at := []jen.Code{jen.Id("now")}
			if rule.IsWindow() { // a charge: admitted now, nothing to give back
				at = append(at, jen.Id("now"))
			}
			body = append(body,
				limiter.Clone().Dot("SettleAt").Call(append(append(slices.Clone(args), at...), jen.Lit(0), jen.Id("cost"))...),
				jen.Id("rd").Op(":=").Add(limiter.Clone()).Dot("PeekAt").Call(append(slices.Clone(args), jen.Id("now"), jen.Lit(0))...),
				jen.List(jen.Id("rd").Dot("Allowed"), jen.Id("rd").Dot("RetryAfter")).Op("=").List(jen.True(), jen.Lit(0)),
			)
			decision = jen.Id("rd")
		}
		switch {
		case rule.Shared && !r.Report && marked && rule.IsWindow():
			// A settled route's window: where the store counted the
			// request, for its settlement to give back from.
			body = append(body, jen.List(jen.Id("sr"), jen.Id("wm")).Op(":=").Add(recv()).Dot("limits").Dot(rule.GoName).Dot("AllowNMark").Call(append(args, jen.Id("cost"))...))
			mark = vd("Mark").Values(jen.Dict{jen.Id("Windows"): jen.Op("&").Index(vd("MaxWindowMarks")).Add(vd("WindowMark")).Values(jen.Id("wm"))})
		case rule.Shared && !r.Report:
			// The store decides, or the rule's on_failure setting when it
			// cannot: the Result says which, for the observers.
			body = append(body, jen.Id("sr").Op(":=").Add(recv()).Dot("limits").Dot(rule.GoName).Dot("AllowN").Call(append(args, jen.Id("cost"))...))
		}
		if rule.Shared && !r.Report {
			decision = jen.Id("sr").Dot("Decision")
			res = append(res, setField("Degraded", jen.Id("sr").Dot("Degraded")), setField("Outage", jen.Id("sr").Dot("Outage")), setField("Err", jen.Id("sr").Dot("Err")))
		}
		res = append(res,
			setField("Decision", decision),
			setField("Policy", jen.Id("httpPolicies").Index(jen.Id(rule.RuleConst())).Index(planIdx)),
			setField("Policies", jen.Id(routes).Index(jen.Lit(i)).Index(planIdx)),
			setField("Cost", jen.Id("cost")),
			setField("Route", jen.Lit(r.Pattern)),
			setField("Rule", jen.Int().Call(jen.Id(rule.RuleConst()))),
			setField("Series", jen.Lit(base)),
		)
	} else {
		t := m.Tiers[r.Tier]
		var args []jen.Code
		if planned {
			args = append(args, jen.Id("plan"))
		}
		args = append(args, keyArgs...)
		core := recv().Dot("limits").Dot(t.CoreName())
		if t.Shared {
			core = recv().Dot("limits").Dot(t.SharedCoreName())
			args = append([]jen.Code{d.ctx}, args...)
		} else {
			args = append(args, jen.Id("now"))
		}
		if r.CostKind == "" {
			args = append(args, jen.Lit(0), jen.True())
		} else {
			args = append(args, jen.Id("cost"), jen.False())
		}
		call := core.Call(args...)
		if t.Shared {
			body = append(body, jen.Id("tr").Op(":=").Add(call))
			call = jen.Id("tr").Dot("TierDecision")
			mark = jen.Id("tr").Dot("Mark")
			res = append(res, setField("Degraded", jen.Id("tr").Dot("Degraded")), setField("Outage", jen.Id("tr").Dot("Outage")), setField("Err", jen.Id("tr").Dot("Err")))
		}
		body = append(body, jen.Id("td").Op(":=").Add(call))
		if r.CostKind == "" {
			body = append(body, jen.Id("cost").Op(":=").Id("httpCosts").Index(jen.Id("td").Dot("Rule")).Index(planIdx))
		}
		res = append(res,
			setField("Decision", jen.Id("td").Dot("Decision")),
			setField("Policy", jen.Id("httpPolicies").Index(jen.Id("td").Dot("Rule")).Index(planIdx)),
			setField("Policies", jen.Id(routes).Index(jen.Lit(i)).Index(planIdx)),
			setField("Cost", jen.Id("cost")),
			setField("Route", jen.Lit(r.Pattern)),
			setField("Tier", jen.Lit(t.Name)),
			setField("Rule", jen.Int().Call(jen.Id("td").Dot("Rule"))),
			setField("Series", jen.Id(d.seriesVar(i)).Index(jen.Id("td").Dot("Rule"))),
		)
	}
	res = append(res, seed...)
	body = append(body,
		jen.Var().Id("res").Add(vd("Result")),
	)
	for _, f := range res {
		body = append(body, jen.Id("res").Dot(f.name).Op("=").Add(f.v))
	}
	body = append(body, emitInForce(m, r, recv, planIdx)...)
	if compositeKey != "" {
		// A composite key's text form is what a denial's jitter and the
		// violation log read (every outcome but Allowed): built for those
		// only, so that an admitted request allocates nothing.
		body = append(body,
			jen.Id("key").Op(":=").Lit(""),
			jen.If(jen.Op("!").Id("res").Dot("Decision").Dot("Allowed").Op("||").Id("res").Dot("Degraded")).Block(
				jen.Id("key").Op("=").Id(compositeKey).Dot("String").Call(),
			),
		)
	}
	respond := recv().Dot("Config").Dot("Respond").Call(append(slices.Clone(d.respond), mode, jen.Op("&").Id("res"), keyArg)...)
	switch {
	case d.message:
		body = append(body, jen.Return(jen.Id("res"), keyArg, jen.Nil()))
	case marked && d.prefix == "http":
		body = append(body, jen.Return(respond, mark))
	case marked:
		body = append(body, jen.Return(mark, respond))
	default:
		body = append(body, jen.Return(respond))
	}
	what := "rule " + m.Rules[firstRule].Name
	if r.Tier >= 0 {
		what = "tier " + m.Tiers[r.Tier].Name
	}
	doc := fmt.Sprintf("%s checks %s (%s, %s) and reports whether the request may go on.", d.entryName(i), r.Pattern, what, strings.ToLower(r.Mode))
	if d.prefix != "http" {
		doc = fmt.Sprintf("%s checks a call of %s (%s, %s) and returns the status that ends it, or nil.", d.entryName(i), r.Pattern, what, strings.ToLower(r.Mode))
	}
	switch {
	case d.prefix == "rls" && r.Report:
		doc = fmt.Sprintf("%s charges a usage report of %s (%s) at cost, owed as debt, and returns an allowed decision for limitrls.Config.Serve to answer (OK, with what is left), with the key that seeds its jitter, or the error that answers it when it holds no key.", d.entryName(i), r.Pattern, what)
	case d.prefix == "rls":
		doc = fmt.Sprintf("%s checks a descriptor of %s (%s, %s) at cost and returns the decision for limitrls.Config.Serve to answer, with the key that seeds its jitter, or the error that answers it when it holds no key.", d.entryName(i), r.Pattern, what, strings.ToLower(r.Mode))
	case d.message:
		doc = fmt.Sprintf("%s checks one message of a stream of %s (%s, %s, %d a message) and returns the decision for limitgrpc.CountMessages to answer, with the key that seeds its jitter, or the status that ends the stream when it has no key.", d.entryName(i), r.Pattern, what, strings.ToLower(r.Mode), r.CostFixed)
	}
	params := d.params
	if d.prefix == "http" && !readsPath(r.Keys) { // the path is read for its wildcards only
		params = params[:len(params)-1]
	}
	result := d.result
	switch {
	case marked && d.prefix == "http":
		result = jen.Params(jen.Bool(), vd("Mark"))
		doc = strings.TrimSuffix(doc, ".") + ", with the mark its settlement reads."
	case marked:
		result = jen.Params(vd("Mark"), jen.Error())
		doc = strings.TrimSuffix(doc, ".") + ", with the mark its settlement reads."
	}
	return jen.Line().
		Add(comment(doc)).
		Func().Params(recv().Op("*").Id(d.typ)).Id(d.entryName(i)).Params(params...).Add(result).Block(body...).Line()
}

// markedRoute says whether route (entry) r of d is settled, its check
// returning the mark its settlement reads (verdict.Mark).
func markedRoute(d *door, r model.Route) bool {
	return settleRoute(r) && !d.message && (d.prefix == "http" || d.prefix == "grpc")
}

// readsPath says whether one of keys (a route's, per rule) is read from its
// path's wildcards.
func readsPath(keys [][]model.KeySource) bool {
	for _, srcs := range keys {
		for _, s := range srcs {
			if s.Kind == "path" {
				return true
			}
		}
	}
	return false
}

// emitPlanOf is the plan method of d's type: the plan source's.
func emitPlanOf(m *model.Model, d *door) jen.Code {
	ps := d.plan
	def := jen.Id(m.Plans[ps.Default].GoName)
	var body []jen.Code
	switch ps.Kind {
	case "func":
		body = append(body,
			jen.If(jen.List(jen.Id("p"), jen.Id("ok")).Op(":=").Add(d.r()).Dot("hooks").Dot(ps.Name).Call(d.req), jen.Id("ok").Op("&&").Id("p").Op("<").Id("numPlans")).Block(jen.Return(jen.Id("p"))))
	case "entry": // an RLS descriptor's entry of that key, wherever it stands
		body = append(body, jen.For(jen.List(jen.Id("_"), jen.Id("e")).Op(":=").Range().Id("en")).Block(
			jen.If(jen.Id("e").Dot("Key").Op("==").Lit(ps.Name)).Block(
				jen.If(jen.List(jen.Id("p"), jen.Id("ok")).Op(":=").Id("ParsePlan").Call(jen.Id("e").Dot("Value")), jen.Id("ok")).Block(jen.Return(jen.Id("p"))),
				jen.Break(),
			),
		))
	case "header", "metadata":
		src := lh("HeaderKey").Call(jen.Id("r"), jen.Lit(ps.Name))
		if ps.Kind == "metadata" {
			src = jen.Qual(grpcPath, "MetadataKey").Call(jen.Id("ctx"), jen.Lit(ps.Name))
		}
		body = append(body,
			jen.If(jen.List(jen.Id("v"), jen.Id("ok")).Op(":=").Add(src), jen.Id("ok")).Block(
				jen.If(jen.List(jen.Id("p"), jen.Id("ok")).Op(":=").Id("ParsePlan").Call(jen.Id("v")), jen.Id("ok")).Block(jen.Return(jen.Id("p")))))
	}
	body = append(body, jen.Return(def))
	param := jen.Id("r").Add(req())
	what := "request"
	switch d.prefix {
	case "grpc":
		param, what = jen.Id("ctx").Qual("context", "Context"), "call"
	case "rls":
		param, what = jen.Id("en").Index().Op("*").Qual(rlsProtos, "RateLimitDescriptor_Entry"), "descriptor"
	}
	return jen.Line().
		Comment(fmt.Sprintf("plan is the %s's plan, from %s:%s, or %s.", what, ps.Kind, ps.Name, m.Plans[ps.Default].Name)).Line().
		Func().Params(d.r().Op("*").Id(d.typ)).Id("plan").Params(param).Id("Plan").Block(body...).Line()
}

// emitInForce is the code that makes a route's fields describe the numbers
// in force when a rule's have changed at run time (SetNumbers,
// SetKeyNumbers): each local rule is asked for its rule in force (nil, one
// atomic load, while its numbers never changed), and only when one has
// changed are the Policy and the RateLimit-Policy value replaced. A shared
// rule answers from its process-local limiter, which every change of its
// numbers keeps equal to the store's.
func emitInForce(m *model.Model, r model.Route, recv func() *jen.Statement, planIdx jen.Code) []jen.Code {
	type part struct {
		rule model.Rule
		rf   string
		call jen.Code
	}
	var parts []part
	for j, ri := range r.Rules {
		rule := m.Rules[ri]
		if rule.IsWindow() {
			continue // a window's numbers never change
		}
		var args []jen.Code
		if rule.Planned {
			args = append(args, jen.Id("plan"))
		}
		if rule.KeyType != "" {
			args = append(args, jen.Id("k"+strconv.Itoa(j)))
		}
		parts = append(parts, part{rule, "rf" + strconv.Itoa(j), recv().Dot("limits").Dot(rule.GoName).Dot("ruleInForce").Call(args...)})
	}
	if len(parts) == 0 {
		return nil
	}
	if r.Rule >= 0 {
		p := parts[0]
		return []jen.Code{jen.If(jen.Id(p.rf).Op(":=").Add(p.call), jen.Id(p.rf).Op("!=").Nil()).Block(
			jen.Id("res").Dot("Policy").Op("=").Add(gi("InForce")).Call(jen.Id("res").Dot("Policy"), jen.Id(p.rf)),
			jen.Id("res").Dot("Policies").Op("=").Add(gi("InForceList")).Call(jen.Id("res").Dot("Policy")),
		)}
	}
	names, calls := []jen.Code{}, []jen.Code{}
	var changed *jen.Statement
	for _, p := range parts {
		names, calls = append(names, jen.Id(p.rf)), append(calls, p.call)
		c := jen.Id(p.rf).Op("!=").Nil()
		if changed == nil {
			changed = c
		} else {
			changed = changed.Op("||").Add(c)
		}
	}
	// Every rule of the tier, in order, for the list; the local ones in force.
	var pols, cases []jen.Code
	for j, ri := range r.Rules {
		rule := m.Rules[ri]
		base := jen.Id("httpPolicies").Index(jen.Id(rule.RuleConst())).Index(planIdx)
		pj := "p" + strconv.Itoa(j)
		if rule.IsWindow() {
			pols = append(pols, jen.Id(pj).Op(":=").Add(base))
		} else {
			pols = append(pols, jen.Id(pj).Op(":=").Add(gi("InForce").Call(base, jen.Id("rf"+strconv.Itoa(j)))))
		}
		cases = append(cases, jen.Case(jen.Id(rule.RuleConst())).Block(jen.Id("res").Dot("Policy").Op("=").Id(pj)))
	}
	list := []jen.Code{}
	for j := range r.Rules {
		list = append(list, jen.Id("p"+strconv.Itoa(j)))
	}
	block := append(pols,
		jen.Id("res").Dot("Policies").Op("=").Add(gi("InForceList")).Call(list...),
		jen.Switch(jen.Id("td").Dot("Rule")).Block(cases...),
	)
	return []jen.Code{
		jen.List(names...).Op(":=").List(calls...),
		jen.If(changed).Block(block...),
	}
}

// unavailable is a shared rule's Unavailable field (its 503 body); nothing for
// a local rule, which has no store to be down.
// nilHooks is the check that refuses nil hooks, naming every one (prefix
// goes before each name); nothing without hooks.
func nilHooks(prefix string, hooks []model.Hook) []jen.Code {
	if len(hooks) == 0 {
		return nil
	}
	var names, nils []jen.Code
	for _, hk := range hooks {
		names = append(names, jen.Lit(hk.Name))
		nils = append(nils, jen.Id("h").Dot(hk.Name).Op("==").Nil())
	}
	return []jen.Code{jen.If(jen.Err().Op(":=").Add(gi("NilHooks")).Call(append([]jen.Code{jen.Lit(prefix), jen.Index().String().Values(names...)}, nils...)...), jen.Err().Op("!=").Nil()).Block(
		jen.Return(jen.Nil(), jen.Err()))}
}

// emitHookStruct prints a door's struct of the service's functions (typ:
// Hooks, GRPCHooks), one field for each hook, each taking param: a plan's
// doc from planDoc (its name, the default plan's), a key's from keyDoc (its
// name, the rules that read it); structDoc is the struct's doc but its last
// line, "nil one.". Nothing when the policy names no functions.
func emitHookStruct(m *model.Model, typ string, hooks []model.Hook, routes []model.Route, defaultPlan int, param *jen.Statement, planDoc, keyDoc string, structDoc ...string) jen.Code {
	if len(hooks) == 0 {
		return jen.Null() // the policy names no functions of the service
	}
	var fs []jen.Code
	for _, hk := range hooks {
		if hk.Type == "Plan" {
			fs = append(fs, comment(fmt.Sprintf(planDoc, hk.Name, m.Plans[defaultPlan].Name)).Id(hk.Name).Func().Params(param.Clone()).Params(jen.Id("Plan"), jen.Bool()))
			continue
		}
		fs = append(fs, comment(fmt.Sprintf(keyDoc, hk.Name, strings.Join(hookUses(m, routes, hk.Name), ", "))).Id(hk.Name).Func().Params(param.Clone()).Params(jen.Id(hk.Type), jen.Bool()))
	}
	out := jen.Line()
	for _, l := range append(structDoc, "nil one.") {
		out.Comment(l).Line()
	}
	return out.Type().Id(typ).Struct(fs...).Line()
}

// doorHooks are a door type's hooks field (of type typ), its constructor's
// parameter and the field's initialiser, and the constructor's doc: none
// and noneDoc when the policy names no functions of the service, else
// hooksDoc.
func doorHooks(typ string, hooks []model.Hook, noneDoc, hooksDoc [2]string) (field, param, init, doc jen.Code) {
	if len(hooks) == 0 {
		return jen.Null(), jen.Null(), jen.Null(), jen.Comment(noneDoc[0]).Line().Comment(noneDoc[1]).Line()
	}
	return jen.Id("hooks").Id(typ), jen.Id("h").Id(typ), jen.Id("hooks").Op(":").Id("h"), jen.Comment(hooksDoc[0]).Line().Comment(hooksDoc[1]).Line()
}

// judgeOf is a door's Config.Judge: its jitter (nil for none: RLS sends no
// wait to spread), its counters over the series table named series, and a
// denial log when the policy asks for one; and what the door's doc says its
// Config logs.
func judgeOf(jitter *float64, series string, logDenials int64) (judge jen.Code, logDoc string) {
	var kv []jen.Code
	if jitter != nil {
		kv = append(kv, field("Jitter", jen.Lit(*jitter)))
	}
	kv = append(kv, field("Counters", vd("NewCounters").Call(jen.Id(series).Index(jen.Empty(), jen.Empty()).Op("..."))))
	logDoc = "logs no denials"
	if logDenials > 0 {
		kv = append(kv, field("Observer", vd("NewDenialLog").Call(jen.Nil(), lit(logDenials))))
		logDoc = fmt.Sprintf("logs denials with log/slog's default logger, at most %d a second", logDenials)
	}
	return field("Judge", vd("Judge").Add(fields(kv...))), logDoc
}

package emit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/limithttp"
)

const (
	httpPath     = "github.com/limitgen/limitgen/limithttp"
	verdictPath  = "github.com/limitgen/limitgen/verdict"
	clientipPath = "github.com/limitgen/limitgen/clientip"
)

func lh(name string) *jen.Statement { return jen.Qual(httpPath, name) }

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

// routerDecl declares httpRouter over httpPatterns: with a switch over the
// policy's literal paths and their methods (limithttp.LiteralRoutes) when it
// has some, which the compiler turns into comparisons of constants where the
// router would look the path up in a map and then choose among its methods.
func routerDecl(patterns []string) *jen.Statement {
	all := jen.Id("httpPatterns").Index(jen.Empty(), jen.Empty()).Op("...")
	paths, err := limithttp.LiteralRoutes(patterns...)
	if err != nil || len(paths) == 0 { // the policy's validation refused what NewRouter refuses
		return jen.Comment("httpRouter finds the route of httpPatterns that covers a request, as http.ServeMux would.").Line().
			Var().Id("httpRouter").Op("=").Add(lh("MustRouter")).Call(all)
	}
	var cases []jen.Code
	for _, p := range paths {
		cases = append(cases, jen.Case(jen.Lit(p.Path)).Block(literalMethods(p)...))
	}
	return jen.Comment("httpRoute is the index+1 of the route of httpPatterns for a method on a clean request path").Line().
		Comment("that is one of the policy's literal paths (limithttp.LiteralRoutes), 0 for any other path: a").Line().
		Comment("switch over constants where the router would look the path up in a map.").Line().
		Func().Id("httpRoute").Params(jen.List(jen.Id("method"), jen.Id("path")).String()).Int().Block(
		jen.Switch(jen.Id("path")).Block(cases...),
		jen.Return(jen.Lit(0)),
	).Line().Line().
		Comment("httpRouter finds the route of httpPatterns that covers a request, as http.ServeMux would.").Line().
		Var().Id("httpRouter").Op("=").Add(lh("MustRouterFunc")).Call(jen.Id("httpRoute"), all)
}

// literalMethods is the body of a literal path's case in httpRoute: the
// route of each method its patterns name (methods sharing a route in one
// comparison), then the route for any other method, if any.
func literalMethods(p limithttp.LiteralPath) []jen.Code {
	var order []int
	byRoute := map[int][]jen.Code{}
	for _, m := range p.Methods {
		if byRoute[m.Route] == nil {
			order = append(order, m.Route)
		}
		byRoute[m.Route] = append(byRoute[m.Route], jen.Lit(m.Method))
	}
	var body []jen.Code
	switch len(order) {
	case 0:
	case 1:
		var cond *jen.Statement
		for _, m := range byRoute[order[0]] {
			eq := jen.Id("method").Op("==").Add(m)
			if cond == nil {
				cond = eq
			} else {
				cond = cond.Op("||").Add(eq)
			}
		}
		body = append(body, jen.If(cond).Block(jen.Return(jen.Lit(order[0]))))
	default:
		var cases []jen.Code
		for _, r := range order {
			cases = append(cases, jen.Case(byRoute[r]...).Block(jen.Return(jen.Lit(r))))
		}
		body = append(body, jen.Switch(jen.Id("method")).Block(cases...))
	}
	if p.Any != 0 {
		body = append(body, jen.Return(jen.Lit(p.Any)))
	}
	return body
}

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
}

func (d *door) r() *jen.Statement { return jen.Id(d.recv) }

// seriesVar is the name of route i's series by RuleName (a tier's route).
func (d *door) seriesVar(i int) string {
	if d.prefix == "http" {
		return "httpSeriesRoute" + strconv.Itoa(i+1)
	}
	return d.prefix + "SeriesEntry" + strconv.Itoa(i+1)
}

func httpDoor(m *model.Model) *door {
	h := m.HTTP
	return &door{
		recv: "m", typ: "Middleware", prefix: "http", routes: h.Routes, plan: h.Plan,
		params:    []jen.Code{jen.Id("w").Add(resw()), jen.Id("r").Add(req()), jen.Id("path").String()},
		result:    jen.Bool(),
		ctx:       jen.Id("r").Dot("Context").Call(),
		req:       jen.Id("r"),
		respond:   []jen.Code{jen.Id("w"), jen.Id("r")},
		reject:    []jen.Code{jen.Id("w")},
		missing:   jen.Lit(h.Missing),
		tooCostly: jen.Lit(400),
		entryName: routeFunc,
		ip:        jen.Id("m").Dot("ClientIP").Dot("Key").Call(jen.Id("r").Dot("RemoteAddr"), jen.Id("r").Dot("Header")),
		source: func(s model.KeySource) jen.Code {
			switch s.Kind {
			case "header":
				return lh("HeaderKey").Call(jen.Id("r"), jen.Lit(s.Name))
			case "query":
				return lh("QueryKey").Call(jen.Id("r"), jen.Lit(s.Name))
			}
			return lh("PathKeyAt").Call(jen.Id("path"), jen.Lit(s.Segment), jen.Lit(s.Multi))
		},
		cost: func(r model.Route) jen.Code {
			fn := "HeaderCost"
			if r.CostKind == "query" {
				fn = "QueryCost"
			}
			return lh(fn).Call(jen.Id("r"), jen.Lit(r.CostName), lit(r.CostMax))
		},
	}
}

func req() *jen.Statement  { return jen.Op("*").Qual("net/http", "Request") }
func resw() *jen.Statement { return jen.Qual("net/http", "ResponseWriter") }

// plansDim is the size of the per-plan dimension of the HTTP tables: numPlans,
// or 1 when the policy has no plans.
func plansDim(m *model.Model) jen.Code {
	if len(m.Plans) == 0 {
		return jen.Lit(1)
	}
	return jen.Id("numPlans")
}

// emitHTTP is the policy's http: section: Hooks, Middleware, its routes, and
// ServeMux.
func emitHTTP(m *model.Model) jen.Code {
	h := m.HTTP
	g := jen.Null()
	d := httpDoor(m)
	g.Add(emitRouteLists(m, d))
	g.Add(emitHooks(m))
	g.Add(emitMiddleware(m))
	bases := seriesBases(h.Routes)
	g.Add(emitSeries(m, d, bases))
	for i, r := range h.Routes {
		if r.Mode != "Off" {
			g.Add(emitRoute(m, d, i, r, bases[i]))
		}
	}
	if h.Plan.Kind != "" {
		g.Add(emitPlanOf(m, d))
	}
	return g
}

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
		n += len(r.Rules)
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
		if r.Tier >= 0 {
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

// emitHTTPTables is every rule's Policy and default cost per plan, and every
// route's RateLimit-Policy value per plan: constants computed when generating.
func emitHTTPTables(m *model.Model) jen.Code {
	dim := len(m.Plans)
	if dim == 0 {
		dim = 1
	}
	var vars, pols, costs []jen.Code
	for i, r := range m.Rules {
		var perPlan, perCost []jen.Code
		for j := range r.Limits {
			p := m.Fields[i][j]
			name := policyVar(m, r, j)
			doc := fmt.Sprintf("%s is rule %s as the RateLimit fields describe it.", name, r.Name)
			if r.Planned {
				doc = fmt.Sprintf("%s is rule %s on the %s plan as the RateLimit fields describe it.", name, r.Name, m.Plans[j].Name)
			}
			pf := []jen.Code{
				field("Name", jen.Lit(p.Name)),
				field("Quota", lit(p.Quota)),
				field("Window", lit(p.Window)),
				field("Limit", fieldLimit(r, j)),
				field("Item", jen.Lit(p.Item)),
				field("Prefix", jen.Lit(p.Prefix)),
			}
			if r.Limits[j].Window {
				pf = append(pf, field("Sliding", jen.True()))
			}
			vars = append(vars, comment(doc).Var().Id(name).Op("=").Add(vd("Policy")).Add(fields(pf...)).Line())
		}
		for pl := range dim {
			j := min(pl, len(r.Limits)-1)
			perPlan = append(perPlan, jen.Op("&").Id(policyVar(m, r, j)))
			perCost = append(perCost, lit(m.Costs[i][j]))
		}
		pols = append(pols, jen.Id(r.RuleConst()).Op(":").Values(perPlan...))
		costs = append(costs, jen.Id(r.RuleConst()).Op(":").Values(perCost...))
	}
	return jen.Line().Add(vars...).Line().
		Comment("httpPolicies are the rules as the RateLimit fields describe them, by RuleName and plan:").Line().
		Comment("every string a response needs, computed when this package was generated.").Line().
		Var().Id("httpPolicies").Op("=").Index(jen.Op("...")).Index(plansDim(m)).Op("*").Add(vd("Policy")).Values(pols...).Line().Line().
		Comment("httpCosts are the rules' default costs, by RuleName and plan.").Line().
		Var().Id("httpCosts").Op("=").Index(jen.Op("...")).Index(plansDim(m)).Int64().Values(costs...).Line()
}

// emitRouteLists is every route's (or method entry's) RateLimit-Policy value
// per plan.
func emitRouteLists(m *model.Model, d *door) jen.Code {
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

func emitHooks(m *model.Model) jen.Code {
	var fs []jen.Code
	for _, hk := range m.HTTP.Hooks {
		if hk.Type == "Plan" {
			fs = append(fs, comment(fmt.Sprintf("%s returns the request's plan; false (or a value outside the plans) means the default plan, %s. Take it from what your authentication verified.",
				hk.Name, m.Plans[m.HTTP.Plan.Default].Name)).Id(hk.Name).Func().Params(req()).Params(jen.Id("Plan"), jen.Bool()))
			continue
		}
		uses := hookUses(m, m.HTTP.Routes, hk.Name)
		fs = append(fs, comment(fmt.Sprintf("%s returns the key of %s for a request, and false when it has none (then the next key source is tried, or the request is refused with the policy's missing_key status). An empty key counts as none.",
			hk.Name, strings.Join(uses, ", "))).Id(hk.Name).Func().Params(req()).Params(jen.Id(hk.Type), jen.Bool()))
	}
	return jen.Line().
		Comment("Hooks are the functions of your service that the policy's http: section names: what only").Line().
		Comment("your service knows (a verified token's subject, the caller's plan). NewMiddleware refuses a").Line().
		Comment("nil one.").Line().
		Type().Id("Hooks").Struct(fs...).Line()
}

func emitMiddleware(m *model.Model) jen.Code {
	h := m.HTTP
	checks := nilHooks(m.Pkg+": NewMiddleware: Hooks.", h.Hooks)
	ipFields := clientIPFields(h.ClientIP)
	judge := []jen.Code{
		field("Jitter", jen.Lit(h.Jitter)),
		field("Counters", vd("NewSeriesCounters").Call(jen.Id("httpSeries").Index(jen.Empty(), jen.Empty()).Op("..."))),
	}
	if h.LogDenials > 0 {
		judge = append(judge, field("Observer", vd("NewDenialLog").Call(jen.Nil(), lit(h.LogDenials))))
	}
	cfg := []jen.Code{
		field("Judge", vd("Judge").Add(fields(judge...))),
		field("Headers", lh(h.Headers)),
	}
	if h.Challenge != "" {
		cfg = append(cfg, field("Challenge", jen.Lit(h.Challenge)))
	}
	var cases, patternLits []jen.Code
	var patterns []string
	for i, r := range h.Routes {
		patterns = append(patterns, r.Pattern)
		patternLits = append(patternLits, jen.Lit(r.Pattern))
		if r.Mode == "Off" {
			continue
		}
		cases = append(cases, jen.Case(jen.Lit(i)).Block(jen.Return(jen.Id("m").Dot(routeFunc(i)).Call(jen.Id("w"), jen.Id("r"), jen.Id("path")))))
	}
	// wrap is Wrap's body and wrapMux NewServeMux's wrapper: every reading
	// of a request's path for a router the middleware cannot see
	// (MatchAll), ServeMux's alone behind its own ServeMux. With every route
	// off there is nothing to match.
	wrapBody := []jen.Code{jen.Return(jen.Id("next"))}
	wrapMux := jen.Id("m").Dot("Wrap")
	var checkFuncs jen.Code = jen.Null()
	if len(cases) > 0 {
		wrapBody = []jen.Code{jen.Return(jen.Qual("net/http", "HandlerFunc").Call(jen.Func().Params(jen.Id("w").Add(resw()), jen.Id("r").Add(req())).Block(
			jen.Id("routes").Op(":=").Id("httpRouter").Dot("MatchAll").Call(jen.Id("r")),
			jen.If(jen.Id("m").Dot("check").Call(jen.Id("w"), jen.Id("r"), jen.Op("&").Id("routes"))).Block(jen.Id("next").Dot("ServeHTTP").Call(jen.Id("w"), jen.Id("r"))),
		)))}
		wrapMux = jen.Id("m").Dot("wrapServeMux")
		checkFuncs = jen.Line().
			Comment("wrapServeMux is Wrap for the ServeMux of NewServeMux: ServeMux's reading of a path is the only").Line().
			Comment("one it dispatches (httpRouter.Match).").Line().
			Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("wrapServeMux").Params(jen.Id("next").Qual("net/http", "Handler")).Qual("net/http", "Handler").Block(
			jen.Return(jen.Qual("net/http", "HandlerFunc").Call(jen.Func().Params(jen.Id("w").Add(resw()), jen.Id("r").Add(req())).Block(
				jen.List(jen.Id("route"), jen.Id("path")).Op(":=").Id("httpRouter").Dot("Match").Call(jen.Id("r")),
				jen.If(jen.Id("m").Dot("checkRoute").Call(jen.Id("w"), jen.Id("r"), jen.Id("route"), jen.Id("path"))).Block(jen.Id("next").Dot("ServeHTTP").Call(jen.Id("w"), jen.Id("r"))),
			))),
		).Line().Line().
			Comment("check checks r against the limits of every policy route a router may hand it to (routes, from").Line().
			Comment("httpRouter.MatchAll), in turn, and reports whether it may go on: all of them allow it.").Line().
			Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("check").Params(jen.Id("w").Add(resw()), jen.Id("r").Add(req()), jen.Id("routes").Op("*").Add(lh("Routes"))).Bool().Block(
			jen.For(jen.Id("i").Op(":=").Range().Id("routes").Dot("N")).Block(
				jen.If(jen.Op("!").Id("m").Dot("checkRoute").Call(jen.Id("w"), jen.Id("r"), jen.Id("routes").Dot("Index").Index(jen.Id("i")), jen.Id("routes").Dot("Path").Index(jen.Id("i")))).Block(jen.Return(jen.False())),
			),
			jen.Return(jen.True()),
		).Line().Line().
			Comment("checkRoute checks r against the limits of route (an index of httpPatterns; -1 for none), whose").Line().
			Comment("wildcards it reads from path, and reports whether it may go on.").Line().
			Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("checkRoute").Params(jen.Id("w").Add(resw()), jen.Id("r").Add(req()), jen.Id("route").Int(), jen.Id("path").String()).Bool().Block(
			jen.Switch(jen.Id("route")).Block(cases...),
			jen.Return(jen.True()),
		).Line()
	}
	logDoc := "logs no denials"
	if h.LogDenials > 0 {
		logDoc = fmt.Sprintf("logs denials with log/slog's default logger, at most %d a second", h.LogDenials)
	}
	g := jen.Line().
		Comment("Middleware enforces the policy's http: section: it finds every policy route a router may hand").Line().
		Comment("a request to (limithttp.Router.MatchAll: the pattern http.ServeMux picks among the policy's own,").Line().
		Comment("or its redirect leads to, and those the path matches uncleaned, as chi and gorilla/mux read it),").Line().
		Comment("whatever router it wraps or sits behind and whatever patterns the service registered; reads").Line().
		Comment("the keys, cost and plan the policy names; checks each route's rule or tier; sets the RateLimit").Line().
		Comment("fields; and answers 429 (or the policy's 4xx) when the request may not go on. A request no").Line().
		Comment("route covers goes on unchecked.").Line().
		Comment("").Line().
		Comment("Routes: "+strings.Join(patterns, "; ")+".").Line().
		Type().Id("Middleware").Struct(
		jen.Id("limits").Op("*").Id("Limits"),
		jen.Id("hooks").Id("Hooks"),
		comment("ClientIP finds the client address that ip key sources read; it starts as the policy's client_ip (set TrustedProxies here when they differ by deployment).").Id("ClientIP").Add(jen.Qual(clientipPath, "Config")),
		comment("Clock, when set, is read instead of atomicbucket.Now: tests drive the middleware through time with it.").Id("Clock").Func().Params().Add(rt("Time")),
		comment("Config is what every route shares: the field style, the jitter, the counters, the observer ("+logDoc+"), and Denied, the response to a denied request when problem+json will not do. Set it before serving.").Id("Config").Add(lh("Config")),
	).Line().Line().
		Comment("NewMiddleware returns the middleware over l (Default when nil), calling h's functions. It").Line().
		Comment("fails when one of them is nil.").Line().
		Func().Id("NewMiddleware").Params(jen.Id("l").Op("*").Id("Limits"), jen.Id("h").Id("Hooks")).Params(jen.Op("*").Id("Middleware"), jen.Error()).Block(
		append(checks,
			jen.If(jen.Id("l").Op("==").Nil()).Block(jen.Id("l").Op("=").Id("Default")),
			jen.Return(jen.Op("&").Id("Middleware").Add(fields(
				field("limits", jen.Id("l")),
				field("hooks", jen.Id("h")),
				field("ClientIP", jen.Qual(clientipPath, "Config").Add(fields(ipFields...))),
				field("Config", lh("Config").Add(fields(cfg...))),
			)), jen.Nil()),
		)...,
	).Line().Line().
		Comment("Wrap returns next behind the limits of the policy's route that covers each request, however").Line().
		Comment("the router behind it reads the request's path: wrap a whole router, or each handler.").Line().
		Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("Wrap").Params(jen.Id("next").Qual("net/http", "Handler")).Qual("net/http", "Handler").Block(
		wrapBody...,
	).Line().Line().
		Comment("now reads the clock once: Clock, or atomicbucket.Now.").Line().
		Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("now").Params().Add(rt("Time")).Block(
		jen.If(jen.Id("m").Dot("Clock").Op("!=").Nil()).Block(jen.Return(jen.Id("m").Dot("Clock").Call())),
		jen.Return(rt("Now").Call()),
	).Line().Line().
		Add(checkFuncs).Line().
		Comment("ServeMux is the http.ServeMux behind the middleware that NewServeMux returns (see limithttp.ServeMux).").Line().
		Type().Id("ServeMux").Op("=").Qual(httpPath, "ServeMux").Line().Line().
		Comment("httpPatterns are the policy's route patterns, in policy order.").Line().
		Var().Id("httpPatterns").Op("=").Index(jen.Op("...")).String().Values(patternLits...).Line().Line().
		Add(routerDecl(patterns)).Line().Line().
		Comment("NewServeMux returns an empty ServeMux behind m: every request it serves is checked first, those").Line().
		Comment("its handlers answer and those it answers itself alike; Uncovered lists the registered patterns").Line().
		Comment("no policy route covers (served unlimited).").Line().
		Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("NewServeMux").Params().Op("*").Id("ServeMux").Block(
		jen.Return(jen.Qual(httpPath, "NewServeMux").Call(wrapMux, jen.Id("httpRouter"), jen.Id("httpPatterns").Index(jen.Empty(), jen.Empty()))),
	).Line()
	return g
}

func routeFunc(i int) string { return "route" + strconv.Itoa(i+1) }

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
					jen.List(jen.Id("n"), jen.Id(ok)).Op("=").Add(vd(parse)).Call(jen.Id("v"), jen.Id("found"), jen.Lit(bits)),
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
		if d.message {
			return jen.Return(vd("Result").Values(), jen.Lit(""), recv().Dot("Config").Dot("Reject").Call(args...))
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
		k, ok := "k"+strconv.Itoa(j), "ok"+strconv.Itoa(j)
		if rule.Composite() {
			body = append(body, emitCompositeKeyRead(d, k, ok, rule, r.Keys[j], r.Ordinal, r.Pattern)...)
		} else {
			body = append(body, emitKey(d, k, ok, rule.KeyType, r.Keys[j], r.Ordinal, r.Pattern)...)
		}
		body = append(body, jen.If(jen.Op("!").Id(ok)).Block(reject(d.missing, jen.Lit(r.MissingBodies[j]), event(ri, "MissingKey", nil))))
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
			jen.List(jen.Id("cost"), jen.Id("st")).Op(":=").Add(d.cost(r)),
			jen.Switch(jen.Id("st")).Block(
				jen.Case(vd("CostMissing")).Block(jen.Id("cost").Op("=").Add(lit(r.CostFixed))),
				jen.Case(vd("CostTooHigh")).Block(reject(d.tooCostly, jen.Lit(r.CostBody), event(firstRule, "TooCostly", jen.Id("cost")))),
			))
	}
	sharedRoute := r.Rule >= 0 && m.Rules[r.Rule].Shared || r.Tier >= 0 && m.Tiers[r.Tier].Shared
	if !sharedRoute && !d.nowParam { // a shared rule or tier is decided on the store's clock
		body = append(body, jen.Id("now").Op(":=").Add(recv()).Dot("now").Call())
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
		if rule.Shared {
			// The store decides, or the rule's on_failure setting when it
			// cannot: the Result says which, for the observers.
			body = append(body, jen.Id("sr").Op(":=").Add(recv()).Dot("limits").Dot(rule.GoName).Dot("AllowN").Call(append(args, jen.Id("cost"))...))
			decision = jen.Id("sr").Dot("Decision")
			res = append(res, setField("Degraded", jen.Id("sr").Dot("Degraded")), setField("Outage", jen.Id("sr").Dot("Outage")), setField("StoreErr", jen.Id("sr").Dot("Err")))
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
			res = append(res, setField("Degraded", jen.Id("tr").Dot("Degraded")), setField("Outage", jen.Id("tr").Dot("Outage")), setField("StoreErr", jen.Id("tr").Dot("Err")))
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
	if d.message {
		body = append(body, jen.Return(jen.Id("res"), keyArg, jen.Nil()))
	} else {
		body = append(body,
			jen.Return(recv().Dot("Config").Dot("Respond").Call(append(slices.Clone(d.respond), mode, jen.Op("&").Id("res"), keyArg)...)),
		)
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
	case d.prefix == "rls":
		doc = fmt.Sprintf("%s checks a descriptor of %s (%s, %s) at cost and returns the decision for limitrls.Config.Serve to answer, with the key that seeds its jitter, or the error that answers it when it holds no key.", d.entryName(i), r.Pattern, what, strings.ToLower(r.Mode))
	case d.message:
		doc = fmt.Sprintf("%s checks one message of a stream of %s (%s, %s, %d a message) and returns the decision for limitgrpc.CountMessages to answer, with the key that seeds its jitter, or the status that ends the stream when it has no key.", d.entryName(i), r.Pattern, what, strings.ToLower(r.Mode), r.CostFixed)
	}
	return jen.Line().
		Add(comment(doc)).
		Func().Params(recv().Op("*").Id(d.typ)).Id(d.entryName(i)).Params(d.params...).Add(d.result).Block(body...).Line()
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
			jen.Id("res").Dot("Policy").Op("=").Add(vd("InForce")).Call(jen.Id("res").Dot("Policy"), jen.Id(p.rf)),
			jen.Id("res").Dot("Policies").Op("=").Add(vd("InForceList")).Call(jen.Id("res").Dot("Policy")),
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
			pols = append(pols, jen.Id(pj).Op(":=").Add(vd("InForce").Call(base, jen.Id("rf"+strconv.Itoa(j)))))
		}
		cases = append(cases, jen.Case(jen.Id(rule.RuleConst())).Block(jen.Id("res").Dot("Policy").Op("=").Id(pj)))
	}
	list := []jen.Code{}
	for j := range r.Rules {
		list = append(list, jen.Id("p"+strconv.Itoa(j)))
	}
	block := append(pols,
		jen.Id("res").Dot("Policies").Op("=").Add(vd("InForceList")).Call(list...),
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
	return []jen.Code{jen.If(jen.Err().Op(":=").Add(vd("NilHooks")).Call(append([]jen.Code{jen.Lit(prefix), jen.Index().String().Values(names...)}, nils...)...), jen.Err().Op("!=").Nil()).Block(
		jen.Return(jen.Nil(), jen.Err()))}
}

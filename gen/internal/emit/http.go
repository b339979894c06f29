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

func httpDoor(m *model.Model) *door {
	h := m.HTTP
	return &door{
		recv: "m", typ: "Middleware", prefix: "http", routes: h.Routes, plan: h.Plan, now: "Now",
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
			return lh(fn).Call(jen.Id("r"), jen.Lit(r.CostName), lit(r.CostFixed), lit(r.CostMax))
		},
	}
}

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
	return emitDoor(m, httpDoor(m), emitHooks(m), emitMiddleware(m))
}

// emitDoor is what every door prints: its route lists, its types (decls),
// its series, each checked route's check (and, for a door that counts a
// stream's messages, each message's), and its plan lookup.
func emitDoor(m *model.Model, d *door, decls ...jen.Code) jen.Code {
	out := jen.Null().Add(emitRouteLists(m, d)).Add(decls...)
	bases := seriesBases(d.routes)
	out.Add(emitSeries(m, d, bases))
	for i, r := range d.routes {
		if r.Mode == "Off" {
			continue
		}
		if slotRoute(r) {
			out.Add(emitSlotRoute(m, d, i, r, bases[i]))
		}
		if checkRoute(r) {
			out.Add(emitRoute(m, d, i, r, bases[i]))
		}
	}
	if d.prefix == "grpc" {
		out.Add(emitMessageChecks(m, d, bases))
	}
	if d.plan.Kind != "" && anyChecked(d.routes, func(r model.Route) bool { return routePlanned(m, r) }) {
		out.Add(emitPlanOf(m, d))
	}
	return out
}

// emitHTTPTables is every rule's Policy and default cost per plan, and every
// route's RateLimit-Policy value per plan: constants computed when generating.
func emitHTTPTables(m *model.Model) jen.Code {
	routes := slices.DeleteFunc(checked(m), func(r model.Route) bool { return !checkRoute(r) })
	if len(routes) == 0 {
		return jen.Null() // every route Off, or of an in-flight rule: nothing reads them
	}
	dim := len(m.Plans)
	if dim == 0 {
		dim = 1
	}
	var vars, pols, costs []jen.Code
	for i, r := range m.Rules {
		if r.IsInFlight() {
			continue // no route checks one: its entries stay nil
		}
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
	out := jen.Line().Add(vars...).Line().
		Comment("httpPolicies are the rules as the RateLimit fields describe them, by RuleName and plan:").Line().
		Comment("every string a response needs, computed when this package was generated.").Line().
		Var().Id("httpPolicies").Op("=").Index(jen.Op("...")).Index(plansDim(m)).Op("*").Add(vd("Policy")).Values(pols...).Line()
	if anyChecked(routes, func(r model.Route) bool { return r.CostKind == "" }) {
		out.Line().Comment("httpCosts are the rules' default costs, by RuleName and plan.").Line().
			Var().Id("httpCosts").Op("=").Index(jen.Op("...")).Index(plansDim(m)).Int64().Values(costs...).Line()
	}
	return out
}

func emitHooks(m *model.Model) jen.Code {
	return emitHookStruct(m, "Hooks", m.HTTP.Hooks, m.HTTP.Routes, m.HTTP.Plan.Default, req(),
		"%s returns the request's plan; false (or a value outside the plans) means the default plan, %s. Take it from what your authentication verified.",
		"%s returns the key of %s for a request, and false when it has none (then the next key source is tried, or the request is refused with the policy's missing_key status). An empty key counts as none.",
		"Hooks are the functions of your service that the policy's http: section names: what only",
		"your service knows (a verified token's subject, the caller's plan). NewMiddleware refuses a")
}

func emitMiddleware(m *model.Model) jen.Code {
	hooksField, hooksParam, hooksInit, newDoc := doorHooks("Hooks", m.HTTP.Hooks,
		[2]string{"NewMiddleware returns the middleware over l (Default when nil); the policy names no functions of", "the service, so it never fails."},
		[2]string{"NewMiddleware returns the middleware over l (Default when nil), calling h's functions. It", "fails when one of them is nil."})
	h := m.HTTP
	checks := nilHooks(m.Pkg+": NewMiddleware: Hooks.", h.Hooks)
	var ipInit jen.Code = jen.Null() // the policy's client_ip, when it says anything
	if ipFields := clientIPFields(h.ClientIP); len(ipFields) > 0 {
		ipInit = jen.Id("m").Dot("ClientIP").Op("=").Qual(clientipPath, "Config").Add(fields(ipFields...))
	}
	judge, logDoc := judgeOf(&h.Jitter, "httpSeries", h.LogDenials)
	cfg := []jen.Code{judge, field("Headers", lh(h.Headers))}
	if h.Challenge != "" {
		cfg = append(cfg, field("Challenge", jen.Lit(h.Challenge)))
	}
	var cases, slotCases, admitCases, admitAll, patternLits []jen.Code
	var patterns []string
	for i, r := range h.Routes {
		patterns = append(patterns, r.Pattern)
		patternLits = append(patternLits, jen.Lit(r.Pattern))
		if r.Mode == "Off" {
			continue
		}
		args := func(keys [][]model.KeySource) []jen.Code {
			if readsPath(keys) {
				return []jen.Code{jen.Id("w"), jen.Id("r"), jen.Id("path")}
			}
			return []jen.Code{jen.Id("w"), jen.Id("r")}
		}
		if slotRoute(r) {
			slotCases = append(slotCases, jen.Case(jen.Lit(i)).Block(jen.Return(jen.Id("m").Dot("acquire"+strconv.Itoa(i+1)).Call(args(slotKeys(r))...))))
		}
		if checkRoute(r) {
			call := jen.Id("m").Dot(routeFunc(i)).Call(args(r.Keys)...)
			if settleRoute(r) { // its check returns its mark too
				cases = append(cases, jen.Case(jen.Lit(i)).Block(jen.List(jen.Id("ok"), jen.Id("_")).Op(":=").Add(call), jen.Return(jen.Id("ok"))))
				admitCases = append(admitCases, jen.Case(jen.Lit(i)).Block(jen.Return(call.Clone())))
			} else {
				cases = append(cases, jen.Case(jen.Lit(i)).Block(jen.Return(call)))
				admitAll = append(admitAll, jen.Case(jen.Lit(i)).Block(jen.Return(call.Clone(), vd("Mark").Values())))
			}
		}
	}
	// checkRoute is what the door calls for each route a request may be
	// handed to; with every route off there is nothing to check.
	var check, checkRoute jen.Code = jen.Nil(), jen.Null()
	if len(cases) > 0 {
		check = jen.Id("m").Dot("checkRoute")
		checkRoute = jen.Line().
			Comment("checkRoute checks r against the limits of route (an index of httpPatterns; -1 for none), whose").Line().
			Comment("wildcards it reads from path, and reports whether it may go on.").Line().
			Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("checkRoute").Params(jen.Id("w").Add(resw()), jen.Id("r").Add(req()), jen.Id("route").Int(), jen.Id("path").String()).Bool().Block(
			jen.Switch(jen.Id("route")).Block(cases...),
			jen.Return(jen.True()),
		).Line()
	}
	// acquireRoute is what the door calls for each route after the checks,
	// when routes check in-flight rules: it takes their slots.
	var initSlots jen.Code = jen.Null()
	if len(slotCases) > 0 {
		initSlots = lh("InitSlots").Call(jen.Op("&").Id("m").Dot("Door"), jen.Id("m").Dot("acquireRoute"))
		checkRoute = jen.Add(checkRoute).Line().
			Comment("acquireRoute takes the slots of route's in-flight rules (route an index of httpPatterns; -1 for").Line().
			Comment("none), reading their keys' wildcards from path, or answers r when it cannot, and reports whether").Line().
			Comment("r may go on; the door gives the slots back when a check denies, or the handler returns.").Line().
			Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("acquireRoute").Params(jen.Id("w").Add(resw()), jen.Id("r").Add(req()), jen.Id("route").Int(), jen.Id("path").String()).Params(jen.Bool(), jen.Qual(slotPath, "Set")).Block(
			jen.Switch(jen.Id("route")).Block(slotCases...),
			jen.Return(jen.True(), jen.Qual(slotPath, "Set").Values()),
		).Line()
	}
	if len(admitCases) > 0 {
		// admitRoute is the check of a policy of settled routes: a settled
		// route's returns its mark for the settlement.
		checkRoute = jen.Add(checkRoute).Line().
			Comment("admitRoute is checkRoute for a policy of settled routes: a settled route's check returns the mark").Line().
			Comment("its settlement reads (verdict.Mark), any other's the zero Mark.").Line().
			Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("admitRoute").Params(jen.Id("w").Add(resw()), jen.Id("r").Add(req()), jen.Id("route").Int(), jen.Id("path").String()).Params(jen.Bool(), vd("Mark")).Block(
			jen.Switch(jen.Id("route")).Block(append(admitCases, admitAll...)...),
			jen.Return(jen.True(), vd("Mark").Values()),
		).Line()
	}
	initSettle, settleFuncs := emitSettleDispatch(m, httpDoor(m))
	g := jen.Line().
		Comment("Middleware enforces the policy's http: section on every route a router may hand a request to").Line().
		Comment("(limithttp.Door): it reads the keys, cost and plan the policy names, checks the route's rule or").Line().
		Comment("tier, sets the RateLimit fields, and answers 429 (or the policy's 4xx) when the request may not").Line().
		Comment("go on; its Config "+logDoc+". Routes: "+strings.Join(patterns, "; ")+".").Line().
		Type().Id("Middleware").Struct(
		lh("Door"),
		jen.Id("limits").Op("*").Id("Limits"),
		hooksField,
	).Line().Line().
		Add(newDoc).
		Func().Id("NewMiddleware").Params(jen.Id("l").Op("*").Id("Limits"), hooksParam).Params(jen.Op("*").Id("Middleware"), jen.Error()).Block(
		append(checks,
			jen.If(jen.Id("l").Op("==").Nil()).Block(jen.Id("l").Op("=").Id("Default")),
			jen.Id("m").Op(":=").Op("&").Id("Middleware").Values(jen.Id("limits").Op(":").Id("l"), hooksInit),
			ipInit,
			jen.Id("m").Dot("Config").Op("=").Add(lh("Config")).Add(fields(cfg...)),
			lh("InitDoor").Call(jen.Op("&").Id("m").Dot("Door"), jen.Id("httpRouter"), jen.Id("httpPatterns").Index(jen.Empty(), jen.Empty()), check),
			initSlots,
			initSettle,
			jen.Return(jen.Id("m"), jen.Nil()),
		)...,
	).Line().
		Add(checkRoute).Line().
		Add(settleFuncs).Line().
		Comment("ServeMux is the http.ServeMux behind the middleware that NewServeMux returns (see limithttp.ServeMux).").Line().
		Type().Id("ServeMux").Op("=").Qual(httpPath, "ServeMux").Line().Line().
		Comment("httpPatterns are the policy's route patterns, in policy order.").Line().
		Var().Id("httpPatterns").Op("=").Index(jen.Op("...")).String().Values(patternLits...).Line().Line().
		Add(routerDecl(patterns)).Line()
	return g
}

func routeFunc(i int) string { return "route" + strconv.Itoa(i+1) }

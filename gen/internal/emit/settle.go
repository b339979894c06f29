package emit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

// settleRoute says whether route r settles its cost after the handler.
func settleRoute(r model.Route) bool {
	return (r.SettleName != "" || r.SettleContext) && r.Mode != "Off"
}

// settleFunc is the name of route (or entry) i's settlement.
func settleFunc(d *door, i int) string {
	if d.prefix == "http" {
		return "settle" + strconv.Itoa(i+1)
	}
	return "settleEntry" + strconv.Itoa(i+1)
}

// settleParams are a settlement's parameters, and the expression of the
// actual cost of route r: HTTP's from the response's header map (the
// request's path too, when the route reads wildcards), gRPC's from the
// trailer metadata the handler set.
func settleParams(d *door, r model.Route) (params []jen.Code, actual jen.Code) {
	if d.prefix == "http" {
		params = []jen.Code{jen.Id("w").Add(resw()), jen.Id("r").Add(req())}
		if readsPath(r.Keys) {
			params = append(params, jen.Id("path").String())
		}
		if r.SettleContext {
			return params, vd("ReportedCost").Call(jen.Id("r").Dot("Context").Call())
		}
		return params, lh("ActualCost").Call(jen.Id("w").Dot("Header").Call(), jen.Lit(r.SettleName))
	}
	params = []jen.Code{jen.Id("ctx").Add(ctxType()), jen.Id("trailer").Qual(metadataPath, "MD")}
	if r.SettleContext {
		return params, vd("ReportedCost").Call(jen.Id("ctx"))
	}
	return params, lg("TrailerCost").Call(jen.Id("trailer"), jen.Lit(r.SettleName))
}

// emitSettle is route i's settlement, which the door calls when the handler
// has returned: the route's keys, plan and estimate read again as its check
// read them, the actual cost from the response's header map, and each rule
// the check charged settled (local ones at one reading of the clock, shared
// ones on their store). A request with no key or no readable actual any more
// keeps its estimate.
func emitSettle(m *model.Model, d *door, i int, r model.Route) jen.Code {
	params, actual := settleParams(d, r)
	params = append(params, jen.Id("mk").Add(vd("Mark")))
	kept := jen.Return(vd("KeptEstimate"))
	var body []jen.Code
	keys := make([]jen.Code, len(r.Rules))
	for j, ri := range r.Rules {
		if m.Rules[ri].KeyType == "" {
			continue
		}
		read, k := emitRuleKey(m, d, r, j, kept)
		body = append(body, read...)
		keys[j] = jen.Id(k)
	}
	if routePlanned(m, model.Route{Rules: r.Rules}) {
		body = append(body, jen.Id("plan").Op(":=").Add(d.r()).Dot("plan").Call(d.req))
	}
	if r.CostKind == "fixed" {
		body = append(body, jen.Id("cost").Op(":=").Add(jen.Int64().Call(lit(r.CostFixed))))
	} else {
		body = append(body,
			jen.List(jen.Id("cost"), jen.Id("costOK")).Op(":=").Add(d.cost(r)),
			jen.If(jen.Op("!").Id("costOK")).Block(kept))
	}
	body = append(body,
		jen.List(jen.Id("actual"), jen.Id("ok")).Op(":=").Add(actual),
		jen.If(jen.Op("!").Id("ok")).Block(kept),
	)
	// Local rules settle at one reading of the clock, shared ones on their
	// store, in the request's context; a store that cannot settle makes the
	// whole settlement verdict.SettleFailed (the rules it did settle stay
	// settled).
	var local, shared []int
	for j, ri := range r.Rules {
		if m.Rules[ri].Shared {
			shared = append(shared, j)
		} else {
			local = append(local, j)
		}
	}
	if len(local) > 0 {
		body = append(body, jen.Id("now").Op(":=").Add(d.r()).Dot(d.now).Call())
	}
	var names []string
	var sum jen.Code // local rules only: the sum of their SettleAt
	windows := 0     // the shared windows' marks, in the order of the rules
	if len(shared) > 0 {
		body = append(body, jen.Var().Id("forgiven").Int64(), jen.Id("failed").Op(":=").False())
	}
	for j, ri := range r.Rules {
		rule := m.Rules[ri]
		names = append(names, rule.Name)
		var args []jen.Code
		if rule.Shared {
			args = append(args, d.ctx)
		}
		if rule.Planned {
			args = append(args, jen.Id("plan"))
		}
		if keys[j] != nil {
			args = append(args, keys[j])
		}
		limiter := d.r().Dot("limits").Dot(rule.GoName)
		if rule.Shared {
			if rule.IsWindow() { // gives back from where its store counted the check
				args = append(args, jen.Id("mk").Dot("Window").Call(jen.Lit(windows)))
				windows++
			}
			body = append(body,
				jen.If(jen.List(jen.Id("f"), jen.Err()).Op(":=").Add(limiter).Dot("Settle").Call(append(args, jen.Id("cost"), jen.Id("actual"))...), jen.Err().Op("!=").Nil()).Block(
					jen.Id("failed").Op("=").True(),
				).Else().Block(jen.Id("forgiven").Op("=").Add(gi("AddForgiven")).Call(jen.Id("forgiven"), jen.Id("f"))))
			continue
		}
		at := []jen.Code{jen.Id("now")}
		if rule.IsWindow() { // a window gives back from what it counted at the check's time
			at = append(at, jen.Id("mk").Dot("At"))
		}
		call := limiter.Dot("SettleAt").Call(append(append(args, at...), jen.Id("cost"), jen.Id("actual"))...)
		switch {
		case len(shared) > 0:
			body = append(body, jen.Id("forgiven").Op("=").Add(gi("AddForgiven")).Call(jen.Id("forgiven"), call))
		case sum == nil:
			sum = call
		default: // saturating: a huge actual forgives nearly MaxInt64 on each rule
			sum = gi("AddForgiven").Call(sum, call)
		}
	}
	if len(shared) > 0 {
		body = append(body, jen.If(jen.Id("failed")).Block(jen.Return(vd("SettleFailed"))), jen.Return(jen.Id("forgiven")))
	} else {
		body = append(body, jen.Return(sum))
	}
	what := "a request of " + r.Pattern + " that its handler answered: the actual cost in the response's " + r.SettleName
	if d.prefix != "http" {
		what = "a call of " + r.Pattern + " that its handler ended: the actual cost in its trailer metadata's " + r.SettleName
	}
	if r.SettleContext {
		what = r.Pattern + "'s request that its handler ended: the actual cost it reported with verdict.ReportCost"
	}
	doc := fmt.Sprintf("%s settles %s, against the estimate the check took, with %s; it returns the tokens forgiven beyond the rules' debt bounds, verdict.KeptEstimate, or verdict.SettleFailed when a store could not settle.",
		settleFunc(d, i), what, strings.Join(names, ", "))
	return jen.Line().Add(comment(doc)).
		Func().Params(d.r().Op("*").Id(d.typ)).Id(settleFunc(d, i)).Params(params...).Int64().Block(body...).Line()
}

// emitSettleDispatch is what the door calls for each route (entry) of a
// request whose handler returned, and the settlements it calls; nothing
// when no route settles. HTTP: settleRoute, by the route's index. gRPC:
// settles (whether a method's entry settles, so that the interceptors
// record its trailer) and settle.
func emitSettleDispatch(m *model.Model, d *door) (initSettle, funcs jen.Code) {
	var cases, methods, fromCtx []jen.Code
	g := jen.Null()
	for i, r := range d.routes {
		if !settleRoute(r) {
			continue
		}
		var args []jen.Code
		if d.prefix == "http" {
			args = []jen.Code{jen.Id("w"), jen.Id("r")}
			if readsPath(r.Keys) {
				args = append(args, jen.Id("path"))
			}
		} else {
			args = []jen.Code{jen.Id("ctx"), jen.Id("trailer")}
		}
		args = append(args, jen.Id("mk"))
		cases = append(cases, jen.Case(jen.Lit(i)).Block(jen.Return(d.r().Dot(settleFunc(d, i)).Call(args...))))
		methods = append(methods, jen.Lit(i))
		if r.SettleContext {
			fromCtx = append(fromCtx, jen.Lit(i))
		}
		g.Add(emitSettle(m, d, i, r))
	}
	if len(cases) == 0 {
		return jen.Null(), jen.Null()
	}
	// fromContext says which routes' handlers report their cost through
	// their context (the door gives those a cell): nil when none does.
	fromContext, fromName := jen.Nil(), d.prefix+"SettleFromContext"
	if len(fromCtx) > 0 {
		fromContext = jen.Id(fromName)
		param, call := jen.Id("route").Int(), jen.Id("route")
		if d.prefix != "http" {
			param, call = jen.Id("method").String(), jen.Id("grpcEntry").Call(jen.Id("method"))
		}
		g.Line().Comment(fromName+" reports whether a request's route (entry) settles from what its handler reports through its context.").Line().
			Func().Id(fromName).Params(param).Bool().Block(
			jen.Switch(call).Block(jen.Case(fromCtx...).Block(jen.Return(jen.True()))),
			jen.Return(jen.False()),
		).Line()
	}
	if d.prefix == "http" {
		return lh("InitSettle").Call(jen.Op("&").Id("m").Dot("Door"), jen.Id("m").Dot("admitRoute"), jen.Id("m").Dot("settleRoute"), fromContext),
			jen.Line().
				Comment("settleRoute settles a request of route (an index of httpPatterns) whose handler returned, reading").Line().
				Comment("its keys' wildcards from path, with the mark its check returned: verdict.NoSettle for a route that does").Line().
				Comment("not settle.").Line().
				Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("settleRoute").Params(jen.Id("w").Add(resw()), jen.Id("r").Add(req()), jen.Id("route").Int(), jen.Id("path").String(), jen.Id("mk").Add(vd("Mark"))).Int64().Block(
				jen.Switch(jen.Id("route")).Block(cases...),
				jen.Return(vd("NoSettle")),
			).Line().Add(g)
	}
	return lg("InitSettle").Call(jen.Op("&").Id("g").Dot("Door"), jen.Id("grpcSettles"), jen.Id("g").Dot("admit"), jen.Id("g").Dot("settle"), fromContext),
		jen.Line().
			Comment("grpcSettles reports whether method's entry settles its cost from the call's trailer metadata.").Line().
			Func().Id("grpcSettles").Params(jen.Id("method").String()).Bool().Block(
			jen.Switch(jen.Id("grpcEntry").Call(jen.Id("method"))).Block(jen.Case(methods...).Block(jen.Return(jen.True()))),
			jen.Return(jen.False()),
		).Line().Line().
			Comment("settle settles a call of method whose handler ended, with the trailer metadata it set and the mark").Line().
			Comment("its check returned: verdict.NoSettle for an entry that does not settle.").Line().
			Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("settle").Params(jen.Id("ctx").Add(ctxType()), jen.Id("method").String(), jen.Id("trailer").Qual(metadataPath, "MD"), jen.Id("mk").Add(vd("Mark"))).Int64().Block(
			jen.Switch(jen.Id("grpcEntry").Call(jen.Id("method"))).Block(cases...),
			jen.Return(vd("NoSettle")),
		).Line().Add(g)
}

package emit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

// settleRoute says whether route r settles its cost after the handler.
func settleRoute(r model.Route) bool { return r.SettleName != "" && r.Mode != "Off" }

// settleFunc is the name of route i's settlement.
func settleFunc(i int) string { return "settle" + strconv.Itoa(i+1) }

// emitSettle is route i's settlement, which the door calls when the handler
// has returned: the route's keys, plan and estimate read again as its check
// read them, the actual cost from the response's header map, and each rule
// the check charged settled (local ones at one reading of the clock, shared
// ones on their store). A request with no key or no readable actual any more
// keeps its estimate.
func emitSettle(m *model.Model, d *door, i int, r model.Route) jen.Code {
	kept := jen.Return(lh("KeptEstimate"))
	var body []jen.Code
	keys := make([]jen.Code, len(r.Rules))
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
		body = append(body, jen.If(jen.Op("!").Id(ok)).Block(kept))
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
		jen.List(jen.Id("actual"), jen.Id("ok")).Op(":=").Add(lh("ActualCost")).Call(jen.Id("w").Dot("Header").Call(), jen.Lit(r.SettleName)),
		jen.If(jen.Op("!").Id("ok")).Block(kept),
	)
	// Local rules settle at one reading of the clock, shared ones on their
	// store, in the request's context; a store that cannot settle makes the
	// whole settlement limithttp.SettleFailed (the rules it did settle stay
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
			body = append(body,
				jen.If(jen.List(jen.Id("f"), jen.Err()).Op(":=").Add(limiter).Dot("Settle").Call(append(args, jen.Id("cost"), jen.Id("actual"))...), jen.Err().Op("!=").Nil()).Block(
					jen.Id("failed").Op("=").True(),
				).Else().Block(jen.Id("forgiven").Op("+=").Id("f")))
			continue
		}
		call := limiter.Dot("SettleAt").Call(append(args, jen.Id("now"), jen.Id("cost"), jen.Id("actual"))...)
		switch {
		case len(shared) > 0:
			body = append(body, jen.Id("forgiven").Op("+=").Add(call))
		case sum == nil:
			sum = call
		default:
			sum = jen.Add(sum).Op("+").Add(call)
		}
	}
	if len(shared) > 0 {
		body = append(body, jen.If(jen.Id("failed")).Block(jen.Return(lh("SettleFailed"))), jen.Return(jen.Id("forgiven")))
	} else {
		body = append(body, jen.Return(sum))
	}
	params := d.params
	if !readsPath(r.Keys) {
		params = params[:len(params)-1]
	}
	doc := fmt.Sprintf("%s settles a request of %s that its handler answered: the actual cost in the response's %s, against the estimate the check took, with %s; it returns the tokens forgiven beyond the rules' debt bounds, limithttp.KeptEstimate, or limithttp.SettleFailed when a store could not settle.",
		settleFunc(i), r.Pattern, r.SettleName, strings.Join(names, ", "))
	return jen.Line().Add(comment(doc)).
		Func().Params(d.r().Op("*").Id(d.typ)).Id(settleFunc(i)).Params(params...).Int64().Block(body...).Line()
}

// emitSettleDispatch is settleRoute, what the door calls for each route of
// a request whose handler returned, and the settlements it calls; nothing
// when no route settles.
func emitSettleDispatch(m *model.Model, d *door) (initSettle, funcs jen.Code) {
	var cases []jen.Code
	g := jen.Null()
	for i, r := range d.routes {
		if !settleRoute(r) {
			continue
		}
		args := []jen.Code{jen.Id("w"), jen.Id("r")}
		if readsPath(r.Keys) {
			args = append(args, jen.Id("path"))
		}
		cases = append(cases, jen.Case(jen.Lit(i)).Block(jen.Return(d.r().Dot(settleFunc(i)).Call(args...))))
		g.Add(emitSettle(m, d, i, r))
	}
	if len(cases) == 0 {
		return jen.Null(), jen.Null()
	}
	return lh("InitSettle").Call(jen.Op("&").Id("m").Dot("Door"), jen.Id("m").Dot("settleRoute")),
		jen.Line().
			Comment("settleRoute settles a request of route (an index of httpPatterns) whose handler returned, reading").Line().
			Comment("its keys' wildcards from path: limithttp.NoSettle for a route that does not settle.").Line().
			Func().Params(jen.Id("m").Op("*").Id("Middleware")).Id("settleRoute").Params(jen.Id("w").Add(resw()), jen.Id("r").Add(req()), jen.Id("route").Int(), jen.Id("path").String()).Int64().Block(
			jen.Switch(jen.Id("route")).Block(cases...),
			jen.Return(lh("NoSettle")),
		).Line().Add(g)
}

package emit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

const overlayPath = "github.com/limitgen/limitgen/overlay"

// keyParse is how an overlay target reads keyed rule r's key given as text:
// nil for a string key.
func keyParse(r model.Rule) jen.Code {
	switch {
	case r.Composite():
		return jen.Id("Parse" + r.KeyType)
	case strings.HasPrefix(r.KeyType, "uint"):
		return jen.Qual(overlayPath, "ParseUint").Index(jen.Id(r.KeyType))
	case r.KeyType != "string":
		return jen.Qual(overlayPath, "ParseInt").Index(jen.Id(r.KeyType))
	}
	return jen.Nil()
}

// emitOverlay is each rule as an overlay Set changes it (an overlay.Target),
// and New's expression of the overlay.Numbers Limits embeds, whose
// ApplyNumbers applies a whole Set.
func emitOverlay(m *model.Model) (decls, numbers jen.Code) {
	g := jen.Line()
	var entries, fixed []jen.Code
	for _, r := range m.Rules {
		switch {
		case r.IsInFlight() && r.Planned: // the limiter's numbers methods, a plan each
			args := []jen.Code{jen.Lit(r.KeyType != ""), jen.True()}
			for i := range r.Limits {
				args = append(args, jen.Qual(overlayPath, "PlanSlots").Types(jen.Id("Plan")).Call(jen.Id("l").Dot(r.GoName), jen.Id("Plan").Call(jen.Lit(i))))
			}
			entries = append(entries, jen.Lit(r.Name).Op(":").Qual(overlayPath, "SlotTarget").Call(args...))
			continue
		case r.IsInFlight(): // the limiter's numbers methods (a local one's, atomicslot's)
			entries = append(entries, jen.Lit(r.Name).Op(":").Qual(overlayPath, "SlotTarget").Call(jen.Lit(r.KeyType != ""), jen.False(), jen.Id("l").Dot(r.GoName)))
			continue
		case r.IsWindow() && !r.Planned && !r.Shared && r.KeyType != "": // genimpl.KeyedWindow's
			entries = append(entries, jen.Lit(r.Name).Op(":").Qual(overlayPath, "WindowTarget").Call(jen.Id("l").Dot(r.GoName).Dot("KeyedWindow"), keyParse(r)))
			continue
		case r.IsWindow() && !r.Planned && !r.Shared: // genimpl.GlobalWindow's
			entries = append(entries, jen.Lit(r.Name).Op(":").Qual(overlayPath, "GlobalWindowTarget").Call(jen.Id("l").Dot(r.GoName).Dot("GlobalWindow")))
			continue
		case r.IsWindow() && !r.Planned: // a shared window's: its local window and its binding to the store
			local := jen.Id("l").Dot(r.GoName).Dot("local").Dot("Window").Call()
			if r.KeyType != "" {
				local = jen.Id("l").Dot(r.GoName).Dot("local").Dot("Table").Call()
			}
			store := jen.Id("l").Dot("shared").Dot("Windows").Index(jen.Lit(r.WindowAt))
			if r.KeyType != "" { // a key's own numbers through the limiter's SetKeyNumbers
				entries = append(entries, jen.Lit(r.Name).Op(":").Qual(overlayPath, "KeyedSharedWindowTarget").Call(local,
					store, lit(r.Limits[0].Cost), jen.Id("l").Dot(r.GoName), keyParse(r)))
				continue
			}
			entries = append(entries, jen.Lit(r.Name).Op(":").Qual(overlayPath, "SharedWindowTarget").Call(local,
				store, lit(r.Limits[0].Cost), jen.False()))
			continue
		case r.IsWindow(): // with plans: a window (or table) a plan, and for a shared rule its bindings to the store
			plans := jen.Id("l").Dot(r.GoName).Dot("s")
			stores := jen.Nil()
			if r.Shared {
				plans = jen.Id("l").Dot(r.GoName).Dot("local").Dot("s")
				stores = jen.Id("l").Dot("shared").Dot("Windows").Index(jen.Lit(r.WindowAt), jen.Lit(r.WindowAt+len(r.Limits)))
			}
			costs := make([]jen.Code, len(r.Limits))
			args := []jen.Code{jen.Lit(r.KeyType != ""), jen.Index().Int64().Values(costs...), stores}
			for i, l := range r.Limits {
				costs[i] = lit(l.Cost)
				args = append(args, plans.Clone().Index(jen.Lit(i)))
			}
			args[1] = jen.Index().Int64().Values(costs...)
			target := jen.Qual(overlayPath, "PlannedWindowTarget")
			if !r.Shared { // no stores to infer the type from
				target = target.Types(jen.Qual(overlayPath, "StoreWindow"))
			}
			entries = append(entries, jen.Lit(r.Name).Op(":").Add(target).Call(args...))
			continue
		}
		if sharedImpl(r) && r.KeyType != "" { // sharedimpl.Keyed's, which the limiter embeds
			entries = append(entries, jen.Lit(r.Name).Op(":").Qual(sharedimplPath, "KeyedTarget").Call(jen.Id("l").Dot(r.GoName).Dot("Keyed"), keyParse(r)))
			continue
		}
		if sharedImpl(r) { // sharedimpl.Global's
			entries = append(entries, jen.Lit(r.Name).Op(":").Qual(sharedimplPath, "GlobalTarget").Call(jen.Id("l").Dot(r.GoName).Dot("Global")))
			continue
		}
		if keyedTarget(r) {
			// genimpl.Keyed's, which the limiter embeds.
			entries = append(entries, jen.Lit(r.Name).Op(":").Qual(overlayPath, "KeyedTarget").Call(jen.Id("l").Dot(r.GoName).Dot("Keyed"), keyParse(r)))
			continue
		}
		if r.KeyType == "" && !r.Planned && !r.Shared { // genimpl.Global's, which the limiter embeds
			entries = append(entries, jen.Lit(r.Name).Op(":").Qual(overlayPath, "GlobalTarget").Call(jen.Id("l").Dot(r.GoName).Dot("Global")))
			continue
		}
		g.Add(emitTarget(r))
		entries = append(entries, jen.Lit(r.Name).Op(":").Id(targetName(r)).Values(jen.Id("l").Dot(r.GoName)))
	}
	pol := jen.Dict{jen.Id("Rules"): jen.Map(jen.String()).Qual(overlayPath, "Target").Values(entries...)}
	if len(m.Plans) > 0 {
		pol[jen.Id("Plans")] = jen.Id("planNames").Index(jen.Empty(), jen.Empty())
	}
	if len(fixed) > 0 {
		pol[jen.Id("Fixed")] = jen.Map(jen.String()).String().Values(fixed...)
	}
	return g, jen.Qual(overlayPath, "NewNumbers").Call(jen.Qual(overlayPath, "Policy").Index(jen.Qual(overlayPath, "Target")).Values(pol))
}

// keyedTarget says whether r is an overlay.KeyedTarget: a keyed rule without
// plans kept in the process, whose limiter embeds genimpl.Keyed.
func keyedTarget(r model.Rule) bool { return r.KeyType != "" && !r.Planned && !r.Shared }

func targetName(r model.Rule) string {
	return strings.ToLower(r.GoName[:1]) + r.GoName[1:] + "Numbers"
}

// emitTarget is rule r as an overlay.Target.
func emitTarget(r model.Rule) jen.Code {
	name := targetName(r)
	recv := jen.Id("t").Id(name)
	g := jen.Line()
	g.Comment(fmt.Sprintf("%s is %s as an overlay Set changes it (overlay.Target).", name, r.GoName)).Line()
	g.Type().Id(name).Struct(jen.Id("l").Op("*").Id(r.TypeName())).Line().Line()
	plans := jen.Lit(0)
	var planA []jen.Code
	if r.Planned {
		plans = jen.Id("numPlans")
		planA = []jen.Code{jen.Id("Plan").Call(jen.Id("plan"))}
	}
	g.Func().Params(recv).Id("Plans").Params().Int().Block(jen.Return(plans)).Line().Line()
	g.Func().Params(recv).Id("Keyed").Params().Bool().Block(jen.Return(jen.Lit(r.KeyType != ""))).Line().Line()
	check := []jen.Code{
		jen.If(jen.List(jen.Id("_"), jen.Err()).Op(":=").Id("t").Dot("l").Dot("Rule").Call(planA...).Dot("WithNumbers").Call(jen.Id("n")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
		costCheck(r, planExpr(r)),
	}
	if r.Shared {
		var idx jen.Code = jen.Lit(r.SharedAt)
		if r.Planned {
			idx = jen.Lit(r.SharedAt).Op("+").Id("plan")
		}
		check = append(check,
			jen.List(jen.Id("nb"), jen.Err()).Op(":=").Id("t").Dot("l").Dot("sh").Dot("Numbered").Call(),
			jen.If(jen.Err().Op("!=").Nil().Op("||").Id("nb").Op("==").Nil()).Block(jen.Return(jen.Err())),
			jen.Return(jen.Id("nb").Dot("CheckNumbers").Call(idx, jen.Id("n"))))
	} else {
		check = append(check, jen.Return(jen.Nil()))
	}
	g.Func().Params(recv).Id("Check").Params(jen.Id("plan").Int(), jen.Id("n").Add(rt("Numbers"))).Error().Block(check...).Line().Line()
	// Base's Cost is the least burst the rule takes on the plan (a scaled
	// burst stays at it): a request's default cost, or the most a request
	// of its routes may cost.
	least := func(j int) int64 {
		c := max(r.Limits[j].Cost, 1)
		if j < len(r.RouteCost) {
			c = max(c, r.RouteCost[j])
		}
		return c
	}
	var cost jen.Code = jen.Lit(int(least(0)))
	if r.Planned {
		var costs []jen.Code
		same := true
		for j := range r.Limits {
			costs = append(costs, jen.Lit(int(least(j))))
			same = same && least(j) == least(0)
		}
		if !same {
			cost = jen.Index(jen.Lit(len(costs))).Int64().Values(costs...).Index(jen.Id("plan"))
		}
	}
	g.Func().Params(recv).Id("Base").Params(jen.Id("plan").Int()).Qual(overlayPath, "Base").Block(
		jen.Id("r").Op(":=").Id("t").Dot("l").Dot("Rule").Call(planA...).Dot("Limit").Call(),
		jen.Return(jen.Qual(overlayPath, "Base").Values(jen.Dict{
			jen.Id("Numbers"):  rt("NumbersOf").Call(jen.Id("r")),
			jen.Id("Cost"):     cost,
			jen.Id("Interval"): jen.Id("r").Dot("Refill").Op("==").Add(rt("Interval")),
		}))).Line().Line()
	keyed := r.KeyType != ""
	// parse is the statements that make k, the key, from key; err is set
	// for an integer key that does not parse.
	parse := func(key jen.Code) []jen.Code {
		switch {
		case !keyed:
			return nil
		case r.KeyType == "string":
			return []jen.Code{jen.Id("k").Op(":=").Add(key)}
		case r.Composite():
			return []jen.Code{
				jen.List(jen.Id("k"), jen.Err()).Op(":=").Id("Parse" + r.KeyType).Call(key),
				jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
			}
		}
		call := jen.Qual("strconv", "ParseInt")
		if strings.HasPrefix(r.KeyType, "uint") {
			call = jen.Qual("strconv", "ParseUint")
		}
		return []jen.Code{
			jen.List(jen.Id("v"), jen.Err()).Op(":=").Add(call).Call(key, jen.Lit(10), jen.Lit(bits(r.KeyType))),
			jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
			jen.Id("k").Op(":=").Id(r.KeyType).Call(jen.Id("v")),
		}
	}
	switch {
	case r.Composite():
		g.Func().Params(recv).Id("CheckKey").Params(jen.Id("key").String()).Error().Block(
			jen.List(jen.Id("_"), jen.Err()).Op(":=").Id("Parse"+r.KeyType).Call(jen.Id("key")),
			jen.Return(jen.Err())).Line().Line()
	case keyed && r.KeyType != "string":
		call := jen.Qual("strconv", "ParseInt")
		if strings.HasPrefix(r.KeyType, "uint") {
			call = jen.Qual("strconv", "ParseUint")
		}
		g.Func().Params(recv).Id("CheckKey").Params(jen.Id("key").String()).Error().Block(
			jen.List(jen.Id("_"), jen.Err()).Op(":=").Add(call).Call(jen.Id("key"), jen.Lit(10), jen.Lit(bits(r.KeyType))),
			jen.Return(jen.Err())).Line().Line()
	case keyed && r.Shared:
		g.Func().Params(recv).Id("CheckKey").Params(jen.Id("key").String()).Error().Block(
			jen.If(jen.Id("key").Op("==").Lit("").Op("||").Len(jen.Id("key")).Op(">").Qual(sharedPath, "MaxKeyLen")).Block(
				jen.Return(jen.Qual("fmt", "Errorf").Call(jen.Lit("a shared rule's key has 1 to %d bytes, not %d"), jen.Qual(sharedPath, "MaxKeyLen"), jen.Len(jen.Id("key"))))),
			jen.Return(jen.Nil())).Line().Line()
	default:
		g.Func().Params(recv).Id("CheckKey").Params(jen.Id("key").String()).Error().Block(jen.Return(jen.Nil())).Line().Line()
	}
	var carry []jen.Code
	if !r.Shared {
		carry = []jen.Code{rt("CarryAsIs")}
	}
	args := func(first []jen.Code, rest ...jen.Code) []jen.Code {
		return append(append(append([]jen.Code{}, first...), rest...), carry...)
	}
	setPlan := jen.Return(jen.Id("t").Dot("l").Dot("SetNumbers").Call(args(planA, jen.Id("n"))...))
	var clearPlan jen.Code = jen.Id("t").Dot("l").Dot("ClearNumbers").Call(args(planA)...)
	if r.Shared {
		clearPlan = jen.Id("_").Op("=").Add(clearPlan).Comment("fails only as Set failed before")
	}
	set, clr := []jen.Code{}, []jen.Code{}
	if keyed {
		var clearKey jen.Code = jen.Id("t").Dot("l").Dot("ClearKeyNumbers").Call(args(nil, jen.Id("k"))...)
		if r.Shared {
			clearKey = jen.Id("_").Op("=").Add(clearKey)
		}
		set = append(set, jen.If(jen.Id("key").Op("!=").Nil()).Block(append(parse(jen.Op("*").Id("key")),
			jen.Return(jen.Id("t").Dot("l").Dot("SetKeyNumbers").Call(args(nil, jen.Id("k"), jen.Id("n"))...)))...))
		clr = append(clr, jen.If(jen.Id("key").Op("!=").Nil()).Block(
			jen.Id("t").Dot("clearKey").Call(jen.Op("*").Id("key")),
			jen.Return()))
		g.Comment("clearKey takes key's own numbers away; a key that does not parse has none.").Line()
		g.Func().Params(recv).Id("clearKey").Params(jen.Id("key").String()).Error().Block(
			append(parse(jen.Id("key")), clearKey, jen.Return(jen.Nil()))...).Line().Line()
	}
	g.Func().Params(recv).Id("Set").Params(jen.Id("plan").Int(), jen.Id("key").Op("*").String(), jen.Id("n").Add(rt("Numbers"))).Error().Block(
		append(set, setPlan)...).Line().Line()
	g.Func().Params(recv).Id("Clear").Params(jen.Id("plan").Int(), jen.Id("key").Op("*").String()).Block(
		append(clr, clearPlan)...).Line()
	return g
}

// bits is an integer key type's size for strconv (0: int's).
func bits(typ string) int {
	n, _ := strconv.Atoi(strings.TrimLeft(typ, "uint"))
	return n
}

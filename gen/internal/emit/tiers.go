package emit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

func emitTierDecision() jen.Code {
	return jen.Line().
		Comment("TierDecision is the outcome of a tier: the decision of the rule that denied, or, when every").Line().
		Comment("rule allowed, of the most constraining one (the fewest tokens remaining; the first on a tie).").Line().
		Type().Id("TierDecision").Struct(
		rt("Decision"),
		jen.Id("Rule").Id("RuleName").Comment("the rule whose decision this is"),
		jen.Id("DeniedBy").Id("RuleName").Comment("the rule that denied; zero when allowed"),
	).Line()
}

func emitTier(m *model.Model, t model.Tier) jen.Code {
	if len(t.Rules) == 0 { // in-flight rules only
		return emitTierSlots(m, t)
	}
	planned := false
	for _, ri := range t.Rules {
		planned = planned || m.Rules[ri].Planned
	}
	// The tier's parameters: the plan when a rule differs by plan, then one key
	// per keyed rule; the forms add now and cost.
	var names []string
	var types []jen.Code
	if planned {
		names, types = append(names, "plan"), append(types, jen.Id("Plan"))
	}
	for _, ri := range t.Rules {
		if r := m.Rules[ri]; r.KeyType != "" {
			names, types = append(names, r.Unexported()+"Key"), append(types, jen.Id(r.KeyType))
		}
	}
	decl := func(extra ...string) []jen.Code {
		var out []jen.Code
		for i, n := range append(append([]string{}, names...), extra...) {
			switch {
			case i < len(names):
				out = append(out, jen.Id(n).Add(types[i]))
			case n == "now":
				out = append(out, jen.Id(n).Add(rt("Time")))
			default:
				out = append(out, jen.Id(n).Int64())
			}
		}
		return out
	}
	use := func(extra ...jen.Code) []jen.Code {
		var out []jen.Code
		for _, n := range names {
			out = append(out, jen.Id(n))
		}
		return append(out, extra...)
	}
	forms := []struct {
		name, doc string
		extra     []string   // parameters after the keys
		core      []jen.Code // the core's now, cost and defaults
	}{
		{t.GoName, t.Doc, nil, []jen.Code{rt("Now").Call(), jen.Lit(0), jen.True()}},
		{t.NName(), fmt.Sprintf("%s is %s with a cost every rule is charged instead of its default.", t.NName(), t.GoName),
			[]string{"cost"}, []jen.Code{rt("Now").Call(), jen.Id("cost"), jen.False()}},
		{t.AtName(), fmt.Sprintf("%s is %s at time now.", t.AtName(), t.GoName), []string{"now"}, []jen.Code{jen.Id("now"), jen.Lit(0), jen.True()}},
		{t.NAtName(), fmt.Sprintf("%s is %s at time now.", t.NAtName(), t.NName()), []string{"now", "cost"}, []jen.Code{jen.Id("now"), jen.Id("cost"), jen.False()}},
	}
	if t.Shared {
		// The store forms take the tier's names (emitSharedTier); these, which
		// decide in this process only, are named so, and only on Limits.
		local := fmt.Sprintf(" It decides in this process only, with the whole limits, on the rules' Local limiters: the "+
			"store's tier is %s.", t.GoName)
		forms[0].name, forms[0].doc = t.LocalName(), fmt.Sprintf("%s checks a request against %s as %s does.%s",
			t.LocalName(), strings.Join(tierRuleNames(m, t), ", "), t.GoName, local)
		forms[1].name, forms[1].doc = t.LocalNName(), fmt.Sprintf("%s is %s with a cost every rule is charged instead of its default.", t.LocalNName(), t.LocalName())
		forms[2].name, forms[2].doc = t.LocalAtName(), fmt.Sprintf("%s is %s at time now.", t.LocalAtName(), t.LocalName())
		forms[3].name, forms[3].doc = t.LocalNAtName(), fmt.Sprintf("%s is %s at time now.", t.LocalNAtName(), t.LocalNName())
	}
	g := jen.Line()
	if len(t.Slots) > 0 { // the forms acquire the slots first (emitTierSlots): the core is what they check
		forms = nil
	}
	for _, f := range forms {
		var fargs []jen.Code
		for _, n := range f.extra {
			fargs = append(fargs, jen.Id(n))
		}
		fparams := decl(f.extra...)
		if !t.Shared {
			g.Add(comment(f.doc + " It uses Default."))
			g.Func().Id(f.name).Params(fparams...).Id("TierDecision").Block(
				jen.Return(jen.Id("Default").Dot(f.name).Call(use(fargs...)...))).Line().Line()
		}
		g.Add(comment(f.doc))
		g.Func().Params(jen.Id("l").Op("*").Id("Limits")).Id(f.name).Params(fparams...).Id("TierDecision").Block(
			jen.Return(jen.Id("l").Dot(t.CoreName()).Call(use(f.core...)...))).Line().Line()
	}

	// The one implementation per tier: each rule in order, all or nothing.
	g.Add(comment(fmt.Sprintf("%s is %s with each rule charged cost, or its own default cost when defaults is set. "+
		"It is tier.At unrolled, with typed calls: keep the two in step.", t.CoreName(), t.GoName)))
	var body []jen.Code
	if planned {
		first := m.Rules[t.Rules[0]]
		for _, ri := range t.Rules {
			if m.Rules[ri].Planned {
				first = m.Rules[ri]
				break
			}
		}
		body = append(body, jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(jen.Id("TierDecision").Add(fields(
			field("Decision", rt("Decision").Values(jen.Dict{jen.Id("RetryAfter"): rt("Never")})),
			field("Rule", jen.Id(first.RuleConst())), field("DeniedBy", jen.Id(first.RuleConst())))))))
	}
	callArgs := tierCallArgs
	var cs, costs, defaults []jen.Code
	for i, ri := range t.Rules {
		cs = append(cs, jen.Id(fmt.Sprintf("c%d", i)))
		costs = append(costs, jen.Id("cost"))
		defaults = append(defaults, costExpr(m.Rules[ri]))
	}
	body = append(body, jen.List(cs...).Op(":=").List(costs...),
		jen.If(jen.Id("defaults")).Block(jen.List(cs...).Op("=").List(defaults...)))
	limiter := func(r model.Rule) *jen.Statement { // the rule's process-local limiter
		if r.Shared {
			return jen.Id("l").Dot(r.GoName).Dot("local")
		}
		return jen.Id("l").Dot(r.GoName)
	}
	denied := func(d jen.Code, r model.Rule) jen.Code {
		return jen.Return(jen.Id("TierDecision").Add(fields(
			field("Decision", d), field("Rule", jen.Id(r.RuleConst())), field("DeniedBy", jen.Id(r.RuleConst())))))
	}
	// Windows cannot give back what they take: each is looked at before
	// anything is taken, and taken from last (tier.At).
	for i, ri := range t.Rules {
		if r := m.Rules[ri]; r.IsWindow() {
			p := jen.Id(fmt.Sprintf("p%d", i))
			body = append(body, p.Clone().Op(":=").Add(limiter(r)).Dot("PeekAt").Call(append(callArgs(r), jen.Id("now"), jen.Id(fmt.Sprintf("c%d", i)))...),
				jen.If(jen.Op("!").Add(p.Clone()).Dot("Allowed")).Block(denied(p.Clone(), r)))
		}
	}
	var taken []int // the buckets taken from so far, in order
	take := func(i int, r model.Rule) {
		d := jen.Id(fmt.Sprintf("d%d", i))
		body = append(body, d.Clone().Op(":=").Add(limiter(r)).Dot("AllowNAt").Call(append(callArgs(r), jen.Id("now"), jen.Id(fmt.Sprintf("c%d", i)))...))
		var undo []jen.Code
		for j := len(taken) - 1; j >= 0; j-- {
			prev := m.Rules[t.Rules[taken[j]]]
			undo = append(undo, limiter(prev).Dot("RefundAt").Call(append(callArgs(prev), jen.Id("now"), jen.Id(fmt.Sprintf("c%d", taken[j])))...))
		}
		body = append(body, jen.If(jen.Op("!").Add(d.Clone()).Dot("Allowed")).Block(append(undo, denied(d.Clone(), r))...))
		if !r.IsWindow() {
			taken = append(taken, i)
		}
	}
	for i, ri := range t.Rules {
		if r := m.Rules[ri]; !r.IsWindow() {
			take(i, r)
		}
	}
	for i, ri := range t.Rules {
		if r := m.Rules[ri]; r.IsWindow() {
			take(i, r)
		}
	}
	// Every rule allowed: report the most constraining one (the fewest remaining;
	// the earliest on a tie), which is what rate-limit headers should show.
	body = append(body, jen.List(jen.Id("most"), jen.Id("rule")).Op(":=").List(jen.Id("d0"), jen.Id(m.Rules[t.Rules[0]].RuleConst())))
	for i := 1; i < len(t.Rules); i++ {
		d := jen.Id(fmt.Sprintf("d%d", i))
		body = append(body, jen.If(d.Clone().Dot("Remaining").Op("<").Id("most").Dot("Remaining")).Block(
			jen.List(jen.Id("most"), jen.Id("rule")).Op("=").List(d.Clone(), jen.Id(m.Rules[t.Rules[i]].RuleConst()))))
	}
	body = append(body, jen.Return(jen.Id("TierDecision").Values(field("Decision", jen.Id("most")), field("Rule", jen.Id("rule")))))
	g.Func().Params(jen.Id("l").Op("*").Id("Limits")).Id(t.CoreName()).Params(append(decl("now", "cost"), jen.Id("defaults").Bool())...).Id("TierDecision").Block(body...).Line()
	if t.Shared {
		g.Add(emitSharedTier(m, t, planned, decl, use, defaults))
	}
	if len(t.Slots) > 0 {
		g.Add(emitTierSlots(m, t))
	}
	return g
}

// tierSlotsShared says whether one of tier t's in-flight rules is shared.
func tierSlotsShared(m *model.Model, t model.Tier) bool {
	for _, ri := range t.Slots {
		if m.Rules[ri].Shared {
			return true
		}
	}
	return false
}

// emitTierSlots is a tier with in-flight rules: its forms take each
// in-flight rule's slot first, in order, then check the rate rules (the
// tier's core), giving every slot back when one cannot be had or a rate rule
// denies: all or nothing. They return the slots, to release when the request
// ends, with the decision.
func emitTierSlots(m *model.Model, t model.Tier) jen.Code {
	planned, ratesPlanned := false, false
	for _, ri := range t.Rules {
		ratesPlanned = ratesPlanned || m.Rules[ri].Planned
	}
	planned = ratesPlanned
	for _, ri := range t.Slots {
		planned = planned || m.Rules[ri].Planned
	}
	store := t.Shared || tierSlotsShared(m, t) // the forms take a context, and say whether the store decided
	result := "TierDecision"
	if store {
		result = "TierResult"
	}
	// The first slot's rule waits (the policy puts a waiting rule first).
	waits := len(t.Slots) > 0 && m.Rules[t.Slots[0]].Waits()
	var params, args []jen.Code // the plan, then a key per keyed rule: the rate rules', then the slots'
	if store {
		params = append(params, jen.Id("ctx").Qual("context", "Context"))
	}
	if planned {
		params = append(params, jen.Id("plan").Id("Plan"))
	}
	if ratesPlanned { // the core takes the plan
		args = append(args, jen.Id("plan"))
	}
	var rateArgs []jen.Code
	for _, ri := range append(slices.Clone(t.Rules), t.Slots...) {
		if r := m.Rules[ri]; r.KeyType != "" {
			params = append(params, jen.Id(r.Unexported()+"Key").Id(r.KeyType))
			if !r.IsInFlight() {
				rateArgs = append(rateArgs, jen.Id(r.Unexported()+"Key"))
			}
		}
	}
	set := jen.Qual(slotPath, "Set")
	decision := func(d, rule jen.Code, denied bool) jen.Code {
		f := []jen.Code{field("Decision", d), field("Rule", rule)}
		if denied {
			f = append(f, field("DeniedBy", rule))
		}
		return jen.Id("TierDecision").Add(fields(f...))
	}
	wrap := func(td jen.Code) jen.Code { // the form's result of a TierDecision
		if !store {
			return td
		}
		return jen.Id("TierResult").Values(jen.Dict{jen.Id("TierDecision"): td, jen.Id("Degraded"): jen.Id("deg"), jen.Id("Err"): jen.Id("err")})
	}
	g := jen.Line()
	for _, form := range []struct {
		name, doc string
		cost, at  bool
	}{
		{t.GoName, t.Doc, false, false},
		{t.NName(), fmt.Sprintf("%s is %s with a cost every rate rule is charged instead of its default.", t.NName(), t.GoName), true, false},
		{t.AtName(), fmt.Sprintf("%s is %s at time now.", t.AtName(), t.GoName), false, true},
		{t.NAtName(), fmt.Sprintf("%s is %s at time now.", t.NAtName(), t.NName()), true, true},
	} {
		if form.cost && len(t.Rules) == 0 || form.at && store {
			continue // no rate rule to charge; the store's clock decides
		}
		ps := slices.Clone(params)
		if waits && !store && !form.at { // the forms on the clock wait, in a context; those at a time do not
			ps = append([]jen.Code{jen.Id("ctx").Qual("context", "Context")}, ps...)
		}
		if form.at {
			ps = append(ps, jen.Id("now").Add(rt("Time")))
		}
		if form.cost {
			ps = append(ps, jen.Id("cost").Int64())
		}
		body := []jen.Code{jen.Var().Id("set").Add(set)}
		if !form.at {
			body = append([]jen.Code{jen.Id("now").Op(":=").Add(rt("Now")).Call()}, body...)
		}
		if store {
			body = append(body, jen.Var().Id("deg").Bool(), jen.Var().Err().Error())
		}
		var ds []jen.Code // the slots' decisions
		for k, ri := range t.Slots {
			r := m.Rules[ri]
			sv, dv := jen.Id(fmt.Sprintf("s%d", k)), jen.Id(fmt.Sprintf("d%d", k))
			var key []jen.Code
			if r.Planned {
				key = append(key, jen.Id("plan"))
			}
			if r.KeyType != "" {
				key = append(key, jen.Id(r.Unexported()+"Key"))
			}
			var planA []jen.Code
			if r.Planned {
				planA = []jen.Code{jen.Id("plan")}
			}
			wait := k == 0 && waits && !form.at
			if r.Shared {
				rv := jen.Id(fmt.Sprintf("r%d", k))
				acquire := jen.Id("l").Dot(r.GoName).Dot("Acquire").Call(append([]jen.Code{jen.Id("ctx")}, key...)...)
				if wait {
					acquire = jen.Id("l").Dot(r.GoName).Dot("AcquireWait").Call(append(append([]jen.Code{jen.Id("ctx")}, key...), jen.Id("l").Dot(r.GoName).Dot("MaxWait").Call(planA...))...)
				}
				body = append(body,
					jen.List(sv.Clone(), rv.Clone()).Op(":=").Add(acquire),
					dv.Clone().Op(":=").Add(rv.Clone()).Dot("Decision"),
					jen.If(rv.Clone().Dot("Degraded")).Block(jen.List(jen.Id("deg"), jen.Err()).Op("=").List(jen.True(), rv.Clone().Dot("Err"))))
				deny := jen.Id("TierResult").Values(jen.Dict{
					jen.Id("TierDecision"): decision(dv.Clone(), jen.Id(r.RuleConst()), true),
					jen.Id("Degraded"):     rv.Clone().Dot("Degraded"), jen.Id("Outage"): rv.Clone().Dot("Outage"), jen.Id("Err"): rv.Clone().Dot("Err")})
				body = append(body, jen.If(jen.Op("!").Add(dv.Clone()).Dot("Allowed")).Block(
					jen.Id("set").Dot("ReleaseAt").Call(jen.Id("now")), jen.Return(set.Clone().Values(), deny)))
			} else {
				acquire := jen.Id("l").Dot(r.GoName).Dot("AcquireAt").Call(append(key, jen.Id("now"))...)
				if wait { // on the real clock: the time the wait ends is the tier's now
					acquire = jen.Id("l").Dot(r.GoName).Dot("AcquireWait").Call(append(append([]jen.Code{jen.Id("ctx")}, key...), jen.Id("l").Dot(r.GoName).Dot("MaxWait").Call(planA...))...)
				}
				body = append(body,
					jen.List(sv.Clone(), dv.Clone()).Op(":=").Add(acquire),
					jen.If(jen.Op("!").Add(dv.Clone()).Dot("Allowed")).Block(
						jen.Id("set").Dot("ReleaseAt").Call(jen.Id("now")), jen.Return(set.Clone().Values(), wrap(decision(dv.Clone(), jen.Id(r.RuleConst()), true)))))
			}
			body = append(body, jen.Id("set").Dot("Add").Call(sv.Clone()))
			if wait && !r.Shared { // the rate rules decide when the wait ended: a second reading, on a form that may block
				body = append(body, jen.Id("now").Op("=").Add(rt("Now")).Call())
			}
			ds = append(ds, dv)
		}
		if len(t.Rules) == 0 { // the most constraining slot's decision: the fewest free
			body = append(body, jen.List(jen.Id("most"), jen.Id("rule")).Op(":=").List(ds[0], jen.Id(m.Rules[t.Slots[0]].RuleConst())))
			for k := 1; k < len(ds); k++ {
				body = append(body, jen.If(jen.Add(ds[k]).Dot("Remaining").Op("<").Id("most").Dot("Remaining")).Block(
					jen.List(jen.Id("most"), jen.Id("rule")).Op("=").List(ds[k], jen.Id(m.Rules[t.Slots[k]].RuleConst()))))
			}
			body = append(body, jen.Return(jen.Id("set"), wrap(decision(jen.Id("most"), jen.Id("rule"), false))))
		} else {
			cost := []jen.Code{jen.Lit(0), jen.True()}
			if form.cost {
				cost = []jen.Code{jen.Id("cost"), jen.False()}
			}
			if t.Shared {
				body = append(body, jen.Id("tr").Op(":=").Id("l").Dot(t.SharedCoreName()).Call(append(append([]jen.Code{jen.Id("ctx")}, args...), append(rateArgs, cost...)...)...),
					jen.If(jen.Id("deg").Op("&&").Op("!").Id("tr").Dot("Degraded")).Block(jen.List(jen.Id("tr").Dot("Degraded"), jen.Id("tr").Dot("Err")).Op("=").List(jen.True(), jen.Err())))
			} else {
				body = append(body, jen.Id("td").Op(":=").Id("l").Dot(t.CoreName()).Call(append(append(slices.Clone(args), rateArgs...), append([]jen.Code{jen.Id("now")}, cost...)...)...))
				if store {
					body = append(body, jen.Id("tr").Op(":=").Id("TierResult").Values(jen.Dict{jen.Id("TierDecision"): jen.Id("td"), jen.Id("Degraded"): jen.Id("deg"), jen.Id("Err"): jen.Err()}))
				}
			}
			out := jen.Id("td")
			if store {
				out = jen.Id("tr")
			}
			body = append(body, jen.If(jen.Op("!").Add(out.Clone()).Dot("Allowed")).Block(
				jen.Id("set").Dot("ReleaseAt").Call(jen.Id("now")), jen.Return(set.Clone().Values(), out.Clone())),
				jen.Return(jen.Id("set"), out.Clone()))
		}
		doc := form.doc
		if !form.cost && !form.at {
			slots := "a slot of " + strings.Join(ruleNamesOf(m, t.Slots), "")
			if len(t.Slots) > 1 {
				slots = "a slot of each of " + strings.Join(ruleNamesOf(m, t.Slots), ", ") + ", in order,"
			}
			doc = fmt.Sprintf("%s takes %s then checks the request against %s: all or nothing "+
				"(a slot that cannot be had, or a rate rule that denies, gives back every slot taken, and a full set of slots "+
				"charges no rate rule). It returns the slots, to release when the request ends (Set.Release), with the "+
				"decision of the rule that denied, or of the most constraining one.", t.GoName, slots,
				map[bool]string{true: strings.Join(ruleNamesOf(m, t.Rules), ", "), false: "nothing more"}[len(t.Rules) > 0])
			if store {
				doc += " It never fails: when a store cannot decide, the rules' on_failure settings do, and the result says so (Degraded, Err)."
			}
		}
		g.Add(comment(doc))
		g.Func().Params(jen.Id("l").Op("*").Id("Limits")).Id(form.name).Params(ps...).Params(set.Clone(), jen.Id(result)).Block(body...).Line().Line()
	}
	return g
}

// ruleNamesOf are the names of rules.
func ruleNamesOf(m *model.Model, rules []int) []string {
	var names []string
	for _, ri := range rules {
		names = append(names, m.Rules[ri].Name)
	}
	return names
}

// emitSharedTier is a tier of shared rules' store forms: one store call, all
// or nothing, or the local tier without a store.
func emitSharedTier(m *model.Model, t model.Tier, planned bool, decl func(...string) []jen.Code,
	use func(...jen.Code) []jen.Code, defaults []jen.Code) jen.Code {
	g := jen.Line()
	ctxParam := jen.Id("ctx").Qual("context", "Context")
	withCtx := func(list []jen.Code) []jen.Code { return append([]jen.Code{jen.Id("ctx")}, list...) }
	forms := []struct {
		name, doc string
		extra     []string
		core      []jen.Code
	}{
		{t.GoName, fmt.Sprintf("%s checks a request against %s on the store given to New, all or nothing, in one call "+
			"where the store can (on a Redis Cluster, one per slot, with refunds), so that the tier holds across every "+
			"instance. It never fails: when the store cannot decide, the rules' on_failure settings do, and the result "+
			"says so (Degraded, Err). Without a store, %s decides and Err is SharedErr's error.",
			t.GoName, strings.Join(tierRuleNames(m, t), ", "), t.LocalName()), nil, []jen.Code{jen.Lit(0), jen.True()}},
		{t.NName(), fmt.Sprintf("%s is %s with a cost every rule is charged instead of its default.", t.NName(), t.GoName),
			[]string{"cost"}, []jen.Code{jen.Id("cost"), jen.False()}},
	}
	// The stores the tier's shared rules are on ("" for WithStore's), in
	// the order the tier first names them: one call a store.
	var stores []string
	for _, ri := range t.Rules {
		if r := m.Rules[ri]; r.Shared && !slices.Contains(stores, r.Store) {
			stores = append(stores, r.Store)
		}
	}
	onStores := "on the store given to New in one call"
	if len(stores) > 1 {
		var names []string
		for _, st := range stores {
			if st == "" {
				st = "WithStore's"
			}
			names = append(names, st)
		}
		onStores = "on their stores (" + strings.Join(names, ", ") + "), one call a store in that order"
		forms[0].doc = fmt.Sprintf("%s checks a request against %s on their stores (%s), one call a store in that order, "+
			"all or nothing: when a store denies, the stores asked before it get back what they took (at best effort, never "+
			"more than they took). It never fails: when a store cannot decide, the rules' on_failure settings do, and the "+
			"result says so (Degraded, Err). Without a store, %s decides and Err is SharedErr's error.",
			t.GoName, strings.Join(tierRuleNames(m, t), ", "), strings.Join(names, ", "), t.LocalName())
	}
	if t.Local {
		var local, store []string
		for _, ri := range t.Rules {
			if r := m.Rules[ri]; r.Shared {
				store = append(store, r.GoName)
			} else {
				local = append(local, r.GoName)
			}
		}
		forms[0].doc = fmt.Sprintf("%s checks a request against %s, all or nothing: %s in this process and %s "+onStores+". Local windows are looked at first, local buckets take next (a request they deny never "+
			"reaches the store), the store decides, and when it denies the local buckets get back what they took; local "+
			"windows count last (should one deny then, the buckets and the store get back what they took: the store at best "+
			"effort, never more than it took). It never fails: when the store cannot decide, the shared rules' on_failure "+
			"settings do, and the result says so (Degraded, Err). Without a store, %s decides and Err is SharedErr's error.",
			t.GoName, strings.Join(tierRuleNames(m, t), ", "), strings.Join(local, ", "), strings.Join(store, ", "), t.LocalName())
	}
	if len(t.Slots) > 0 { // the forms acquire the slots first (emitTierSlots): the shared core is what they check
		forms = forms[:0]
	}
	for _, f := range forms {
		var fargs []jen.Code
		for _, n := range f.extra {
			fargs = append(fargs, jen.Id(n))
		}
		params := append([]jen.Code{ctxParam}, decl(f.extra...)...)
		g.Add(comment(f.doc + " It uses Default."))
		g.Func().Id(f.name).Params(params...).Id("TierResult").Block(
			jen.Return(jen.Id("Default").Dot(f.name).Call(withCtx(use(fargs...))...))).Line().Line()
		g.Add(comment(f.doc))
		g.Func().Params(jen.Id("l").Op("*").Id("Limits")).Id(f.name).Params(params...).Id("TierResult").Block(
			jen.Return(jen.Id("l").Dot(t.SharedCoreName()).Call(withCtx(use(f.core...))...))).Line().Line()
	}

	var body []jen.Code
	inProcess := jen.Id("l").Dot("shared").Dot("Bound").Op("==").Nil() // no store, or one that refused the rules
	if m.Shared == 0 {                                                 // shared windows only: no binding of buckets
		inProcess = jen.Id("l").Dot("shared").Dot("Why").Op("!=").Nil()
	}
	body = append(body, jen.If(inProcess).Block(
		jen.Return(jen.Id("TierResult").Values(jen.Dict{
			jen.Id("TierDecision"): jen.Id("l").Dot(t.CoreName()).Call(use(rt("Now").Call(), jen.Id("cost"), jen.Id("defaults"))...),
			jen.Id("Err"):          jen.Id("l").Dot("shared").Dot("Why"),
		}))))
	if planned {
		first := m.Rules[t.Rules[0]]
		body = append(body, jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(jen.Id("TierResult").Values(jen.Dict{
			jen.Id("TierDecision"): jen.Id("TierDecision").Add(fields(
				field("Decision", rt("Decision").Values(jen.Dict{jen.Id("RetryAfter"): rt("Never")})),
				field("Rule", jen.Id(first.RuleConst())), field("DeniedBy", jen.Id(first.RuleConst())))),
		}))))
	}
	var cs, costs, steps, ruleNames []jen.Code
	for i, ri := range t.Rules {
		r := m.Rules[ri]
		cs = append(cs, jen.Id(fmt.Sprintf("c%d", i)))
		costs = append(costs, jen.Id("cost"))
		if !r.Shared || r.IsWindow() {
			continue
		}
		var idx jen.Code = jen.Lit(r.SharedAt)
		if r.Planned {
			idx = jen.Lit(r.SharedAt).Op("+").Int().Call(jen.Id("plan"))
		}
		steps = append(steps, jen.Values(jen.Dict{jen.Id("Rule"): idx, jen.Id("Key"): sharedKey(r, jen.Id(r.Unexported()+"Key")), jen.Id("Cost"): jen.Id(fmt.Sprintf("c%d", i))}))
		ruleNames = append(ruleNames, jen.Id(r.RuleConst()))
	}
	body = append(body,
		jen.List(cs...).Op(":=").List(costs...),
		jen.If(jen.Id("defaults")).Block(jen.List(cs...).Op("=").List(defaults...)))
	result := func(td jen.Code, store bool) jen.Code {
		d := jen.Dict{jen.Id("TierDecision"): td}
		if store {
			d[jen.Id("Degraded")] = jen.Id("res").Dot("Degraded")
			d[jen.Id("Outage")] = jen.Id("res").Dot("Outage")
			d[jen.Id("Err")] = jen.Id("res").Dot("Err")
		}
		return jen.Id("TierResult").Values(d)
	}
	sharedWindows := false
	for _, ri := range t.Rules {
		sharedWindows = sharedWindows || m.Rules[ri].Shared && m.Rules[ri].IsWindow()
	}
	if !t.Local && !sharedWindows {
		body = append(body,
			jen.List(jen.Id("res"), jen.Id("i")).Op(":=").Id("l").Dot("shared").Dot("Bound").Dot("Check").Call(jen.Id("ctx"), jen.Index().Qual(sharedPath, "Step").Values(steps...)),
			jen.Id("rules").Op(":=").Index(jen.Lit(len(ruleNames))).Id("RuleName").Values(ruleNames...),
			jen.If(jen.Id("i").Op("<").Lit(0).Op("||").Id("i").Op(">=").Len(jen.Id("rules"))).Block(jen.Id("i").Op("=").Lit(0)),
			jen.Id("td").Op(":=").Id("TierDecision").Values(jen.Dict{jen.Id("Decision"): jen.Id("res").Dot("Decision"), jen.Id("Rule"): jen.Id("rules").Index(jen.Id("i"))}),
			jen.If(jen.Op("!").Id("res").Dot("Allowed")).Block(jen.Id("td").Dot("DeniedBy").Op("=").Id("rules").Index(jen.Id("i"))),
			jen.Return(result(jen.Id("td"), true)),
		)
	} else {
		body = append(body, mixedTier(m, t, steps, ruleNames, result)...)
	}
	g.Add(comment(fmt.Sprintf("%s is %s's store call, with each rule charged cost, or its own default cost when defaults is set.", t.SharedCoreName(), t.GoName)))
	g.Func().Params(jen.Id("l").Op("*").Id("Limits")).Id(t.SharedCoreName()).Params(append(append([]jen.Code{ctxParam}, decl("cost")...), jen.Id("defaults").Bool())...).Id("TierResult").Block(body...).Line()
	return g
}

// mixedTier is the rest of a mixed tier's store form, after its costs: the
// local rules decided around the store's call, all or nothing. Local windows
// are looked at first; local buckets take next (each denial giving back what
// earlier ones took, as a local tier does), so a request a local rule denies
// never reaches the store; then the store decides the shared rules in one
// call, and when it denies, the local buckets get their tokens back; local
// windows, which cannot give back, count last, and should one deny after its
// look (a concurrent request took the room), the local buckets and the store
// get back what they took (Bound.Refund: best effort, never more than taken).
// Every part decides at the same now, read once.
func mixedTier(m *model.Model, t model.Tier, steps, sharedNames []jen.Code, result func(jen.Code, bool) jen.Code) []jen.Code {
	callArgs := tierCallArgs
	at := func(r model.Rule, i int) []jen.Code {
		return append(callArgs(r), jen.Id("now"), jen.Id(fmt.Sprintf("c%d", i)))
	}
	denied := func(d jen.Code, rule jen.Code) jen.Code {
		return jen.Id("TierDecision").Values(jen.Dict{jen.Id("Decision"): d, jen.Id("Rule"): rule, jen.Id("DeniedBy"): rule})
	}
	var body []jen.Code
	if t.Local { // the local rules decide at one instant
		body = append(body, jen.Id("now").Op(":=").Add(rt("Now")).Call())
	}
	for i, ri := range t.Rules {
		if r := m.Rules[ri]; !r.Shared && r.IsWindow() {
			p := jen.Id(fmt.Sprintf("p%d", i))
			body = append(body, p.Clone().Op(":=").Id("l").Dot(r.GoName).Dot("PeekAt").Call(at(r, i)...),
				jen.If(jen.Op("!").Add(p.Clone()).Dot("Allowed")).Block(jen.Return(result(denied(p.Clone(), jen.Id(r.RuleConst())), false))))
		}
	}
	var taken []int
	undo := func() []jen.Code {
		var u []jen.Code
		for j := len(taken) - 1; j >= 0; j-- {
			prev := m.Rules[t.Rules[taken[j]]]
			u = append(u, jen.Id("l").Dot(prev.GoName).Dot("RefundAt").Call(at(prev, taken[j])...))
		}
		return u
	}
	for i, ri := range t.Rules {
		if r := m.Rules[ri]; !r.Shared && !r.IsWindow() {
			d := jen.Id(fmt.Sprintf("d%d", i))
			body = append(body, d.Clone().Op(":=").Id("l").Dot(r.GoName).Dot("AllowNAt").Call(at(r, i)...),
				jen.If(jen.Op("!").Add(d.Clone()).Dot("Allowed")).Block(append(undo(), jen.Return(result(denied(d.Clone(), jen.Id(r.RuleConst())), false)))...))
			taken = append(taken, i)
		}
	}
	buckets := len(steps) > 0 // shared bucket rules: one store call
	if buckets {
		body = append(body,
			jen.Id("steps").Op(":=").Index().Qual(sharedPath, "Step").Values(steps...),
			jen.List(jen.Id("res"), jen.Id("i")).Op(":=").Id("l").Dot("shared").Dot("Bound").Dot("Check").Call(jen.Id("ctx"), jen.Id("steps")),
			jen.Id("storeRules").Op(":=").Index(jen.Lit(len(sharedNames))).Id("RuleName").Values(sharedNames...),
			jen.If(jen.Id("i").Op("<").Lit(0).Op("||").Id("i").Op(">=").Len(jen.Id("storeRules"))).Block(jen.Id("i").Op("=").Lit(0)),
			jen.If(jen.Op("!").Id("res").Dot("Allowed")).Block(append(undo(), jen.Return(result(denied(jen.Id("res").Dot("Decision"), jen.Id("storeRules").Index(jen.Id("i"))), true)))...),
		)
	} else {
		body = append(body, jen.Var().Id("res").Add(vd("Result")).Comment("the shared windows' degradation, merged"))
	}
	back := func() []jen.Code { // what a later denial gives back: the local buckets, and the store's buckets
		b := undo()
		if buckets {
			b = append(b, jen.Id("_").Op("=").Id("l").Dot("shared").Dot("Bound").Dot("Refund").Call(jen.Id("ctx"), jen.Id("steps")).Comment("best effort: a store that cannot refund keeps what it took"))
		}
		return b
	}
	// Shared windows count on the store when asked (a store's window has no
	// look): after the buckets, each in turn; one that denies gives the
	// buckets back, the windows asked before it keep their count. Each
	// admission's mark, where its store counted it, goes in the tier's for
	// a settlement (TierResult.Mark).
	var marks []jen.Code
	for i, ri := range t.Rules {
		if r := m.Rules[ri]; r.Shared && r.IsWindow() {
			w := jen.Id(fmt.Sprintf("w%d", i))
			args := append([]jen.Code{jen.Id("ctx")}, callArgs(r)...)
			marks = append(marks, jen.Id(fmt.Sprintf("m%d", i)))
			body = append(body, jen.List(w.Clone(), jen.Id(fmt.Sprintf("m%d", i))).Op(":=").Id("l").Dot(r.GoName).Dot("AllowNMark").Call(append(args, jen.Id(fmt.Sprintf("c%d", i)))...),
				jen.If(w.Clone().Dot("Degraded").Op("&&").Op("!").Id("res").Dot("Degraded")).Block(
					jen.List(jen.Id("res").Dot("Degraded"), jen.Id("res").Dot("Err")).Op("=").List(jen.True(), w.Clone().Dot("Err"))),
				jen.If(jen.Op("!").Add(w.Clone()).Dot("Allowed")).Block(append(back(), jen.Return(jen.Id("TierResult").Values(jen.Dict{
					jen.Id("TierDecision"): denied(w.Clone().Dot("Decision"), jen.Id(r.RuleConst())),
					jen.Id("Degraded"):     jen.Id("res").Dot("Degraded"),
					jen.Id("Outage"):       w.Clone().Dot("Outage"),
					jen.Id("Err"):          jen.Id("res").Dot("Err"),
				})))...))
		}
	}
	for i, ri := range t.Rules {
		if r := m.Rules[ri]; !r.Shared && r.IsWindow() {
			d := jen.Id(fmt.Sprintf("d%d", i))
			body = append(body, d.Clone().Op(":=").Id("l").Dot(r.GoName).Dot("AllowNAt").Call(at(r, i)...),
				jen.If(jen.Op("!").Add(d.Clone()).Dot("Allowed")).Block(append(back(), jen.Return(result(denied(d.Clone(), jen.Id(r.RuleConst())), true)))...))
		}
	}
	// Every rule allowed: the most constraining (fewest remaining, the
	// earliest in the tier on a tie), the store's deciding rule standing at
	// the place of the tier's first shared rule.
	type cand struct{ d, rule jen.Code }
	var cands []cand
	storeSeen := false
	for i, ri := range t.Rules {
		r := m.Rules[ri]
		switch {
		case !r.Shared:
			cands = append(cands, cand{jen.Id(fmt.Sprintf("d%d", i)), jen.Id(r.RuleConst())})
		case r.IsWindow():
			cands = append(cands, cand{jen.Id(fmt.Sprintf("w%d", i)).Dot("Decision"), jen.Id(r.RuleConst())})
		case !storeSeen:
			storeSeen = true
			cands = append(cands, cand{jen.Id("res").Dot("Decision"), jen.Id("storeRules").Index(jen.Id("i"))})
		}
	}
	body = append(body, jen.List(jen.Id("most"), jen.Id("rule")).Op(":=").List(cands[0].d, cands[0].rule))
	for _, c := range cands[1:] {
		body = append(body, jen.If(jen.Add(c.d).Dot("Remaining").Op("<").Id("most").Dot("Remaining")).Block(
			jen.List(jen.Id("most"), jen.Id("rule")).Op("=").List(c.d, c.rule)))
	}
	admitted := jen.Dict{
		jen.Id("TierDecision"): jen.Id("TierDecision").Values(jen.Dict{jen.Id("Decision"): jen.Id("most"), jen.Id("Rule"): jen.Id("rule")}),
		jen.Id("Degraded"):     jen.Id("res").Dot("Degraded"),
		jen.Id("Outage"):       jen.Id("res").Dot("Outage"),
		jen.Id("Err"):          jen.Id("res").Dot("Err"),
	}
	mark := jen.Dict{}
	if t.Local {
		mark[jen.Id("At")] = jen.Id("now")
	}
	if len(marks) > 0 {
		mark[jen.Id("Windows")] = jen.Op("&").Index(vd("MaxWindowMarks")).Add(vd("WindowMark")).Values(marks...)
	}
	if len(mark) > 0 {
		admitted[jen.Id("Mark")] = vd("Mark").Values(mark)
	}
	return append(body, jen.Return(jen.Id("TierResult").Values(admitted)))
}

// newStateParams are newSharedState's parameters: the default store, and the
// named ones when the policy names stores.
func newStateParams(named bool) []jen.Code {
	ps := []jen.Code{jen.Id("store").Qual(sharedPath, "Store")}
	if named {
		ps = append(ps, jen.Id("named").Map(jen.String()).Qual(sharedPath, "Store"))
	}
	return ps
}

// tierCallArgs are a rule's arguments in a tier's implementation: the plan
// when it has plans, its key when keyed.
func tierCallArgs(r model.Rule) []jen.Code {
	var a []jen.Code
	if r.Planned {
		a = append(a, jen.Id("plan"))
	}
	if r.KeyType != "" {
		a = append(a, jen.Id(r.Unexported()+"Key"))
	}
	return a
}

// tierRuleNames are the Go names of a tier's rules, in order.
func tierRuleNames(m *model.Model, t model.Tier) []string {
	names := make([]string, len(t.Rules))
	for i, ri := range t.Rules {
		names[i] = m.Rules[ri].GoName
	}
	return names
}

// sharedKey is a rule's key as a store takes it: a string, integers in decimal.
func sharedKey(r model.Rule, key jen.Code) jen.Code {
	switch {
	case r.KeyType == "":
		return jen.Lit("")
	case r.KeyType == "string":
		return key
	case r.Composite(): // its text form, hashed when longer than a store's keys may be
		return jen.Qual(sharedPath, "StoreKey").Call(jen.Add(key).Dot("String").Call())
	case strings.HasPrefix(r.KeyType, "uint"):
		return jen.Qual("strconv", "FormatUint").Call(jen.Uint64().Call(key), jen.Lit(10))
	}
	return jen.Qual("strconv", "FormatInt").Call(jen.Int64().Call(key), jen.Lit(10))
}

func emitTierResult() jen.Code {
	return jen.Line().
		Comment("TierResult is the outcome of a tier of shared rules: its TierDecision, and whether the store").Line().
		Comment("made it (Degraded is set when the rules' on_failure settings decided instead, with the error;").Line().
		Comment("Outage when they denied because the store could not decide: not a limit, an outage).").Line().
		Comment("Mark, for a tier admitted, is what its settlement reads: the time its local rules read, and where").Line().
		Comment("each of its shared windows' stores counted the request.").Line().
		Type().Id("TierResult").Struct(
		jen.Id("TierDecision"),
		jen.Id("Degraded").Bool(),
		jen.Id("Outage").Bool(),
		jen.Id("Err").Error(),
		jen.Id("Mark").Add(vd("Mark")),
	).Line()
}

package emit

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

// emitWindow is a window rule (at most N in any interval of W): a type that
// embeds the runtime's genimpl.KeyedWindow or genimpl.GlobalWindow, which has
// every method; its numbers are in its rule variable (emitLimitVar).
func emitWindow(m *model.Model, r model.Rule, typ, ctor, doc string) jen.Code {
	if r.Planned {
		return emitPlannedWindow(m, r, typ, ctor, doc)
	}
	g := jen.Null()
	cost := lit(r.Limits[0].Cost)
	if r.KeyType == "" {
		g.Comment(fmt.Sprintf("%s returns %s's (empty) window.", ctor, r.GoName)).Line()
		g.Func().Id(ctor).Params().Op("*").Id(typ).Block(
			jen.Return(jen.Op("&").Id(typ).Values(gi("NewGlobalWindow").Call(wrt("NewWindow").Call(jen.Id(r.LimitVar())), cost)))).Line().Line()
		g.Add(comment(strings.Replace(doc, "Its methods are", "Its methods, genimpl.GlobalWindow's, are", 1)))
		g.Type().Id(typ).Struct(gi("GlobalWindow")).Line()
		return g
	}
	table := wrt("NewTable").Types(jen.Id(r.KeyType)).Call(jen.Id(r.LimitVar()), tableOptions(r, false))
	g.Comment(fmt.Sprintf("%s returns %s's (empty) table.", ctor, r.GoName)).Line()
	g.Func().Id(ctor).Params().Op("*").Id(typ).Block(
		jen.Return(jen.Op("&").Id(typ).Values(gi("NewKeyedWindow").Call(table, cost)))).Line().Line()
	g.Add(comment(strings.Replace(doc, "Its methods are", "Its methods, genimpl.KeyedWindow's, are", 1)))
	g.Type().Id(typ).Struct(gi("KeyedWindow").Types(jen.Id(r.KeyType))).Line()
	return g
}

// emitInFlight is an in-flight rule (at most N requests at once): a type that
// embeds atomicslot's Table (keyed) or Gate (global), which has every method;
// its numbers are in its rule variable (emitLimitVar).
func emitInFlight(r model.Rule, typ, ctor, doc string) jen.Code {
	if r.Planned {
		return emitPlannedInFlight(r, typ, ctor, doc)
	}
	g := jen.Null()
	embed, made, of := jen.Op("*").Qual(slotPath, "Gate"), jen.Qual(slotPath, "NewGate").Call(jen.Id(r.LimitVar())), "slots"
	if r.KeyType != "" {
		embed = jen.Op("*").Qual(slotPath, "Table").Types(jen.Id(r.KeyType))
		made = jen.Qual(slotPath, "NewTable").Types(jen.Id(r.KeyType)).Call(jen.Id(r.LimitVar()), tableOptions(r, false))
		of = "(empty) table of slots"
	}
	g.Comment(fmt.Sprintf("%s returns %s's %s, none held.", ctor, r.GoName, of)).Line()
	g.Func().Id(ctor).Params().Op("*").Id(typ).Block(jen.Return(jen.Op("&").Id(typ).Values(made))).Line().Line()
	g.Add(comment(doc))
	g.Type().Id(typ).Struct(embed).Line()
	if w := r.Limits[0].WaitNs; r.Waits() {
		g.Line().Add(comment(fmt.Sprintf("MaxWait is the policy's wait: the longest a request waits for a free slot of %s "+
			"(AcquireWait's maxWait; the doors wait this long, or until the request's context ends, before they deny).", r.GoName)))
		g.Func().Params(jen.Id("l").Op("*").Id(typ)).Id("MaxWait").Params().Qual("time", "Duration").Block(jen.Return(duration(w))).Line()
	}
	return g
}

// emitPlannedInFlight is an in-flight rule with numbers per plan: a gate (or
// a table) per plan, and its methods, each taking the plan first; a plan
// outside the constants is denied, RetryAfter Never.
func emitPlannedInFlight(r model.Rule, typ, ctor, doc string) jen.Code {
	g := jen.Null()
	recv := jen.Id("l").Op("*").Id(typ)
	store := jen.Op("*").Qual(slotPath, "Gate")
	newStore := func(i int) jen.Code {
		return jen.Qual(slotPath, "NewGate").Call(jen.Id(r.LimitVar()).Index(jen.Lit(i)))
	}
	if r.KeyType != "" {
		store = jen.Op("*").Qual(slotPath, "Table").Types(jen.Id(r.KeyType))
		newStore = func(i int) jen.Code {
			return jen.Qual(slotPath, "NewTable").Types(jen.Id(r.KeyType)).Call(jen.Id(r.LimitVar()).Index(jen.Lit(i)), tableOptions(r, false))
		}
	}
	var vals []jen.Code
	for i := range r.Limits {
		vals = append(vals, newStore(i))
	}
	g.Comment(fmt.Sprintf("%s returns %s's slots, one set per plan, none held.", ctor, r.GoName)).Line()
	g.Func().Id(ctor).Params().Op("*").Id(typ).Block(
		jen.Return(jen.Op("&").Id(typ).Values(jen.Dict{jen.Id("s"): jen.Index(jen.Id("numPlans")).Add(store.Clone()).Values(vals...)}))).Line().Line()
	g.Add(comment(doc))
	g.Type().Id(typ).Struct(jen.Id("s").Index(jen.Id("numPlans")).Add(store.Clone())).Line().Line()
	var keyP, keyA []jen.Code
	if r.KeyType != "" {
		keyP, keyA = []jen.Code{jen.Id("key").Id(r.KeyType)}, []jen.Code{jen.Id("key")}
	}
	planP := jen.Id("plan").Id("Plan")
	badPlan := func(ret ...jen.Code) jen.Code {
		return jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(ret...))
	}
	never := rt("Decision").Values(jen.Dict{jen.Id("RetryAfter"): rt("Never")})
	noSlot := jen.Qual(slotPath, "Slot").Values()
	target := jen.Id("l").Dot("s").Index(jen.Id("plan"))
	method := func(name, doc string, ps []jen.Code, results jen.Code, bad []jen.Code, call jen.Code) {
		g.Add(comment(name + " " + doc))
		g.Func().Params(recv).Id(name).Params(append([]jen.Code{planP}, ps...)...).Add(results).Block(badPlan(bad...), jen.Return(call)).Line().Line()
	}
	slotD := jen.Params(jen.Qual(slotPath, "Slot"), rt("Decision"))
	method("Rule", "returns the in-flight rule behind the limiter on plan (nil for a plan outside the constants).", nil,
		jen.Op("*").Qual(slotPath, "Rule"), []jen.Code{jen.Nil()}, target.Clone().Dot("Rule").Call())
	method("Acquire", "takes a slot now on plan's numbers, when fewer than the plan's limit are held (see atomicslot).", keyP, slotD,
		[]jen.Code{noSlot, never}, target.Clone().Dot("Acquire").Call(keyA...))
	method("AcquireAt", "is Acquire at time now.", append(slices.Clone(keyP), jen.Id("now").Add(rt("Time"))), slotD,
		[]jen.Code{noSlot, never}, target.Clone().Dot("AcquireAt").Call(append(slices.Clone(keyA), jen.Id("now"))...))
	g.Add(comment("AcquireWait is Acquire, waiting up to maxWait for a free slot, first come first served (see atomicslot)."))
	g.Func().Params(recv).Id("AcquireWait").Params(append(append([]jen.Code{jen.Id("ctx").Qual("context", "Context"), planP}, keyP...), jen.Id("maxWait").Qual("time", "Duration"))...).Add(slotD).Block(
		badPlan(noSlot, never), jen.Return(target.Clone().Dot("AcquireWait").Call(append(append([]jen.Code{jen.Id("ctx")}, keyA...), jen.Id("maxWait"))...))).Line().Line()
	method("PeekAt", "is what AcquireAt would decide, holding nothing.", append(slices.Clone(keyP), jen.Id("now").Add(rt("Time"))), rt("Decision"),
		[]jen.Code{never}, target.Clone().Dot("PeekAt").Call(append(slices.Clone(keyA), jen.Id("now"))...))
	if r.Waits() {
		var waits []jen.Code
		for _, l := range r.Limits {
			waits = append(waits, duration(l.WaitNs))
		}
		method("MaxWait", "is the policy's wait on plan: the longest a request waits for a free slot (the doors wait this long).", nil,
			jen.Qual("time", "Duration"), []jen.Code{jen.Lit(0)}, jen.Index(jen.Id("numPlans")).Qual("time", "Duration").Values(waits...).Index(jen.Id("plan")))
	}
	numbers := jen.Id("n").Add(rt("Numbers"))
	method("SetNumbers", "makes n (atomicslot.RuleOf: the slots as Tokens and Burst, the maximum hold as Period) plan's numbers from now, "+
		"counting every slot held (see atomicslot.Table.SetNumbers).", []jen.Code{numbers}, jen.Error(),
		[]jen.Code{jen.Id("ErrUnknownPlan")}, target.Clone().Dot("SetNumbers").Call(jen.Id("n")))
	g.Add(comment("ClearNumbers puts the policy's numbers back in force on plan."))
	g.Func().Params(recv).Id("ClearNumbers").Params(planP).Block(badPlan(), target.Clone().Dot("ClearNumbers").Call()).Line().Line()
	method("NumbersFor", "is plan's numbers in force, and where they come from.", nil, jen.Params(rt("Numbers"), rt("Origin")),
		[]jen.Code{rt("Numbers").Values(), rt("FromPolicy")}, target.Clone().Dot("NumbersFor").Call())
	method("PolicyRule", "returns the in-flight rule the policy gives plan (nil for a plan outside the constants).", nil,
		jen.Op("*").Qual(slotPath, "Rule"), []jen.Code{jen.Nil()}, target.Clone().Dot("PolicyRule").Call())
	g.Add(comment("Stats are every plan's slots together: held, expired, and for a keyed rule its keys and cap refusals."))
	g.Func().Params(recv).Id("Stats").Params().Qual(slotPath, "Stats").Block(
		jen.Var().Id("st").Qual(slotPath, "Stats"),
		jen.For(jen.List(jen.Id("_"), jen.Id("s")).Op(":=").Range().Id("l").Dot("s")).Block(
			jen.Id("ps").Op(":=").Id("s").Dot("Stats").Call(),
			jen.Id("st").Dot("Held").Op("+=").Id("ps").Dot("Held"),
			jen.Id("st").Dot("Keys").Op("+=").Id("ps").Dot("Keys"),
			jen.Id("st").Dot("Expired").Op("+=").Id("ps").Dot("Expired"),
			jen.Id("st").Dot("AtCapHits").Op("+=").Id("ps").Dot("AtCapHits"),
		),
		jen.Return(jen.Id("st")),
	).Line()
	return g
}

// emitSharedSlots is a shared in-flight rule's limiter: its acquisitions go
// to the store's slots (sharedimpl.State.Slot), or, without a store, to its
// process-local slots, with the reason.
func emitSharedSlots(r model.Rule) jen.Code {
	typ, recv := r.TypeName(), jen.Id("l").Op("*").Id(r.TypeName())
	var keyP, keyA []jen.Code
	var storeKey jen.Code = jen.Lit("global") // a global rule's one key on the store
	if r.KeyType != "" {
		keyP, keyA = []jen.Code{jen.Id("key").Id(r.KeyType)}, []jen.Code{jen.Id("key")}
		storeKey = sharedKey(r, jen.Id("key"))
	}
	var planP, planA []jen.Code
	var idx jen.Code = jen.Lit(r.SlotsAt)
	badPlan := jen.Null()
	if r.Planned { // one set of slots a plan on the store
		planP, planA = []jen.Code{jen.Id("plan").Id("Plan")}, []jen.Code{jen.Id("plan")}
		idx = jen.Lit(r.SlotsAt).Op("+").Int().Call(jen.Id("plan"))
		badPlan = jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(jen.Qual(slotPath, "Slot").Values(), vd("Result").Values(jen.Dict{
			jen.Id("Decision"): rt("Decision").Values(jen.Dict{jen.Id("RetryAfter"): rt("Never")})})))
	}
	bound := jen.Id("s").Op(":=").Id("l").Dot("sh").Dot("Slot").Call(idx)
	g := jen.Line()
	g.Comment(fmt.Sprintf("%s returns %s's limiter over its process-local slots; New binds it to the store.", r.CtorName(), r.GoName)).Line()
	g.Func().Id(r.CtorName()).Params().Op("*").Id(typ).Block(
		jen.Return(jen.Op("&").Id(typ).Values(jen.Dict{jen.Id("local"): jen.Id(r.LocalCtorName()).Call()}))).Line().Line()
	g.Add(comment(r.TypeDoc))
	g.Type().Id(typ).Struct(
		jen.Id("local").Op("*").Id(r.LocalTypeName()),
		jen.Id("sh").Op("*").Qual(sharedimplPath, "State").Comment("the store, or why there is none"),
	).Line().Line()
	g.Comment("Rule returns the in-flight rule behind the limiter.").Line()
	g.Func().Params(recv).Id("Rule").Params(planP...).Op("*").Qual(slotPath, "Rule").Block(
		jen.Return(jen.Id("l").Dot("local").Dot("Rule").Call(planA...))).Line().Line()
	g.Add(comment(fmt.Sprintf("Local returns %s's slots in this process only, with the whole limit, apart from the store's, "+
		"for tests and tools: what it holds is not counted by any other instance.", r.GoName)))
	g.Func().Params(recv).Id("Local").Params().Op("*").Id(r.LocalTypeName()).Block(jen.Return(jen.Id("l").Dot("local"))).Line().Line()
	most := fmt.Sprint(r.Limits[0].Tokens)
	if r.Planned {
		most = "the plan's limit"
	}
	g.Add(comment(fmt.Sprintf("Acquire takes one of %s's slots on the store given to New, so that at most %s are held at once "+
		"across every instance that shares it, and returns it with the Result; the Slot's Release gives it back (once in "+
		"effect; it makes one call to the store, within the store's timeout). A slot never released comes back on the "+
		"store %s after it was taken, whichever instance took it. It never fails: when the store cannot decide, the "+
		"rule's on_failure setting (%s) does, and the Result says so (Degraded, Err). Without a store, %s's "+
		"process-local slots (Local) decide and Err is SharedErr's error.", map[bool]string{true: "key's", false: "the rule's"}[r.KeyType != ""],
		most, time.Duration(r.Limits[0].PeriodNs), failureWords(r), r.GoName)))
	g.Func().Params(recv).Id("Acquire").Params(append(append([]jen.Code{jen.Id("ctx").Qual("context", "Context")}, planP...), keyP...)...).Params(jen.Qual(slotPath, "Slot"), vd("Result")).Block(
		badPlan,
		jen.If(bound.Clone(), jen.Id("s").Op("!=").Nil()).Block(jen.Return(jen.Id("s").Dot("Acquire").Call(jen.Id("ctx"), storeKey))),
		jen.List(jen.Id("slot"), jen.Id("d")).Op(":=").Id("l").Dot("local").Dot("Acquire").Call(append(slices.Clone(planA), keyA...)...),
		jen.Return(jen.Id("slot"), vd("Result").Values(jen.Dict{jen.Id("Decision"): jen.Id("d"), jen.Id("Err"): jen.Id("l").Dot("sh").Dot("Why")})),
	).Line().Line()
	if r.Waits() {
		g.Add(comment("AcquireWait is Acquire, waiting up to maxWait (and while ctx is not done) for a free slot: on the store, " +
			"asking again at the first held slot's expiry, on a back-off, and at once when this instance releases one of the key's " +
			"slots (shared.Slots.AcquireWait: waiters are served in the order they came only within an instance); without a store, " +
			"in the process-local slots, first come first served."))
		g.Func().Params(recv).Id("AcquireWait").Params(append(append(append([]jen.Code{jen.Id("ctx").Qual("context", "Context")}, planP...), keyP...), jen.Id("maxWait").Qual("time", "Duration"))...).Params(jen.Qual(slotPath, "Slot"), vd("Result")).Block(
			badPlan,
			jen.If(bound.Clone(), jen.Id("s").Op("!=").Nil()).Block(jen.Return(jen.Id("s").Dot("AcquireWait").Call(jen.Id("ctx"), storeKey, jen.Id("maxWait")))),
			jen.List(jen.Id("slot"), jen.Id("d")).Op(":=").Id("l").Dot("local").Dot("AcquireWait").Call(append(append(append([]jen.Code{jen.Id("ctx")}, planA...), keyA...), jen.Id("maxWait"))...),
			jen.Return(jen.Id("slot"), vd("Result").Values(jen.Dict{jen.Id("Decision"): jen.Id("d"), jen.Id("Err"): jen.Id("l").Dot("sh").Dot("Why")})),
		).Line().Line()
		g.Add(comment("MaxWait is the policy's wait: the longest a request waits for a free slot (the doors wait this long, or until the request's context ends, before they deny)."))
		g.Func().Params(recv).Id("MaxWait").Params(planP...).Qual("time", "Duration").Block(
			jen.Return(jen.Id("l").Dot("local").Dot("MaxWait").Call(planA...))).Line().Line()
	}
	g.Add(emitSharedSlotNumbers(r, recv, planP, planA, bound))
	g.Add(comment("Stats are the rule's slots as this instance knows them: on the store, its slots not yet released " +
		"and the slots its calls found expired unreleased (with its local share's, shared.Slots.Stats); without a store, " +
		"the process-local slots'."))
	releaseDoc := comment("ReleaseFailed is how many of this instance's releases the store did not take (down, or its " +
		"breaker open): each such slot stays held there until its expiry (shared.SlotStats.ReleaseFailed); 0 without a store.")
	if !r.Planned {
		g.Func().Params(recv).Id("Stats").Params().Qual(slotPath, "Stats").Block(
			jen.If(bound.Clone(), jen.Id("s").Op("!=").Nil()).Block(jen.Return(jen.Id("s").Dot("Stats").Call().Dot("Stats"))),
			jen.Return(jen.Id("l").Dot("local").Dot("Stats").Call()),
		).Line().Line()
		g.Add(releaseDoc)
		g.Func().Params(recv).Id("ReleaseFailed").Params().Int64().Block(
			jen.If(bound.Clone(), jen.Id("s").Op("!=").Nil()).Block(jen.Return(jen.Id("s").Dot("Stats").Call().Dot("ReleaseFailed"))),
			jen.Return(jen.Lit(0)),
		).Line()
		return g
	}
	g.Func().Params(recv).Id("Stats").Params().Qual(slotPath, "Stats").Block(
		jen.If(jen.Id("l").Dot("sh").Dot("Slot").Call(jen.Lit(r.SlotsAt)).Op("==").Nil()).Block(jen.Return(jen.Id("l").Dot("local").Dot("Stats").Call())),
		jen.Var().Id("st").Qual(slotPath, "Stats"),
		jen.For(jen.Id("plan").Op(":=").Range().Id("numPlans")).Block(
			jen.Id("ps").Op(":=").Id("l").Dot("sh").Dot("Slot").Call(idx).Dot("Stats").Call(),
			jen.Id("st").Dot("Held").Op("+=").Id("ps").Dot("Held"),
			jen.Id("st").Dot("Expired").Op("+=").Id("ps").Dot("Expired"),
		),
		jen.Return(jen.Id("st")),
	).Line().Line()
	g.Add(releaseDoc)
	g.Func().Params(recv).Id("ReleaseFailed").Params().Int64().Block(
		jen.If(jen.Id("l").Dot("sh").Dot("Slot").Call(jen.Lit(r.SlotsAt)).Op("==").Nil()).Block(jen.Return(jen.Lit(0))),
		jen.Var().Id("n").Int64(),
		jen.For(jen.Id("plan").Op(":=").Range().Id("numPlans")).Block(
			jen.Id("n").Op("+=").Id("l").Dot("sh").Dot("Slot").Call(idx).Dot("Stats").Call().Dot("ReleaseFailed"),
		),
		jen.Return(jen.Id("n")),
	).Line()
	return g
}

// emitSharedSlotNumbers is a shared in-flight rule's numbers methods: on
// the store's binding (bound, s) first when there is one, then on the
// process-local slots.
func emitSharedSlotNumbers(r model.Rule, recv jen.Code, planP, planA []jen.Code, bound *jen.Statement) jen.Code {
	g := jen.Null()
	badPlan := func(ret ...jen.Code) jen.Code {
		if !r.Planned {
			return jen.Null()
		}
		return jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(ret...))
	}
	local := jen.Id("l").Dot("local")
	g.Add(comment("SetNumbers makes n (atomicslot.RuleOf: the slots as Tokens and Burst, the maximum hold as Period) the rule's " +
		"numbers in this instance from now: on the store given to New (shared.Slots.SetNumbers: every instance that shares the " +
		"rule must be given the same), then in the process-local slots. Numbers the store refuses change neither."))
	g.Func().Params(recv).Id("SetNumbers").Params(append(slices.Clone(planP), jen.Id("n").Add(rt("Numbers")))...).Error().Block(
		badPlan(jen.Id("ErrUnknownPlan")),
		jen.If(bound.Clone(), jen.Id("s").Op("!=").Nil()).Block(
			jen.If(jen.Err().Op(":=").Id("s").Dot("SetNumbers").Call(jen.Id("n")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err()))),
		jen.Return(local.Clone().Dot("SetNumbers").Call(append(slices.Clone(planA), jen.Id("n"))...)),
	).Line().Line()
	g.Add(comment("ClearNumbers puts the policy's numbers back in force, on the store's binding and in the process-local slots."))
	g.Func().Params(recv).Id("ClearNumbers").Params(planP...).Block(
		badPlan(),
		jen.If(bound.Clone(), jen.Id("s").Op("!=").Nil()).Block(jen.Id("s").Dot("ClearNumbers").Call()),
		local.Clone().Dot("ClearNumbers").Call(planA...),
	).Line().Line()
	g.Add(comment("NumbersFor is the rule's numbers in force in this instance, and where they come from."))
	g.Func().Params(recv).Id("NumbersFor").Params(planP...).Params(rt("Numbers"), rt("Origin")).Block(
		badPlan(rt("Numbers").Values(), rt("FromPolicy")),
		jen.Return(local.Clone().Dot("NumbersFor").Call(planA...)),
	).Line().Line()
	g.Add(comment("PolicyRule returns the in-flight rule the policy gives the limiter."))
	g.Func().Params(recv).Id("PolicyRule").Params(planP...).Op("*").Qual(slotPath, "Rule").Block(
		jen.Return(local.Clone().Dot("PolicyRule").Call(planA...))).Line().Line()
	return g
}

// emitPlannedWindow is a window rule with numbers per plan: a window (or a
// table) per plan, and its checks, each taking the plan first.
func emitPlannedWindow(m *model.Model, r model.Rule, typ, ctor, doc string) jen.Code {
	g := jen.Null()
	recv := jen.Id("l").Op("*").Id(typ)
	store := wrt("Window")
	newStore := func(i int) jen.Code { return wrt("NewWindow").Call(jen.Id(r.LimitVar()).Index(jen.Lit(i))) }
	if r.KeyType != "" {
		store = wrt("Table").Types(jen.Id(r.KeyType))
		newStore = func(i int) jen.Code {
			return wrt("NewTable").Types(jen.Id(r.KeyType)).Call(jen.Id(r.LimitVar()).Index(jen.Lit(i)), tableOptions(r, false))
		}
	}
	vals := jen.Dict{}
	for i, p := range m.Plans {
		vals[jen.Id(p.GoName)] = newStore(i)
	}
	what := "window"
	if r.KeyType != "" {
		what = "table"
	}
	g.Comment(fmt.Sprintf("%s returns %s's (empty) %ss, one per plan.", ctor, r.GoName, what)).Line()
	g.Func().Id(ctor).Params().Op("*").Id(typ).Block(
		jen.Return(jen.Op("&").Id(typ).Values(jen.Dict{jen.Id("s"): jen.Index(jen.Id("numPlans")).Op("*").Add(store).Values(vals)}))).Line().Line()
	g.Add(comment(doc))
	g.Type().Id(typ).Struct(jen.Id("s").Index(jen.Id("numPlans")).Op("*").Add(store)).Line().Line()
	if r.CostDiffers() {
		costs := make([]jen.Code, len(r.Limits))
		for i, l := range r.Limits {
			costs[i] = lit(l.Cost)
		}
		g.Comment(fmt.Sprintf("%sCost is each plan's default cost for %s.", r.Unexported(), r.GoName)).Line()
		g.Var().Id(r.Unexported() + "Cost").Op("=").Index(jen.Id("numPlans")).Int64().Values(costs...).Line().Line()
	}
	badPlan := func(ret jen.Code) jen.Code {
		return jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(ret))
	}
	never := rt("Decision").Values(jen.Dict{jen.Id("RetryAfter"): rt("Never")})
	target := jen.Id("l").Dot("s").Index(jen.Id("plan"))
	params := func(extra ...jen.Code) []jen.Code {
		ps := []jen.Code{jen.Id("plan").Id("Plan")}
		if r.KeyType != "" {
			ps = append(ps, jen.Id("key").Id(r.KeyType))
		}
		return append(ps, extra...)
	}
	args := func(extra ...jen.Code) []jen.Code {
		var as []jen.Code
		if r.KeyType != "" {
			as = append(as, jen.Id("key"))
		}
		return append(as, extra...)
	}
	nowP, costP := jen.Id("now").Add(rt("Time")), jen.Id("cost").Int64()
	now, cost := jen.Id("now"), jen.Id("cost")
	method := func(name, doc string, ps []jen.Code, result, bad, call jen.Code) {
		g.Comment(name + " " + doc).Line()
		g.Func().Params(recv).Id(name).Params(ps...).Add(result).Block(badPlan(bad), jen.Return(call)).Line().Line()
	}
	method("Rule", "returns the window rule behind the limiter on plan (nil for a plan outside the constants).", []jen.Code{jen.Id("plan").Id("Plan")},
		jen.Op("*").Add(wrt("Rule")), jen.Nil(), target.Clone().Dot("Rule").Call())
	method("Allow", "reports whether a request of the plan's default cost is admitted now, counting it if so.", params(), jen.Bool(), jen.False(),
		target.Clone().Dot("AllowCost").Call(args(rt("Now").Call(), costExpr(r))...))
	method("AllowAt", "is Allow at time now.", params(nowP), jen.Bool(), jen.False(),
		target.Clone().Dot("AllowCost").Call(args(now, costExpr(r))...))
	method("AllowN", "decides a request of the given cost now, counting it if admitted.", params(costP), rt("Decision"), never,
		target.Clone().Dot("AllowNAt").Call(args(rt("Now").Call(), cost)...))
	method("AllowNAt", "is AllowN at time now.", params(nowP, costP), rt("Decision"), never,
		target.Clone().Dot("AllowNAt").Call(args(now, cost)...))
	method("Peek", "is what AllowN would decide now, counting nothing.", params(costP), rt("Decision"), never,
		target.Clone().Dot("PeekAt").Call(args(rt("Now").Call(), cost)...))
	method("PeekAt", "is Peek at time now.", params(nowP, costP), rt("Decision"), never,
		target.Clone().Dot("PeekAt").Call(args(now, cost)...))
	settleP := jen.List(jen.Id("estimate"), jen.Id("actual")).Int64()
	admittedP := jen.Id("admitted").Add(rt("Time"))
	method("Settle", "settles now a request admitted by a check at time admitted at cost estimate, whose actual cost is actual: a higher actual counts the excess in the window now (at most the limit; the rest forgiven, and returned), a lower one gives the difference back from the units counted at the admission's grain while they are in the window (atomicwindow.Table.SettleAt); 0 for a plan outside the constants.",
		params(admittedP, settleP), jen.Int64(), jen.Lit(0), target.Clone().Dot("SettleAt").Call(args(rt("Now").Call(), jen.Id("admitted"), jen.Id("estimate"), jen.Id("actual"))...))
	method("SettleAt", "is Settle at time now.", params(jen.List(jen.Id("now"), jen.Id("admitted")).Add(rt("Time")), settleP), jen.Int64(), jen.Lit(0),
		target.Clone().Dot("SettleAt").Call(args(now, jen.Id("admitted"), jen.Id("estimate"), jen.Id("actual"))...))
	// Reset: every plan's window of the key (a key's plan may change).
	if r.KeyType != "" {
		g.Comment("Reset empties key's window on every plan now: what it admitted no longer counts (a customer's quota").Line()
		g.Comment("given back after a refund). It reports whether the key had a window on any plan.").Line()
		g.Func().Params(recv).Id("Reset").Params(jen.Id("key").Id(r.KeyType)).Bool().Block(
			jen.Return(jen.Id("l").Dot("ResetAt").Call(jen.Id("key"), rt("Now").Call()))).Line().Line()
		g.Comment("ResetAt is Reset at time now: what was admitted at or before now no longer counts.").Line()
		g.Func().Params(recv).Id("ResetAt").Params(jen.Id("key").Id(r.KeyType), nowP).Bool().Block(
			jen.Id("had").Op(":=").False(),
			jen.For(jen.List(jen.Id("_"), jen.Id("t")).Op(":=").Range().Id("l").Dot("s")).Block(
				jen.Id("had").Op("=").Id("t").Dot("ResetAt").Call(jen.Id("key"), jen.Id("now")).Op("||").Id("had")),
			jen.Return(jen.Id("had"))).Line().Line()
		g.Add(emitPlannedWindowKeyNumbers(r, recv))
		g.Add(emitKeyedExtras(r, recv))
		return g
	}
	g.Comment("Reset empties the window on every plan now: what it admitted no longer counts.").Line()
	g.Func().Params(recv).Id("Reset").Params().Block(jen.Id("l").Dot("ResetAt").Call(rt("Now").Call())).Line().Line()
	g.Comment("ResetAt is Reset at time now: what was admitted at or before now no longer counts.").Line()
	g.Func().Params(recv).Id("ResetAt").Params(nowP).Block(
		jen.For(jen.List(jen.Id("_"), jen.Id("w")).Op(":=").Range().Id("l").Dot("s")).Block(
			jen.Id("w").Dot("ResetAt").Call(jen.Id("now")))).Line().Line()
	return g
}

// emitPlannedWindowKeyNumbers are a planned keyed window's SetKeyNumbers,
// ClearKeyNumbers and NumbersFor: a key's own numbers hold on every plan.
func emitPlannedWindowKeyNumbers(r model.Rule, recv jen.Code) jen.Code {
	g := jen.Null()
	keyP, nowP, nP := jen.Id("key").Id(r.KeyType), jen.Id("now").Add(rt("Time")), jen.Id("n").Add(rt("Numbers"))
	idx, cost := jen.Id("_"), lit(r.Limits[0].Cost)
	if r.CostDiffers() {
		idx, cost = jen.Id("i"), jen.Id(r.Unexported()+"Cost").Index(jen.Id("i"))
	}
	each := func(body jen.Code) jen.Code {
		return jen.For(jen.List(idx, jen.Id("t")).Op(":=").Range().Id("l").Dot("s")).Block(body)
	}
	g.Comment("SetKeyNumbers gives key a window of its own on every plan from now on: n.Tokens in any n.Period, the limit").Line()
	g.Comment("as n.Burst (one customer's quota raised or cut), whatever the plan's. Its window is carried into them, holding").Line()
	g.Comment("what it held. Numbers a window cannot take on some plan are refused, and nothing changes.").Line()
	g.Func().Params(recv).Id("SetKeyNumbers").Params(keyP, nP).Error().Block(
		jen.Return(jen.Id("l").Dot("SetKeyNumbersAt").Call(jen.Id("key"), rt("Now").Call(), jen.Id("n")))).Line().Line()
	g.Comment("SetKeyNumbersAt is SetKeyNumbers at time now.").Line()
	check := jen.If(jen.List(jen.Id("_"), jen.Err()).Op(":=").Add(wrt("RuleOf")).Call(jen.Id("n"), cost), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err()))
	if r.CostDiffers() {
		check = jen.For(jen.Id("i").Op(":=").Range().Id("l").Dot("s")).Block(check)
	}
	g.Func().Params(recv).Id("SetKeyNumbersAt").Params(keyP, nowP, nP).Error().Block(
		check,
		each(jen.If(jen.Err().Op(":=").Id("t").Dot("SetKeyNumbersAt").Call(jen.Id("now"), jen.Id("key"), jen.Id("n"), cost), jen.Err().Op("!=").Nil()).Block(
			jen.Return(jen.Err()).Comment("the empty key: refused on the first plan, before any change"))),
		jen.Return(jen.Nil())).Line().Line()
	g.Comment("ClearKeyNumbers takes key's own numbers away on every plan: from now on it has its plan's.").Line()
	g.Func().Params(recv).Id("ClearKeyNumbers").Params(keyP).Block(
		jen.Id("l").Dot("ClearKeyNumbersAt").Call(jen.Id("key"), rt("Now").Call())).Line().Line()
	g.Comment("ClearKeyNumbersAt is ClearKeyNumbers at time now.").Line()
	g.Func().Params(recv).Id("ClearKeyNumbersAt").Params(keyP, nowP).Block(
		jen.For(jen.List(jen.Id("_"), jen.Id("t")).Op(":=").Range().Id("l").Dot("s")).Block(
			jen.Id("t").Dot("ClearKeyNumbersAt").Call(jen.Id("now"), jen.Id("key")))).Line().Line()
	g.Comment("NumbersFor returns the numbers in force for key on plan and where they come from.").Line()
	g.Func().Params(recv).Id("NumbersFor").Params(jen.Id("plan").Id("Plan"), keyP).Params(rt("Numbers"), rt("Origin")).Block(
		jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(rt("Numbers").Values(), rt("FromPolicy"))),
		jen.Return(jen.Id("l").Dot("s").Index(jen.Id("plan")).Dot("KeyNumbersFor").Call(jen.Id("key")))).Line().Line()
	return g
}

// emitSharedWindow is a shared window rule's limiter: its checks go to the
// store's window (sharedimpl.State.Windows), or, without one, to its
// process-local window, with the reason.
func emitSharedWindow(r model.Rule) jen.Code {
	typ, recv := r.TypeName(), jen.Id("l").Op("*").Id(r.TypeName())
	ctxP := jen.Id("ctx").Qual("context", "Context")
	var keyP, keyA, planP, planA []jen.Code   // the plan and the key, as parameters and arguments
	var storeKey jen.Code = jen.Lit("global") // a global window's one key on the store
	if r.Planned {
		planP, planA = []jen.Code{jen.Id("plan").Id("Plan")}, []jen.Code{jen.Id("plan")}
	}
	if r.KeyType != "" {
		keyP, keyA = []jen.Code{jen.Id("key").Id(r.KeyType)}, []jen.Code{jen.Id("key")}
		storeKey = sharedKey(r, jen.Id("key"))
	}
	params := func(first jen.Code, last ...jen.Code) []jen.Code {
		ps := []jen.Code{}
		if first != nil {
			ps = append(ps, first)
		}
		return append(append(append(ps, planP...), keyP...), last...)
	}
	args := func(first jen.Code, last ...jen.Code) []jen.Code {
		as := []jen.Code{}
		if first != nil {
			as = append(as, first)
		}
		return append(append(append(as, planA...), keyA...), last...)
	}
	var idx jen.Code = jen.Lit(r.WindowAt)
	if r.Planned { // one window a plan on the store
		idx = jen.Lit(r.WindowAt).Op("+").Int().Call(jen.Id("plan"))
	}
	g := jen.Line()
	g.Comment(fmt.Sprintf("%s returns %s's limiter over its process-local window; New binds it to the store.", r.CtorName(), r.GoName)).Line()
	g.Func().Id(r.CtorName()).Params().Op("*").Id(typ).Block(
		jen.Return(jen.Op("&").Id(typ).Values(jen.Dict{jen.Id("local"): jen.Id(r.LocalCtorName()).Call()}))).Line().Line()
	g.Add(comment(r.TypeDoc))
	g.Type().Id(typ).Struct(
		jen.Id("local").Op("*").Id(r.LocalTypeName()),
		jen.Id("sh").Op("*").Qual(sharedimplPath, "State").Comment("the store, or why there is none"),
	).Line().Line()
	g.Comment("Rule returns the window rule behind the limiter.").Line()
	g.Func().Params(recv).Id("Rule").Params(planP...).Op("*").Add(wrt("Rule")).Block(
		jen.Return(jen.Id("l").Dot("local").Dot("Rule").Call(planA...))).Line().Line()
	g.Add(comment(fmt.Sprintf("Local returns %s decided in this process only, with the whole limit, on a window apart "+
		"from the store's, for tests and tools: what it admits is not counted by any other instance.", r.GoName)))
	g.Func().Params(recv).Id("Local").Params().Op("*").Id(r.LocalTypeName()).Block(jen.Return(jen.Id("l").Dot("local"))).Line().Line()
	g.Add(comment("Allow reports whether a request of the rule's default cost is admitted, deciding on the store " +
		"(see AllowN, whose Result says more: whether the store decided, and why not)."))
	var costBad jen.Code = jen.Null() // the default cost per plan is looked up first
	if r.Planned && r.CostDiffers() {
		costBad = jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(jen.False()))
	}
	g.Func().Params(recv).Id("Allow").Params(params(ctxP)...).Bool().Block(
		costBad,
		jen.Return(jen.Id("l").Dot("AllowN").Call(args(jen.Id("ctx"), costExpr(r))...).Dot("Allowed"))).Line().Line()
	g.Add(comment(fmt.Sprintf("AllowN decides a request of cost on the store given to New, so that %s holds across every "+
		"instance that shares it. It never fails: when the store cannot decide, the rule's on_failure setting (%s) "+
		"does, and the Result says so (Degraded, Err). %sWithout a store, %s's process-local window (Local) decides "+
		"and Err is SharedErr's error.", r.GoName, failureWords(r), leaseWords(r), r.GoName)))
	g.Func().Params(recv).Id("AllowN").Params(params(ctxP, jen.Id("cost").Int64())...).Add(vd("Result")).Block(
		jen.List(jen.Id("res"), jen.Id("_")).Op(":=").Id("l").Dot("AllowNMark").Call(args(jen.Id("ctx"), jen.Id("cost"))...),
		jen.Return(jen.Id("res")),
	).Line().Line()
	markBad := jen.Null()
	if r.Planned {
		markBad = jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(vd("Result").Values(jen.Dict{
			jen.Id("Decision"): rt("Decision").Values(jen.Dict{jen.Id("RetryAfter"): rt("Never")})}), vd("WindowMark").Values()))
	}
	g.Add(comment("AllowNMark is AllowN, with where the store counted an admission, for Settle to give a lower actual " +
		"back from (the zero verdict.WindowMark when it counted nothing: a failure setting decided, or there is no store)."))
	g.Func().Params(recv).Id("AllowNMark").Params(params(ctxP, jen.Id("cost").Int64())...).Params(vd("Result"), vd("WindowMark")).Block(
		markBad,
		jen.If(jen.Id("w").Op(":=").Id("l").Dot("sh").Dot("Windows").Index(idx), jen.Id("w").Op("!=").Nil()).Block(
			jen.Return(jen.Id("w").Dot("AllowNMark").Call(jen.Id("ctx"), storeKey, jen.Id("cost")))),
		jen.Return(vd("Result").Values(jen.Dict{
			jen.Id("Decision"): jen.Id("l").Dot("local").Dot("AllowN").Call(args(nil, jen.Id("cost"))...),
			jen.Id("Err"):      jen.Id("l").Dot("sh").Dot("Why"),
		}), vd("WindowMark").Values()),
	).Line().Line()
	var settleBad jen.Code = jen.Null()
	if r.Planned {
		settleBad = jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(jen.Lit(0), jen.Id("ErrUnknownPlan")))
	}
	g.Add(comment("Settle settles a request admitted at cost estimate whose actual cost is actual, on the store " +
		"(shared.Window.Settle): a higher actual counts the excess in the window now (at most the limit; the rest " +
		"forgiven, and returned), a lower one gives the difference back from where the store counted the admission " +
		"(mark, from AllowNMark). When the store cannot, nothing is settled and the error says so. Without a store, " +
		"Local settles the excess, and gives nothing back."))
	g.Func().Params(recv).Id("Settle").Params(params(ctxP, jen.Id("mark").Add(vd("WindowMark")), jen.List(jen.Id("estimate"), jen.Id("actual")).Int64())...).Params(jen.Id("forgiven").Int64(), jen.Err().Error()).Block(
		settleBad,
		jen.If(jen.Id("w").Op(":=").Id("l").Dot("sh").Dot("Windows").Index(idx), jen.Id("w").Op("!=").Nil()).Block(
			jen.Return(jen.Id("w").Dot("Settle").Call(jen.Id("ctx"), storeKey, jen.Id("mark"), jen.Id("estimate"), jen.Id("actual")))),
		// The check was the local window's, at a time the caller was not
		// told: a lower actual gives nothing back (admitted 0).
		jen.Return(jen.Id("l").Dot("local").Dot("Settle").Call(args(nil, jen.Lit(0), jen.Id("estimate"), jen.Id("actual"))...), jen.Nil()),
	).Line().Line()
	// Reset: the store's window of the key (every plan's) and the
	// process-local one.
	var resets []jen.Code
	if r.Planned {
		resets = append(resets, jen.For(jen.Id("plan").Op(":=").Range().Id("numPlans")).Block(
			jen.If(jen.Id("w").Op(":=").Id("l").Dot("sh").Dot("Windows").Index(idx), jen.Id("w").Op("!=").Nil()).Block(
				jen.Id("err").Op("=").Qual("errors", "Join").Call(jen.Id("err"), jen.Id("w").Dot("Reset").Call(jen.Id("ctx"), storeKey)))))
	} else {
		resets = append(resets, jen.If(jen.Id("w").Op(":=").Id("l").Dot("sh").Dot("Windows").Index(idx), jen.Id("w").Op("!=").Nil()).Block(
			jen.Id("err").Op("=").Id("w").Dot("Reset").Call(jen.Id("ctx"), storeKey)))
	}
	g.Add(comment(fmt.Sprintf("Reset empties %s on the store given to New, so that what it admitted no longer counts "+
		"on any instance (a customer's quota given back after a refund)%s, and %s's process-local window (Local). "+
		"This instance's lease gives back what it holds first; another instance's may still spend what it was "+
		"granted (see shared.Window.Reset). It fails when the store cannot (its error); without a store it resets "+
		"the process-local window only.", map[bool]string{true: "key's window", false: "the window"}[r.KeyType != ""],
		map[bool]string{true: ", on every plan", false: ""}[r.Planned], r.GoName)))
	g.Func().Params(recv).Id("Reset").Params(append([]jen.Code{ctxP}, keyP...)...).Error().Block(
		append([]jen.Code{
			jen.Id("l").Dot("local").Dot("Reset").Call(keyA...),
			jen.Var().Err().Error(),
		}, append(resets, jen.Return(jen.Err()))...)...,
	).Line()
	if r.KeyType != "" && !r.Planned {
		g.Add(emitSharedWindowKeyNumbers(r, recv, idx, storeKey))
	}
	return g
}

// emitSharedWindowKeyNumbers are a keyed shared window's SetKeyNumbers and
// ClearKeyNumbers (a rule without plans): the store's, then the
// process-local window's.
func emitSharedWindowKeyNumbers(r model.Rule, recv, idx, storeKey jen.Code) jen.Code {
	ctxP, keyP := jen.Id("ctx").Qual("context", "Context"), jen.Id("key").Id(r.KeyType)
	window := jen.Id("w").Op(":=").Id("l").Dot("sh").Dot("Windows").Index(idx)
	g := jen.Line()
	g.Add(comment(fmt.Sprintf("SetKeyNumbers gives key a window of its own on the store given to New, whatever %s's: "+
		"n.Tokens in any n.Period, the limit as n.Burst (one customer's quota raised or cut), and in the process-local "+
		"window (Local). Its window is carried into them, holding what it held; this instance's lease gives back what "+
		"it holds first. Every instance that checks the key must be given the same numbers (see "+
		"shared.Window.SetKeyNumbers). Numbers a window or the store cannot take, and a key no door checks, are "+
		"refused, and nothing changes.", r.GoName)))
	g.Func().Params(recv).Id("SetKeyNumbers").Params(ctxP, keyP, jen.Id("n").Add(rt("Numbers"))).Error().Block(
		jen.If(window.Clone(), jen.Id("w").Op("!=").Nil()).Block(
			jen.If(jen.Err().Op(":=").Id("w").Dot("SetKeyNumbers").Call(jen.Id("ctx"), storeKey, jen.Id("n"), lit(r.Limits[0].Cost)), jen.Err().Op("!=").Nil()).Block(
				jen.Return(jen.Err()))),
		jen.Return(jen.Id("l").Dot("local").Dot("SetKeyNumbers").Call(jen.Id("key"), jen.Id("n"))),
	).Line().Line()
	g.Add(comment(fmt.Sprintf("ClearKeyNumbers takes key's own numbers away, on the store and in the process-local "+
		"window: from now on it has %s's.", r.GoName)))
	g.Func().Params(recv).Id("ClearKeyNumbers").Params(ctxP, keyP).Block(
		jen.If(window.Clone(), jen.Id("w").Op("!=").Nil()).Block(
			jen.Id("w").Dot("ClearKeyNumbers").Call(jen.Id("ctx"), storeKey)),
		jen.Id("l").Dot("local").Dot("ClearKeyNumbers").Call(jen.Id("key")),
	).Line()
	return g
}

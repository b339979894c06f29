package emit

import (
	"fmt"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/shared"
)

// emitShared is what a policy with shared rules adds to New: the rules as the
// store sees them, the state of their binding, and SharedErr.
func emitShared(m *model.Model) jen.Code {
	var rules []jen.Code
	failure := func(r model.Rule) jen.Code {
		f := []jen.Code{field("Mode", jen.Qual(sharedPath, r.Failure))}
		if r.Failure == "FailLocal" {
			f = append(f, field("Share", jen.Lit(r.Share)))
		}
		return jen.Qual(sharedPath, "Failure").Add(fields(f...))
	}
	for _, r := range m.Rules {
		if !r.Shared {
			continue
		}
		if r.IsWindow() || r.IsInFlight() {
			continue // bound on its own (newSharedState)
		}
		for i := range r.Limits {
			name := r.Name
			if r.Planned {
				name = r.Name + ":" + m.Plans[i].Name
			}
			rf := []jen.Code{
				field("Namespace", jen.Lit(m.Namespace)),
				field("Name", jen.Lit(name)),
				field("Limit", limitRef(r, i)),
				field("Failure", failure(r)),
			}
			if r.Lease > 0 {
				rf = append(rf, field("Lease", jen.Lit(r.Lease)))
			}
			if r.KeyType == "" {
				rf = append(rf, field("Global", jen.True()))
			}
			if r.Store != "" {
				rf = append(rf, field("Store", jen.Lit(r.Store)))
			}
			if u := r.Units[i]; u != (shared.Units{}) {
				uf := []jen.Code{field("PerMicro", jen.Lit(u.PerMicro)), field("Emit", jen.Lit(u.Emit))}
				if u.Exact {
					uf = append(uf, field("Exact", jen.True()))
				}
				rf = append(rf, field("Units", jen.Qual(sharedPath, "Units").Add(fields(uf...))))
			}
			rules = append(rules, fields(rf...))
		}
	}
	g := jen.Null()
	if m.Shared > 0 {
		g.Comment("sharedRules are the policy's shared rules as a store sees them (one per plan for a rule with plans),").Line().
			Comment("in the order their checks name them.").Line().
			Var().Id("sharedRules").Op("=").Index(jen.Lit(m.Shared)).Qual(sharedPath, "Rule").Values(rules...).Line().Line()
	}
	if newState(m) {
		g.Add(emitNewSharedState(m, failure))
	}
	g.Comment("SharedErr is nil while the policy's shared rules are checked on the store given to New and").Line().
		Comment("the store answers. Otherwise it says why not: there is no store, or it refused the rules (they").Line().
		Comment("then run in this process only, each instance enforcing the whole limit alone), or the store is").Line().
		Comment("not answering now (down at start, or since: each rule's on_failure decides meanwhile, counted").Line().
		Comment("as degraded, until it answers again). It is the live state: report it at startup, and from a").Line().
		Comment("health check.").Line().
		Func().Params(jen.Id("l").Op("*").Id("Limits")).Id("SharedErr").Params().Error().Block(
		jen.Return(jen.Id("l").Dot("shared").Dot("Err").Call())).Line()
	return g
}

// newState says whether New binds the shared rules through a generated
// newSharedState (window rules to bind one by one, or stores the policy
// names) rather than sharedimpl.Bind alone.
func newState(m *model.Model) bool {
	return m.SharedWindows > 0 || m.SharedSlots > 0 || len(m.StoreNames()) > 0
}

// stateExpr is New's expression of the shared rules' State.
func stateExpr(m *model.Model) jen.Code {
	if newState(m) {
		args := []jen.Code{jen.Id("o").Dot("store")}
		if len(m.StoreNames()) > 0 {
			args = append(args, jen.Id("o").Dot("named"))
		}
		return jen.Id("newSharedState").Call(args...)
	}
	return jen.Qual(sharedimplPath, "Bind").Call(jen.Lit(m.Pkg), jen.Id("o").Dot("store"), jen.Id("sharedRules").Index(jen.Empty(), jen.Empty()), jen.Lit(0))
}

// emitNewSharedState is newSharedState: sharedimpl.Bind, then each shared
// window rule bound on its store.
func emitNewSharedState(m *model.Model, failure func(model.Rule) jen.Code) jen.Code {
	refused := func(what string) jen.Code {
		return jen.Return(jen.Id("s").Dot("Refuse").Call(jen.Lit(what), jen.Err()))
	}
	named := len(m.StoreNames()) > 0
	var rules jen.Code = jen.Nil()
	if m.Shared > 0 {
		rules = jen.Id("sharedRules").Index(jen.Empty(), jen.Empty())
	}
	var body []jen.Code
	bindTo := jen.Id("store") // what Bind and BindWindow are given
	if named {
		body = append(body,
			jen.If(jen.Id("store").Op("==").Nil().Op("&&").Len(jen.Id("named")).Op("==").Lit(0)).Block(
				jen.Return(jen.Qual(sharedimplPath, "Bind").Call(jen.Lit(m.Pkg), jen.Nil(), jen.Nil(), jen.Lit(m.SharedWindows)))),
			jen.Id("stores").Op(":=").Qual(sharedPath, "Stores").Values(jen.Dict{jen.Id("Default"): jen.Id("store"), jen.Id("Named"): jen.Id("named")}))
		bindTo = jen.Id("stores")
	}
	body = append(body,
		jen.Id("s").Op(":=").Qual(sharedimplPath, "Bind").Call(jen.Lit(m.Pkg), bindTo, rules, jen.Lit(m.SharedWindows)),
		jen.If(jen.Id("s").Dot("Why").Op("!=").Nil()).Block(jen.Return(jen.Id("s"))))
	if m.SharedWindows > 0 || m.SharedSlots > 0 {
		body = append(body, jen.Var().Id("err").Error())
	}
	if m.SharedSlots > 0 {
		body = append(body, jen.Id("s").Dot("Slots").Op("=").Make(jen.Index().Op("*").Qual(sharedPath, "Slots"), jen.Lit(m.SharedSlots)))
	}
	// storeOf is the store rule r binds to: store, or (named stores) ws,
	// looked up first, what being refused when the lookup fails.
	wsDeclared := false
	storeOf := func(r model.Rule, what string) jen.Code {
		if !named {
			return jen.Id("store")
		}
		if !wsDeclared {
			body, wsDeclared = append(body, jen.Var().Id("ws").Qual(sharedPath, "Store")), true
		}
		body = append(body, jen.List(jen.Id("ws"), jen.Id("err")).Op("=").Id("stores").Dot("For").Call(jen.Lit(r.Store)),
			jen.If(jen.Id("err").Op("!=").Nil()).Block(refused(what)))
		return jen.Id("ws")
	}
	// Each shared in-flight and window rule, a binding per plan, named as a
	// bucket rule's plans are (Rule:plan).
	for _, r := range m.Rules {
		if !r.Shared || !r.IsInFlight() && !r.IsWindow() {
			continue
		}
		for i := range r.Limits {
			name, limit := r.Name, jen.Id(r.LimitVar())
			if r.Planned {
				name, limit = r.Name+":"+m.Plans[i].Name, jen.Id(r.LimitVar()).Index(jen.Lit(i))
			}
			if r.IsInFlight() {
				what := fmt.Sprintf("the in-flight rule %s, and the shared rules run in this process only", r.Name)
				ws := storeOf(r, what)
				body = append(body,
					jen.If(jen.List(jen.Id("s").Dot("Slots").Index(jen.Lit(r.SlotsAt+i)), jen.Id("err")).Op("=").Qual(sharedPath, "BindSlots").Call(
						ws, jen.Lit(m.Namespace), jen.Lit(name), limit, failure(r)),
						jen.Id("err").Op("!=").Nil()).Block(refused(what)))
				if r.Lease > 0 { // an instance's share of a key's slots, handed out here
					body = append(body, jen.If(jen.Id("err").Op("=").Id("s").Dot("Slots").Index(jen.Lit(r.SlotsAt+i)).Dot("Lease").Call(jen.Lit(int(r.Lease)), jen.Lit(0)),
						jen.Id("err").Op("!=").Nil()).Block(refused(what)))
				}
				continue
			}
			what := fmt.Sprintf("the window rule %s, and the shared rules run in this process only", name)
			ws := storeOf(r, what)
			body = append(body,
				jen.If(jen.List(jen.Id("s").Dot("Windows").Index(jen.Lit(r.WindowAt+i)), jen.Id("err")).Op("=").Add(bindWindow(r, ws, jen.Lit(m.Namespace), jen.Lit(name), limit, failure(r))),
					jen.Id("err").Op("!=").Nil()).Block(refused(what)))
		}
	}
	body = append(body, jen.Return(jen.Id("s")))
	return jen.Comment("newSharedState binds the shared rules to store, if one was given (a store that refuses one, or").Line().
		Comment("panics, leaves every one in this process, with the error).").Line().
		Func().Id("newSharedState").Params(newStateParams(named)...).Op("*").Qual(sharedimplPath, "State").Block(body...).Line().Line()
}

// sharedImpl says whether shared rule r's limiter embeds sharedimpl's (Keyed
// or Global): a bucket rule without plans.
func sharedImpl(r model.Rule) bool { return r.Shared && !r.Planned && !r.IsWindow() && !r.IsInFlight() }

// emitSharedImpl is a shared bucket rule without plans: sharedimpl's limiter
// over its process-local one, which Local returns.
func emitSharedImpl(r model.Rule) jen.Code {
	typ, recv := r.TypeName(), jen.Id("l").Op("*").Id(r.TypeName())
	state := jen.Id("s").Op("*").Qual(sharedimplPath, "State")
	params, args := []jen.Code{state}, []jen.Code(nil)
	embed := jen.Qual(sharedimplPath, "Global")
	made := jen.Qual(sharedimplPath, "NewGlobal").Call(jen.Id("local").Dot("Global"), jen.Id("s"), jen.Lit(r.SharedAt))
	if r.KeyType == "" {
		params, args = []jen.Code{jen.Id("now").Add(rt("Time")), state}, []jen.Code{jen.Id("now")}
	} else {
		embed = jen.Qual(sharedimplPath, "Keyed").Index(jen.Id(r.KeyType))
		key := jen.Qual(sharedimplPath, "Text") // a string is its own store key
		if r.KeyType != "string" {
			key = jen.Func().Params(jen.Id("k").Id(r.KeyType)).String().Block(jen.Return(sharedKey(r, jen.Id("k"))))
		}
		made = jen.Qual(sharedimplPath, "NewKeyed").Call(jen.Id("local").Dot("Keyed"), jen.Id("s"), jen.Lit(r.SharedAt), key)
	}
	g := jen.Line()
	g.Comment(fmt.Sprintf("%s returns %s's limiter over its process-local buckets, checked on the store s binds.", r.CtorName(), r.GoName)).Line()
	g.Func().Id(r.CtorName()).Params(params...).Op("*").Id(typ).Block(
		jen.Id("local").Op(":=").Id(r.LocalCtorName()).Call(args...),
		jen.Return(jen.Op("&").Id(typ).Values(made, jen.Id("local")))).Line().Line()
	g.Add(comment(r.TypeDoc))
	g.Type().Id(typ).Struct(embed, jen.Id("local").Op("*").Id(r.LocalTypeName())).Line().Line()
	g.Add(comment(fmt.Sprintf("Local returns %s decided in this process only, with the whole limit, on buckets apart "+
		"from the store's, for tests and tools: what it admits is not counted by any other instance.", r.GoName)))
	g.Func().Params(recv).Id("Local").Params().Op("*").Id(r.LocalTypeName()).Block(jen.Return(jen.Id("l").Dot("local"))).Line()
	if r.InForce {
		var keyP, keyA []jen.Code
		if r.KeyType != "" {
			keyP, keyA = []jen.Code{jen.Id("key").Id(r.KeyType)}, []jen.Code{jen.Id("key")}
		}
		g.Line().Add(comment("ruleInForce is, once the numbers have ever changed, the rule in force (for the middleware's fields): Local's, which every change keeps equal to the store's; nil before."))
		g.Func().Params(recv).Id("ruleInForce").Params(keyP...).Op("*").Add(rt("Rule")).Block(
			jen.Return(jen.Id("l").Dot("local").Dot("ruleInForce").Call(keyA...))).Line()
	}
	return g
}

func emitSharedRule(r model.Rule) jen.Code {
	if sharedImpl(r) {
		return emitSharedImpl(r)
	}
	typ, recv := r.TypeName(), jen.Id("l").Op("*").Id(r.TypeName())
	var params, args []jen.Code // the plan and the key
	if r.Planned {
		params, args = append(params, jen.Id("plan").Id("Plan")), append(args, jen.Id("plan"))
	}
	if r.KeyType != "" {
		params, args = append(params, jen.Id("key").Id(r.KeyType)), append(args, jen.Id("key"))
	}
	ctxP := jen.Id("ctx").Qual("context", "Context")
	with := func(first jen.Code, list []jen.Code, last ...jen.Code) []jen.Code {
		out := []jen.Code{}
		if first != nil {
			out = append(out, first)
		}
		return append(append(out, list...), last...)
	}
	var idx jen.Code = jen.Lit(r.SharedAt)
	if r.Planned {
		idx = jen.Lit(r.SharedAt).Op("+").Int().Call(jen.Id("plan"))
	}
	step := jen.Qual(sharedPath, "Step").Values(jen.Dict{jen.Id("Rule"): idx, jen.Id("Key"): sharedKey(r, jen.Id("key")), jen.Id("Cost"): jen.Id("cost")})
	badPlan := func(ret jen.Code) jen.Code {
		if !r.Planned {
			return jen.Null()
		}
		return jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(ret))
	}
	never := vd("Result").Values(jen.Dict{jen.Id("Decision"): rt("Decision").Values(jen.Dict{jen.Id("RetryAfter"): rt("Never")})})
	var nowP, now []jen.Code
	if r.KeyType == "" {
		nowP, now = []jen.Code{jen.Id("now").Add(rt("Time"))}, []jen.Code{jen.Id("now")}
	}
	g := jen.Line()
	g.Comment(fmt.Sprintf("%s returns %s's limiter over its process-local buckets; New binds it to the store.", r.CtorName(), r.GoName)).Line()
	g.Func().Id(r.CtorName()).Params(nowP...).Op("*").Id(typ).Block(
		jen.Return(jen.Op("&").Id(typ).Values(jen.Dict{jen.Id("local"): jen.Id(r.LocalCtorName()).Call(now...)}))).Line().Line()
	g.Add(comment(r.TypeDoc))
	g.Type().Id(typ).Struct(
		jen.Id("local").Op("*").Id(r.LocalTypeName()),
		jen.Id("sh").Op("*").Qual(sharedimplPath, "State").Comment("the store, or why there is none"),
	).Line().Line()
	var planP, planA []jen.Code
	if r.Planned {
		planP, planA = []jen.Code{jen.Id("plan").Id("Plan")}, []jen.Code{jen.Id("plan")}
	}
	g.Comment("Rule returns the runtime rule behind the limiter (its units, exactness and limits).").Line()
	g.Func().Params(recv).Id("Rule").Params(planP...).Op("*").Add(rt("Rule")).Block(
		jen.Return(jen.Id("l").Dot("local").Dot("Rule").Call(planA...))).Line().Line()
	g.Add(comment(fmt.Sprintf("Local returns %s decided in this process only, with the whole limit, on buckets apart "+
		"from the store's, for tests and tools: what it admits is not counted by any other instance.", r.GoName)))
	g.Func().Params(recv).Id("Local").Params().Op("*").Id(r.LocalTypeName()).Block(jen.Return(jen.Id("l").Dot("local"))).Line().Line()
	g.Add(comment("Allow reports whether a request of the rule's default cost is allowed, deciding on the store " +
		"(see AllowN, whose Result says more: whether the store decided, and why not)."))
	var costBad jen.Code = jen.Null() // the default cost per plan is looked up first
	if r.Planned && r.CostDiffers() {
		costBad = badPlan(jen.False())
	}
	g.Func().Params(recv).Id("Allow").Params(with(ctxP, params)...).Bool().Block(
		costBad,
		jen.Return(jen.Id("l").Dot("AllowN").Call(with(jen.Id("ctx"), args, costExpr(r))...).Dot("Allowed"))).Line().Line()
	g.Add(comment(fmt.Sprintf("AllowN decides a request of cost on the store given to New, so that %s holds across every "+
		"instance that shares it. It never fails: when the store cannot decide, the rule's on_failure setting (%s) "+
		"does, and the Result says so (Degraded, Err). %sWithout a store, %s's process-local limiter (Local) decides "+
		"and Err is SharedErr's error.", r.GoName, failureWords(r), leaseWords(r), r.GoName)))
	g.Func().Params(recv).Id("AllowN").Params(with(ctxP, params, jen.Id("cost").Int64())...).Add(vd("Result")).Block(
		badPlan(never),
		jen.If(jen.Id("l").Dot("sh").Dot("Bound").Op("==").Nil()).Block(
			jen.Return(vd("Result").Values(jen.Dict{
				jen.Id("Decision"): jen.Id("l").Dot("local").Dot("AllowN").Call(with(nil, args, jen.Id("cost"))...),
				jen.Id("Err"):      jen.Id("l").Dot("sh").Dot("Why"),
			}))),
		jen.Return(jen.Id("l").Dot("sh").Dot("Bound").Dot("CheckStep").Call(jen.Id("ctx"), step)),
	).Line().Line()
	g.Add(comment("Wait blocks until a request of cost is allowed on the store, or ctx is done: it checks, and after a " +
		"denial sleeps for its RetryAfter and checks again (shared.Wait), so a crowd of waiters is served in no " +
		"fixed order. It returns at once when the wait would pass ctx's deadline or the cost exceeds the burst. " +
		"Without a store it is Local's Wait."))
	g.Func().Params(recv).Id("Wait").Params(with(ctxP, params, jen.Id("cost").Int64())...).Error().Block(
		badPlan(jen.Id("ErrUnknownPlan")),
		jen.If(jen.Id("l").Dot("sh").Dot("Bound").Op("==").Nil()).Block(
			jen.Return(jen.Id("l").Dot("local").Dot("Wait").Call(with(jen.Id("ctx"), args, jen.Id("cost"))...))),
		jen.Return(jen.Qual(sharedPath, "Wait").Call(jen.Id("ctx"), jen.Id("l").Dot("sh").Dot("Bound"), step)),
	).Line().Line()
	settled := jen.Qual(sharedPath, "Step").Values(jen.Dict{jen.Id("Rule"): idx, jen.Id("Key"): sharedKey(r, jen.Id("key")), jen.Id("Cost"): jen.Id("estimate")})
	g.Add(comment("Settle settles a request admitted at cost estimate whose actual cost is actual, on the store " +
		"(shared.Bound.Settle): the difference given back, or owed as debt; it returns the tokens forgiven beyond the " +
		"debt bound. When the store cannot be reached nothing is settled and the error says so. Without a store, Local settles."))
	g.Func().Params(recv).Id("Settle").Params(with(ctxP, params, jen.List(jen.Id("estimate"), jen.Id("actual")).Int64())...).Params(jen.Id("forgiven").Int64(), jen.Err().Error()).Block(
		badPlan(jen.List(jen.Lit(0), jen.Id("ErrUnknownPlan"))),
		jen.If(jen.Id("l").Dot("sh").Dot("Bound").Op("==").Nil()).Block(
			jen.Return(jen.Id("l").Dot("local").Dot("Settle").Call(with(nil, args, jen.Id("estimate"), jen.Id("actual"))...), jen.Nil())),
		jen.Return(jen.Id("l").Dot("sh").Dot("Bound").Dot("Settle").Call(jen.Id("ctx"), settled, jen.Id("actual"))),
	).Line()
	g.Add(emitSharedNumbers(r, recv, idx))
	return g
}

// emitSharedNumbers are a shared rule's changes of numbers: on the store's
// binding (shared.Numbered) and on its process-local limiter alike, so that
// Local, the failure setting's share and the middleware's fields have the
// numbers the store has.
func emitSharedNumbers(r model.Rule, recv, idx jen.Code) jen.Code {
	g := jen.Line()
	var planP, planA []jen.Code
	onPlan, every := "", ""
	if r.Planned {
		planP, planA = []jen.Code{jen.Id("plan").Id("Plan")}, []jen.Code{jen.Id("plan")}
		onPlan, every = " on plan", " on every plan"
	}
	keyed := r.KeyType != ""
	var keyP, keyA []jen.Code
	if keyed {
		keyP, keyA = []jen.Code{jen.Id("key").Id(r.KeyType)}, []jen.Code{jen.Id("key")}
	}
	badPlan := func(ret ...jen.Code) jen.Code {
		if !r.Planned {
			return jen.Null()
		}
		return jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(ret...))
	}
	var ruleList []jen.Code // every plan's index of the rule
	for i := range r.Limits {
		ruleList = append(ruleList, jen.Lit(r.SharedAt+i))
	}
	rules := jen.Index().Int().Values(ruleList...)
	nb := jen.List(jen.Id("nb"), jen.Err()).Op(":=").Id("l").Dot("sh").Dot("Numbered").Call()
	nbErr := jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err()))
	asIs := rt("CarryAsIs")
	forKeys := ""
	if keyed {
		forKeys = " for every key without numbers of its own"
	}
	storeWords := "A store converts each bucket at its next check (tokens held carried as they are, never beyond the " +
		"new burst); every instance sharing the store must be given the same numbers, or each converts the buckets to its own " +
		"(never gaining tokens): give them from one source (shared.Numbered says more)."
	g.Add(comment(fmt.Sprintf("SetNumbers makes n %s's numbers%s%s, on the store and in this process (Local, and the "+
		"on_failure share). Numbers the rule or the store cannot hold are refused, and nothing changes. %s",
		r.GoName, onPlan, forKeys, storeWords)))
	g.Func().Params(recv).Id("SetNumbers").Params(append(append([]jen.Code{}, planP...), jen.Id("n").Add(rt("Numbers")))...).Error().Block(
		badPlan(jen.Id("ErrUnknownPlan")),
		costCheck(r, planExpr(r)),
		nb, nbErr,
		jen.If(jen.Id("nb").Op("!=").Nil()).Block(
			jen.If(jen.Err().Op(":=").Id("nb").Dot("SetNumbers").Call(idx, jen.Id("n")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err()))),
		jen.Return(jen.Id("l").Dot("local").Dot("SetNumbers").Call(append(append([]jen.Code{}, planA...), jen.Id("n"), asIs)...)),
	).Line().Line()
	g.Add(comment(fmt.Sprintf("ClearNumbers returns %s%s to the policy's numbers, on the store and in this process.", r.GoName, onPlan)))
	g.Func().Params(recv).Id("ClearNumbers").Params(planP...).Error().Block(
		badPlan(jen.Id("ErrUnknownPlan")),
		nb, nbErr,
		jen.If(jen.Id("nb").Op("!=").Nil()).Block(jen.Id("nb").Dot("ClearNumbers").Call(idx)),
		jen.Id("l").Dot("local").Dot("ClearNumbers").Call(append(append([]jen.Code{}, planA...), asIs)...),
		jen.Return(jen.Nil()),
	).Line().Line()
	if r.InForce {
		g.Add(comment("ruleInForce is, once the numbers have ever changed, the rule in force (for the middleware's fields): Local's, which every change keeps equal to the store's; nil before."))
		g.Func().Params(recv).Id("ruleInForce").Params(append(append([]jen.Code{}, planP...), keyP...)...).Op("*").Add(rt("Rule")).Block(
			jen.Return(jen.Id("l").Dot("local").Dot("ruleInForce").Call(append(append([]jen.Code{}, planA...), keyA...)...))).Line().Line()
	}
	key := sharedKey(r, jen.Id("key"))
	g.Add(comment(fmt.Sprintf("NumbersFor returns the numbers in force%s%s and where they come from: the store's binding's, or without a store Local's.",
		map[bool]string{true: " for key", false: ""}[keyed], onPlan)))
	g.Func().Params(recv).Id("NumbersFor").Params(append(append([]jen.Code{}, planP...), keyP...)...).Params(rt("Numbers"), rt("Origin")).Block(
		badPlan(rt("Numbers").Values(), rt("FromPolicy")),
		jen.If(jen.List(jen.Id("nb"), jen.Id("_")).Op(":=").Id("l").Dot("sh").Dot("Numbered").Call(), jen.Id("nb").Op("!=").Nil()).Block(
			jen.Return(jen.Id("nb").Dot("NumbersFor").Call(idx, key))),
		jen.Return(jen.Id("l").Dot("local").Dot("NumbersFor").Call(append(append([]jen.Code{}, planA...), keyA...)...)),
	).Line().Line()
	ctxP := jen.Id("ctx").Qual("context", "Context")
	if !keyed {
		var localReset jen.Code = jen.Id("l").Dot("local").Dot("Reset").Call()
		if r.Planned {
			localReset = jen.For(jen.Id("p").Op(":=").Id("Plan").Call(jen.Lit(0)), jen.Id("p").Op("<").Id("numPlans"), jen.Id("p").Op("++")).Block(
				jen.Id("l").Dot("local").Dot("Reset").Call(jen.Id("p")))
		}
		g.Add(comment(fmt.Sprintf("Reset forgets %s's bucket%s on the store (its next check finds it full) and in this process. "+
			"Other instances' leases keep what they were granted until it expires.", r.GoName, every)))
		g.Func().Params(recv).Id("Reset").Params(ctxP).Error().Block(
			nb, nbErr,
			localReset,
			jen.If(jen.Id("nb").Op("!=").Nil()).Block(jen.Return(jen.Id("nb").Dot("Reset").Call(jen.Id("ctx"), rules, jen.Lit("")))),
			jen.Return(jen.Nil()),
		).Line()
		return g
	}
	g.Add(comment(fmt.Sprintf("SetKeyNumbers gives key numbers of its own%s (an enterprise customer's quota), whatever %s's, "+
		"on the store and in this process; refused as by SetNumbers, all or nothing.", every, r.GoName)))
	g.Func().Params(recv).Id("SetKeyNumbers").Params(jen.Id("key").Id(r.KeyType), jen.Id("n").Add(rt("Numbers"))).Error().Block(
		costCheck(r, nil),
		nb, nbErr,
		jen.If(jen.Id("nb").Op("!=").Nil()).Block(
			jen.If(jen.Err().Op(":=").Id("nb").Dot("SetKeyNumbers").Call(rules, key, jen.Id("n")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err()))),
		jen.Return(jen.Id("l").Dot("local").Dot("SetKeyNumbers").Call(jen.Id("key"), jen.Id("n"), asIs)),
	).Line().Line()
	g.Add(comment(fmt.Sprintf("ClearKeyNumbers takes key's own numbers away%s, on the store and in this process.", every)))
	g.Func().Params(recv).Id("ClearKeyNumbers").Params(jen.Id("key").Id(r.KeyType)).Error().Block(
		nb, nbErr,
		jen.If(jen.Id("nb").Op("!=").Nil()).Block(jen.Id("nb").Dot("ClearKeyNumbers").Call(rules, key)),
		jen.Id("l").Dot("local").Dot("ClearKeyNumbers").Call(jen.Id("key"), asIs),
		jen.Return(jen.Nil()),
	).Line().Line()
	g.Add(comment(fmt.Sprintf("Reset forgets key's bucket%s on the store (\"unblock this user\": its next check finds it full) "+
		"and in this process. Other instances' leases keep what they were granted until it expires.", every)))
	g.Func().Params(recv).Id("Reset").Params(ctxP, jen.Id("key").Id(r.KeyType)).Error().Block(
		nb, nbErr,
		jen.Id("l").Dot("local").Dot("Reset").Call(jen.Id("key")),
		jen.If(jen.Id("nb").Op("!=").Nil()).Block(jen.Return(jen.Id("nb").Dot("Reset").Call(jen.Id("ctx"), rules, key))),
		jen.Return(jen.Nil()),
	).Line()
	return g
}

// bindWindow is the call that binds a shared window rule to its store:
// shared.BindWindow, or BindLeasedWindow with the rule's lease.
func bindWindow(r model.Rule, args ...jen.Code) jen.Code {
	if r.Lease > 0 {
		return jen.Qual(sharedPath, "BindLeasedWindow").Call(append(args, jen.Lit(int(r.Lease)))...)
	}
	return jen.Qual(sharedPath, "BindWindow").Call(args...)
}

func leaseWords(r model.Rule) string {
	switch {
	case r.Lease == 0:
		return ""
	case r.IsWindow():
		return fmt.Sprintf("The rule is leased: each instance takes batches of at most %d units from the store's window, "+
			"which counts them until the window after the batch's term is over, and spends them here, so most checks "+
			"make no call. ", r.Lease)
	}
	return fmt.Sprintf("The rule is leased: each instance takes batches of at most %d tokens from a store that leases "+
		"and spends them here, so most checks make no call. ", r.Lease)
}

func failureWords(r model.Rule) string {
	switch r.Failure {
	case "FailAllow":
		return "allow"
	case "FailLocal":
		return fmt.Sprintf("a local share of %g of the limit", r.Share)
	}
	return "deny"
}

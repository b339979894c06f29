package emit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

func emitRule(m *model.Model, r model.Rule) jen.Code {
	// A shared rule's buckets are its process-local limiter, which the shared
	// limiter (emitSharedRule) wraps.
	typ, ctor, doc := r.TypeName(), r.CtorName(), r.TypeDoc
	if r.Shared {
		typ, ctor, doc = r.LocalTypeName(), r.LocalCtorName(), r.LocalDoc
	}
	recv := jen.Id("l").Op("*").Id(typ)
	g := jen.Line().Add(emitLimitVar(r))
	if r.IsInFlight() {
		g.Add(emitInFlight(r, typ, ctor, doc))
		if r.Shared {
			g.Add(emitSharedSlots(r))
		}
		return g
	}
	if r.IsWindow() {
		g.Add(emitWindow(m, r, typ, ctor, doc))
		if r.Shared {
			g.Add(emitSharedWindow(r))
		}
		return g
	}
	if !r.Planned {
		if r.KeyType != "" {
			g.Add(emitKeyed(r, typ, ctor, doc, recv))
		} else {
			g.Add(emitGlobal(r, typ, ctor, doc, recv))
		}
		if r.Shared {
			g.Add(emitSharedRule(r))
		}
		return g
	}

	// A planned rule: a bucket set per plan, and every method here, each
	// taking the plan first.
	vals := make([]jen.Code, len(m.Plans))
	for i, p := range m.Plans {
		vals[i] = jen.Id(p.GoName).Op(":").Add(newStore(r, i))
	}
	init := jen.Index(jen.Id("numPlans")).Op("*").Add(store(r)).Add(fields(vals...))
	if r.KeyType == "" {
		g.Comment(fmt.Sprintf("%s returns %s's bucket, created at now.", ctor, r.GoName)).Line()
		g.Func().Id(ctor).Params(jen.Id("now").Add(rt("Time"))).Op("*").Id(typ).Block(
			jen.Return(jen.Op("&").Id(typ).Values(jen.Dict{jen.Id("s"): init}))).Line().Line()
	} else {
		g.Comment(fmt.Sprintf("%s returns %s's (empty) tables.", ctor, r.GoName)).Line()
		g.Func().Id(ctor).Params().Op("*").Id(typ).Block(
			jen.Return(jen.Op("&").Id(typ).Values(jen.Dict{jen.Id("s"): init}))).Line().Line()
	}
	g.Add(comment(doc))
	g.Type().Id(typ).Struct(jen.Id("s").Index(jen.Id("numPlans")).Op("*").Add(store(r))).Line()
	// Rule: the runtime numbers behind the limiter.
	target := func() *jen.Statement { return jen.Id("l").Dot("s").Index(jen.Id("plan")) }
	badPlan := func(ret jen.Code) jen.Code { return jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(ret) }
	g.Line().Comment("Rule returns the runtime rule behind the limiter (its units, exactness and limits).").Line()
	g.Func().Params(recv).Id("Rule").Params(jen.Id("plan").Id("Plan")).Op("*").Add(rt("Rule")).Block(
		badPlan(jen.Return(jen.Nil())), jen.Return(target().Dot("Rule").Call())).Line()
	if r.CostDiffers() {
		costs := make([]jen.Code, len(r.Limits))
		for i, l := range r.Limits {
			costs[i] = lit(l.Cost)
		}
		g.Line().Comment(fmt.Sprintf("%sCost is each plan's default cost for %s.", r.Unexported(), r.GoName)).Line()
		g.Var().Id(r.Unexported() + "Cost").Op("=").Index(jen.Id("numPlans")).Int64().Values(costs...).Line()
	}

	for _, mt := range methods(r) {
		params := []jen.Code{}
		if mt.ctxFirst {
			params = append(params, jen.Id("ctx").Qual("context", "Context"))
		}
		params = append(params, jen.Id("plan").Id("Plan"))
		if r.KeyType != "" {
			params = append(params, jen.Id("key").Id(r.KeyType))
		}
		params = append(params, mt.params...)
		args := []jen.Code{}
		if mt.ctxFirst {
			args = append(args, jen.Id("ctx"))
		}
		if r.KeyType != "" {
			args = append(args, jen.Id("key"))
		}
		args = append(args, mt.args...)
		call := target().Dot(mt.call).Call(args...)
		if mt.suffix != nil {
			call.Add(mt.suffix)
		}
		bad := jen.Return()
		if mt.onBadPlan != nil {
			bad = jen.Return(mt.onBadPlan)
		}
		body := []jen.Code{badPlan(bad)}
		if mt.results != nil {
			body = append(body, jen.Return(call))
		} else {
			body = append(body, call)
		}
		g.Line().Comment(fmt.Sprintf("%s %s", mt.name, mt.doc)).Line()
		fn := g.Func().Params(recv).Id(mt.name).Params(params...)
		if mt.results != nil {
			fn.Add(mt.results)
		}
		fn.Block(body...).Line()
	}
	if r.KeyType != "" {
		g.Add(emitKeyedExtras(r, recv))
	}
	g.Add(emitNumbers(r, recv))
	if r.Shared {
		g.Add(emitSharedRule(r))
	}
	return g
}

// unitsConsts declares a folded rule's units (see atomicbucket.Rule.Units).
func unitsConsts(r model.Rule) jen.Code {
	l := r.Limits[0]
	return comment(r.UnitsDoc).Const().Defs(
		jen.Id(r.UnitsPerNs()).Op("=").Add(lit(l.Scale)),
		jen.Id(r.UnitsPerToken()).Op("=").Add(lit(l.Emit)),
		jen.Id(r.BurstUnits()).Op("=").Add(lit(l.Tau)),
	).Line().Line()
}

// emitGlobal is a global rule without plans: a type that embeds the
// runtime's genimpl.Global, which has every method, and adds what is
// specialised: the rule's units as constants and, when they fold, an Allow
// that takes them as arguments (and falls back on the runtime's check when
// the bucket's numbers changed at run time).
func emitGlobal(r model.Rule, typ, ctor, doc string, recv jen.Code) jen.Code {
	g := jen.Null()
	l := r.Limits[0]
	g.Comment(fmt.Sprintf("%s returns %s's bucket, created at now.", ctor, r.GoName)).Line()
	g.Func().Id(ctor).Params(jen.Id("now").Add(rt("Time"))).Op("*").Id(typ).Block(
		jen.Return(jen.Op("&").Id(typ).Values(gi("NewGlobal").Call(newStore(r, 0), costOf(r, l.Cost))))).Line().Line()
	whose := "Its methods, genimpl.Global's, are"
	if r.Folded() {
		whose = "Its methods, genimpl.Global's and the folded Allow below, are"
	}
	g.Add(comment(strings.Replace(doc, "Its methods are", whose, 1)))
	g.Type().Id(typ).Struct(gi("Global")).Line().Line()
	if r.Folded() {
		g.Add(unitsConsts(r))
		inc := jen.Id(r.UnitsPerToken()).Op("*").Add(lit(l.Cost))
		if l.Cost == 1 {
			inc = jen.Id(r.UnitsPerToken())
		}
		bucket := jen.Id("l").Dot("Bucket").Call()
		fallback := bucket.Clone().Dot("AllowAt").Call(jen.Id("now"))
		if l.Cost != 1 {
			fallback = bucket.Clone().Dot("AllowNAt").Call(jen.Id("now"), lit(l.Cost)).Dot("Allowed")
		}
		folded := []jen.Code{
			jen.If(jen.List(jen.Id("word"), jen.Id("ok")).Op(":=").Add(bucket.Clone().Dot("AllowGreedyAt").Call(jen.Id("now"), jen.Id(r.UnitsPerNs()), inc, jen.Id(r.BurstUnits()))), jen.Id("word").Op(">=").Lit(0)).Block(
				jen.Return(jen.Id("ok"))),
			jen.Comment("The numbers changed at run time: the runtime's check, which judges by those in force."),
			jen.Return(fallback),
		}
		g.Comment("Allow reports whether a request is allowed now, taking its tokens if so: the check with the units above.").Line()
		g.Func().Params(recv).Id("Allow").Params().Bool().Block(append([]jen.Code{jen.Id("now").Op(":=").Add(rt("Now").Call())}, folded...)...).Line().Line()
		g.Comment("AllowAt is Allow at time now.").Line()
		g.Func().Params(recv).Id("AllowAt").Params(jen.Id("now").Add(rt("Time"))).Bool().Block(folded...).Line().Line()
	}
	if r.InForce {
		g.Comment("ruleInForce is, once the numbers have ever changed, the rule in force (for the middleware's fields); nil before.").Line()
		g.Func().Params(recv).Id("ruleInForce").Params().Op("*").Add(rt("Rule")).Block(
			jen.Return(jen.Id("l").Dot("Bucket").Call().Dot("ChangedRule").Call())).Line()
	}
	return g
}

// emitKeyed is a keyed rule without plans: a type that embeds the runtime's
// genimpl.Keyed, which has every method, and adds what is specialised:
// the rule's units as constants and, when they fold, an Allow that takes
// them as arguments.
func emitKeyed(r model.Rule, typ, ctor, doc string, recv jen.Code) jen.Code {
	g := jen.Null()
	keyed := gi("Keyed").Types(jen.Id(r.KeyType))
	valid := jen.Nil()
	switch {
	case r.KeyType == "string":
		valid = gi("NonEmpty")
	case r.Composite(): // a string field empty or too long, as no door reads it
		var cond *jen.Statement
		for _, f := range r.Fields {
			if f.Type != "string" {
				continue
			}
			c := keyOK(jen.Id("k").Dot(f.GoName))
			if cond == nil {
				cond = c
			} else {
				cond = cond.Op("&&").Add(c)
			}
		}
		if cond != nil {
			valid = jen.Func().Params(jen.Id("k").Id(r.KeyType)).Bool().Block(jen.Return(cond))
		}
	}
	g.Comment(fmt.Sprintf("%s returns %s's (empty) table.", ctor, r.GoName)).Line()
	g.Func().Id(ctor).Params().Op("*").Id(typ).Block(
		jen.Return(jen.Op("&").Id(typ).Values(gi("NewKeyed").Call(newStore(r, 0), costOf(r, r.Limits[0].Cost), valid)))).Line().Line()
	whose := "Its methods, genimpl.Keyed's, are"
	if r.Folded() {
		whose = "Its methods, genimpl.Keyed's and the folded Allow below, are"
	}
	g.Add(comment(strings.Replace(doc, "Its methods are", whose, 1)))
	g.Type().Id(typ).Struct(keyed).Line().Line()
	if r.Folded() {
		l := r.Limits[0]
		g.Add(unitsConsts(r))
		inc := jen.Id(r.UnitsPerToken()).Op("*").Add(lit(l.Cost))
		if l.Cost == 1 {
			inc = jen.Id(r.UnitsPerToken())
		}
		call := func(now jen.Code) jen.Code {
			return jen.Return(jen.Id("l").Dot("Table").Call().Dot("AllowGreedyAt").Call(jen.Id("key"), now, jen.Id(r.UnitsPerNs()), inc, jen.Id(r.BurstUnits())))
		}
		key := jen.Id("key").Id(r.KeyType)
		g.Comment("Allow reports whether a request is allowed now, taking its tokens if so: the check with the units above.").Line()
		g.Func().Params(recv).Id("Allow").Params(key).Bool().Block(call(rt("Now").Call())).Line().Line()
		g.Comment("AllowAt is Allow at time now.").Line()
		g.Func().Params(recv).Id("AllowAt").Params(key, jen.Id("now").Add(rt("Time"))).Bool().Block(call(jen.Id("now"))).Line().Line()
	}
	if r.InForce {
		g.Comment("ruleInForce is, once the numbers have ever changed, the rule in force (for the middleware's fields); nil before.").Line()
		g.Func().Params(recv).Id("ruleInForce").Params(jen.Id("key").Id(r.KeyType)).Op("*").Add(rt("Rule")).Block(
			jen.Return(jen.Id("l").Dot("Table").Call().Dot("ChangedRule").Call(jen.Id("key")))).Line()
	}
	return g
}

// emitNumbers are the methods that change a planned rule's numbers at run time:
// SetNumbers, ClearNumbers, NumbersFor and Reset, and for a keyed rule
// SetKeyNumbers and ClearKeyNumbers, whose numbers hold on every plan.
func emitNumbers(r model.Rule, recv jen.Code) jen.Code {
	g := jen.Line()
	nowCall := rt("Now").Call()
	now, nowP := jen.Id("now"), jen.Id("now").Add(rt("Time"))
	planParam := []jen.Code{jen.Id("plan").Id("Plan")}
	target := jen.Id("l").Dot("s").Index(jen.Id("plan"))
	badPlan := func(ret ...jen.Code) []jen.Code {
		return []jen.Code{jen.If(jen.Id("plan").Op(">=").Id("numPlans")).Block(jen.Return(ret...))}
	}
	onPlan, every := " on plan", " on every plan"
	keyed := r.KeyType != ""
	forKeys := ""
	if keyed {
		forKeys = " for every key without numbers of its own"
	}
	// pair emits a method and its At form: the first calls the second with
	// the clock read once. before and after are the parameters around now.
	pair := func(name, doc string, before, after []param, result jen.Code, body []jen.Code) {
		decl := func(ps []param) []jen.Code {
			out := []jen.Code{}
			for _, p := range ps {
				out = append(out, jen.Id(p.name).Add(p.typ))
			}
			return out
		}
		use := func(ps []param) []jen.Code {
			out := []jen.Code{}
			for _, p := range ps {
				out = append(out, jen.Id(p.name))
			}
			return out
		}
		g.Add(comment(fmt.Sprintf("%s %s", name, doc)))
		call := jen.Id("l").Dot(name + "At").Call(append(append(use(before), nowCall), use(after)...)...)
		f := g.Func().Params(recv).Id(name).Params(append(decl(before), decl(after)...)...)
		if result != nil {
			f.Add(result).Block(jen.Return(call))
		} else {
			f.Block(call)
		}
		g.Line().Line()
		g.Add(comment(fmt.Sprintf("%sAt is %s at time now.", name, name)))
		f = g.Func().Params(recv).Id(name + "At").Params(append(append(decl(before), nowP), decl(after)...)...)
		if result != nil {
			f.Add(result)
		}
		f.Block(body...)
		g.Line().Line()
	}
	numbers, carry := param{"n", rt("Numbers")}, param{"carry", rt("Carry")}
	keyP := param{"key", jen.Id(r.KeyType)}
	planP := []param{{"plan", jen.Id("Plan")}}
	pair("SetNumbers", fmt.Sprintf("makes n %s's numbers%s%s from now on: every bucket is carried into them "+
		"as of now by carry (atomicbucket.CarryAsIs keeps the tokens held, at most the new burst). Numbers the rule cannot "+
		"hold are refused with the generator's own message (an error wrapping atomicbucket.ErrInvalidLimit), and nothing changes.",
		r.GoName, onPlan, forKeys), planP, []param{numbers, carry}, jen.Error(),
		append(badPlan(jen.Id("ErrUnknownPlan")), costCheck(r, planExpr(r)), jen.Return(target.Clone().Dot("SetNumbersAt").Call(now, jen.Id("n"), jen.Id("carry")))))
	pair("ClearNumbers", fmt.Sprintf("returns %s%s to the policy's numbers, its buckets carried by carry.", r.GoName, onPlan),
		planP, []param{carry}, nil,
		append(badPlan(), target.Clone().Dot("ClearNumbersAt").Call(now, jen.Id("carry"))))
	inForceDoc := comment("ruleInForce is, once the numbers have ever changed, the rule in force (for the middleware's fields); nil before.")
	if !keyed {
		if r.InForce {
			g.Add(inForceDoc)
			g.Func().Params(recv).Id("ruleInForce").Params(planParam...).Op("*").Add(rt("Rule")).Block(
				jen.Return(target.Clone().Dot("ChangedRule").Call())).Line().Line()
		}
		g.Add(comment(fmt.Sprintf("NumbersFor returns %s's numbers in force%s and where they come from.", r.GoName, onPlan)))
		g.Func().Params(recv).Id("NumbersFor").Params(planParam...).Params(rt("Numbers"), rt("Origin")).Block(
			append(badPlan(rt("Numbers").Values(), rt("FromPolicy")), jen.Return(target.Clone().Dot("NumbersFor").Call()))...).Line().Line()
		pair("Reset", fmt.Sprintf("forgets the bucket's state%s: from now it holds the initial tokens of the numbers in force, refilling from now%s.", onPlan, gridStays(r)),
			planP, nil, nil, append(badPlan(), target.Clone().Dot("ResetAt").Call(now)))
		return g
	}
	tables := jen.Id("l").Dot("s")
	key := jen.Id("key").Id(r.KeyType)
	if r.InForce {
		g.Add(inForceDoc)
		g.Func().Params(recv).Id("ruleInForce").Params(append(planParam, key)...).Op("*").Add(rt("Rule")).Block(
			jen.Return(target.Clone().Dot("ChangedRule").Call(jen.Id("key")))).Line().Line()
	}
	pair("SetKeyNumbers", fmt.Sprintf("gives key numbers of its own%s from now on (an enterprise customer's quota), "+
		"whatever %s's; its bucket is carried into them as of now by carry. Numbers the rule cannot hold are refused "+
		"as by SetNumbers, and nothing changes.", every, r.GoName), []param{keyP}, []param{numbers, carry}, jen.Error(),
		[]jen.Code{
			emptyKeyCheck(r),
			costCheck(r, nil),
			jen.For(jen.List(jen.Id("_"), jen.Id("t")).Op(":=").Range().Add(tables)).Block(
				jen.If(jen.List(jen.Id("_"), jen.Err()).Op(":=").Id("t").Dot("Rule").Call().Dot("WithNumbers").Call(jen.Id("n")), jen.Err().Op("!=").Nil()).Block(
					jen.Return(jen.Err()))),
			jen.For(jen.List(jen.Id("_"), jen.Id("t")).Op(":=").Range().Add(tables)).Block(
				jen.Id("_").Op("=").Id("t").Dot("SetKeyNumbersAt").Call(now, jen.Id("key"), jen.Id("n"), jen.Id("carry")).Comment("cannot fail: checked above")),
			jen.Return(jen.Nil()),
		})
	pair("ClearKeyNumbers", fmt.Sprintf("takes key's own numbers away%s: from now on it has %s's, its bucket carried by carry.", every, r.GoName),
		[]param{keyP}, []param{carry}, nil,
		[]jen.Code{jen.For(jen.List(jen.Id("_"), jen.Id("t")).Op(":=").Range().Add(tables)).Block(
			jen.Id("t").Dot("ClearKeyNumbersAt").Call(now, jen.Id("key"), jen.Id("carry")))})
	g.Add(comment(fmt.Sprintf("NumbersFor returns the numbers in force for key%s and where they come from (the policy, SetNumbers, SetKeyNumbers).", onPlan)))
	g.Func().Params(recv).Id("NumbersFor").Params(append(planParam, key)...).Params(rt("Numbers"), rt("Origin")).Block(
		append(badPlan(rt("Numbers").Values(), rt("FromPolicy")), jen.Return(target.Clone().Dot("NumbersFor").Call(jen.Id("key"))))...).Line().Line()
	pair("Reset", fmt.Sprintf("makes key's bucket new%s (\"unblock this user\"): from now it holds the initial tokens of the numbers in force for key, "+
		"refilling from now, as a key first seen now would; a key without a bucket is left as it is.", every),
		[]param{keyP}, nil, nil,
		[]jen.Code{jen.For(jen.List(jen.Id("_"), jen.Id("t")).Op(":=").Range().Add(tables)).Block(
			jen.Id("t").Dot("ResetAt").Call(jen.Id("key"), now))})
	return g
}

// gridStays is what Reset says of a global interval rule's grid: it stays
// where the bucket was made (or the wall clock's, aligned).
func gridStays(r model.Rule) string {
	if !r.Limits[0].Interval {
		return ""
	}
	return " on the same interval grid (its next boundary comes when it would have)"
}

// emptyKeyCheck refuses the empty key of a string-keyed rule, which no door
// ever checks (a request without a key is missing_key): numbers given to it
// would never apply. Nothing for other key types.
func emptyKeyCheck(r model.Rule) jen.Code {
	if r.Composite() { // a string field empty or too long, as no door reads it
		var cond *jen.Statement
		for _, f := range r.Fields {
			if f.Type != "string" {
				continue
			}
			c := keyBad(jen.Id("key").Dot(f.GoName))
			if cond == nil {
				cond = c
			} else {
				cond = cond.Op("||").Add(c)
			}
		}
		if cond == nil {
			return jen.Null()
		}
		return jen.If(cond).Block(jen.Return(rt("ErrEmptyKey")))
	}
	if r.KeyType != "string" {
		return jen.Null()
	}
	return jen.If(jen.Id("key").Op("==").Lit("")).Block(jen.Return(rt("ErrEmptyKey")))
}

// costCheck refuses numbers whose burst is below the cost of one of r's
// requests, as the generator refuses such a policy: on plan (an expression
// of type Plan or int), or, for plan nil, on every plan. Nothing for a rule
// whose requests cost 1.
func costCheck(r model.Rule, plan jen.Code) jen.Code {
	if len(r.RouteCost) == 0 {
		return defaultCostCheck(r, plan)
	}
	return jen.Add(defaultCostCheck(r, plan)).Line().Add(routeCostCheck(r, plan))
}

// routeCostCheck is the statement that refuses numbers n whose burst is below
// the most a request of one of r's routes may cost (model.Rule.RouteCost),
// naming the route; nothing when no route costs more than r's default. On a
// rule with plans, plan is the plan's expression, or nil for numbers of
// every plan (a key's own), held to the most of any plan.
func routeCostCheck(r model.Rule, plan jen.Code) jen.Code {
	if len(r.RouteCost) == 0 {
		return jen.Null()
	}
	most, at := int64(0), 0
	same := true
	for j, c := range r.RouteCost {
		if c > most {
			most, at = c, j
		}
		same = same && c == r.RouteCost[0] && r.RouteCostOf[j] == r.RouteCostOf[0]
	}
	var cost, what jen.Code = jen.Lit(int(most)), jen.Lit("route " + strconv.Quote(r.RouteCostOf[at]))
	if plan != nil && !same {
		var cs, ws []jen.Code
		for j, c := range r.RouteCost {
			cs = append(cs, jen.Lit(int(c)))
			ws = append(ws, jen.Lit("route "+strconv.Quote(r.RouteCostOf[j])))
		}
		cost = jen.Index(jen.Lit(len(cs))).Int64().Values(cs...).Index(plan)
		what = jen.Index(jen.Lit(len(ws))).String().Values(ws...).Index(plan)
	}
	return jen.If(jen.Err().Op(":=").Add(gi("CheckMaxCost")).Call(jen.Id("n").Dot("Burst"), cost, what), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err()))
}

// defaultCostCheck is the statement that refuses numbers n whose burst is
// below r's default cost (on plan), nothing when that is 1.
func defaultCostCheck(r model.Rule, plan jen.Code) jen.Code {
	costs := make([]int64, len(r.Limits))
	most, same := int64(1), true
	for i, l := range r.Limits {
		costs[i] = max(l.Cost, 1)
		most = max(most, costs[i])
		same = same && costs[i] == costs[0]
	}
	if most <= 1 {
		return jen.Null()
	}
	var cost jen.Code = jen.Lit(int(most))
	if plan != nil && !same {
		var lits []jen.Code
		for _, c := range costs {
			lits = append(lits, jen.Lit(int(c)))
		}
		cost = jen.Index(jen.Lit(len(costs))).Int64().Values(lits...).Index(plan)
	}
	return jen.If(jen.Err().Op(":=").Add(gi("CheckCost")).Call(jen.Id("n").Dot("Burst"), cost), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err()))
}

// planExpr is the plan parameter of a method of r, nil without plans.
func planExpr(r model.Rule) jen.Code {
	if !r.Planned {
		return nil
	}
	return jen.Id("plan")
}

// param is a generated method's parameter.
type param struct {
	name string
	typ  jen.Code
}

// emitKeyedExtras are a planned keyed rule's Sweep, Len, Stats and
// RunSweeper, over every plan's table.
func emitKeyedExtras(r model.Rule, recv jen.Code) jen.Code {
	g := jen.Line()
	over := func(v string, typ jen.Code, each jen.Code) []jen.Code {
		return []jen.Code{
			jen.Var().Id(v).Add(typ),
			jen.For(jen.List(jen.Id("_"), jen.Id("t")).Op(":=").Range().Id("l").Dot("s")).Block(each),
			jen.Return(jen.Id(v)),
		}
	}
	g.Comment("Sweep removes the buckets, of every plan, that have been full for atomicbucket.SweepGrace, and returns how many.").Line()
	g.Func().Params(recv).Id("Sweep").Params().Int().Block(
		over("n", jen.Int(), jen.Id("n").Op("+=").Id("t").Dot("SweepAt").Call(rt("Now").Call()))...).Line().Line()
	g.Comment("Len is the number of keys tracked, over every plan.").Line()
	g.Func().Params(recv).Id("Len").Params().Int64().Block(
		over("n", jen.Int64(), jen.Id("n").Op("+=").Id("t").Dot("Len").Call())...).Line().Line()
	g.Comment("Stats returns the tables' counters, summed over every plan.").Line()
	g.Func().Params(recv).Id("Stats").Params().Add(rt("TableStats")).Block(
		over("s", rt("TableStats"), jen.Id("s").Op("=").Add(gi("AddStats")).Call(jen.Id("s"), jen.Id("t").Dot("Stats").Call()))...).Line().Line()
	g.Add(comment("RunSweeper calls Sweep every interval until ctx is done; run it in its own goroutine. It is optional: " +
		"the tables reclaim full buckets themselves; it returns idle keys' memory sooner when no new keys come."))
	params := []jen.Code{jen.Id("ctx").Qual("context", "Context"), jen.Id("interval").Qual("time", "Duration")}
	g.Func().Params(recv).Id("RunSweeper").Params(params...).Block(
		gi("RunEvery").Call(jen.Id("ctx"), jen.Id("interval"), jen.Func().Params().Block(jen.Id("l").Dot("Sweep").Call())),
	).Line()
	return g
}

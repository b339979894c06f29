package emit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

// slotRoute says whether route r acquires slots of in-flight rules (its
// rule's, or its tier's).
func slotRoute(r model.Route) bool { return len(r.Slots) > 0 }

// checkRoute says whether route r checks rate rules (its rule, or its
// tier's buckets and windows).
func checkRoute(r model.Route) bool { return len(r.Rules) > 0 }

// emitSlotRoute is the acquisition of route (or method entry) i's in-flight
// rules, in order: each one's key read as emitRoute reads one, its slot
// taken, and the answer (limithttp's or limitgrpc's Config.Hold), the slots
// taken before it given back when it denies. The door acquires before the
// route's check and releases the set when the handler returns, or when a
// check denies. An HTTP route's returns whether the request may go on and
// the set; a gRPC entry's, the set and the status that ends the call.
func emitSlotRoute(m *model.Model, d *door, i int, r model.Route, base int) jen.Code {
	mode := vd(r.Mode)
	http := d.prefix == "http"
	set := jen.Qual(slotPath, "Set")
	// denied is the way out when call (a Hold or a Reject) ends the request.
	denied := func(call jen.Code) jen.Code {
		giveBack := jen.Id("set").Dot("ReleaseAt").Call(jen.Id("now"))
		if http {
			return jen.If(jen.Op("!").Add(call)).Block(giveBack, jen.Return(jen.False(), set.Clone().Values()))
		}
		return jen.If(jen.Err().Op(":=").Add(call), jen.Err().Op("!=").Nil()).Block(giveBack, jen.Return(set.Clone().Values(), jen.Err()))
	}
	body := []jen.Code{jen.Var().Id("set").Add(set), jen.Id("now").Op(":=").Add(d.r()).Dot(d.now).Call()}
	if routePlanned(m, model.Route{Slots: r.Slots}) {
		body = append(body, jen.Id("plan").Op(":=").Add(d.r()).Dot("plan").Call(d.req))
	}
	var names []string
	for k, sl := range r.Slots {
		rule := m.Rules[sl.Rule]
		names = append(names, rule.Name)
		kv, ok, s, res, text := fmt.Sprintf("k%d", k), fmt.Sprintf("ok%d", k), fmt.Sprintf("s%d", k), fmt.Sprintf("res%d", k), fmt.Sprintf("key%d", k)
		event := func(outcome string, key ...resField) jen.Code {
			f := []jen.Code{
				field("Route", jen.Lit(r.Pattern)),
				field("Rule", jen.Lit(rule.Name)),
				field("RuleIndex", jen.Int().Call(jen.Id(rule.RuleConst()))),
				field("Series", jen.Lit(base+len(r.Rules)+k)),
			}
			if r.Tier >= 0 {
				f = append(f, field("Tier", jen.Lit(m.Tiers[r.Tier].Name)))
			}
			if outcome != "" {
				f = append(f, field("Outcome", vd(outcome)))
			} else {
				f = append(f, field("Cost", jen.Lit(1))) // checked: one slot
			}
			for _, x := range key {
				f = append(f, field(x.name, x.v))
			}
			return vd("Event").Values(f...)
		}
		var acquire, args []jen.Code
		var key []resField
		limiter := d.r().Dot("limits").Dot(rule.GoName)
		var planA []jen.Code // the plan, first, for a rule with numbers per plan
		if rule.Planned {
			planA = []jen.Code{jen.Id("plan")}
		}
		if rule.KeyType != "" {
			if rule.Composite() {
				body = append(body, emitCompositeKeyRead(d, kv, ok, rule, sl.Keys, r.Ordinal, r.Pattern)...)
			} else {
				body = append(body, emitKey(d, kv, ok, rule.KeyType, sl.Keys, r.Ordinal, r.Pattern)...)
			}
			args = append(args, jen.Id(kv))
			switch {
			case rule.Composite(): // its text form, for the log: built only for a denial
				acquire = append(acquire, jen.Id(text).Op(":=").Lit(""))
				key = append(key, setField("Key", jen.Id(text)))
			case rule.KeyType == "string":
				key = append(key, setField("Key", jen.Id(kv)))
			default:
				key = append(key, setField("KeyInt", jen.Uint64().Call(jen.Id(kv))))
			}
		}
		args = append(slices.Clone(planA), args...)
		if rule.Shared && rule.Waits() { // on the store, waiting in the request's context
			acquire = append(acquire, jen.List(jen.Id(s), jen.Id(res)).Op(":=").Add(limiter).Dot("AcquireWait").Call(
				append(append([]jen.Code{d.ctx}, args...), limiter.Clone().Dot("MaxWait").Call(planA...))...))
		} else if rule.Shared { // on the store, in the request's context
			acquire = append(acquire, jen.List(jen.Id(s), jen.Id(res)).Op(":=").Add(limiter).Dot("Acquire").Call(append([]jen.Code{d.ctx}, args...)...))
		} else if rule.Waits() { // a wait for a free slot: on the real clock, in the request's context
			acquire = append(acquire, jen.Var().Id(res).Add(vd("Result")), jen.Var().Id(s).Qual(slotPath, "Slot"),
				jen.List(jen.Id(s), jen.Id(res).Dot("Decision")).Op("=").Add(limiter).Dot("AcquireWait").Call(
					append(append([]jen.Code{d.ctx}, args...), limiter.Clone().Dot("MaxWait").Call(planA...))...))
		} else {
			acquire = append(acquire, jen.Var().Id(res).Add(vd("Result")), jen.Var().Id(s).Qual(slotPath, "Slot"),
				jen.List(jen.Id(s), jen.Id(res).Dot("Decision")).Op("=").Add(limiter).Dot("AcquireAt").Call(append(args, jen.Id("now"))...))
		}
		if rule.Composite() {
			acquire = append(acquire, jen.If(jen.Op("!").Id(res).Dot("Allowed")).Block(jen.Id(text).Op("=").Id(kv).Dot("String").Call()))
		}
		hold := append(slices.Clone(d.respond), mode, jen.Op("&").Id(res), jen.Lit(sl.Body), event("", key...))
		acquire = append(acquire, denied(d.r().Dot("Config").Dot("Hold").Call(hold...)), jen.Id("set").Dot("Add").Call(jen.Id(s)))
		if rule.KeyType == "" {
			body = append(body, acquire...)
			continue
		}
		reject := d.r().Dot("Config").Dot("Reject").Call(append(slices.Clone(d.reject), mode, d.missing, jen.Lit(sl.Missing), event("MissingKey"))...)
		body = append(body, jen.If(jen.Id(ok)).Block(acquire...).Else().Add(denied(reject)))
	}
	if http {
		body = append(body, jen.Return(jen.True(), jen.Id("set")))
	} else {
		body = append(body, jen.Return(jen.Id("set"), jen.Nil()))
	}
	what := "a slot of " + names[0]
	if len(names) > 1 {
		what = "a slot of each of " + strings.Join(names, ", ")
	}
	doc := fmt.Sprintf("%s takes %s for %s (%s) and reports whether the request may go on, with the slots to release when it ends.", d.acquireName(i), what, r.Pattern, strings.ToLower(r.Mode))
	results := jen.Params(jen.Bool(), set.Clone())
	params := d.params
	if !http {
		doc = fmt.Sprintf("%s takes %s for a call of %s (%s) and returns them, to release when the call ends, or the status that ends the call.", d.acquireName(i), what, r.Pattern, strings.ToLower(r.Mode))
		results = jen.Params(set.Clone(), jen.Error())
	} else if !readsPath(slotKeys(r)) {
		params = params[:len(params)-1]
	}
	return jen.Line().Add(comment(doc)).
		Func().Params(d.r().Op("*").Id(d.typ)).Id(d.acquireName(i)).Params(params...).Add(results).Block(body...).Line()
}

// slotKeys are the key sources of route r's in-flight rules.
func slotKeys(r model.Route) [][]model.KeySource {
	var keys [][]model.KeySource
	for _, s := range r.Slots {
		keys = append(keys, s.Keys)
	}
	return keys
}

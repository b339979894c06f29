package emit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

const (
	rlsPath   = "github.com/limitgen/limitgen/limitrls"
	rlsProtos = "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

func lr(name string) *jen.Statement { return jen.Qual(rlsPath, name) }

// descriptorFunc is the name of descriptor pattern i's check.
func descriptorFunc(i int) string { return "descriptor" + strconv.Itoa(i+1) }

func rlsDoor(m *model.Model) *door {
	return &door{
		recv: "s", typ: "RLS", prefix: "rls", routes: m.RLS.Routes, plan: m.RLS.Plan,
		params: []jen.Code{
			jen.Id("ctx").Add(ctxType()),
			jen.Id("en").Index().Op("*").Qual(rlsProtos, "RateLimitDescriptor_Entry"),
			jen.Id("cost").Int64(),
			jen.Id("now").Add(rt("Time")),
		},
		result:    jen.Params(vd("Result"), jen.String(), jen.Error()),
		ctx:       jen.Id("ctx"),
		req:       jen.Id("en"), // what the plan is read from
		missing:   jen.Lit(0),
		tooCostly: jen.Lit(0),
		entryName: descriptorFunc,
		message:   true,
		nowParam:  true,
		source: func(s model.KeySource) jen.Code {
			return lr("EntryKey").Call(jen.Id("en"), jen.Lit(s.Segment))
		},
	}
}

// emitRLS is the policy's rls: section: the RLS type (Envoy's rate-limit
// service over limitrls), its descriptor patterns' matching, and each
// pattern's check.
func emitRLS(m *model.Model) jen.Code {
	return emitDoor(m, rlsDoor(m), emitRLSType(m))
}

func emitRLSType(m *model.Model) jen.Code {
	s := m.RLS
	judge := []jen.Code{
		field("Counters", vd("NewCounters").Call(jen.Id("rlsSeries").Index(jen.Empty(), jen.Empty()).Op("..."))),
	}
	if s.LogDenials > 0 {
		judge = append(judge, field("Observer", vd("NewDenialLog").Call(jen.Nil(), lit(s.LogDenials))))
	}
	cfg := []jen.Code{field("Judge", vd("Judge").Add(fields(judge...)))}
	if s.Headers {
		cfg = append(cfg, field("Headers", jen.True()))
	}
	logDoc := "logs no denials"
	if s.LogDenials > 0 {
		logDoc = fmt.Sprintf("logs denials with log/slog's default logger, at most %d a second", s.LogDenials)
	}
	var domainCases, patternCases []jen.Code
	var listed []string
	for _, dom := range s.Domains {
		var conds []jen.Code
		for _, i := range dom.Match {
			r := s.Routes[i]
			listed = append(listed, r.Pattern)
			cond := jen.Len(jen.Id("en")).Op("==").Lit(len(r.Entries))
			for j, e := range r.Entries {
				cond = cond.Op("&&").Id("en").Index(jen.Lit(j)).Dot("Key").Op("==").Lit(e.Key)
				if e.Fixed {
					cond = cond.Op("&&").Id("en").Index(jen.Lit(j)).Dot("Value").Op("==").Lit(e.Value)
				}
			}
			conds = append(conds, jen.Case(cond).Block(jen.Id("i").Op("=").Lit(i)))
			mode := vd(r.Mode)
			var body []jen.Code
			if r.Mode == "Off" {
				dict := jen.Dict{jen.Id("Mode"): mode, jen.Id("Found"): jen.True()}
				if r.Unlimited {
					dict[jen.Id("Unlimited")] = jen.True()
				}
				body = append(body, jen.Return(lr("Decision").Values(dict), jen.Nil()))
			} else {
				body = append(body,
					jen.List(jen.Id("res"), jen.Id("key"), jen.Err()).Op(":=").Id("s").Dot(descriptorFunc(i)).Call(jen.Id("ctx"), jen.Id("en"), jen.Id("cost"), jen.Id("now")),
					jen.Return(lr("Decision").Values(jen.Dict{jen.Id("Result"): jen.Id("res"), jen.Id("Key"): jen.Id("key"), jen.Id("Mode"): mode, jen.Id("Found"): jen.True()}), jen.Err()),
				)
			}
			patternCases = append(patternCases, jen.Case(jen.Lit(i)).Block(body...))
		}
		domainCases = append(domainCases, jen.Case(jen.Lit(dom.Name)).Block(jen.Switch().Block(conds...)))
	}
	return jen.Line().
		Comment("RLS serves Envoy's rate-limit service (envoy.service.ratelimit.v3.RateLimitService) for the").Line().
		Comment("policy's rls: section: it finds the descriptor pattern a request's descriptor matches in its").Line().
		Comment("domain (the same entry keys in order, and the values the pattern fixes), reads its rule's key").Line().
		Comment("from the pattern's entry, checks the rule or tier at the descriptor's hits_addend, and answers").Line().
		Comment("with limitrls (statuses, the overall code, the IETF fields when asked). A descriptor no pattern").Line().
		Comment("matches is OK and counted (Config.Unmatched).").Line().
		Comment("").Line().
		Comment("Descriptors: "+strings.Join(listed, "; ")+".").Line().
		Type().Id("RLS").Struct(
		jen.Id("limits").Op("*").Id("Limits"),
		comment("Clock, when set, is read instead of atomicbucket.Now: tests drive the service through time with it. Set it before calling Service.").Id("Clock").Func().Params().Add(rt("Time")),
		comment("Config is what every request shares: the fields, the counters, the observer ("+logDoc+"). Set it before serving.").Id("Config").Add(lr("Config")),
	).Line().Line().
		Comment("NewRLS returns the rate-limit service over l (Default when nil).").Line().
		Func().Id("NewRLS").Params(jen.Id("l").Op("*").Id("Limits")).Op("*").Id("RLS").Block(
		jen.If(jen.Id("l").Op("==").Nil()).Block(jen.Id("l").Op("=").Id("Default")),
		jen.Return(jen.Op("&").Id("RLS").Values(jen.Dict{jen.Id("limits"): jen.Id("l"), jen.Id("Config"): lr("Config").Add(fields(cfg...))})),
	).Line().Line().
		Comment("Service is the gRPC service to register: rlsv3.RegisterRateLimitServiceServer(srv, s.Service()).").Line().
		Func().Params(jen.Id("s").Op("*").Id("RLS")).Id("Service").Params().Op("*").Add(lr("Service")).Block(
		jen.Return(jen.Op("&").Add(lr("Service")).Values(jen.Dict{jen.Id("Config"): jen.Op("&").Id("s").Dot("Config"), jen.Id("Decide"): jen.Id("s").Dot("decide"), jen.Id("Clock"): jen.Id("s").Dot("Clock")})),
	).Line().Line().
		Comment("decide checks one descriptor of domain at cost (limitrls.Decider).").Line().
		Func().Params(jen.Id("s").Op("*").Id("RLS")).Id("decide").Params(jen.Id("ctx").Add(ctxType()), jen.Id("domain").String(), jen.Id("d").Op("*").Qual(rlsProtos, "RateLimitDescriptor"), jen.Id("cost").Int64(), jen.Id("now").Add(rt("Time"))).Params(lr("Decision"), jen.Error()).Block(
		jen.Id("en").Op(":=").Id("d").Dot("Entries"),
		jen.Id("i").Op(":=").Lit(-1),
		jen.Switch(jen.Id("domain")).Block(domainCases...),
		jen.Switch(jen.Id("i")).Block(patternCases...),
		jen.Return(lr("Decision").Values(), jen.Nil()),
	).Line()
}

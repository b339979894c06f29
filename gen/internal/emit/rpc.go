package emit

import (
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

const (
	grpcPath     = "github.com/limitgen/limitgen/limitgrpc"
	grpcLib      = "google.golang.org/grpc"
	codesPath    = "google.golang.org/grpc/codes"
	metadataPath = "google.golang.org/grpc/metadata"
)

func lg(name string) *jen.Statement { return jen.Qual(grpcPath, name) }
func ctxType() *jen.Statement       { return jen.Qual("context", "Context") }

func grpcDoor(m *model.Model) *door {
	g := m.GRPC
	return &door{
		recv: "g", typ: "GRPC", prefix: "grpc", routes: g.Routes, plan: g.Plan, now: "Now",
		params:    []jen.Code{jen.Id("ctx").Add(ctxType()), jen.Id("method").String()},
		result:    jen.Error(),
		ctx:       jen.Id("ctx"),
		req:       jen.Id("ctx"),
		respond:   []jen.Code{jen.Id("ctx")},
		reject:    nil,
		missing:   jen.Qual(codesPath, g.Missing),
		tooCostly: jen.Qual(codesPath, "InvalidArgument"),
		entryName: func(i int) string { return "entry" + strconv.Itoa(i+1) },
		ip:        lg("PeerKey").Call(jen.Id("ctx"), jen.Op("&").Id("g").Dot("ClientIP")),
		source: func(s model.KeySource) jen.Code {
			return lg("MetadataKey").Call(jen.Id("ctx"), jen.Lit(s.Name))
		},
		cost: func(r model.Route) jen.Code {
			return lg("MetadataCost").Call(jen.Id("ctx"), jen.Lit(r.CostName), lit(r.CostFixed), lit(r.CostMax))
		},
	}
}

// emitGRPC is the policy's grpc: section: GRPCHooks, GRPC (the unary and
// stream server interceptors), its method entries, and Coverage.
func emitGRPC(m *model.Model) jen.Code {
	return emitDoor(m, grpcDoor(m), emitGRPCHooks(m), emitGRPCType(m))
}

// emitMessageChecks are the checks of one message of each entry that counts
// its stream's messages (limitgrpc.CountMessages calls them).
func emitMessageChecks(m *model.Model, d *door, bases []int) jen.Code {
	md := *d
	md.message = true
	md.result = jen.Params(vd("Result"), jen.String(), jen.Error())
	md.entryName = messageFunc
	out := jen.Null()
	for i, r := range d.routes {
		if r.Mode != "Off" && r.Messages != nil {
			mr := r
			mr.CostKind, mr.CostFixed = "fixed", r.Messages.Cost
			out.Add(emitRoute(m, &md, i, mr, bases[i]))
		}
	}
	return out
}

func emitGRPCHooks(m *model.Model) jen.Code {
	return emitHookStruct(m, "GRPCHooks", m.GRPC.Hooks, m.GRPC.Routes, m.GRPC.Plan.Default, ctxType(),
		"%s returns the call's plan; false (or a value outside the plans) means the default plan, %s. Take it from what your authentication verified (an earlier interceptor's value in the context).",
		"%s returns the key of %s for a call, from its context (metadata.FromIncomingContext, peer.FromContext, or what an authentication interceptor stored), and false when it has none (then the next key source is tried, or the call ends with the policy's missing_key status). An empty key counts as none.",
		"GRPCHooks are the functions of your service that the policy's grpc: section names: what only",
		"your service knows of a call (a verified token's subject, the caller's plan). NewGRPC refuses a")
}

func emitGRPCType(m *model.Model) jen.Code {
	hooksField, hooksParam, hooksInit, newDoc := doorHooks("GRPCHooks", m.GRPC.Hooks,
		[2]string{"NewGRPC returns the interceptors over l (Default when nil); the policy names no functions of", "the service, so it never fails."},
		[2]string{"NewGRPC returns the interceptors over l (Default when nil), calling h's functions. It fails", "when one of them is nil."})
	g := m.GRPC
	checks := nilHooks(m.Pkg+": NewGRPC: GRPCHooks.", g.Hooks)
	judge, logDoc := judgeOf(&g.Jitter, "grpcSeries", g.LogDenials)
	cfg := []jen.Code{judge, field("Metadata", lg(g.Metadata))}
	var methodCases, serviceCases, entryCases, admitCases, slotCases, names []jen.Code
	var listed []string
	for i, r := range g.Routes {
		names = append(names, jen.Lit(r.Pattern))
		listed = append(listed, r.Pattern)
		c := jen.Case(jen.Lit(r.Pattern)).Block(jen.Return(jen.Lit(i)))
		if strings.HasPrefix(r.Pattern, "/") {
			methodCases = append(methodCases, c)
		} else {
			serviceCases = append(serviceCases, c)
		}
		if r.Mode == "Off" {
			continue
		}
		if slotRoute(r) {
			slotCases = append(slotCases, jen.Case(jen.Lit(i)).Block(jen.Return(jen.Id("g").Dot("acquireEntry"+strconv.Itoa(i+1)).Call(jen.Id("ctx"), jen.Id("method")))))
		}
		if checkRoute(r) {
			call := jen.Id("g").Dot("entry"+strconv.Itoa(i+1)).Call(jen.Id("ctx"), jen.Id("method"))
			if settleRoute(r) { // its check returns its mark too
				entryCases = append(entryCases, jen.Case(jen.Lit(i)).Block(jen.List(jen.Id("_"), jen.Err()).Op(":=").Add(call), jen.Return(jen.Err())))
				admitCases = append(admitCases, jen.Case(jen.Lit(i)).Block(jen.Return(call.Clone())))
			} else {
				entryCases = append(entryCases, jen.Case(jen.Lit(i)).Block(jen.Return(call)))
			}
		}
	}
	var entryBody []jen.Code
	if len(methodCases) > 0 {
		entryBody = append(entryBody, jen.Switch(jen.Id("method")).Block(methodCases...))
	}
	if len(serviceCases) > 0 {
		entryBody = append(entryBody, jen.Switch(lg("Service").Call(jen.Id("method"))).Block(serviceCases...))
	}
	entryBody = append(entryBody, jen.Return(jen.Lit(-1)))
	var check, checkFunc jen.Code = jen.Nil(), jen.Null() // with every entry off there is nothing to check
	if len(entryCases) > 0 {
		check = jen.Id("g").Dot("check")
		checkFunc = jen.Comment("check checks a call of method against its entry and returns the status that ends it, or nil.").Line().
			Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("check").Params(jen.Id("ctx").Add(ctxType()), jen.Id("method").String()).Error().Block(
			jen.Switch(jen.Id("grpcEntry").Call(jen.Id("method"))).Block(entryCases...), jen.Return(jen.Nil())).Line().Line()
	}
	if len(admitCases) > 0 {
		checkFunc = jen.Add(checkFunc).
			Comment("admit is check for a policy of settled entries: a settled entry's check returns the mark its").Line().
			Comment("settlement reads (verdict.Mark), any other's the zero Mark.").Line().
			Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("admit").Params(jen.Id("ctx").Add(ctxType()), jen.Id("method").String()).Params(vd("Mark"), jen.Error()).Block(
			jen.Switch(jen.Id("grpcEntry").Call(jen.Id("method"))).Block(admitCases...), jen.Return(vd("Mark").Values(), jen.Id("g").Dot("check").Call(jen.Id("ctx"), jen.Id("method")))).Line().Line()
	}
	var initSlots jen.Code = jen.Null() // entries of in-flight rules: their slots, taken after the check
	if len(slotCases) > 0 {
		initSlots = lg("InitSlots").Call(jen.Op("&").Id("g").Dot("Door"), jen.Id("g").Dot("acquire"))
		checkFunc = jen.Add(checkFunc).
			Comment("acquire takes the slots of the in-flight rules of method's entry, to release when the call ends,").Line().
			Comment("or returns the status that ends the call; the zero Set and nil for any other entry.").Line().
			Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("acquire").Params(jen.Id("ctx").Add(ctxType()), jen.Id("method").String()).Params(jen.Qual(slotPath, "Set"), jen.Error()).Block(
			jen.Switch(jen.Id("grpcEntry").Call(jen.Id("method"))).Block(slotCases...), jen.Return(jen.Qual(slotPath, "Set").Values(), jen.Nil())).Line().Line()
	}
	count, countFunc := countMessages(m)
	initSettle, settleFuncs := emitSettleDispatch(m, grpcDoor(m))
	var ipInit jen.Code = jen.Null() // the policy's client_ip, when it says anything
	if ipFields := clientIPFields(g.ClientIP); len(ipFields) > 0 {
		ipInit = jen.Id("g").Dot("ClientIP").Op("=").Qual(clientipPath, "Config").Add(fields(ipFields...))
	}
	return jen.Line().
		Comment("GRPC enforces the policy's grpc: section with unary and stream server interceptors").Line().
		Comment("(limitgrpc.Door): it reads the keys, cost and plan the policy names, checks the entry's rule or").Line().
		Comment("tier, and ends a denied call with codes.ResourceExhausted, its RetryInfo and QuotaFailure, and").Line().
		Comment("grpc-retry-pushback-ms and the RateLimit fields in its trailers; its Config "+logDoc+".").Line().
		Comment("Entries: "+strings.Join(listed, "; ")+".").Line().
		Type().Id("GRPC").Struct(
		lg("Door"),
		jen.Id("limits").Op("*").Id("Limits"),
		hooksField,
	).Line().Line().
		Add(newDoc).
		Func().Id("NewGRPC").Params(jen.Id("l").Op("*").Id("Limits"), hooksParam).Params(jen.Op("*").Id("GRPC"), jen.Error()).Block(
		append(checks,
			jen.If(jen.Id("l").Op("==").Nil()).Block(jen.Id("l").Op("=").Id("Default")),
			jen.Id("g").Op(":=").Op("&").Id("GRPC").Values(jen.Id("limits").Op(":").Id("l"), hooksInit),
			ipInit,
			jen.Id("g").Dot("Config").Op("=").Add(lg("Config")).Add(fields(cfg...)),
			lg("InitDoor").Call(jen.Op("&").Id("g").Dot("Door"), jen.Id("grpcEntries").Index(jen.Empty(), jen.Empty()), jen.Id("grpcEntry"), check, count),
			initSlots,
			initSettle,
			jen.Return(jen.Id("g"), jen.Nil()),
		)...,
	).Line().Line().
		Comment("grpcEntries are the policy's method entries, in policy order: full methods, and services.").Line().
		Var().Id("grpcEntries").Op("=").Index(jen.Op("...")).String().Values(names...).Line().Line().
		Comment("grpcEntry is the index of the entry that covers a full method name: its own entry, else its").Line().
		Comment("service's; -1 when none does.").Line().
		Func().Id("grpcEntry").Params(jen.Id("method").String()).Int().Block(entryBody...).Line().Line().
		Add(checkFunc).
		Add(countFunc).
		Add(settleFuncs)
}

// clientIPFields is a clientip.Config literal's fields for c.
func clientIPFields(c model.ClientIP) []jen.Code {
	var proxies []jen.Code
	for _, p := range c.TrustedProxies {
		proxies = append(proxies, jen.Qual("net/netip", "MustParsePrefix").Call(jen.Lit(p)))
	}
	var out []jen.Code
	if len(proxies) > 0 {
		out = append(out, field("TrustedProxies", jen.Index().Qual("net/netip", "Prefix").Values(proxies...)))
	}
	if c.Forwarded {
		out = append(out, field("Header", jen.Qual(clientipPath, "Forwarded")))
	}
	if c.IPv6Prefix != 0 {
		out = append(out, field("IPv6Prefix", jen.Lit(c.IPv6Prefix)))
	}
	if c.IPv4Prefix != 0 {
		out = append(out, field("IPv4Prefix", jen.Lit(c.IPv4Prefix)))
	}
	return out
}

// messageFunc is the name of entry i's check of one stream message.
func messageFunc(i int) string { return "entry" + strconv.Itoa(i+1) + "Message" }

// countMessages is what the door calls to wrap a stream whose entry counts
// its messages (limitgrpc.CountMessages): g.messages, and its declaration;
// nil and nothing when no entry counts them.
func countMessages(m *model.Model) (count, decl jen.Code) {
	var cases []jen.Code
	for i, r := range m.GRPC.Routes {
		ms := r.Messages
		if ms == nil || r.Mode == "Off" {
			continue
		}
		kv := []jen.Code{field("Mode", vd(r.Mode))}
		if ms.Recv {
			kv = append(kv, field("Recv", jen.True()))
		}
		if ms.Send {
			kv = append(kv, field("Send", jen.True()))
		}
		if ms.Pace {
			kv = append(kv, field("Pace", jen.True()))
		}
		kv = append(kv, field("Check", jen.Func().Params(jen.Id("ctx").Add(ctxType())).Params(vd("Result"), jen.String(), jen.Error()).Block(
			jen.Return(jen.Id("g").Dot(messageFunc(i)).Call(jen.Id("ctx"), jen.Id("method"))),
		)))
		cases = append(cases, jen.Case(jen.Lit(i)).Block(
			jen.Return(lg("CountMessages").Call(jen.Id("ss"), jen.Op("&").Id("g").Dot("Config"), lg("Messages").Add(fields(kv...)))),
		))
	}
	if len(cases) == 0 {
		return jen.Nil(), jen.Null()
	}
	ss := jen.Qual(grpcLib, "ServerStream")
	return jen.Id("g").Dot("messages"), jen.Comment("messages wraps a stream of method whose entry counts its messages, so that each is checked; nil").Line().
		Comment("for the others.").Line().
		Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("messages").Params(jen.Id("ss").Add(ss), jen.Id("method").String()).Add(ss).Block(
		jen.Switch(jen.Id("grpcEntry").Call(jen.Id("method"))).Block(cases...),
		jen.Return(jen.Nil())).Line()
}

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
	judge, logDoc := judgeOf(nil, "rlsSeries", s.LogDenials)
	cfg := []jen.Code{judge}
	if s.Headers {
		cfg = append(cfg, field("Headers", jen.True()))
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

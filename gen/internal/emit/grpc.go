package emit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

const (
	grpcPath  = "github.com/limitgen/limitgen/limitgrpc"
	grpcLib   = "google.golang.org/grpc"
	codesPath = "google.golang.org/grpc/codes"
)

func lg(name string) *jen.Statement { return jen.Qual(grpcPath, name) }
func ctxType() *jen.Statement       { return jen.Qual("context", "Context") }

func grpcDoor(m *model.Model) *door {
	g := m.GRPC
	return &door{
		recv: "g", typ: "GRPC", prefix: "grpc", routes: g.Routes, plan: g.Plan, now: "now",
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
			return lg("MetadataCost").Call(jen.Id("ctx"), jen.Lit(r.CostName), lit(r.CostMax))
		},
	}
}

// emitGRPC is the policy's grpc: section: GRPCHooks, GRPC (the unary and
// stream server interceptors), its method entries, and Coverage.
func emitGRPC(m *model.Model) jen.Code {
	g := m.GRPC
	d := grpcDoor(m)
	out := jen.Null()
	out.Add(emitRouteLists(m, d))
	out.Add(emitGRPCHooks(m))
	out.Add(emitGRPCType(m))
	bases := seriesBases(g.Routes)
	out.Add(emitSeries(m, d, bases))
	for i, r := range g.Routes {
		if r.Mode != "Off" {
			out.Add(emitRoute(m, d, i, r, bases[i]))
		}
	}
	md := *d
	md.message = true
	md.result = jen.Params(vd("Result"), jen.String(), jen.Error())
	md.entryName = messageFunc
	for i, r := range g.Routes {
		if r.Mode != "Off" && r.Messages != nil {
			mr := r
			mr.CostKind, mr.CostFixed = "fixed", r.Messages.Cost
			out.Add(emitRoute(m, &md, i, mr, bases[i]))
		}
	}
	if g.Plan.Kind != "" && anyChecked(g.Routes, func(r model.Route) bool { return routePlanned(m, r) }) {
		out.Add(emitPlanOf(m, d))
	}
	return out
}

func emitGRPCHooks(m *model.Model) jen.Code {
	g := m.GRPC
	if len(g.Hooks) == 0 {
		return jen.Null() // the policy names no functions of the service
	}
	var fs []jen.Code
	for _, hk := range g.Hooks {
		if hk.Type == "Plan" {
			fs = append(fs, comment(fmt.Sprintf("%s returns the call's plan; false (or a value outside the plans) means the default plan, %s. Take it from what your authentication verified (an earlier interceptor's value in the context).",
				hk.Name, m.Plans[g.Plan.Default].Name)).Id(hk.Name).Func().Params(ctxType()).Params(jen.Id("Plan"), jen.Bool()))
			continue
		}
		uses := hookUses(m, g.Routes, hk.Name)
		fs = append(fs, comment(fmt.Sprintf("%s returns the key of %s for a call, from its context (metadata.FromIncomingContext, peer.FromContext, or what an authentication interceptor stored), and false when it has none (then the next key source is tried, or the call ends with the policy's missing_key status). An empty key counts as none.",
			hk.Name, strings.Join(uses, ", "))).Id(hk.Name).Func().Params(ctxType()).Params(jen.Id(hk.Type), jen.Bool()))
	}
	return jen.Line().
		Comment("GRPCHooks are the functions of your service that the policy's grpc: section names: what only").Line().
		Comment("your service knows of a call (a verified token's subject, the caller's plan). NewGRPC refuses a").Line().
		Comment("nil one.").Line().
		Type().Id("GRPCHooks").Struct(fs...).Line()
}

func emitGRPCType(m *model.Model) jen.Code {
	// The hooks, when the policy names functions of the service.
	var hooksField, hooksParam, hooksInit jen.Code = jen.Null(), jen.Null(), jen.Null()
	newDoc := jen.Comment("NewGRPC returns the interceptors over l (Default when nil); the policy names no functions of").Line().
		Comment("the service, so it never fails.").Line()
	if len(m.GRPC.Hooks) > 0 {
		hooksField, hooksParam, hooksInit = jen.Id("hooks").Id("GRPCHooks"), jen.Id("h").Id("GRPCHooks"), field("hooks", jen.Id("h"))
		newDoc = jen.Comment("NewGRPC returns the interceptors over l (Default when nil), calling h's functions. It fails").Line().
			Comment("when one of them is nil.").Line()
	}
	g := m.GRPC
	checks := nilHooks(m.Pkg+": NewGRPC: GRPCHooks.", g.Hooks)
	judge := []jen.Code{
		field("Jitter", jen.Lit(g.Jitter)),
		field("Counters", vd("NewSeriesCounters").Call(jen.Id("grpcSeries").Index(jen.Empty(), jen.Empty()).Op("..."))),
	}
	if g.LogDenials > 0 {
		judge = append(judge, field("Observer", vd("NewDenialLog").Call(jen.Nil(), lit(g.LogDenials))))
	}
	cfg := []jen.Code{
		field("Judge", vd("Judge").Add(fields(judge...))),
		field("Metadata", lg(g.Metadata)),
	}
	logDoc := "logs no denials"
	if g.LogDenials > 0 {
		logDoc = fmt.Sprintf("logs denials with log/slog's default logger, at most %d a second", g.LogDenials)
	}
	var methodCases, serviceCases, entryCases, names []jen.Code
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
		if r.Mode != "Off" {
			entryCases = append(entryCases, jen.Case(jen.Lit(i)).Block(jen.Return(jen.Id("g").Dot("entry"+strconv.Itoa(i+1)).Call(jen.Id("ctx"), jen.Id("method")))))
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
	checkBody := []jen.Code{jen.Return(jen.Nil())}
	if len(entryCases) > 0 {
		checkBody = []jen.Code{jen.Switch(jen.Id("grpcEntry").Call(jen.Id("method"))).Block(entryCases...), jen.Return(jen.Nil())}
	}
	gp := func(name string) *jen.Statement { return jen.Qual(grpcLib, name) }
	return jen.Line().
		Comment("GRPC enforces the policy's grpc: section with unary and stream server interceptors: it finds").Line().
		Comment("the entry that covers a call (its full method's own, else its service's), reads the keys, cost and").Line().
		Comment("plan the policy names, checks the entry's rule or tier, and ends a denied call with").Line().
		Comment("codes.ResourceExhausted, its RetryInfo and QuotaFailure, and grpc-retry-pushback-ms and the").Line().
		Comment("RateLimit fields in its trailers (package limitgrpc). A stream is checked when it opens, and each").Line().
		Comment("message too where its entry counts messages. A call no entry covers goes on").Line().
		Comment("unchecked: Coverage lists a server's methods that no entry covers, or that the interceptors").Line().
		Comment("made here do not see (a server given UnaryInterceptor alone serves its streams unchecked).").Line().
		Comment("").Line().
		Comment("Entries: "+strings.Join(listed, "; ")+".").Line().
		Type().Id("GRPC").Struct(
		jen.Id("limits").Op("*").Id("Limits"),
		hooksField,
		comment("ClientIP finds the client address that ip key sources read: the peer, or behind a trusted proxy the client its forwarding metadata names. It starts as the policy's grpc: client_ip.").Id("ClientIP").Add(jen.Qual(clientipPath, "Config")),
		comment("Clock, when set, is read instead of atomicbucket.Now: tests drive the interceptors through time with it.").Id("Clock").Func().Params().Add(rt("Time")),
		comment("Config is what every entry shares: the metadata, the jitter, the counters, the observer ("+logDoc+"). Set it before serving.").Id("Config").Add(lg("Config")),
		comment("unary and stream record which interceptors were made, for Coverage.").Id("unary").Op(",").Id("stream").Qual("sync/atomic", "Bool"),
	).Line().Line().
		Add(newDoc).
		Func().Id("NewGRPC").Params(jen.Id("l").Op("*").Id("Limits"), hooksParam).Params(jen.Op("*").Id("GRPC"), jen.Error()).Block(
		append(checks,
			jen.If(jen.Id("l").Op("==").Nil()).Block(jen.Id("l").Op("=").Id("Default")),
			jen.Return(jen.Op("&").Id("GRPC").Add(fields(
				field("limits", jen.Id("l")),
				hooksInit,
				field("ClientIP", jen.Qual(clientipPath, "Config").Add(fields(clientIPFields(g.ClientIP)...))),
				field("Config", lg("Config").Add(fields(cfg...))),
			)), jen.Nil()),
		)...,
	).Line().Line().
		Comment("UnaryInterceptor checks each unary call before its handler runs.").Line().
		Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("UnaryInterceptor").Params().Add(gp("UnaryServerInterceptor")).Block(
		jen.Id("g").Dot("unary").Dot("Store").Call(jen.True()),
		jen.Return(jen.Func().Params(jen.Id("ctx").Add(ctxType()), jen.Id("req").Any(), jen.Id("info").Op("*").Add(gp("UnaryServerInfo")), jen.Id("handler").Add(gp("UnaryHandler"))).Params(jen.Any(), jen.Error()).Block(
			jen.If(jen.Err().Op(":=").Id("g").Dot("check").Call(jen.Id("ctx"), jen.Id("info").Dot("FullMethod")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
			jen.Return(jen.Id("handler").Call(jen.Id("ctx"), jen.Id("req"))),
		)),
	).Line().Line().
		Add(streamDoc(m)).
		Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("StreamInterceptor").Params().Add(gp("StreamServerInterceptor")).Block(
		jen.Id("g").Dot("stream").Dot("Store").Call(jen.True()),
		jen.Return(jen.Func().Params(jen.Id("srv").Any(), jen.Id("ss").Add(gp("ServerStream")), jen.Id("info").Op("*").Add(gp("StreamServerInfo")), jen.Id("handler").Add(gp("StreamHandler"))).Error().Block(
			jen.If(jen.Err().Op(":=").Id("g").Dot("check").Call(jen.Id("ss").Dot("Context").Call(), jen.Id("info").Dot("FullMethod")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
			countMessages(m),
			handlerCall(m),
		)),
	).Line().Line().
		Comment("ServerOptions chains both interceptors onto a server: grpc.NewServer(g.ServerOptions()...).").Line().
		Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("ServerOptions").Params().Index().Add(gp("ServerOption")).Block(
		jen.Return(jen.Index().Add(gp("ServerOption")).Values(
			gp("ChainUnaryInterceptor").Call(jen.Id("g").Dot("UnaryInterceptor").Call()),
			gp("ChainStreamInterceptor").Call(jen.Id("g").Dot("StreamInterceptor").Call()),
		)),
	).Line().Line().
		Comment("now reads the clock once: Clock, or atomicbucket.Now.").Line().
		Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("now").Params().Add(rt("Time")).Block(
		jen.If(jen.Id("g").Dot("Clock").Op("!=").Nil()).Block(jen.Return(jen.Id("g").Dot("Clock").Call())),
		jen.Return(rt("Now").Call()),
	).Line().Line().
		Comment("grpcEntries are the policy's method entries, in policy order: full methods, and services.").Line().
		Var().Id("grpcEntries").Op("=").Index(jen.Op("...")).String().Values(names...).Line().Line().
		Comment("grpcEntry is the index of the entry that covers a full method name: its own entry, else its").Line().
		Comment("service's; -1 when none does.").Line().
		Func().Id("grpcEntry").Params(jen.Id("method").String()).Int().Block(entryBody...).Line().Line().
		Comment("check checks a call of method against its entry and returns the status that ends it, or nil.").Line().
		Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("check").Params(jen.Id("ctx").Add(ctxType()), jen.Id("method").String()).Error().Block(checkBody...).Line().Line().
		Comment("Coverage compares the policy's entries with the methods s serves (a *grpc.Server): unlimited").Line().
		Comment("are s's methods no entry covers, and those of a kind (unary, streaming) whose interceptor was").Line().
		Comment("never made here, which go unchecked; stale are the entries that cover none of them, a sign of a").Line().
		Comment("policy out of step with the service. Both are sorted. Call it once the server is set up.").Line().
		Func().Params(jen.Id("g").Op("*").Id("GRPC")).Id("Coverage").Params(jen.Id("s").Add(lg("ServiceInfoProvider"))).Params(jen.Id("unlimited"), jen.Id("stale").Index().String()).Block(
		jen.Return(lg("Coverage").Call(jen.Id("s"), jen.Id("grpcEntries").Index(jen.Empty(), jen.Empty()), jen.Id("grpcEntry"), jen.Id("g").Dot("unary").Dot("Load").Call(), jen.Id("g").Dot("stream").Dot("Load").Call())),
	).Line()
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

// streamDoc is StreamInterceptor's doc comment.
func streamDoc(m *model.Model) jen.Code {
	for _, r := range m.GRPC.Routes {
		if r.Messages != nil && r.Mode != "Off" {
			return jen.Comment("StreamInterceptor checks each stream when it opens, before its handler runs, and each message of").Line().
				Comment("the streams whose entry counts them (limitgrpc.CountMessages).").Line()
		}
	}
	return jen.Comment("StreamInterceptor checks each stream once, when it opens, before its handler runs.").Line()
}

// handlerCall is the stream interceptor's call of the handler, whose error
// is a message's denial when one ended the stream (limitgrpc.Ended).
func handlerCall(m *model.Model) jen.Code {
	call := jen.Id("handler").Call(jen.Id("srv"), jen.Id("ss"))
	for _, r := range m.GRPC.Routes {
		if r.Messages != nil && r.Mode != "Off" {
			return jen.Return(lg("Ended").Call(jen.Id("ss"), call))
		}
	}
	return jen.Return(call)
}

// messageFunc is the name of entry i's check of one stream message.
func messageFunc(i int) string { return "entry" + strconv.Itoa(i+1) + "Message" }

// countMessages is the stream interceptor's wrapping of a stream whose entry
// counts its messages (limitgrpc.CountMessages); nothing when no entry does.
func countMessages(m *model.Model) jen.Code {
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
			jen.Return(jen.Id("g").Dot(messageFunc(i)).Call(jen.Id("ctx"), jen.Id("info").Dot("FullMethod"))),
		)))
		cases = append(cases, jen.Case(jen.Lit(i)).Block(
			jen.Id("ss").Op("=").Add(lg("CountMessages")).Call(jen.Id("ss"), jen.Op("&").Id("g").Dot("Config"), lg("Messages").Add(fields(kv...))),
		))
	}
	if len(cases) == 0 {
		return jen.Null()
	}
	return jen.Comment("The entries that count their streams' messages check each one.").Line().
		Switch(jen.Id("grpcEntry").Call(jen.Id("info").Dot("FullMethod"))).Block(cases...)
}

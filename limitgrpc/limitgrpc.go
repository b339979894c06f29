// Package limitgrpc is the runtime of the gRPC server interceptors limitgen
// generates from a policy's grpc: section: how a call's keys and cost are
// read from its metadata and peer, and how a decision is answered.
//
// A denied call ends with codes.ResourceExhausted and a trailers-only
// response: the status, two details a client library can read
// (google.rpc.RetryInfo, the wait as verdict.Verdict.Wait says it, jitter included; and
// google.rpc.QuotaFailure, the rule as subject "rule:Name" and its numbers),
// and trailer metadata: grpc-retry-pushback-ms (the same wait, which
// grpc-go's own retry policy obeys: a service config retrying
// RESOURCE_EXHAUSTED waits it, then succeeds), and the IETF RateLimit fields
// as the HTTP middleware sends them (ratelimit-policy, ratelimit, and
// retry-after in whole seconds). With MetadataAll, allowed calls carry
// ratelimit-policy and ratelimit in their header metadata too. A call whose
// cost can never be admitted (above the rule's burst, or above the most its
// cost source allows) ends with codes.InvalidArgument and a QuotaFailure. A
// call a shared rule's failure setting refuses because its store could not
// decide (on_failure: deny) is an outage, not a quota: it ends with
// codes.Unavailable, a RetryInfo and the pushback, and no QuotaFailure. A
// call with no key for a keyed rule ends with the policy's missing_key code.
// Nothing is taken for either.
//
// A stream is checked when it opens, at the cost its metadata declares; an
// entry whose policy counts messages checks each message too
// (CountMessages). Clients that pace themselves by these answers: Obey.
//
// Judging, counting, the fields' numbers, keys and costs are package
// verdict's, shared with the other doors; a client's address behind trusted
// proxies is package clientip's.
//
// It is a module of its own so that google.golang.org/grpc is a dependency
// only of the services that use it.
package limitgrpc

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/limitgen/limitgen/clientip"
	"github.com/limitgen/limitgen/internal/memo"
	"github.com/limitgen/limitgen/internal/wire"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The response metadata keys (gRPC's are lower case).
const (
	KeyPolicy     = "ratelimit-policy"
	KeyRateLimit  = "ratelimit"
	KeyRetryAfter = "retry-after"
	// KeyPushback is gRPC's own retry hint (gRFC A6): on a denial, the wait
	// in milliseconds after which grpc-go's retry policy tries again.
	KeyPushback = "grpc-retry-pushback-ms"
)

// MetadataStyle selects the rate-limit metadata a response carries.
type MetadataStyle uint8

const (
	// MetadataDenials (the zero value) sends the RateLimit fields on
	// denials only, in their trailers: ratelimit-policy, ratelimit and
	// retry-after. An allowed call carries nothing and costs nothing more.
	MetadataDenials MetadataStyle = iota
	// MetadataAll also sends ratelimit-policy and ratelimit in every allowed
	// call's header metadata, so that a client can pace itself before it is
	// denied (ObeyingClient).
	MetadataAll
	// MetadataNone sends no RateLimit fields; a denial still carries its
	// RetryInfo and grpc-retry-pushback-ms.
	MetadataNone
	// MetadataLean is the cheapest denial that still tells a client when
	// to come back: its status code and message, and grpc-retry-pushback-ms
	// in its trailers (what grpc-go's retry policy obeys). No RateLimit
	// fields, and no status details (RetryInfo, QuotaFailure): a client
	// that reads the details finds none. Allowed calls carry nothing.
	MetadataLean
)

// Config is what every method of a generated interceptor shares. Set it
// before serving.
type Config struct {
	// Judge judges, counts and observes the decisions (its Jitter is the
	// largest fraction of a denial's wait added to its retry delay, per
	// key).
	verdict.Judge
	Metadata MetadataStyle

	mds     memo.Table[mdEntry] // responses' metadata
	denials memo.Table[denial]  // denials' status errors
}

// A response's metadata depends only on its rule, its entry's policy list,
// r, t and (denied) the wait, which take few values (internal/memo), so the
// last few hundred are kept and set again: a response whose metadata was
// made before allocates none of its own (grpc.SetHeader and SetTrailer still
// join it into the stream's, as they join any). Nothing writes to a kept MD:
// grpc reads what it is given.
type mdEntry struct {
	policy   *verdict.Policy
	policies string
	r, t     int64
	wait     time.Duration // a denial's; −1 for an allowed call's header
	style    MetadataStyle
	md       metadata.MD
}

// metadata is an allowed call's header metadata (wait −1) or a denial's
// trailer (wait ≥ 0): the fields unless MetadataNone, and on a denial
// retry-after and grpc-retry-pushback-ms.
func (c *Config) metadata(res *verdict.Result, v verdict.Verdict, wait time.Duration) metadata.MD {
	style := c.Metadata
	slot := c.mds.Slot(memo.Hash(res.Policy, v.R, v.T, uint64(wait)<<8^uint64(style)))
	if e := slot.Load(); e != nil && e.r == v.R && e.t == v.T && e.wait == wait && e.style == style && e.policy == res.Policy && e.policies == res.Policies {
		return e.md
	}
	md := metadata.MD{}
	if style == MetadataDenials || style == MetadataAll {
		md[KeyPolicy] = []string{res.Policies}
		md[KeyRateLimit] = []string{string(verdict.AppendRateLimit(nil, res.Policy, v.R, v.T))}
		if wait >= 0 {
			md[KeyRetryAfter] = []string{strconv.FormatInt(max(v.Retry, 0), 10)}
		}
	}
	if wait >= 0 {
		md[KeyPushback] = []string{strconv.FormatInt(int64(wait/time.Millisecond), 10)}
	}
	slot.Store(&mdEntry{policy: res.Policy, policies: res.Policies, r: v.R, t: v.T, wait: wait, style: style, md: md})
	return md
}

// Respond answers a checked call: it counts and observes the decision and
// returns nil when the call may go on, or the status error that ends it. A
// denial's metadata goes in its trailers (SetTrailer), so that the
// response is trailers-only, as grpc-go's retry policy requires before it
// reads grpc-retry-pushback-ms; an allowed call's (MetadataAll) in its
// header. key seeds the jitter (the call's first string key; "" with
// res.SeedInt for an integer one). mode Off returns nil at once.
func (c *Config) Respond(ctx context.Context, mode verdict.Mode, res *verdict.Result, key string) error {
	return c.respond(ctx, mode, res, key, true)
}

// respond is Respond; header says whether an admitted call sets its header
// metadata (MetadataAll).
func (c *Config) respond(ctx context.Context, mode verdict.Mode, res *verdict.Result, key string, header bool) error {
	if mode == verdict.Off {
		return nil
	}
	res.Door = verdict.DoorGRPC
	v := c.Verdict(mode, res, key)
	switch v.Outcome {
	case verdict.Allowed, verdict.ShadowDenied:
		if header && c.Metadata == MetadataAll {
			// An error here means the call has no server stream (a unit
			// test's context) or its headers are sent: the decision stands
			// without them.
			_ = grpc.SetHeader(ctx, c.metadata(res, v, -1))
		}
		return nil
	case verdict.TooCostly:
		if mode == verdict.Shadow {
			return nil
		}
		if c.Metadata == MetadataDenials || c.Metadata == MetadataAll {
			_ = grpc.SetTrailer(ctx, c.metadata(res, v, -1))
		}
		return c.denial(codes.InvalidArgument, res.Policy, 0, res.Cost)
	}
	_ = grpc.SetTrailer(ctx, c.metadata(res, v, v.Wait))
	if v.Outage {
		return c.denial(codes.Unavailable, res.Policy, v.Wait, 0)
	}
	return c.denial(codes.ResourceExhausted, res.Policy, v.Wait, 0)
}

// Hold answers res, an in-flight rule's acquisition for a call on an entry
// of mode, and returns nil when the call may go on: admitted, or denied on a
// Shadow entry. A denial on an Enforce entry ends the call with
// codes.ResourceExhausted and msg; its wait (until the first held slot
// reaches its longest hold: the latest a slot comes back if no call ends
// sooner) goes in its RetryInfo (but MetadataLean) and in its trailers'
// grpc-retry-pushback-ms and retry-after, with no jitter. A denial a shared
// rule's outage made (res.Outage) ends it codes.Unavailable, with the same
// wait and no QuotaFailure. It counts and observes ev with the outcome
// (degraded when res is). An in-flight rule sends no RateLimit fields: a
// count of calls at once has no window.
func (c *Config) Hold(ctx context.Context, mode verdict.Mode, res *verdict.Result, msg string, ev verdict.Event) error {
	if mode == verdict.Off {
		return nil
	}
	ev.Door = verdict.DoorGRPC
	deny, outage := c.Held(mode, res, ev)
	if !deny {
		return nil
	}
	d := &res.Decision
	code := codes.ResourceExhausted
	if outage {
		code, msg = codes.Unavailable, "the store that holds rule "+ev.Rule+"'s slots could not decide, and the rule denies while it cannot"
	}
	wait := (d.RetryAfter + time.Millisecond - 1).Truncate(time.Millisecond) // never early
	md := metadata.MD{KeyPushback: []string{strconv.FormatInt(int64(wait/time.Millisecond), 10)}}
	if c.Metadata == MetadataDenials || c.Metadata == MetadataAll {
		md[KeyRetryAfter] = []string{strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)}
	}
	_ = grpc.SetTrailer(ctx, md) // no server stream (a unit test's context): the status stands alone
	if c.Metadata == MetadataLean {
		return status.Error(code, msg)
	}
	var details []*anypb.Any
	if ri, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		details = append(details, ri)
	}
	if !outage { // an outage, not a quota
		if q, err := anypb.New(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "rule:" + ev.Rule, Description: msg}}}); err == nil {
			details = append(details, q)
		}
	}
	return status.ErrorProto(&spb.Status{Code: int32(code), Message: msg, Details: details})
}

// Reject answers a call that was not checked (no key, a cost above its
// source's maximum) with code and msg, counting it as ev. On a Shadow route it
// only counts, and returns nil; Off returns nil at once.
func (c *Config) Reject(mode verdict.Mode, code codes.Code, msg string, ev verdict.Event) error {
	if mode == verdict.Off {
		return nil
	}
	ev.Door = verdict.DoorGRPC
	c.Record(ev)
	if mode == verdict.Shadow {
		return nil
	}
	return status.Error(code, msg)
}

// A denial's status error depends only on its code, rule and wait (or cost),
// so the last few hundred are kept (internal/memo): a denied call allocates
// nothing when its error was made before. A status error is never modified
// once made (grpc reads it, copying its proto).
type denial struct {
	code   codes.Code
	policy *verdict.Policy
	n      int64 // the wait, or the cost
	lean   bool
	err    error
}

func (c *Config) denial(code codes.Code, p *verdict.Policy, wait time.Duration, cost int64) error {
	n := int64(wait)
	if code == codes.InvalidArgument {
		n = cost
	}
	lean := c.Metadata == MetadataLean
	slot := c.denials.Slot(memo.Hash(p, n, 0, uint64(code)<<40))
	if d := slot.Load(); d != nil && d.code == code && d.policy == p && d.n == n && d.lean == lean {
		return d.err
	}
	d := &denial{code: code, policy: p, n: n, lean: lean, err: denialError(code, p, wait, cost, lean)}
	slot.Store(d)
	return d.err
}

// denialError is a denial's status: its message, and (but lean) its
// details.
func denialError(code codes.Code, p *verdict.Policy, wait time.Duration, cost int64, lean bool) error {
	var msg string
	var details []*anypb.Any
	quota := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     "rule:" + p.Name,
		Description: p.Name + ": " + p.Describe(),
	}}}
	switch code {
	case codes.ResourceExhausted, codes.Unavailable:
		msg = "rate limited by rule " + p.Name + "; retry in " + wait.String()
		if code == codes.Unavailable {
			msg = "the store that keeps rule " + p.Name + "'s counts could not decide, and the rule denies while it cannot; retry in " + wait.String()
		}
		ri, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
		if err == nil {
			details = append(details, ri)
		}
	default:
		msg = "the call's cost, " + strconv.FormatInt(cost, 10) + ", is more than rule " + p.Name + " can ever admit"
	}
	if lean {
		return status.Error(code, msg)
	}
	if code == codes.Unavailable {
		quota = nil // an outage, not a quota
	}
	if quota != nil {
		if q, err := anypb.New(quota); err == nil {
			details = append(details, q)
		}
	}
	return status.ErrorProto(&spb.Status{Code: int32(code), Message: msg, Details: details})
}

// MetadataKey returns the first value of the call's incoming metadata name
// (lower case), and whether it can be a key (1 to verdict.MaxKeyLen bytes).
func MetadataKey(ctx context.Context, name string) (string, bool) {
	vs := metadata.ValueFromIncomingContext(ctx, name)
	if len(vs) == 0 || !wire.KeyOK(vs[0]) {
		return "", false
	}
	return vs[0], true
}

// MetadataCost reads a call's cost from the first value of its metadata
// name (verdict.ParseCost): def when there is none.
func MetadataCost(ctx context.Context, name string, def, max int64) (int64, bool) {
	if vs := metadata.ValueFromIncomingContext(ctx, name); len(vs) > 0 {
		return verdict.ParseCost(vs[0], def, max)
	}
	return def, true
}

// incoming is a call's incoming metadata as clientip reads a forwarding
// header: by the header's name, in lower case.
type incoming struct{ ctx context.Context }

func (m incoming) Values(name string) []string {
	switch name { // clientip's canonical names, lower-cased without an allocation
	case "X-Forwarded-For":
		name = "x-forwarded-for"
	case "Forwarded":
		name = "forwarded"
	}
	return metadata.ValueFromIncomingContext(m.ctx, name)
}

// PeerKey is the key of the call's client: its peer's address (a TCP peer's),
// or behind a trusted proxy of c the client its forwarding metadata
// (x-forwarded-for or forwarded) names, keyed as c keys an HTTP request's;
// false when the peer has no IP address (a Unix socket, an in-memory
// listener).
func PeerKey(ctx context.Context, c *clientip.Config) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", false
	}
	var addr netip.Addr
	switch a := p.Addr.(type) {
	case *net.TCPAddr:
		addr, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		addr, _ = netip.AddrFromSlice(a.IP)
	default:
		return "", false
	}
	return c.PeerKey(addr, incoming{ctx})
}

// Service is the service of a full method name ("/pkg.Service/Method"):
// "pkg.Service"; "" when method is not one.
func Service(method string) string {
	if len(method) < 4 || method[0] != '/' {
		return ""
	}
	for i := len(method) - 1; i > 1; i-- {
		if method[i] == '/' {
			if i == len(method)-1 {
				return ""
			}
			return method[1:i]
		}
	}
	return ""
}

// ServiceInfoProvider is what Door.Coverage reads: a *grpc.Server (or xDS's).
type ServiceInfoProvider interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}

// coverage is Door.Coverage: it compares a policy's method entries (full
// methods and services) with the methods s serves: unlimited are s's methods no entry covers (entry
// returns the index of the entry that covers a full method, −1 for none), and
// those whose kind of interceptor was never made (unary false: unary methods;
// stream false: streaming ones), which a server given only one of the two
// interceptors serves unchecked; stale are the entries that cover none of
// s's methods. Both are sorted.
func coverage(s ServiceInfoProvider, entries []string, entry func(method string) int, unary, stream bool) (unlimited, stale []string) {
	used := make([]bool, len(entries))
	for svc, info := range s.GetServiceInfo() {
		for _, mi := range info.Methods {
			full := "/" + svc + "/" + mi.Name
			i := entry(full)
			if i >= 0 && i < len(used) {
				used[i] = true
			}
			checked := unary
			if mi.IsClientStream || mi.IsServerStream {
				checked = stream
			}
			if i < 0 || !checked {
				unlimited = append(unlimited, full)
			}
		}
	}
	for i, e := range entries {
		if !used[i] {
			stale = append(stale, e)
		}
	}
	slices.Sort(unlimited)
	slices.Sort(stale)
	return unlimited, stale
}

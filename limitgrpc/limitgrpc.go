// Package limitgrpc is the runtime of the gRPC server interceptors limitgen
// generates from a policy's grpc: section: how a call's keys and cost are
// read from its metadata and peer, and how a decision is answered.
//
// An allowed call carries the IETF RateLimit fields as response header
// metadata: ratelimit-policy and ratelimit, as the HTTP middleware sends
// them. A denied call ends with codes.ResourceExhausted, the same two entries
// and retry-after (whole seconds), and two details a client library can
// read: google.rpc.RetryInfo (the wait) and google.rpc.QuotaFailure (the rule,
// as subject "rule:Name", and its numbers). A call whose cost can never be
// admitted (above the rule's burst, or above the most its cost source
// allows) ends with codes.InvalidArgument and a QuotaFailure. A call a shared
// rule's failure setting refuses because its store could not decide
// (on_failure: deny) is an outage, not a quota: it ends with
// codes.Unavailable and a RetryInfo, and no QuotaFailure. A call with no
// key for a keyed rule ends with the policy's missing_key code. Nothing is
// taken for either.
//
// A stream is checked once, when it opens, at the cost its metadata declares:
// its messages are not counted.
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
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limithttp"
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
)

// Config is what every method of a generated interceptor shares. Set it
// before serving: the first call fixes it.
type Config struct {
	// Metadata is limithttp.HeadersNone to send no RateLimit metadata (a
	// denial still has its RetryInfo); any other value sends it.
	Metadata limithttp.HeaderStyle
	// Jitter is the largest fraction of a denial's wait added to its retry
	// delay, per key, as for HTTP's Retry-After.
	Jitter float64
	// Observer, when set, is told of every decision.
	Observer limithttp.Observer
	// Counters, when set, counts every decision by series (method entry, tier
	// and rule) and outcome.
	Counters *limithttp.Counters

	core    atomic.Pointer[limithttp.Config]
	mds     unsafe.Pointer // *[mdSlots]atomic.Pointer[mdEntry], made on first use
	denials unsafe.Pointer // *[denialSlots]atomic.Pointer[denial], made on first denial
}

// slots returns the table *p points to, making it on first use.
func slots[E any, T ~[256]atomic.Pointer[E] | ~[512]atomic.Pointer[E]](p *unsafe.Pointer) *T {
	t := (*T)(atomic.LoadPointer(p))
	if t == nil {
		atomic.CompareAndSwapPointer(p, nil, unsafe.Pointer(new(T)))
		t = (*T)(atomic.LoadPointer(p))
	}
	return t
}

// A response's metadata depends only on its rule, its entry's policy list,
// r, t and (denied) the retry, which take few values (limithttp's values.go
// says why), so the last few hundred are kept and set again: a response
// whose metadata was made before allocates none of its own (grpc.SetHeader
// still copies it into the stream's, as it copies any). Nothing writes to a
// kept MD: grpc reads what SetHeader is given.
const (
	mdBits  = 9
	mdSlots = 1 << mdBits
)

type mdEntry struct {
	policy      *limithttp.Policy
	policies    string
	r, t, retry int64
	md          metadata.MD
}

func (c *Config) metadata(h *limithttp.Config, res *limithttp.Result, v limithttp.Verdict) metadata.MD {
	retry := int64(-1)
	if v.Outcome == limithttp.Denied {
		retry = v.Retry
	}
	tp := slots[mdEntry, [mdSlots]atomic.Pointer[mdEntry]](&c.mds)
	x := (uint64(uintptr(unsafe.Pointer(res.Policy))) ^ uint64(v.R)*0x9e3779b97f4a7c15 ^ uint64(v.T)<<32 ^ uint64(retry)<<48) * 0xff51afd7ed558ccd
	slot := &tp[x>>(64-mdBits)]
	if e := slot.Load(); e != nil && e.r == v.R && e.t == v.T && e.retry == retry && e.policy == res.Policy && e.policies == res.Policies {
		return e.md
	}
	pol, rl := h.FieldValues(res, v)
	md := metadata.MD{KeyPolicy: {pol}, KeyRateLimit: {rl}}
	if retry >= 0 {
		md[KeyRetryAfter] = []string{strconv.FormatInt(retry, 10)}
	}
	slot.Store(&mdEntry{policy: res.Policy, policies: res.Policies, r: v.R, t: v.T, retry: retry, md: md})
	return md
}

// http is the limithttp.Config the fields describe, made on first use.
func (c *Config) http() *limithttp.Config {
	if p := c.core.Load(); p != nil {
		return p
	}
	c.core.CompareAndSwap(nil, &limithttp.Config{Headers: c.Metadata, Jitter: c.Jitter, Observer: c.Observer, Counters: c.Counters})
	return c.core.Load()
}

// Respond answers a checked call: it counts and observes the decision, sets
// the RateLimit metadata, and returns nil when the call may go on, or the
// status error that ends it. key seeds the jitter (the call's first string
// key; "" with res.SeedInt for an integer one). mode Off returns nil at once.
func (c *Config) Respond(ctx context.Context, mode limithttp.Mode, res *limithttp.Result, key string) error {
	if mode == limithttp.Off {
		return nil
	}
	h := c.http()
	v := h.Judge(mode, res, key)
	if c.Metadata != limithttp.HeadersNone {
		// An error here means the call has no server stream (a unit test's
		// context) or its headers are sent: the decision stands without them.
		_ = grpc.SetHeader(ctx, c.metadata(h, res, v))
	}
	switch v.Outcome {
	case limithttp.Allowed, limithttp.ShadowDenied:
		return nil
	case limithttp.TooCostly:
		if mode == limithttp.Shadow {
			return nil
		}
		return c.denial(codes.InvalidArgument, res.Policy, -1, res.Cost)
	}
	if v.Outage {
		return c.denial(codes.Unavailable, res.Policy, v.Retry, 0)
	}
	return c.denial(codes.ResourceExhausted, res.Policy, v.Retry, 0)
}

// Reject answers a call that was not checked (no key, a cost above its
// source's maximum) with code and msg, counting it as ev. On a Shadow route it
// only counts, and returns nil; Off returns nil at once.
func (c *Config) Reject(mode limithttp.Mode, code codes.Code, msg string, ev limithttp.Event) error {
	if mode == limithttp.Off {
		return nil
	}
	c.http().Record(ev)
	if mode == limithttp.Shadow {
		return nil
	}
	return status.Error(code, msg)
}

// A denial's status error depends only on its code, rule and wait (or cost),
// so the last few hundred are kept, as limithttp keeps field values: a denied
// call allocates nothing when its error was made before. A status error is
// never modified once made (grpc reads it, copying its proto).
const (
	denialBits  = 8
	denialSlots = 1 << denialBits
)

type denial struct {
	code   codes.Code
	policy *limithttp.Policy
	n      int64 // the retry's seconds, or the cost
	err    error
}

func (c *Config) denial(code codes.Code, p *limithttp.Policy, retry, cost int64) error {
	n := retry
	if code == codes.InvalidArgument {
		n = cost
	}
	tp := slots[denial, [denialSlots]atomic.Pointer[denial]](&c.denials)
	h := (uint64(uintptr(unsafe.Pointer(p))) ^ uint64(n)*0x9e3779b97f4a7c15 ^ uint64(code)<<40) * 0xff51afd7ed558ccd
	slot := &tp[h>>(64-denialBits)]
	if d := slot.Load(); d != nil && d.code == code && d.policy == p && d.n == n {
		return d.err
	}
	d := &denial{code: code, policy: p, n: n, err: denialError(code, p, retry, cost)}
	slot.Store(d)
	return d.err
}

// denialError is a denial's status: its message, and its details.
func denialError(code codes.Code, p *limithttp.Policy, retry, cost int64) error {
	var msg string
	var details []*anypb.Any
	quota := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     "rule:" + p.Name,
		Description: p.Name + ": " + Describe(p.Limit),
	}}}
	switch code {
	case codes.ResourceExhausted, codes.Unavailable:
		msg = "rate limited by rule " + p.Name + "; retry in " + strconv.FormatInt(retry, 10) + " s"
		if code == codes.Unavailable {
			msg = "the store that keeps rule " + p.Name + "'s counts could not decide, and the rule denies while it cannot; retry in " + strconv.FormatInt(retry, 10) + " s"
		}
		ri, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(retry) * time.Second)})
		if err == nil {
			details = append(details, ri)
		}
	default:
		msg = "the call's cost, " + strconv.FormatInt(cost, 10) + ", is more than rule " + p.Name + " can ever admit"
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
// (lower case), and whether it can be a key: present, not empty, at most
// limithttp.MaxKeyLen bytes.
func MetadataKey(ctx context.Context, name string) (string, bool) {
	vs := metadata.ValueFromIncomingContext(ctx, name)
	if len(vs) == 0 || vs[0] == "" || len(vs[0]) > limithttp.MaxKeyLen {
		return "", false
	}
	return vs[0], true
}

// MetadataCost reads a call's cost from the first value of its metadata
// name, as limithttp.HeaderCost reads a header's.
func MetadataCost(ctx context.Context, name string, max int64) (int64, limithttp.CostStatus) {
	vs := metadata.ValueFromIncomingContext(ctx, name)
	if len(vs) == 0 {
		return limithttp.ParseCost("", max)
	}
	return limithttp.ParseCost(vs[0], max)
}

// PeerKey is the key of the call's client: its peer's address (a TCP peer's),
// or behind a trusted proxy of c the client its forwarding metadata
// (c.HeaderName()) names, keyed as c keys an HTTP request's; false when the
// peer has no IP address (a Unix socket, an in-memory listener).
func PeerKey(ctx context.Context, c *limithttp.ClientIP) (string, bool) {
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
	var lines []string
	if len(c.TrustedProxies) > 0 {
		lines = metadata.ValueFromIncomingContext(ctx, c.HeaderName())
	}
	return c.PeerKey(addr, lines)
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

// ServiceInfoProvider is what Coverage reads: a *grpc.Server (or xDS's).
type ServiceInfoProvider interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}

// Coverage compares a policy's method entries (full methods and services)
// with the methods s serves: unlimited are s's methods no entry covers (entry
// returns the index of the entry that covers a full method, −1 for none), and
// those whose kind of interceptor was never made (unary false: unary methods;
// stream false: streaming ones), which a server given only one of the two
// interceptors serves unchecked; stale are the entries that cover none of
// s's methods. Both are sorted.
func Coverage(s ServiceInfoProvider, entries []string, entry func(method string) int, unary, stream bool) (unlimited, stale []string) {
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

// Describe is a limit's numbers as a policy writes them: "30/min, burst 10",
// "5 per 10s, burst 5".
func Describe(l atomicbucket.Limit) string {
	units := map[time.Duration]string{time.Second: "s", time.Minute: "min", time.Hour: "h", 24 * time.Hour: "d"}
	rate := strconv.FormatInt(l.Tokens, 10) + " per " + l.Period.String()
	if u, ok := units[l.Period]; ok {
		rate = strconv.FormatInt(l.Tokens, 10) + "/" + u
	}
	return rate + ", burst " + strconv.FormatInt(l.Burst, 10)
}

// Package limitrls is limitgen's door for Envoy's rate-limit service: it
// serves envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, so
// that Envoy, Istio, or any proxy that speaks the protocol limits requests
// for services in any language, on limitgen's rules and stores.
//
// A request names a domain (a namespace) and descriptors, each a list of
// entries (key, value). A Decider (generated from a policy's rls: section, or
// written by hand) maps a descriptor to a rule or tier and its key, and
// checks it; Serve answers each descriptor with a status (OK or OVER_LIMIT,
// the rule's limit, what remains, and the time until the bucket is full, or
// on a denial the wait), and the request with the overall code: OVER_LIMIT
// when a descriptor on an enforcing route is over its limit. A descriptor no
// rule matches is OK and counted (Unmatched). The hits_addend (the
// descriptor's, else the request's, else 1) is the cost; a descriptor's
// hits_addend of 0 asks how its limit stands and takes nothing (a peek, as
// envoyproxy/ratelimit reads it): OK, with what remains.
//
// What a proxy sends is checked before anything is taken: a request without
// a domain or descriptors, with more descriptors or entries than the
// Config allows, an entry's key or value longer than verdict.MaxKeyLen, or a
// hits_addend that is negative (is_negative_hits: a client cannot give
// tokens back) or above MaxCost, ends with codes.InvalidArgument. A rule's
// store that could not decide, and whose failure setting denies
// (on_failure: deny), ends the request with codes.Unavailable, not
// OVER_LIMIT: it is an outage, not a limit (configure Envoy's filter with
// failure_mode_deny: true where such rules must hold).
//
// Descriptors are checked one by one, as envoyproxy/ratelimit checks them:
// one denied leaves the tokens the others took taken (never more admitted
// than a rule allows; a request denied by one rule may count against
// another).
//
// It is a module of its own so that go-control-plane is a dependency only of
// the services that use it.
package limitrls

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/wire"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Defaults of Config's zero limits.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 16
	DefaultMaxCost        = 1 << 30
)

// Decision is a descriptor's check, as a Decider makes it: the decision,
// unanswered; the key that seeds the jitter; the mode of the descriptor's
// route. Found is false when no rule matches the descriptor. Unlimited
// marks a descriptor that matched a pattern limiting nothing (envoyproxy/
// ratelimit's unlimited: true): it is answered OK with the most remaining a
// status can say, as envoyproxy/ratelimit answers it.
type Decision struct {
	verdict.Result
	Key       string
	Mode      verdict.Mode
	Found     bool
	Unlimited bool
}

// Decider checks one descriptor of domain at cost, at now, and returns the
// decision; an error ends the request with that error (a refusal the
// Decider made, such as a key it cannot read).
type Decider func(ctx context.Context, domain string, d *rlv3.RateLimitDescriptor, cost int64, now atomicbucket.Time) (Decision, error)

// Config is what every request of a service shares. The zero Config adds no
// headers and takes the default limits. Set it before serving.
type Config struct {
	// Judge judges, counts and observes the decisions.
	verdict.Judge
	// Headers adds the IETF fields to response_headers_to_add:
	// RateLimit-Policy (the matched rules), RateLimit (the rule that
	// denied, or the one with the fewest left) and, on a denial,
	// Retry-After.
	Headers bool
	// MaxDescriptors, MaxEntries (a descriptor's) and MaxCost (a
	// hits_addend) bound a request; 0 means the Default.
	MaxDescriptors, MaxEntries int
	MaxCost                    int64

	unmatched atomic.Uint64
}

// Unmatched is how many descriptors no rule matched (answered OK).
func (c *Config) Unmatched() uint64 { return c.unmatched.Load() }

// ErrMissingKey is what a Decider returns (from Reject) for a descriptor
// that matched a pattern whose entry holds no key for its rule (empty,
// longer than verdict.MaxKeyLen, or not a number the rule's key can be):
// Serve answers it OVER_LIMIT.
var ErrMissingKey = errors.New("limitrls: the descriptor holds no key for its rule")

// Reject records a descriptor refused unchecked (ev: no key) and returns
// ErrMissingKey; on a Shadow route it records it and returns nil, and the
// descriptor is answered OK. Generated descriptor checks call it.
func (c *Config) Reject(mode verdict.Mode, ev verdict.Event) error {
	if mode == verdict.Off {
		return nil
	}
	ev.Door = verdict.DoorRLS
	c.Record(ev)
	if mode == verdict.Shadow {
		return nil
	}
	return ErrMissingKey
}

// EntryKey is the value of entry i of a descriptor, as a key: false when it
// is empty or longer than verdict.MaxKeyLen.
func EntryKey(en []*rlv3.RateLimitDescriptor_Entry, i int) (string, bool) {
	if i < 0 || i >= len(en) || en[i] == nil || !wire.KeyOK(en[i].Value) {
		return "", false
	}
	return en[i].Value, true
}

// Serve answers req, checking each of its descriptors with decide at now
// (the request's one clock read).
func (c *Config) Serve(ctx context.Context, req *rlsv3.RateLimitRequest, now atomicbucket.Time, decide Decider) (*rlsv3.RateLimitResponse, error) {
	if err := c.check(req); err != nil {
		return nil, err
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	var (
		policies string
		deciding *verdict.Result
		shown    verdict.Verdict
		denied   bool
	)
	for i, d := range req.Descriptors {
		cost := int64(1)
		if req.HitsAddend > 0 {
			cost = int64(req.HitsAddend)
		}
		if d.HitsAddend != nil {
			cost = int64(d.HitsAddend.Value)
		}
		dec, err := decide(ctx, req.Domain, d, cost, now)
		if errors.Is(err, ErrMissingKey) {
			// A pattern matched, but its entry held no key: refused (and
			// counted by Reject), never let through on one shared bucket.
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			continue
		}
		if err != nil {
			return nil, err
		}
		if !dec.Found {
			c.unmatched.Add(1)
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			continue
		}
		if dec.Unlimited {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		mode := dec.Mode
		if mode == verdict.Off || dec.Policy == nil { // off, or refused unchecked on a Shadow route (recorded)
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			continue
		}
		res := dec.Result
		res.Door = verdict.DoorRLS
		v := c.Verdict(mode, &res, dec.Key)
		if v.Outage {
			return nil, status.Error(codes.Unavailable, "the store that keeps rule "+res.Policy.Name+"'s counts could not decide, and the rule denies while it cannot; retry in "+v.Wait.String())
		}
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           rlsv3.RateLimitResponse_OK,
			CurrentLimit:   CurrentLimit(res.Policy),
			LimitRemaining: uint32(min(v.R, math.MaxUint32)),
		}
		over := v.Outcome == verdict.Denied || v.Outcome == verdict.TooCostly && mode == verdict.Enforce
		switch {
		case over:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			st.DurationUntilReset = durationpb.New(v.Wait)
			if v.Outcome == verdict.TooCostly {
				st.DurationUntilReset = durationpb.New(res.Decision.Reset)
			}
		default: // allowed, or over the limit on a Shadow route (counted so)
			st.DurationUntilReset = durationpb.New(max(res.Decision.Reset, 0))
		}
		resp.Statuses[i] = st
		if c.Headers {
			if policies != "" {
				policies += ", "
			}
			policies += res.Policies
			if deciding == nil || over && !denied || over == denied && v.R < shown.R {
				r := res
				deciding, shown, denied = &r, v, over
			}
		}
	}
	if c.Headers && deciding != nil {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: "RateLimit-Policy", Value: policies},
			&corev3.HeaderValue{Key: "RateLimit", Value: string(verdict.AppendRateLimit(nil, deciding.Policy, shown.R, shown.T))})
		if denied && shown.Retry >= 0 {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(shown.Retry, 10)})
		}
	}
	return resp, nil
}

// check refuses what a request may not hold, before anything is taken.
func (c *Config) check(req *rlsv3.RateLimitRequest) error {
	maxD, maxE, maxCost := c.MaxDescriptors, c.MaxEntries, c.MaxCost
	if maxD <= 0 {
		maxD = DefaultMaxDescriptors
	}
	if maxE <= 0 {
		maxE = DefaultMaxEntries
	}
	if maxCost <= 0 {
		maxCost = DefaultMaxCost
	}
	bad := func(msg string) error { return status.Error(codes.InvalidArgument, msg) }
	switch {
	case req == nil || req.Domain == "":
		return bad("a rate limit request names its domain")
	case len(req.Domain) > verdict.MaxKeyLen:
		return bad("the domain is longer than " + strconv.Itoa(verdict.MaxKeyLen) + " bytes")
	case len(req.Descriptors) == 0:
		return bad("a rate limit request has at least one descriptor")
	case len(req.Descriptors) > maxD:
		return bad("the request has " + strconv.Itoa(len(req.Descriptors)) + " descriptors; at most " + strconv.Itoa(maxD) + " are read")
	case int64(req.HitsAddend) > maxCost:
		return bad("hits_addend " + strconv.FormatUint(uint64(req.HitsAddend), 10) + " is above the most a request may cost, " + strconv.FormatInt(maxCost, 10))
	}
	for i, d := range req.Descriptors {
		at := "descriptor " + strconv.Itoa(i) + ": "
		switch {
		case d == nil || len(d.Entries) == 0:
			return bad(at + "no entries")
		case len(d.Entries) > maxE:
			return bad(at + strconv.Itoa(len(d.Entries)) + " entries; at most " + strconv.Itoa(maxE) + " are read")
		case d.IsNegativeHits:
			return bad(at + "is_negative_hits: tokens are not given back on a client's word")
		case d.HitsAddend != nil && d.HitsAddend.Value > uint64(maxCost):
			return bad(at + "hits_addend " + strconv.FormatUint(d.HitsAddend.Value, 10) + " is above the most a request may cost, " + strconv.FormatInt(maxCost, 10))
		case d.Limit != nil:
			return bad(at + "a descriptor's limit override is not taken: the policy sets the limits")
		}
		for _, e := range d.Entries {
			if e == nil || e.Key == "" || len(e.Key) > verdict.MaxKeyLen || len(e.Value) > verdict.MaxKeyLen {
				return bad(at + "an entry's key is 1 to " + strconv.Itoa(verdict.MaxKeyLen) + " bytes, and its value at most that")
			}
		}
	}
	return nil
}

// CurrentLimit is a rule's limit as Envoy's DescriptorStatus states it:
// its tokens per period, in the largest unit the period is a whole number
// of (5 per 10 s: 5 a SECOND, unit multiplier 10). A token bucket's burst
// has no field there; the Name is the rule's.
func CurrentLimit(p *verdict.Policy) *rlsv3.RateLimitResponse_RateLimit {
	l := p.Limit
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: p.Name, RequestsPerUnit: uint32(min(l.Tokens, math.MaxUint32))}
	units := []struct {
		d time.Duration
		u rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
		{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
	}
	for _, u := range units {
		if l.Period >= u.d && l.Period%u.d == 0 {
			rl.Unit = u.u
			if m := l.Period / u.d; m > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(int64(m), math.MaxUint32)))
			}
			return rl
		}
	}
	rl.Unit = rlsv3.RateLimitResponse_RateLimit_UNKNOWN // a period under a second, or not whole seconds
	return rl
}

// Service serves the rate-limit service over a Decider: a generated
// package's, or one written by hand. Clock, when set, is read instead of
// atomicbucket.Now.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	Config *Config
	Decide Decider
	Clock  func() atomicbucket.Time
}

// ShouldRateLimit answers a request (Config.Serve), reading the clock once.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	now := atomicbucket.Now()
	if s.Clock != nil {
		now = s.Clock()
	}
	return s.Config.Serve(ctx, req, now, s.Decide)
}

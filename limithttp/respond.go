package limithttp

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/limitgen/limitgen/internal/memo"
	"github.com/limitgen/limitgen/verdict"
)

// HeaderStyle selects the rate-limit fields a response carries.
type HeaderStyle uint8

const (
	// HeadersIETF sends RateLimit-Policy and RateLimit (the zero value).
	HeadersIETF HeaderStyle = iota
	// HeadersLegacy sends the IETF fields and X-RateLimit-Limit, -Remaining and
	// -Reset, for clients that parse only those.
	HeadersLegacy
	// HeadersNone sends no rate-limit fields; a 429 still has Retry-After.
	HeadersNone
)

// Config is what every route of a middleware shares. The zero Config sends the
// IETF fields, answers denials with problem+json, adds no jitter and observes
// nothing beyond its Counters (when set).
type Config struct {
	// Judge judges, counts and observes the decisions (its Jitter is the
	// largest fraction of a denial's wait added to Retry-After, per key).
	verdict.Judge
	Headers HeaderStyle
	// Denied, when set, writes the response to a denied request instead of the
	// problem body. The rate-limit fields and Retry-After are already set.
	Denied func(w http.ResponseWriter, r *http.Request, res *verdict.Result)
	// Challenge is the WWW-Authenticate value Reject sends with a 401 (RFC
	// 9110 requires one), such as `Bearer realm="api"`; empty sends none.
	Challenge string

	values   memo.Table[valueEntry]   // allowed responses' field values (values.go)
	full     memo.Table[fullEntry]    // other responses' field values
	problems memo.Table[problemEntry] // the rules' problem bodies (problems.go)
}

// Respond sets the rate-limit fields of res on w and, for a denied request on
// an Enforce route, writes the denial. It reports whether the request may go on
// to the handler. It counts and observes the decision. key is the request's
// (first) key, which seeds the Retry-After jitter; Respond does not keep it
// (Config.Denied gets a copy).
func (c *Config) Respond(w http.ResponseWriter, r *http.Request, mode verdict.Mode, res *verdict.Result, key string) bool {
	if mode == verdict.Off {
		return true
	}
	res.Door = verdict.DoorHTTP
	v := c.Verdict(mode, res, key)
	h := w.Header()
	vals := c.setFields(h, res, v.R, v.T, v.Retry)
	switch v.Outcome {
	case verdict.Allowed, verdict.ShadowDenied:
		return true
	case verdict.TooCostly:
		if mode == verdict.Shadow {
			return true
		}
		writeProblem(h, w, vals, http.StatusBadRequest, c.problem(res.Policy, tooCostly))
		return false
	}
	if c.Denied != nil {
		// A copy, with a key of its own: res stays on the caller's stack, and
		// key may share a buffer the caller reuses.
		cp := *res
		cp.Key = strings.Clone(key)
		c.Denied(w, r, &cp)
		return false
	}
	if v.Outage {
		writeProblem(h, w, vals, http.StatusServiceUnavailable, c.problem(res.Policy, unavailable))
		return false
	}
	writeProblem(h, w, vals, http.StatusTooManyRequests, c.problem(res.Policy, overQuota))
	return false
}

// Hold answers res, an in-flight rule's acquisition for r on a route of
// mode, and reports whether the request may go on: when admitted, or denied
// on a Shadow route. A denial on an Enforce route is answered 429 with body
// (or by Denied) and a Retry-After of the wait until the first held slot
// expires, in whole seconds rounded up: the latest a slot comes back if none
// is released (one may be released sooner), with no jitter, as expiries are
// spread by the times the slots were taken. A denial a shared rule's outage
// made (res.Outage: its store could not decide, and on_failure denies) is
// answered 503 with the problem type ProblemStoreUnavailable and a
// Retry-After of a second. It counts and observes ev with the outcome
// (degraded when res is). An in-flight rule sends no RateLimit fields: they
// describe a quota over a window, and a count of requests at once has no
// window and no remaining that holds until the next request.
func (c *Config) Hold(w http.ResponseWriter, r *http.Request, mode verdict.Mode, res *verdict.Result, body string, ev verdict.Event) bool {
	if mode == verdict.Off {
		return true
	}
	ev.Door = verdict.DoorHTTP
	deny, outage := c.Held(mode, res, ev)
	if !deny {
		return true
	}
	d := &res.Decision
	h := w.Header()
	h[HeaderRetryAfter] = []string{strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10)}
	if c.Denied != nil {
		cp := verdict.Result{Decision: *d, Cost: 1, Route: ev.Route, Tier: ev.Tier, Rule: ev.RuleIndex, Series: ev.Series, Key: strings.Clone(ev.Key), SeedInt: ev.KeyInt, Door: ev.Door,
			Degraded: res.Degraded, Outage: res.Outage, Err: res.Err}
		c.Denied(w, r, &cp)
		return false
	}
	if outage {
		writeProblem(h, w, nil, http.StatusServiceUnavailable, problemBody(ProblemStoreUnavailable, "Service Unavailable", 503,
			"The store that holds the slots of rule "+ev.Rule+" could not decide, and the rule denies while it cannot; retry after the delay in Retry-After.", ""))
		return false
	}
	writeProblem(h, w, nil, http.StatusTooManyRequests, body)
	return false
}

// Reject answers a request that was not checked (no key, an unreadable cost)
// with status and the problem body (ProblemBody), counting it as outcome
// against the rule at index rule. Nothing is taken. On a Shadow route it only
// counts, and reports true: the request goes on.
func (c *Config) Reject(w http.ResponseWriter, mode verdict.Mode, status int, body string, ev verdict.Event) bool {
	if mode == verdict.Off {
		return true
	}
	ev.Door = verdict.DoorHTTP
	c.Record(ev)
	if mode == verdict.Shadow {
		return true
	}
	h := w.Header()
	if status == http.StatusUnauthorized && c.Challenge != "" {
		h[headerAuthenticate] = []string{c.Challenge}
	}
	writeProblem(h, w, nil, status, body)
	return false
}

// setFields sets the fields on h and returns the values writeProblem sets
// (Content-Type and X-Content-Type-Options, filled in), or nil when it has
// none: the allowed path's values have no room for them. The values are the
// Config's table's (values.go): shared, never written after they are made.
func (c *Config) setFields(h http.Header, res *verdict.Result, rv, tv, retry int64) []string {
	if c.Headers == HeadersIETF && retry < 0 {
		// The common case, an allowed request, in the smallest entry.
		vals := c.allowedValues(res, rv, tv)
		h[HeaderPolicy] = vals[0:1:1]
		h[HeaderRateLimit] = vals[1:2:2]
		return nil // writeProblem allocates its own, on the rare path that needs them
	}
	e := c.fullValues(res, rv, tv, retry)
	for i, name := range e.names {
		h[name] = e.vals[i : i+1 : i+1]
	}
	n := len(e.names)
	return e.vals[n : n+2 : n+2]
}

// writeProblem writes status and an RFC 9457 body. problem holds the values
// of Content-Type and X-Content-Type-Options (from setFields), or is nil: then
// it allocates them.
func writeProblem(h http.Header, w http.ResponseWriter, problem []string, status int, body string) {
	if len(problem) < 2 {
		problem = []string{problemType, "nosniff"}
	}
	h[headerContentType] = problem[0:1:1]
	h[headerContentOptions] = problem[1:2:2]
	w.WriteHeader(status)
	io.WriteString(w, body) //nolint:errcheck // the client is gone; nothing to do
}

const problemType = "application/problem+json"

// ProblemBody is an RFC 9457 problem document (application/problem+json). A
// non-empty violated names the violated policy in the draft's
// violated-policies member. The generator computes the bodies of its routes'
// refusals with it; a rule's denials' bodies are made on first use
// (problems.go).
func ProblemBody(typ, title string, status int, detail, violated string) string {
	return problemBody(typ, title, status, detail, violated)
}

func problemBody(typ, title string, status int, detail, violated string) string {
	type problem struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail,omitempty"`
		Violated []string `json:"violated-policies,omitempty"`
	}
	p := problem{Type: typ, Title: title, Status: status, Detail: detail}
	if violated != "" {
		p.Violated = []string{violated}
	}
	b, err := json.Marshal(p)
	if err != nil { // strings and an int always marshal
		panic(err)
	}
	return string(b) + "\n"
}

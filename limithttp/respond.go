package limithttp

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
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

// Mode is what a route does with its decisions.
type Mode uint8

const (
	// Enforce denies what the policy denies (the zero value).
	Enforce Mode = iota
	// Shadow decides, counts, observes and sends the fields, but lets every
	// request through: what a team runs while rolling a policy out.
	Shadow
	// Off checks nothing and sends nothing.
	Off
)

// String returns the mode's name as the policy spells it.
func (m Mode) String() string {
	switch m {
	case Enforce:
		return "enforce"
	case Shadow:
		return "shadow"
	case Off:
		return "off"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Outcome is what became of a request.
type Outcome uint8

const (
	Allowed      Outcome = iota // admitted, tokens taken
	Denied                      // over the limit: 429
	ShadowDenied                // over the limit on a Shadow route: let through
	TooCostly                   // its cost is above the burst, or the cost source's maximum: 400, nothing taken
	MissingKey                  // no key source had a key: the route's 4xx, nothing taken
	// DegradedAllowed: a shared rule's store could not decide (down, slow,
	// its breaker open, closed) and the rule's on_failure setting admitted
	// the request (allow, or a local share with tokens).
	DegradedAllowed
	// DegradedDenied: the store could not decide and the on_failure setting
	// denied the request (deny, or a local share without tokens): a 429, or
	// let through on a Shadow route.
	DegradedDenied
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "shadow_denied", "too_costly", "missing_key", "degraded_allowed", "degraded_denied"}

// String returns the outcome's name, as metrics and logs spell it.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Event is one decision, as observers see it: what was decided and by which
// rule. Key and KeyInt say for whom, for a violation log only: never put a
// key in a metric label (it makes the metric's series unbounded).
type Event struct {
	Route      string        // the route's ServeMux pattern
	Tier       string        // the tier checked; "" when the route checks one rule
	Rule       string        // the rule that decided (that denied, or the most constraining)
	RuleIndex  int           // Rule's index among the package's rules (its RuleName)
	Series     int           // the decision's series in the Counters: its route, tier and rule
	Cost       int64         // the request's cost; 0 for a request refused unchecked (Reject: nothing taken)
	Outcome    Outcome       // what became of the request
	RetryAfter time.Duration // the decision's wait, when denied
	// StoreError is, for a shared rule or tier whose store did not decide,
	// the class of the store's error (shared.ErrorClass: "timeout",
	// "circuit_open", "closed", "no_store", …); "" when the store decided or
	// the rule is local.
	StoreError string
	// Key is the request's first key (the one Respond's jitter is seeded
	// by; in a tier, the first rule's); "" for an integer key, which is
	// KeyInt (its bits as a uint64), and for a route whose rules have no key
	// (KeyInt 0). Unchecked requests (Reject) have none.
	Key    string
	KeyInt uint64
}

// Observer is told of every decision. Observe is called on the request's
// goroutine, so it must be quick and must not block; it must not keep e's
// strings beyond the call if it mutates them (they are shared constants).
type Observer interface {
	Observe(e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Config is what every route of a middleware shares. The zero Config sends the
// IETF fields, answers denials with problem+json, adds no jitter and observes
// nothing beyond its Counters (when set).
type Config struct {
	Headers HeaderStyle
	// Jitter is the largest fraction of a denial's wait added to Retry-After,
	// per key (see the package doc); values outside [0, 1] are clamped.
	Jitter float64
	// Denied, when set, writes the response to a denied request instead of the
	// problem body. The rate-limit fields and Retry-After are already set.
	Denied func(w http.ResponseWriter, r *http.Request, res *Result)
	// Observer, when set, is told of every decision.
	Observer Observer
	// Counters, when set, counts every decision by series (route, tier and
	// rule) and outcome.
	Counters *Counters
	// Challenge is the WWW-Authenticate value Reject sends with a 401 (RFC
	// 9110 requires one), such as `Bearer realm="api"`; empty sends none.
	Challenge string

	values unsafe.Pointer // table[valueEntry]: allowed responses' field values (values.go), made on first use
	full   unsafe.Pointer // table[fullEntry]: other responses' field values
}

// Result is a decision and what the response needs to describe it.
type Result struct {
	Decision atomicbucket.Decision
	Policy   *Policy // the rule that decided
	Policies string  // the route's RateLimit-Policy value: its rules' Items (PolicyList)
	Cost     int64   // the request's cost
	SeedInt  uint64  // the jitter's seed when the request's key is an integer (Respond's key is then "")
	// Key is the key Respond was given, in the copy of the Result that
	// Config.Denied receives (Respond's own Result leaves it empty).
	Key   string
	Route string // for the Event: the route's pattern
	Tier  string // for the Event: the tier checked, if any
	Rule  int    // for the Event: the deciding rule's index among the package's rules
	// Series is the decision's series in the Counters: the route's row for
	// the deciding rule.
	Series int
	// Degraded is set when a shared rule's store could not decide and its
	// on_failure setting did; StoreErr is the store's error then, or (not
	// degraded) shared.ErrNoStore when the package has no store.
	Degraded bool
	StoreErr error
	// Outage is set when the store could not decide and the rule's failure
	// setting denied the request for it (shared.Result.Outage): the denial
	// is answered 503 with Policy.Unavailable, not 429.
	Outage bool
}

// Respond sets the rate-limit fields of res on w and, for a denied request on
// an Enforce route, writes the denial. It reports whether the request may go on
// to the handler. It counts and observes the decision. key is the request's
// (first) key, which seeds the Retry-After jitter; Respond does not keep it
// (Config.Denied gets a copy).
func (c *Config) Respond(w http.ResponseWriter, r *http.Request, mode Mode, res *Result, key string) bool {
	if mode == Off {
		return true
	}
	v := c.Judge(mode, res, key)
	outcome, rv, tv, retry := v.Outcome, v.R, v.T, v.Retry
	h := w.Header()
	vals := c.setFields(h, res, rv, tv, retry)
	switch outcome {
	case Allowed, ShadowDenied:
		return true
	case TooCostly:
		if mode == Shadow {
			return true
		}
		writeProblem(h, w, vals, http.StatusBadRequest, res.Policy.TooCostly)
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
		writeProblem(h, w, vals, http.StatusServiceUnavailable, res.Policy.Unavailable)
		return false
	}
	writeProblem(h, w, vals, http.StatusTooManyRequests, res.Policy.Problem)
	return false
}

// Verdict is what a response says of a decision (Judge).
type Verdict struct {
	// Outcome is the response's: Allowed, Denied, ShadowDenied (a Shadow
	// route's denial, let through) or TooCostly (on any route: the front door
	// lets it through on a Shadow route).
	Outcome Outcome
	R, T    int64 // the RateLimit field's r (remaining) and t (seconds until r would be the quota)
	Retry   int64 // Denied: the wait in whole seconds, jitter added (Retry-After); −1 otherwise
	// Outage: a Denied outcome made because the store could not decide
	// (Result.Outage), to be answered as the service unavailable.
	Outage bool
}

// Judge reads res's decision as mode answers it, counts and observes it
// (degraded when res.Degraded), and returns what the response says: the work
// of Respond before it writes, for another front door (gRPC's, in module
// limitgrpc). key seeds the jitter, as for Respond. mode must not be Off.
func (c *Config) Judge(mode Mode, res *Result, key string) Verdict {
	d := &res.Decision
	outcome := Allowed
	switch {
	case d.Allowed:
	case d.RetryAfter == atomicbucket.Never || d.RetryAfter < 0:
		outcome = TooCostly
	case mode == Shadow:
		outcome = ShadowDenied
	default:
		outcome = Denied
	}
	rv, tv := res.Policy.Fields(res.Decision, res.Cost)
	retry := int64(-1)
	if outcome == Denied {
		seed := uint64(0)
		if c.Jitter > 0 { // the key's hash places the jitter; without one, no hash
			seed = seedOf(key, res.SeedInt)
		}
		retry = max(tv, c.retryAfter(d.RetryAfter, seed))
	}
	observed := outcome
	if res.Degraded {
		switch outcome {
		case Allowed:
			observed = DegradedAllowed
		case Denied, ShadowDenied:
			observed = DegradedDenied
		}
	}
	c.observe(res, observed, key)
	return Verdict{Outcome: outcome, R: rv, T: tv, Retry: retry, Outage: outcome == Denied && res.Outage}
}

// FieldValues returns the values of the RateLimit-Policy and RateLimit
// fields of res as v reads it, from the Config's table (values.go): no
// allocation when the table holds them already.
func (c *Config) FieldValues(res *Result, v Verdict) (policy, rateLimit string) {
	vals := c.allowedValues(res, v.R, v.T)
	return vals[0], vals[1]
}

// Record counts and observes a decision that was not checked (no key, an
// unreadable cost), as Reject does before it answers.
func (c *Config) Record(ev Event) {
	if c.Counters != nil {
		c.Counters.Add(c.Counters.row(ev.RuleIndex, ev.Series), ev.Outcome)
	}
	if c.Observer != nil {
		c.Observer.Observe(ev)
	}
}

func (c *Config) observe(res *Result, o Outcome, key string) {
	if c.Counters != nil {
		c.Counters.Add(c.Counters.row(res.Rule, res.Series), o)
	}
	if c.Observer != nil {
		storeErr := res.StoreErr
		if o == TooCostly {
			storeErr = nil // decided by the cost alone: no store was asked
		}
		c.Observer.Observe(Event{
			Route: res.Route, Tier: res.Tier, Rule: res.Policy.Name, RuleIndex: res.Rule, Series: res.Series,
			Cost: res.Cost, Outcome: o, RetryAfter: res.Decision.RetryAfter,
			StoreError: shared.ErrorClass(storeErr),
			Key:        key, KeyInt: res.SeedInt,
		})
	}
}

// Reject answers a request that was not checked (no key, an unreadable cost)
// with status and the problem body (ProblemBody), counting it as outcome
// against the rule at index rule. Nothing is taken. On a Shadow route it only
// counts, and reports true: the request goes on.
func (c *Config) Reject(w http.ResponseWriter, mode Mode, status int, body string, ev Event) bool {
	if mode == Off {
		return true
	}
	c.Record(ev)
	if mode == Shadow {
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
func (c *Config) setFields(h http.Header, res *Result, rv, tv, retry int64) []string {
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

// seedOf is the hash that places a request's jitter: of its key, or of its
// integer key when the key is "".
func seedOf(key string, n uint64) uint64 {
	if key == "" {
		return mix64(n)
	}
	return mix64(atomicbucket.KeyHash(key))
}

// retryAfter is the denial's wait in whole seconds, rounded up, with the
// jitter of seed (a hash) added: wait·(1 + Jitter·u), u in [0, 1) from seed.
func (c *Config) retryAfter(wait time.Duration, seed uint64) int64 {
	j := min(max(c.Jitter, 0), 1)
	if j > 0 && wait > 0 {
		u := float64(seed>>11) / (1 << 53)
		f := float64(wait) * (1 + j*u)
		if f >= float64(atomicbucket.Never) {
			return ceilSeconds(atomicbucket.Never)
		}
		wait = time.Duration(f)
	}
	return ceilSeconds(wait)
}

// mix64 is MurmurHash3's 64-bit finaliser: FNV-1a (atomicbucket.KeyHash: cheap,
// allocation-free, the same in every process, so a client's jitter does not
// change with the instance it reaches) leaves its high bits
// poorly mixed for keys that differ in their last bytes (client-1, client-2),
// and the jitter is read from the high bits.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// ProblemBody is an RFC 9457 problem document (application/problem+json). A
// non-empty violated names the violated policy in the draft's
// violated-policies member. The generator computes the bodies of its routes
// with it; Policy's are computed by NewPolicy.
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

// NilHooks is the error of a generated constructor given nil hooks: names are
// the hooks' names, isNil says which are nil, and the error names every nil
// one; prefix is where, then the hooks' type ("limits: NewMiddleware:
// Hooks."). Nil when none is nil.
func NilHooks(prefix string, names []string, isNil ...bool) error {
	where, typ := "", prefix
	if i := strings.LastIndex(prefix, ": "); i >= 0 {
		where, typ = prefix[:i+2], prefix[i+2:]
	}
	var missing []string
	for i, n := range isNil {
		if n && i < len(names) {
			missing = append(missing, typ+names[i])
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return errors.New(where + missing[0] + " is nil")
	}
	return errors.New(where + strings.Join(missing[:len(missing)-1], ", ") + " and " + missing[len(missing)-1] + " are nil")
}

package verdict

import (
	"errors"
	"math/bits"
	"strconv"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/keyhash"
	"github.com/limitgen/limitgen/internal/wire"
)

// Mode is what a route (an HTTP route, a gRPC method entry, an RLS
// descriptor) does with its decisions.
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
	Denied                      // over the limit: HTTP 429, gRPC RESOURCE_EXHAUSTED, RLS OVER_LIMIT
	ShadowDenied                // over the limit on a Shadow route: let through
	TooCostly                   // its cost is above the burst, or the cost source's maximum: nothing taken
	MissingKey                  // no key source had a key: the route's refusal, nothing taken
	// DegradedAllowed: a shared rule's store could not decide (down, slow,
	// its breaker open, closed) and the rule's on_failure setting admitted
	// the request (allow, or a local share with tokens).
	DegradedAllowed
	// DegradedDenied: the store could not decide and the on_failure setting
	// denied the request (deny, or a local share without tokens): a denial,
	// or let through on a Shadow route.
	DegradedDenied
	// numOutcomes is the number of outcomes: a Count's Outcomes are indexed
	// by Outcome below it.
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

// The doors' names, as Event.Door and the metrics' door label spell them.
const (
	DoorHTTP = "http"
	DoorGRPC = "grpc"
	DoorRLS  = "rls"
)

// Event is one decision, as observers see it: what was decided and by which
// rule. Key and KeyInt say for whom, for a violation log only: never put a
// key in a metric label (it makes the metric's series unbounded).
type Event struct {
	Door       string        // the door that decided: DoorHTTP, DoorGRPC, DoorRLS, or a door's own name
	Route      string        // what the door matched: an HTTP route's pattern, a gRPC method entry, an RLS domain and descriptor
	Tier       string        // the tier checked; "" when the route checks one rule
	Rule       string        // the rule that decided (that denied, or the most constraining)
	RuleIndex  int           // Rule's index among the package's rules (its RuleName)
	Series     int           // the decision's series in the Counters: its route, tier and rule
	Cost       int64         // the request's cost; 0 for a request refused unchecked (nothing taken)
	Outcome    Outcome       // what became of the request
	RetryAfter time.Duration // the decision's wait, when denied
	// StoreError is, for a shared rule or tier whose store did not decide,
	// the class of the store's error ("timeout", "circuit_open", "closed",
	// "no_store", …: see ClassedError); "" when the store decided or the
	// rule is local.
	StoreError string
	// Key is the request's first key (the one the jitter is seeded by; in a
	// tier, the first rule's); "" for an integer key, which is KeyInt (its
	// bits as a uint64), and for a route whose rules have no key (KeyInt 0).
	// A composite key is its text form on every outcome but Allowed, and ""
	// (KeyInt 0) on Allowed, where it is not built. Unchecked requests have
	// none.
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

// ClassedError is a store's error that names its class for Event.StoreError
// (a bounded set, unlike error strings): package shared's errors do
// ("timeout", "circuit_open", "closed", "no_store", …: shared.ErrorClass).
// classOf finds one in an error's chain with errors.As.
type ClassedError interface {
	error
	ErrorClass() string
}

// classOf is the class of err: "" for nil, "store" for an error that names
// none (ClassedError).
func classOf(err error) string {
	if err == nil {
		return ""
	}
	var c ClassedError
	if errors.As(err, &c) {
		return c.ErrorClass()
	}
	return "store"
}

// Judge turns decisions into verdicts, counts and observes them: what every
// door shares, below its wire. The zero Judge adds no jitter and observes
// nothing. Set it before serving.
type Judge struct {
	// Jitter is the largest fraction of a denial's wait added to the retry
	// hint, per key (see Verdict.Wait); values outside [0, 1] are clamped.
	Jitter float64
	// Observer, when set, is told of every decision.
	Observer Observer
	// Counters, when set, counts every decision by series (route, tier and
	// rule) and outcome.
	Counters *Counters
}

// Result is a decision and what a response needs to describe it. A shared
// rule's check (package shared) returns one too, with the decision and
// Degraded, Outage and Err set: a door copies them into its own.
type Result struct {
	atomicbucket.Decision
	Policy   *Policy // the rule that decided
	Policies string  // the route's RateLimit-Policy value: its rules' Items joined by ", "
	Cost     int64   // the request's cost
	SeedInt  uint64  // the jitter's seed when the request's key is an integer (the key is then "")
	// Key is the request's key, in the copy of the Result a door's own
	// denial writer receives (the door's own Result leaves it empty).
	Key   string
	Door  string // for the Event: the door (set by the door)
	Route string // for the Event: the route's pattern, method entry or descriptor
	Tier  string // for the Event: the tier checked, if any
	Rule  int    // for the Event: the deciding rule's index among the package's rules
	// Series is the decision's series in the Counters: the route's row for
	// the deciding rule.
	Series int
	// Degraded is set when a shared rule's store could not decide and its
	// on_failure setting did; Err is the store's error then (or its circuit
	// breaker's), or (not degraded) the "no store" error when the package
	// has none.
	Degraded bool
	Err      error
	// Outage is set for a denial the failure settings made because the store
	// could not decide (on_failure: deny), not by a limit: a door answers it
	// as the service unavailable (HTTP 503, gRPC UNAVAILABLE), so clients and
	// dashboards can tell an outage from a quota. A local share that denies
	// is a limit (its share of the quota), and not an outage.
	Outage bool
}

// Verdict is what a response says of a decision (Judge.Verdict).
type Verdict struct {
	// Outcome is the response's: Allowed, Denied, ShadowDenied (a Shadow
	// route's denial, let through) or TooCostly (on any route: a door lets it
	// through on a Shadow route).
	Outcome Outcome
	R, T    int64 // the RateLimit field's r (remaining) and t (whole seconds), by the rules of the package doc
	// Wait is, for Denied, the time to wait before retrying: the decision's
	// RetryAfter with the key's jitter added, rounded up to the millisecond
	// (from a second up, to three significant digits: at most 1% late), so
	// never early. 0 otherwise.
	Wait time.Duration
	// Retry is, for Denied, the wait in whole seconds, rounded up, at least
	// T (an HTTP Retry-After); −1 otherwise.
	Retry int64
	// Outage: a Denied outcome made because the store could not decide
	// (Result.Outage), to be answered as the service unavailable.
	Outage bool
}

// Verdict reads res's decision as mode answers it, counts and observes it
// (degraded when res.Degraded), and returns what the response says. key
// seeds the jitter (the request's first string key; "" with res.SeedInt for
// an integer one). mode must not be Off.
func (j *Judge) Verdict(mode Mode, res *Result, key string) Verdict {
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
	v := Verdict{Outcome: outcome, Retry: -1}
	v.R, v.T = res.Policy.fields(res.Decision, res.Cost)
	if outcome == Denied {
		seed := uint64(0)
		if j.Jitter > 0 { // the key's hash places the jitter; without one, no hash
			seed = seedOf(key, res.SeedInt)
		}
		v.Wait = j.wait(d.RetryAfter, seed)
		v.Retry = max(v.T, ceilSeconds(v.Wait))
		v.Outage = res.Outage
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
	j.observe(res, observed, key)
	return v
}

// Held counts and observes res, an in-flight rule's acquisition on a route
// of mode (ev says which), with its outcome, degraded when res.Degraded, and
// reports how the door answers: deny for a denial on an Enforce route,
// outage when the store's outage made it (Result.Outage). An acquisition has
// no fields to describe, so it has no Verdict. mode must not be Off.
func (j *Judge) Held(mode Mode, res *Result, ev Event) (deny, outage bool) {
	d := &res.Decision
	switch {
	case d.Allowed:
		ev.Outcome = Allowed
	case mode == Shadow:
		ev.Outcome, ev.RetryAfter = ShadowDenied, d.RetryAfter
	default:
		ev.Outcome, ev.RetryAfter = Denied, d.RetryAfter
	}
	deny = ev.Outcome == Denied
	if res.Degraded {
		ev.StoreError = classOf(res.Err)
		ev.Outcome = DegradedDenied
		if d.Allowed {
			ev.Outcome = DegradedAllowed
		}
	}
	j.Record(ev)
	return deny, deny && res.Outage
}

// Record counts and observes a decision that was not checked (no key, an
// unreadable cost), as a door does before it refuses the request.
func (j *Judge) Record(ev Event) {
	if j.Counters != nil {
		j.Counters.add(ev.Series, ev.Outcome)
	}
	if j.Observer != nil {
		j.Observer.Observe(ev)
	}
}

func (j *Judge) observe(res *Result, o Outcome, key string) {
	if j.Counters != nil {
		j.Counters.add(res.Series, o)
	}
	if j.Observer != nil {
		storeErr := res.Err
		if o == TooCostly {
			storeErr = nil // decided by the cost alone: no store was asked
		}
		j.Observer.Observe(Event{
			Door: res.Door, Route: res.Route, Tier: res.Tier, Rule: res.Policy.Name, RuleIndex: res.Rule, Series: res.Series,
			Cost: res.Cost, Outcome: o, RetryAfter: res.Decision.RetryAfter,
			StoreError: classOf(storeErr),
			Key:        key, KeyInt: res.SeedInt,
		})
	}
}

// seedOf is the hash that places a request's jitter: of its key, or of its
// integer key when the key is "".
func seedOf(key string, n uint64) uint64 {
	if key == "" {
		return mix64(n)
	}
	return mix64(keyhash.Of(key))
}

// wait is a denial's wait with the jitter of seed (a hash) added,
// wait·(1 + Jitter·u) for u in [0, 1) from seed, rounded up to the
// millisecond; at most atomicbucket.Never.
func (j *Judge) wait(wait time.Duration, seed uint64) time.Duration {
	if wait <= 0 {
		return 0
	}
	if jit := min(max(j.Jitter, 0), 1); jit > 0 {
		u := float64(seed>>11) / (1 << 53)
		f := float64(wait) * (1 + jit*u)
		if f >= float64(atomicbucket.Never) {
			return atomicbucket.Never
		}
		wait = max(time.Duration(f), wait) // the float's rounding must not make it earlier
	}
	return shownWait(wait)
}

// shownWait is how a wait is said (Verdict.Wait): rounded up to the
// millisecond, and from a second up to three significant digits (at most 1%
// later; 3,599,937 ms is said as 3,600,000), so that a long wait stays the
// same for a while and the doors reuse what they encoded for it. Waits past
// atomicbucket.Never are Never.
func shownWait(wait time.Duration) time.Duration {
	if wait <= 0 {
		return 0
	}
	if wait > atomicbucket.Never-time.Millisecond {
		return atomicbucket.Never
	}
	ms := int64((wait + time.Millisecond - 1) / time.Millisecond)
	if ms >= 1000 {
		n := (bits.Len64(uint64(ms))*1233)>>12 + 1 // the digit count, or one more (as shown)
		if uint64(ms) < wire.Pow10[n-1] {
			n--
		}
		unit := int64(wire.Pow10[n-3])
		if up := (ms + unit - 1) / unit * unit; up <= int64(atomicbucket.Never/time.Millisecond) {
			ms = up
		}
	}
	return time.Duration(ms) * time.Millisecond
}

// mix64 is MurmurHash3's 64-bit finaliser: FNV-1a (keyhash.Of: cheap,
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

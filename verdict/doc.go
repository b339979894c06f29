// Package verdict is what every door of limitgen shares below its wire: an
// HTTP middleware, a gRPC interceptor and Envoy's rate-limit service each turn
// a request into a rule (or tier), a key and a cost, ask the generated
// package, and hand its decision to a Judge, which says what the response
// must say (a Verdict), counts it and tells the observers. The door then
// writes the verdict in its own protocol. The package knows the standard
// library and atomicbucket's Decision, no protocol.
//
// # Keys and costs
//
// A key a door reads from a request is chosen by whoever sent it: a door
// takes one of 1 to MaxKeyLen bytes, and a door that finds none tries its
// next source or refuses the request (MissingKey), never pooling every
// keyless request in one bucket. ParseCost
// reads a declared cost: decimal digits only, at least 1; an absent or
// malformed value gets the caller's default, and a value above the caller's
// maximum, or above the rule's burst, is refused without taking anything,
// because no wait can admit it.
//
// # The numbers of the fields
//
// Responses describe a decision with the fields of
// draft-ietf-httpapi-ratelimit-headers-11 (HTTP headers, gRPC metadata, the
// headers Envoy adds), whose values are Structured Fields (RFC 9651) lists:
//
//	RateLimit-Policy: "PerUser";q=50;w=5
//	RateLimit: "PerUser";r=17;t=4
//
// The draft's authors have floated renaming the parameters, so their names are
// kept in one table, the Param constants:
//
//	field             parameter  constant        meaning here
//	RateLimit-Policy  q          paramQuota      the rule's burst, in tokens
//	RateLimit-Policy  w          paramWindow     seconds an empty bucket takes to refill: ⌈burst/rate⌉, at least 1
//	RateLimit         r          paramRemaining  whole tokens left after this request
//	RateLimit         t          paramReset      seconds (see below)
//
// A token bucket has no fixed window, so the numbers are chosen so that a
// client that believes them is never denied for it:
//   - q and w: a client that sends at most q tokens' worth in any w seconds is
//     always admitted (an empty bucket refills completely in w). When the
//     bucket refills in less than a second, w is 1 and q stays the burst, which
//     understates the rate rather than promising a burst the bucket cannot give.
//     RateLimit-Policy is a constant per rule and plan (Policy.Item), computed
//     when the package is generated (NewPolicy computes the same by hand).
//   - r is the whole tokens left now: exactly, below 1000; from 1000 up,
//     rounded down to three significant digits (shown), never more than is
//     left, so that a draining bucket's responses share their field values.
//     When it is 0, t is the seconds until the
//     request's own cost is available again: on a denial that is its wait (the
//     decision's RetryAfter); after an allowed request that took the last whole
//     token, the wait a request of the same cost would have.
//   - When r is positive, t is the seconds until the bucket is full again (the
//     decision's Reset; on a denial, the request's wait instead), stretched when
//     needed so that r/t is at most the rule's rate: a client that paces r over
//     t seconds never outruns the refill.
//   - A request that can never be admitted (its cost is above the burst) has
//     no wait: t is then the time until the bucket is full.
//   - Every t is rounded up to whole seconds: rounding down would tell a client
//     to come back before its tokens are there.
//
// A request checked against a tier carries, in RateLimit-Policy, every rule of
// the tier, and in RateLimit the rule that decided: the one that denied, or the
// most constraining one (the fewest tokens left).
//
// # Waits
//
// A denial's wait (Verdict.Wait) is the decision's RetryAfter plus a
// deterministic jitter of up to Judge.Jitter of it, seeded by the request's
// key, rounded up to the millisecond, and from a second up to three
// significant digits (at most 1% later: 3,599,937 ms is said as 3,600,000):
// clients denied together do not all come back at once, a client always gets
// the same offset, and no client is told to come back before its tokens are
// there; and a long wait stays the same for a while, so that the doors reuse
// what they encoded for it (a gRPC status, its RetryInfo and pushback) and
// their transports' header compression sends it as an index. Verdict.Retry is
// the same wait in whole seconds (an HTTP Retry-After), never earlier than t.
//
// # Denials
//
// A request over its rule's limit is Denied. A request a shared rule's
// failure setting refuses because its store could not decide (on_failure:
// deny; Result.Outage) is not over a quota: its Verdict has Outage set, and
// every door answers it as the service unavailable (HTTP 503, gRPC
// UNAVAILABLE), so that clients and dashboards tell an outage from a limit.
// Each route has a Mode: Enforce denies; Shadow decides, counts and sends the
// fields but lets every request through (the way a policy is rolled out);
// Off skips the check.
//
// # Observing
//
// Every decision is counted in Counters, one row per Series (a route, its
// tier and a rule) and a column per Outcome, whose cells are striped so that
// cores counting at once do not share a cache line (Snapshot reads them as
// Counts), and handed to the Judge's Observer (an ObserverFunc is one) as an
// Event with the door, route, rule, tier, cost and outcome; its key only for
// a violation log, never for metrics: per-user labels would make them
// unbounded. NewDenialLog makes an Observer that logs
// denials with log/slog, at most a configured number a second. An Event's
// StoreError is the class a store's error names (ClassedError), found with
// errors.As.
//
// What is not here: a client's Pacer (package pace), the doors' caches of
// what they made (internal/memo), what only the doors share below this
// package (internal/wire: the bound on a key, decimal formatting), and what
// only generated code calls (package genimpl).
package verdict

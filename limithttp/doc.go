// Package limithttp is limitgen's HTTP runtime: what a rate limiter in front of
// a net/http handler needs that the buckets do not. It knows net/http, the
// standard library and atomicbucket's Decision, not YAML. Middleware generated
// from a policy's http: section calls it with constants; a service can use it
// by hand (see Example).
//
// # Keys
//
// ClientIP keys a request by its client's address, believing forwarding
// headers only from trusted proxies. HeaderKey, QueryKey and PathKey read a key
// from the request; a service's own function (a verified token's subject from
// the request context) is the other source. A key source that finds nothing,
// an empty value or one longer than MaxKeyLen reports false: the caller tries
// its next source or answers the request with a 4xx (Config.Reject), never
// one bucket shared by every keyless request.
//
// # Costs
//
// ParseCost reads a cost a client or an upstream declared: decimal digits only,
// at least 1. An absent or malformed value gets the caller's default; a value
// above the caller's maximum (Config.Reject) or above the rule's burst
// (Respond, from the decision) is answered 400 at once without taking
// anything, because no wait can admit it.
//
// # Fields
//
// Responses carry the fields of draft-ietf-httpapi-ratelimit-headers-11, whose
// values are Structured Fields (RFC 9651) lists:
//
//	RateLimit-Policy: "PerUser";q=50;w=5
//	RateLimit: "PerUser";r=17;t=4
//
// The draft's authors have floated renaming the parameters, so their names are
// kept in one table, the Param constants:
//
//	field             parameter  constant        meaning here
//	RateLimit-Policy  q          ParamQuota      the rule's burst, in tokens
//	RateLimit-Policy  w          ParamWindow     seconds an empty bucket takes to refill: ⌈burst/rate⌉, at least 1
//	RateLimit         r          ParamRemaining  whole tokens left after this request
//	RateLimit         t          ParamReset      seconds (see below)
//
// A token bucket has no fixed window, so the fields are chosen so that a client
// that believes them is never denied for it:
//   - q and w: a client that sends at most q tokens' worth in any w seconds is
//     always admitted (an empty bucket refills completely in w). When the
//     bucket refills in less than a second, w is 1 and q stays the burst, which
//     understates the rate rather than promising a burst the bucket cannot give.
//     RateLimit-Policy is a constant per rule and plan, computed when the
//     middleware is generated (NewPolicy computes the same by hand).
//   - r is the whole tokens left now. When it is 0, t is the seconds until the
//     request's own cost is available again: on a 429 that is its wait (the
//     decision's RetryAfter); after an allowed request that took the last whole
//     token, the wait a request of the same cost would have.
//   - When r is positive, t is the seconds until the bucket is full again (the
//     decision's Reset; on a 429, the request's wait instead), stretched when
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
// On a 429, Retry-After (RFC 9110, delay-seconds) is the wait rounded up, plus
// a deterministic jitter of up to Config.Jitter of it, seeded by the request's
// key: clients denied together do not all come back in the same second, and a
// client always gets the same offset. It is never earlier than t. A request that
// can never be admitted (its cost is above the burst) gets no Retry-After.
//
// The fields' values are strings a response's header map keeps after the
// request. Respond keeps the ones it made in a table of its Config (512
// entries for allowed responses, 512 for the others, by rule, route and the
// numbers in them) and gives a response whose fields are already there the
// same strings and the same []string values: a rule's fields take few values
// (r is at most its burst; for a given r, t is a second or two), so most
// responses allocate nothing, and a response whose fields are new allocates
// one entry. The values are shared between responses: a handler may replace a
// field (Header.Set, Add, Del) but must not write into the slice it holds.
//
// HeadersLegacy adds the X-RateLimit-Limit, -Remaining and -Reset headers that
// older clients parse (Limit is q, Remaining is r, Reset is t: seconds, not a
// date); HeadersNone sends no rate-limit fields at all.
//
// # Denials
//
// A denied request gets 429 with an RFC 9457 problem body of the draft's type
// https://iana.org/assignments/http-problem-types#quota-exceeded, naming the
// violated policy in its violated-policies member, or whatever Config.Denied
// writes instead. A request a shared rule's failure setting refuses because
// its store could not decide (on_failure: deny; Result.Outage) is not over a
// quota: it gets 503 with a problem body of type ProblemStoreUnavailable and
// a Retry-After, so that clients and dashboards tell an outage from a limit
// (Config.Denied, when set, writes it instead, seeing Result.Outage). Each route has a Mode: Enforce denies; Shadow decides, counts
// and sends the fields but lets every request through (the way a policy is
// rolled out); Off skips the check.
//
// # Observing
//
// Every decision is counted in Counters, whose cells are striped so that cores
// counting at once do not share a cache line, and handed to Config.Observer
// with the rule, tier, route, cost and outcome, never the key: per-user labels
// would make metrics unbounded. DenialLog is an Observer that logs denials
// with log/slog, at most a configured number a second.
package limithttp

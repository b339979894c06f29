// Package limithttp is limitgen's HTTP door: what a rate limiter in front of
// a net/http handler needs on the wire. It knows net/http; the judging,
// counting, field numbers, keys and costs it shares with the other doors are
// package verdict's, and a client's address behind trusted proxies is package
// clientip's. Middleware generated from a policy's http: section calls it
// with constants; a service can use it by hand (see Example).
//
// # Routes
//
// Router finds which of a policy's route patterns covers a request, by
// net/http's own rules, whatever router the service uses (see Router).
//
// # Keys and costs
//
// HeaderKey, QueryKey and PathKey read a key from the request; a service's
// own function (a verified token's subject from the request context) is the
// other source. A key source that finds nothing, an empty value or one
// longer than verdict.MaxKeyLen reports false: the caller tries its next
// source or answers the request with a 4xx (Config.Reject), never one
// bucket shared by every keyless request. HeaderCost and QueryCost read a
// declared cost (verdict.ParseCost); a cost above the caller's maximum
// (Config.Reject) or above the rule's burst (Respond, from the decision) is
// answered 400 at once without taking anything, because no wait can admit it.
//
// # Fields
//
// Responses carry the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-11, with the numbers package verdict
// defines (see its documentation for what q, w, r and t promise). On a 429,
// Retry-After (RFC 9110, delay-seconds) is the verdict's wait in whole
// seconds, jitter included, rounded up, never earlier than t. A request that
// can never be admitted (its cost is above the burst) gets no Retry-After.
//
// The fields' values are strings a response's header map keeps after the
// request. Respond keeps the ones it made in memo tables (internal/memo) of its Config
// (for allowed responses and for the others, by rule, route and the numbers
// in them) and gives a response whose fields are already there the same
// strings and the same []string values: a rule's fields take few values (r
// is at most its burst; for a given r, t is a second or two), so most
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
// its store could not decide (on_failure: deny; verdict.Result.Outage) is not
// over a quota: it gets 503 with a problem body of type
// ProblemStoreUnavailable and a Retry-After, so that clients and dashboards
// tell an outage from a limit (Config.Denied, when set, writes it instead,
// seeing Result.Outage). A rule's problem bodies are made on its first
// denial and kept. Each route has a verdict.Mode: Enforce denies; Shadow
// decides, counts and sends the fields but lets every request through;
// Off skips the check.
package limithttp

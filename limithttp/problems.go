package limithttp

import (
	"strconv"

	"github.com/limitgen/limitgen/internal/memo"
	"github.com/limitgen/limitgen/verdict"
)

// ProblemQuotaExceeded is the problem type the draft defines for a request
// that exceeds a quota policy (RFC 9457).
const ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// ProblemStoreUnavailable is the problem type of a request refused because a
// shared rule's store could not decide and the rule's failure setting denies
// (on_failure: deny): an outage, answered 503, not a quota (RFC 9457).
const ProblemStoreUnavailable = "https://github.com/limitgen/limitgen#store-unavailable"

// problemKind is which of a rule's problem bodies a response sends.
type problemKind uint8

const (
	overQuota   problemKind = iota // 429: the rule's limit
	tooCostly                      // 400: the cost is above the burst
	unavailable                    // 503: the store could not decide and the rule denies
)

// problemEntry is a rule's problem body of one kind; never written after it
// is published.
type problemEntry struct {
	policy *verdict.Policy
	kind   problemKind
	body   string
}

// problem returns the body of p's problem of kind, made once per rule (and
// Config) and kept in the Config's Memo: a rule's denials allocate nothing.
func (c *Config) problem(p *verdict.Policy, kind problemKind) string {
	slot := c.problems.Slot(memo.Hash(p, int64(kind), 0, 0x9d))
	if e := slot.Load(); e != nil && e.policy == p && e.kind == kind {
		return e.body
	}
	e := &problemEntry{policy: p, kind: kind, body: problemOf(p, kind)}
	slot.Store(e)
	return e.body
}

// problemOf is the RFC 9457 body of a response about rule p, of kind.
func problemOf(p *verdict.Policy, kind problemKind) string {
	switch kind {
	case tooCostly:
		return problemBody("about:blank", "Bad Request", 400,
			"The request costs more than the burst of policy "+p.Name+" ("+strconv.FormatInt(p.Limit.Burst, 10)+" tokens): waiting cannot admit it.", "")
	case unavailable:
		return problemBody(ProblemStoreUnavailable, "Service Unavailable", 503,
			"The store that keeps the counts of policy "+p.Name+" could not decide, and the policy denies while it cannot; retry after the delay in Retry-After.", "")
	}
	return problemBody(ProblemQuotaExceeded, "Too Many Requests", 429,
		"The request exceeds the quota of policy "+p.Name+"; retry after the delay in Retry-After.", p.Name)
}

package genimpl

import (
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// The fields of a rule whose numbers changed at run time.
//
// A generated door's Policies are constants of the policy's numbers.
// When a rule's numbers change (SetNumbers, SetKeyNumbers), the fields of a
// request must describe the numbers that judged it: InForce gives the verdict.Policy
// of those numbers and InForceList the route's RateLimit-verdict.Policy value. Both
// keep what they made in small tables (by the policy and the numbers, by
// the policies listed), so that a request whose fields are not new to them
// allocates nothing: the doors' own Memos, keyed by
// verdict.Policy pointer and list, then go on working. A rule whose numbers never
// changed pays nothing here: its generated check asks for the rule in force
// only to learn that there is none (one atomic load), and keeps its constant.

// inForceBits is the size of the tables: 256 policies, 256 lists.
const inForceBits = 8

type policyEntry struct {
	base *verdict.Policy
	n    atomicbucket.Limit
	p    *verdict.Policy
}

type listEntry struct {
	ps [maxInForceList]*verdict.Policy
	n  int
	s  string
}

// maxInForceList is the longest list InForceList keeps; longer lists (a tier
// of more rules) are joined anew each time.
const maxInForceList = 8

var inForce struct {
	policies [1 << inForceBits]atomic.Pointer[policyEntry]
	lists    [1 << inForceBits]atomic.Pointer[listEntry]
}

// InForce returns the verdict.Policy of base's rule under r's numbers: base when r is
// nil (the numbers never changed) or has base's numbers.
func InForce(base *verdict.Policy, r *atomicbucket.Rule) *verdict.Policy {
	if r == nil {
		return base
	}
	l := r.Limit()
	if l == base.Limit {
		return base
	}
	h := (uint64(uintptr(unsafe.Pointer(base))) ^ uint64(l.Tokens)*0x9e3779b97f4a7c15 ^ uint64(l.Period)<<17 ^ uint64(l.Burst)*0xc2b2ae3d27d4eb4f) * 0xff51afd7ed558ccd
	slot := &inForce.policies[h>>(64-inForceBits)]
	if e := slot.Load(); e != nil && e.base == base && e.n == l {
		return e.p
	}
	p, err := verdict.NewPolicy(base.Name, l)
	if err != nil {
		return base // cannot happen: r was made by NewRule and base's name is valid
	}
	p.Sliding = base.Sliding
	slot.Store(&policyEntry{base: base, n: l, p: &p})
	return &p
}

// InForceList is policyList(ps...), the same string for the same policies.
func InForceList(ps ...*verdict.Policy) string {
	if len(ps) > maxInForceList {
		return policyList(ps...)
	}
	h := uint64(len(ps))
	for _, p := range ps {
		h = (h ^ uint64(uintptr(unsafe.Pointer(p)))) * 0xff51afd7ed558ccd
	}
	slot := &inForce.lists[h>>(64-inForceBits)]
	if e := slot.Load(); e != nil && e.n == len(ps) && slices.Equal(e.ps[:e.n], ps) {
		return e.s
	}
	e := &listEntry{n: len(ps), s: policyList(ps...)}
	copy(e.ps[:], ps)
	slot.Store(e)
	return e.s
}

// policyList joins policies' Items into one RateLimit-Policy value.
func policyList(ps ...*verdict.Policy) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		s += p.Item
	}
	return s
}

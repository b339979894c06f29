package verdict

import (
	"strings"
)

// MaxKeyLen is the longest key a door's key source returns, in bytes. Keys
// read from a request are chosen by whoever sent it; an unbounded one would
// let a client make every bucket it creates as large as a header can be. A
// longer value is treated as no key (the next source, or the route's
// refusal), never cut short: two long keys cut to one prefix would share a
// bucket. It is the longest key the shared stores take (shared.MaxKeyLen),
// so that no key a door passes is refused there.
const MaxKeyLen = 256

// KeyOK reports whether v can be a key: not empty, at most MaxKeyLen bytes.
func KeyOK(v string) bool { return v != "" && len(v) <= MaxKeyLen }

// ParseCost reads a declared cost: ASCII decimal digits (no sign, no spaces,
// no exponent, no base prefix), at least 1. It returns the cost and
// CostOK, CostMissing for an absent or malformed value (the caller uses its
// default), or CostTooHigh for a well-formed value above max (or too long to
// be read: more than 18 significant digits), which the caller must refuse. "0" is
// malformed: a cost of nothing would let a client turn the limit off. Every
// door reads a declared cost (a header, a query parameter, metadata) with it.
func ParseCost(v string, max int64) (int64, CostStatus) {
	if v == "" {
		return 0, CostMissing
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, CostMissing
		}
	}
	v = strings.TrimLeft(v, "0")
	switch {
	case v == "":
		return 0, CostMissing
	case len(v) > 18: // 18 digits always fit an int64
		return 0, CostTooHigh
	}
	var n int64
	for i := 0; i < len(v); i++ {
		n = n*10 + int64(v[i]-'0')
	}
	if n > max {
		return n, CostTooHigh
	}
	return n, CostOK
}

// CostStatus is what ParseCost made of a value.
type CostStatus uint8

const (
	CostOK      CostStatus = iota // a cost from 1 to the maximum
	CostMissing                   // absent or malformed: use the default
	CostTooHigh                   // above the maximum: refuse the request
)

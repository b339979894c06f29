package verdict

import (
	"strings"

	"github.com/limitgen/limitgen/internal/wire"
)

// MaxKeyLen is the longest key a door's key source returns, in bytes. Keys
// read from a request are chosen by whoever sent it; an unbounded one would
// let a client make every bucket it creates as large as a header can be. A
// longer value is treated as no key (the next source, or the route's
// refusal), never cut short: two long keys cut to one prefix would share a
// bucket. It is the longest key the shared stores take (shared.MaxKeyLen),
// so that no key a door passes is refused there.
const MaxKeyLen = wire.MaxKeyLen

// ParseCost reads a declared cost: ASCII decimal digits (no sign, no spaces,
// no exponent, no base prefix), at least 1. An absent or malformed value
// costs def; a well-formed value above max (or too long to be read: more
// than 18 significant digits) is refused: ok is false, and the caller must
// refuse the request (cost is the value, or max+1 when it is too long).
// "0" is malformed: a cost of nothing would let a client turn the limit off.
// Every door reads a declared cost (a header, a query parameter, metadata)
// with it.
func ParseCost(v string, def, max int64) (cost int64, ok bool) {
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return def, true
		}
	}
	v = strings.TrimLeft(v, "0")
	switch {
	case v == "":
		return def, true
	case len(v) > 18: // 18 digits always fit an int64
		return max + 1, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		n = n*10 + int64(v[i]-'0')
	}
	return n, n <= max
}

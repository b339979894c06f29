package verdict

import (
	"strconv"
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

// IntKey reads a signed integer key of the given bit size (0 for int) from a
// key source's value: decimal, an optional minus sign, no spaces. False when
// the source found none, or v is not such a number or does not fit.
func IntKey(v string, ok bool, bits int) (int64, bool) {
	if !ok || v == "" || len(v) > 20 || v[0] == '+' {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, bits)
	if err != nil {
		return 0, false
	}
	return n, true
}

// UintKey is IntKey for unsigned keys: decimal digits only.
func UintKey(v string, ok bool, bits int) (uint64, bool) {
	if !ok || v == "" || len(v) > 20 || v[0] == '+' {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, bits)
	if err != nil {
		return 0, false
	}
	return n, true
}

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

// A composite key (a rule's key of several fields, such as a tenant and a
// user) has a text form: its fields in order, separated by commas, integers
// in decimal, strings with '%', ',' and '#' escaped as %25, %2C and %23. It
// is what run-time numbers name a key by, and (StoreKey) what a store keeps
// it under. Distinct keys have distinct forms, and a form is read back to
// its key (KeyFields).

// AppendKeyField appends s, a string field of a composite key, to the text
// form in dst, escaped.
func AppendKeyField(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			dst = append(dst, "%25"...)
		case ',':
			dst = append(dst, "%2C"...)
		case '#':
			dst = append(dst, "%23"...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// KeyFields splits the text form of a composite key of n fields into its
// fields, unescaped. False when s does not have n fields, or holds an escape
// other than the three AppendKeyField writes (or a '#').
func KeyFields(s string, n int) ([]string, bool) {
	if strings.Count(s, ",") != n-1 || strings.IndexByte(s, '#') >= 0 {
		return nil, false
	}
	out := strings.Split(s, ",")
	for i, f := range out {
		if strings.IndexByte(f, '%') < 0 {
			continue
		}
		var b strings.Builder
		for j := 0; j < len(f); j++ {
			if f[j] != '%' {
				b.WriteByte(f[j])
				continue
			}
			if j+2 >= len(f) {
				return nil, false
			}
			switch f[j+1 : j+3] {
			case "25":
				b.WriteByte('%')
			case "2C", "2c":
				b.WriteByte(',')
			case "23":
				b.WriteByte('#')
			default:
				return nil, false
			}
			j += 2
		}
		out[i] = b.String()
	}
	return out, true
}

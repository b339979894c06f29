// Package wire holds what the doors and verdict share below verdict's
// surface: the bound on a key read from a request, and appending integers
// in decimal faster than strconv when the buffer has room (the RateLimit
// fields' numbers, the legacy X-RateLimit headers).
package wire

import (
	"math/bits"
	"strconv"
)

// MaxKeyLen is verdict.MaxKeyLen, the longest key a door takes, in bytes.
const MaxKeyLen = 256

// KeyOK reports whether v can be a key: not empty, at most MaxKeyLen bytes.
func KeyOK(v string) bool { return v != "" && len(v) <= MaxKeyLen }

// AppendDecimal appends v ≥ 0 in decimal to b, as strconv.AppendInt does,
// writing the digits in place when b has room: their count comes from v's
// bit length (no division counts them), and they are written from the last,
// eight at a time in two halves that do not wait for each other, then two at
// a time. The RateLimit field's numbers are most of what formatting an
// allowed response's fields costs.
func AppendDecimal(b []byte, v int64) []byte {
	u := uint64(v)
	n := (bits.Len64(u|1)*1233)>>12 + 1 // ⌊log10(2)·bits⌋+1: the count, or one more
	if n > 1 && u < Pow10[n-1] {
		n--
	}
	if v < 0 || cap(b)-len(b) < n {
		return strconv.AppendInt(b, v, 10)
	}
	i := len(b) + n
	b = b[:i]
	for u >= 1e8 {
		q := u / 1e8
		r := u - q*1e8
		hi, lo := r/1e4, r%1e4
		h1, h2, l1, l2 := hi/100, hi%100, lo/100, lo%100
		i -= 8
		b[i], b[i+1], b[i+2], b[i+3] = digitPairs[2*h1], digitPairs[2*h1+1], digitPairs[2*h2], digitPairs[2*h2+1]
		b[i+4], b[i+5], b[i+6], b[i+7] = digitPairs[2*l1], digitPairs[2*l1+1], digitPairs[2*l2], digitPairs[2*l2+1]
		u = q
	}
	for u >= 100 {
		q := u / 100
		r := u - q*100
		i -= 2
		b[i], b[i+1] = digitPairs[2*r], digitPairs[2*r+1]
		u = q
	}
	if u >= 10 {
		b[i-2], b[i-1] = digitPairs[2*u], digitPairs[2*u+1]
	} else {
		b[i-1] = byte('0' + u)
	}
	return b
}

// Pow10 are the powers of ten up to 10¹⁹, the largest a uint64 holds.
var Pow10 = [20]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

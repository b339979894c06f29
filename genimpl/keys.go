package genimpl

import (
	"strconv"
	"strings"
)

// A composite key (a rule's key of several fields, such as a tenant and a
// user) has a text form: its fields in order, separated by commas, integers
// in decimal, strings with '%', ',' and '#' escaped as %25, %2C and %23. It
// is what run-time numbers name a key by, and (shared.StoreKey) what a store keeps
// it under. Distinct keys have distinct forms, and a form is read back to
// its key (KeyFields).

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

package clientip

import "strings"

// The forwarding headers are read from the right, one entry at a time, so that
// a long or malformed left part (which the client wrote) is never parsed: the
// walk stops at the first entry that is not a trusted proxy, and everything a
// trusted proxy wrote is to the right of it.

// lastListItem splits a comma-separated list (X-Forwarded-For) into its last
// item and the rest before the last comma ("" when there is none).
func lastListItem(s string) (item, rest string) {
	i := strings.LastIndexByte(s, ',')
	if i < 0 {
		return s, ""
	}
	return s[i+1:], s[:i]
}

// lastForwardedElement splits a Forwarded field value into its last element
// and the rest before the comma that starts it. Commas inside quoted strings
// do not separate elements; a quote preceded by an odd number of backslashes is
// escaped (RFC 9110 quoted-pair) and does not open or close one.
func lastForwardedElement(s string) (elem, rest string) {
	quoted := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			slashes := 0
			for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
				slashes++
			}
			if slashes%2 == 0 {
				quoted = !quoted
			}
		case ',':
			if !quoted {
				return s[i+1:], s[:i]
			}
		}
	}
	return s, ""
}

// forParam returns the value of the for= parameter of one Forwarded element
// (parameter names are case-insensitive), unquoted; false when the element has
// none, has it twice, or its value is malformed.
func forParam(elem string) (string, bool) {
	var value string
	found := false
	for elem != "" {
		var pair string
		pair, elem = nextPair(elem)
		name, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		if found {
			return "", false // two for= in one element: ambiguous
		}
		found = true
		if value, ok = unquote(strings.TrimSpace(v)); !ok {
			return "", false
		}
	}
	return value, found
}

// nextPair splits an element at its first semicolon outside a quoted string.
func nextPair(s string) (pair, rest string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if quoted {
				i++ // the escaped character
			}
		case '"':
			quoted = !quoted
		case ';':
			if !quoted {
				return s[:i], s[i+1:]
			}
		}
	}
	return s, ""
}

// unquote returns a token as it is, and a quoted string without its quotes
// and escapes; false for an unterminated or malformed quoted string.
func unquote(v string) (string, bool) {
	if !strings.HasPrefix(v, `"`) {
		return v, !strings.ContainsAny(v, "\" \t")
	}
	if len(v) < 2 || !strings.HasSuffix(v, `"`) {
		return "", false
	}
	inner := v[1 : len(v)-1]
	if !strings.Contains(inner, `\`) {
		return inner, !strings.Contains(inner, `"`)
	}
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		switch c := inner[i]; c {
		case '\\':
			if i++; i == len(inner) {
				return "", false
			}
			b.WriteByte(inner[i])
		case '"':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

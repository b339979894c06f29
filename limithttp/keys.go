package limithttp

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/limitgen/limitgen/shared"
)

// MaxKeyLen is the longest key a key source returns, in bytes. Keys read from
// a request are chosen by whoever sent it; an unbounded one would let a client
// make every bucket it creates as large as a header can be. A longer value is
// treated as no key (the next source, or the route's 4xx), never cut short:
// two long keys cut to one prefix would share a bucket. It is the longest key
// the shared stores take (shared.MaxKeyLen), so that no key the middleware
// passes is refused there.
const MaxKeyLen = shared.MaxKeyLen

// keyOK reports whether v can be a key: not empty, at most MaxKeyLen bytes.
func keyOK(v string) bool { return v != "" && len(v) <= MaxKeyLen }

// HeaderKey returns the first value of the header name (in canonical form,
// http.CanonicalHeaderKey: the generator emits it so), or false when it is
// absent, empty or longer than MaxKeyLen. A header is a key only when the
// service or a trusted upstream sets it: anything a client sends it can vary.
func HeaderKey(r *http.Request, name string) (string, bool) {
	v := r.Header[name]
	if len(v) == 0 || !keyOK(v[0]) {
		return "", false
	}
	return v[0], true
}

// QueryKey returns the first value of the query parameter name, decoded, or
// false when it is absent, empty, longer than MaxKeyLen or badly escaped. It
// scans the raw query instead of parsing all of it (url.Values would allocate a
// map per request), and allocates only to decode an escaped value.
func QueryKey(r *http.Request, name string) (string, bool) {
	if r.URL == nil {
		return "", false
	}
	v, ok := queryValue(r.URL.RawQuery, name)
	if !ok || !keyOK(v) {
		return "", false
	}
	return v, true
}

// PathKey returns the value of the ServeMux path wildcard name (r.PathValue),
// or false when it is empty or longer than MaxKeyLen. Only a ServeMux sets
// r.PathValue, in the handlers it calls: generated middleware reads its
// routes' wildcards with Router and PathKeyAt instead, under any router.
func PathKey(r *http.Request, name string) (string, bool) {
	v := r.PathValue(name)
	if !keyOK(v) {
		return "", false
	}
	return v, true
}

// PatternKey returns the ServeMux pattern that matched r (r.Pattern): one
// bucket per route. False when r was not routed by a ServeMux (generated
// middleware keys a route by its policy pattern, a constant, instead).
func PatternKey(r *http.Request) (string, bool) {
	if r.Pattern == "" {
		return "", false
	}
	return r.Pattern, true
}

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

// queryValue finds the first value of name in a raw query string: pairs
// separated by '&', key and value by the first '='. A pair's key is decoded only
// when it holds an escape ('%' or '+').
func queryValue(raw, name string) (string, bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(k, "%+") {
			dk, err := url.QueryUnescape(k)
			if err != nil {
				continue
			}
			k = dk
		}
		if k != name {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			dv, err := url.QueryUnescape(v)
			if err != nil {
				return "", false
			}
			v = dv
		}
		return v, true
	}
	return "", false
}

// ParseCost reads a declared cost: ASCII decimal digits (no sign, no spaces,
// no exponent, no base prefix), at least 1. It returns the cost and
// CostOK, CostMissing for an absent or malformed value (the caller uses its
// default), or CostTooHigh for a well-formed value above max (or too long to
// be read: more than 18 significant digits), which the caller must refuse. "0" is
// malformed: a cost of nothing would let a client turn the limit off.
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

// HeaderCost is ParseCost of the first value of the header name (canonical).
func HeaderCost(r *http.Request, name string, max int64) (int64, CostStatus) {
	v := r.Header[name]
	if len(v) == 0 {
		return 0, CostMissing
	}
	return ParseCost(v[0], max)
}

// QueryCost is ParseCost of the first value of the query parameter name.
func QueryCost(r *http.Request, name string, max int64) (int64, CostStatus) {
	if r.URL == nil {
		return 0, CostMissing
	}
	v, ok := queryValue(r.URL.RawQuery, name)
	if !ok {
		return 0, CostMissing
	}
	return ParseCost(v, max)
}

package limithttp

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/limitgen/limitgen/internal/wire"
	"github.com/limitgen/limitgen/verdict"
)

// HeaderKey returns the first value of the header name (in canonical form,
// http.CanonicalHeaderKey: the generator emits it so), or false when it is
// absent, empty or longer than verdict.MaxKeyLen. A header is a key only when the
// service or a trusted upstream sets it: anything a client sends it can vary.
func HeaderKey(r *http.Request, name string) (string, bool) {
	v := r.Header[name]
	if len(v) == 0 || !wire.KeyOK(v[0]) {
		return "", false
	}
	return v[0], true
}

// QueryKey returns the first value of the query parameter name, decoded, or
// false when it is absent, empty, longer than verdict.MaxKeyLen or badly escaped. It
// scans the raw query instead of parsing all of it (url.Values would allocate a
// map per request), and allocates only to decode an escaped value.
func QueryKey(r *http.Request, name string) (string, bool) {
	if r.URL == nil {
		return "", false
	}
	v, ok := queryValue(r.URL.RawQuery, name)
	if !ok || !wire.KeyOK(v) {
		return "", false
	}
	return v, true
}

// PathKey returns the value of the ServeMux path wildcard name (r.PathValue),
// or false when it is empty or longer than verdict.MaxKeyLen. Only a ServeMux sets
// r.PathValue, in the handlers it calls: generated middleware reads its
// routes' wildcards with Router and PathKeyAt instead, under any router.
func PathKey(r *http.Request, name string) (string, bool) {
	v := r.PathValue(name)
	if !wire.KeyOK(v) {
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

// HeaderCost is verdict.ParseCost of the first value of the header name
// (canonical): def when there is none.
func HeaderCost(r *http.Request, name string, def, max int64) (int64, bool) {
	if v := r.Header[name]; len(v) > 0 {
		return verdict.ParseCost(v[0], def, max)
	}
	return def, true
}

// QueryCost is verdict.ParseCost of the first value of the query parameter
// name: def when there is none.
func QueryCost(r *http.Request, name string, def, max int64) (int64, bool) {
	if r.URL != nil {
		if v, ok := queryValue(r.URL.RawQuery, name); ok {
			return verdict.ParseCost(v, def, max)
		}
	}
	return def, true
}

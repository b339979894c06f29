package limithttp

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/internal/wire"
)

// routePatterns is a policy's worth of patterns that exercise each of
// net/http's rules: methods (GET covers HEAD), a host, wildcards, a multi
// wildcard, the end anchor, subtrees and their trailing-slash redirects.
var routePatterns = []string{
	"GET /hello",
	"POST /export/{account}",
	"/v1/",
	"GET /v1/users/{id}",
	"DELETE /v1/users/{id}",
	"GET /files/{path...}",
	"GET /exact/{$}",
	"api.example.com/status",
	"/tree/",
	"GET /a%2Fb/{x}",
}

// The router's answer for requests, each written by hand as net/http routes
// it; every row is also held to http.ServeMux itself below.
func TestRouterMatch(t *testing.T) {
	rt, err := NewRouter(routePatterns...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, target, host string
		want                 string // the pattern, "" for none
		key                  string // the wildcard's name, if the pattern has one
		value                string // its value
	}{
		{"GET", "/hello", "", "GET /hello", "", ""},
		{"HEAD", "/hello", "", "GET /hello", "", ""},
		{"POST", "/hello", "", "", "", ""},               // 405 in ServeMux: no route
		{"GET", "/hello/", "", "", "", ""},               // 404
		{"GET", "//hello", "", "GET /hello", "", ""},     // unclean: redirected to /hello
		{"GET", "/x/../hello", "", "GET /hello", "", ""}, // unclean
		{"POST", "/export/acme", "", "POST /export/{account}", "account", "acme"},
		{"POST", "/export/a%20b", "", "POST /export/{account}", "account", "a b"},
		{"POST", "/export/", "", "", "", ""},
		{"GET", "/v1/things", "", "/v1/", "", ""},
		{"PUT", "/v1/users/7", "", "/v1/", "", ""}, // no PUT pattern: the subtree
		{"GET", "/v1/users/7", "", "GET /v1/users/{id}", "id", "7"},
		{"DELETE", "/v1/users/7", "", "DELETE /v1/users/{id}", "id", "7"},
		{"GET", "/v1", "", "/v1/", "", ""}, // redirected to /v1/
		{"GET", "/files/a/b/c", "", "GET /files/{path...}", "path", "a/b/c"},
		{"GET", "/files/", "", "GET /files/{path...}", "path", ""},
		{"GET", "/exact/", "", "GET /exact/{$}", "", ""},
		{"GET", "/exact/x", "", "", "", ""},
		{"GET", "/exact", "", "GET /exact/{$}", "", ""}, // redirected to /exact/
		{"GET", "/status", "api.example.com", "api.example.com/status", "", ""},
		{"GET", "/status", "api.example.com:8443", "api.example.com/status", "", ""},
		{"GET", "/status", "example.com", "", "", ""},
		{"GET", "/tree", "", "/tree/", "", ""},
		{"GET", "/tree/deep/er", "", "/tree/", "", ""},
		{"GET", "/a%2Fb/1", "", "GET /a%2Fb/{x}", "x", "1"},
		{"GET", "/nothing", "", "", "", ""},
		{"GET", "*", "", "", "", ""},
	} {
		r := httptest.NewRequest(c.method, "http://example.com"+strings.TrimPrefix(c.target, "*"), nil)
		if c.target == "*" {
			r.URL.Path = "*"
		}
		if c.host != "" {
			r.Host = c.host
		}
		i, clean := rt.Match(r)
		got := ""
		if i >= 0 {
			got = routePatterns[i]
		}
		if got != c.want {
			t.Errorf("%s %s (host %q): pattern %q, want %q", c.method, c.target, r.Host, got, c.want)
			continue
		}
		if mux := muxPattern(routePatterns, r); mux != got {
			t.Errorf("%s %s: http.ServeMux says %q, the router %q", c.method, c.target, mux, got)
		}
		if c.key == "" {
			continue
		}
		p, err := ParsePattern(got)
		if err != nil {
			t.Fatal(err)
		}
		idx, multi := p.Wildcard(c.key)
		v, ok := PathKeyAt(clean, idx, multi)
		if v != c.value || ok != (c.value != "") {
			t.Errorf("%s %s: wildcard %s = %q, %v; want %q", c.method, c.target, c.key, v, ok, c.value)
		}
	}
}

// muxPattern is the pattern http.ServeMux.Handler reports for r on a mux
// holding patterns.
func muxPattern(patterns []string, r *http.Request) string {
	mux := http.NewServeMux()
	for _, p := range patterns {
		mux.Handle(p, http.NotFoundHandler())
	}
	_, p := mux.Handler(r)
	return p
}

// Matching allocates nothing for clean paths, and takes no lock.
func TestRouterAllocs(t *testing.T) {
	rt := MustRouter(routePatterns...)
	for _, target := range []string{"/hello", "/v1/users/7", "/v1/things/deep", "/nothing/here", "/v1"} {
		r := httptest.NewRequest("GET", target, nil)
		if n := testing.AllocsPerRun(100, func() { rt.Match(r) }); n != 0 {
			t.Errorf("%s: %v allocations", target, n)
		}
		if n := testing.AllocsPerRun(100, func() { rt.MatchAll(r) }); n != 0 {
			t.Errorf("%s: MatchAll: %v allocations", target, n)
		}
	}
}

// Every reading of a path and the routes it finds, written by hand: ServeMux
// cleans and redirects; chi reads RawPath (or Path) as it is; gorilla/mux
// reads Path as it is, encoded slashes decoded.
func TestRouterMatchAll(t *testing.T) {
	rt := MustRouter(routePatterns...)
	for _, c := range []struct {
		method, target string
		want           []string // the routes, most canonical reading first
	}{
		{"GET", "/hello", []string{"GET /hello"}},
		{"GET", "/v1/users/7", []string{"GET /v1/users/{id}"}},
		{"GET", "/x/../hello", []string{"GET /hello"}},  // as it is, /x/../hello is no route
		{"GET", "/v1/users/../hello", []string{"/v1/"}}, // /v1/hello; as it is, a segment too many for {id}
		{"GET", "/v1/users/..", []string{"/v1/", "GET /v1/users/{id}"}},
		{"POST", "/export/../hello", nil}, // no POST /hello; as it is, export has one segment more
		{"POST", "/export/..", []string{"POST /export/{account}"}},
		{"POST", "/export/%2e%2e", []string{"POST /export/{account}"}},
		{"GET", "/v1/users/a%2Fb", []string{"GET /v1/users/{id}", "/v1/"}}, // gorilla: /v1/users/a/b
		{"GET", "/files/../v1/users/7", []string{"GET /v1/users/{id}", "GET /files/{path...}"}},
		{"GET", "/v1", []string{"/v1/"}},     // ServeMux redirects; chi and gorilla find nothing
		{"GET", "/tree", []string{"/tree/"}}, // likewise
		{"GET", "/exact", []string{"GET /exact/{$}"}},
		{"GET", "//hello", []string{"GET /hello"}},
		{"GET", "/v1//users/7", []string{"GET /v1/users/{id}", "/v1/"}},
		{"HEAD", "/v1/users/./7", []string{"GET /v1/users/{id}", "/v1/"}},
		{"DELETE", "/v1/users/7/..", []string{"/v1/"}},
		{"DELETE", "/v1/users/%2e", []string{"DELETE /v1/users/{id}"}},
		{"GET", "/HELLO", nil},
	} {
		r := httptest.NewRequest(c.method, "http://example.com"+c.target, nil)
		all := rt.MatchAll(r)
		var got []string
		for i := range all.N {
			got = append(got, routePatterns[all.Index[i]])
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s %s: %q, want %q", c.method, c.target, got, c.want)
		}
	}
}

// A pattern ServeMux refuses, or two that conflict, are refused with its
// reason.
func TestNewRouterRefuses(t *testing.T) {
	for _, ps := range [][]string{
		{"GET"},
		{"/a/{x"},
		{"GET /a/{x}", "GET /a/{y}"},
		{"/{x...}/b"},
	} {
		if _, err := NewRouter(ps...); err == nil || !strings.Contains(err.Error(), "invalid route pattern") {
			t.Errorf("%q: %v", ps, err)
		}
	}
}

// FuzzRouter holds the router to http.ServeMux: for a set of patterns drawn
// from pieces (methods, hosts, literals, wildcards, escapes, anchors,
// subtrees) and requests drawn likewise (unclean paths, ports, HEAD,
// CONNECT), Match reports the pattern ServeMux.Handler reports, and where
// ServeMux serves the request itself, PathKeyAt reads every wildcard as
// r.PathValue does.
func FuzzRouter(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte{5, 0, 9, 7, 1, 3, 3, 2, 2, 8, 4, 6, 5, 1, 0, 9, 9, 0, 1, 2, 3, 4, 200, 100, 50})
	f.Add([]byte{8, 255, 254, 253, 1, 17, 33, 49, 65, 81, 97, 113, 129, 145, 161, 177, 193, 209, 225, 241})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(b)
		}
		methods := []string{"", "GET ", "POST ", "HEAD ", "DELETE "}
		hosts := []string{"", "", "", "example.com", "a.example.com"}
		segs := []string{"a", "b", "{x}", "{y}", "a%2Fb", "%61", "c d", "é"}
		ends := []string{"", "/", "/{$}", "/{rest...}"}
		var patterns []string
		mux := http.NewServeMux()
		for range next()%8 + 1 {
			var b strings.Builder
			b.WriteString(methods[next()%len(methods)])
			b.WriteString(hosts[next()%len(hosts)])
			for range next() % 4 {
				b.WriteString("/" + segs[next()%len(segs)])
			}
			end := ends[next()%len(ends)]
			if b.Len() == 0 || strings.HasSuffix(b.String(), " ") || !strings.Contains(b.String(), "/") && end == "" {
				end = "/"
			}
			b.WriteString(end)
			p := b.String()
			if strings.HasSuffix(p, "//{$}") || strings.HasSuffix(p, "//{rest...}") {
				continue
			}
			if register(mux, p) == "" {
				patterns = append(patterns, p)
			}
		}
		if len(patterns) == 0 {
			return
		}
		rt, err := NewRouter(patterns...)
		if err != nil {
			t.Fatalf("%q: ServeMux takes them, NewRouter: %v", patterns, err)
		}
		// The router a generated package builds: its literal routes chosen
		// by a function (a switch there, written from LiteralRoutes), which
		// must answer as rt does (MustRouterFunc panics where it does not).
		lits, err := LiteralRoutes(patterns...)
		if err != nil {
			t.Fatal(err)
		}
		index := map[string]LiteralPath{}
		for _, lp := range lits {
			index[lp.Path] = lp
		}
		sw := MustRouterFunc(func(m, p string) int {
			lp, ok := index[p]
			if !ok {
				return 0
			}
			for _, x := range lp.Methods {
				if x.Method == m {
					return x.Route
				}
			}
			return lp.Any
		}, patterns...)
		reqMethods := []string{"GET", "HEAD", "POST", "DELETE", "PUT", "CONNECT"}
		reqHosts := []string{"example.com", "example.com:8080", "a.example.com", "other", "[::1]:80", "a.example.com:1"}
		reqSegs := []string{"a", "b", "c", "a%2Fb", "%61", "c%20d", "", ".", "..", "%zz", "é", "%C3%A9"}
		for range next()%6 + 1 {
			var b strings.Builder
			for range next() % 5 {
				b.WriteString("/" + reqSegs[next()%len(reqSegs)])
			}
			if next()%3 == 0 {
				b.WriteString("/")
			}
			target := b.String()
			if target == "" {
				target = "/"
			}
			r, err := http.NewRequest(reqMethods[next()%len(reqMethods)], "http://h"+target, nil)
			if err != nil {
				continue
			}
			r.Host = reqHosts[next()%len(reqHosts)]
			_, want := mux.Handler(r)
			i, clean := rt.Match(r)
			if si, sclean := sw.Match(r); si != i || sclean != clean {
				t.Fatalf("patterns %q, %s %s: the switch's router %d %q, the map's %d %q", patterns, r.Method, r.URL.EscapedPath(), si, sclean, i, clean)
			}
			// MatchAll's first reading is Match's; the switch's router reads
			// every path as the map's does.
			all := rt.MatchAll(r)
			if i >= 0 && (all.N == 0 || all.Index[0] != i || all.Path[0] != clean) || i < 0 && all.N > 0 && all.Index[0] == -1 {
				t.Fatalf("patterns %q, %s %s: MatchAll %+v, Match %d %q", patterns, r.Method, r.URL.EscapedPath(), all, i, clean)
			}
			if sall := sw.MatchAll(r); sall != all {
				t.Fatalf("patterns %q, %s %s: the switch's router reads %+v, the map's %+v", patterns, r.Method, r.URL.EscapedPath(), sall, all)
			}
			got := ""
			if i >= 0 {
				got = patterns[i]
			}
			if r.Method == "CONNECT" && strings.HasPrefix(want, "/") && !slices.Contains(patterns, want) {
				// ServeMux reports a CONNECT request's trailing-slash redirect
				// by the path it redirects to; the router, as for any method,
				// by the pattern that path matches.
				if want != cleanURLPath(r.URL.Path)+"/" || i < 0 {
					t.Fatalf("patterns %q, CONNECT %s: ServeMux redirects to %q, router %q", patterns, r.URL.EscapedPath(), want, got)
				}
				continue
			}
			if got != want {
				t.Fatalf("patterns %q, %s %s host %q: router %q, ServeMux %q", patterns, r.Method, r.URL.EscapedPath(), r.Host, got, want)
			}
			if i < 0 || r.Method == "CONNECT" {
				// (A CONNECT path is not cleaned; on an empty segment
				// r.PathValue panics in go1.26, a wildcard matched but not
				// recorded. No service keys a CONNECT by its path.)
				continue
			}
			// Where ServeMux serves the request itself, compare the wildcards.
			var values map[string]string
			served := http.NewServeMux()
			for _, p := range patterns {
				served.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
					if r.Pattern != got {
						return
					}
					values = map[string]string{}
					pp, _ := ParsePattern(got)
					for _, s := range pp.Segments {
						if s.Wild && s.Name != "" {
							values[s.Name] = r.PathValue(s.Name)
						}
					}
				})
			}
			served.ServeHTTP(httptest.NewRecorder(), r)
			if values == nil {
				continue
			}
			pp, _ := ParsePattern(got)
			for name, want := range values {
				idx, multi := pp.Wildcard(name)
				v, ok := PathKeyAt(clean, idx, multi)
				if wantOK := wire.KeyOK(want); ok != wantOK || ok && v != want {
					t.Fatalf("pattern %q, %s: wildcard %s = %q, %v; r.PathValue %q", got, r.URL.EscapedPath(), name, v, ok, want)
				}
			}
		}
	})
}

// TestMustRouterFuncRefuses checks that a literal-route function that
// disagrees with the patterns (a package generated from other ones) panics
// with the pair it got wrong, rather than route requests elsewhere.
func TestMustRouterFuncRefuses(t *testing.T) {
	patterns := []string{"GET /a", "POST /a", "/b", "GET /c/{x}"}
	right := func(m, p string) int {
		switch p {
		case "/a":
			switch m {
			case "GET", "HEAD":
				return 1
			case "POST":
				return 2
			}
		case "/b":
			return 3
		}
		return 0
	}
	MustRouterFunc(right, patterns...) // must not panic
	for name, wrong := range map[string]func(m, p string) int{
		"HEAD not GET's": func(m, p string) int {
			if p == "/a" && m == "HEAD" {
				return 0
			}
			return right(m, p)
		},
		"a path left out": func(m, p string) int {
			if p == "/b" {
				return 0
			}
			return right(m, p)
		},
		"any method for one": func(m, p string) int {
			if p == "/a" {
				return 1
			}
			return right(m, p)
		},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "regenerate") {
					t.Errorf("%s: recovered %v, want the panic naming the pair", name, r)
				}
			}()
			MustRouterFunc(wrong, patterns...)
		}()
	}
}

package limithttp

import (
	"net/http"
)

// Routes are the policy routes a request may be handed to, whichever router
// dispatches it: the distinct routes of its readings (MatchAll), the most
// canonical reading first. N is 0 when no reading finds a route.
type Routes struct {
	N     int       // how many entries of Index and Path are set
	Index [3]int    // the routes, by pattern index; distinct
	Path  [3]string // the path each route was matched on: PathKeyAt reads its wildcards from it
}

// add records route i, matched on p, unless it is none (-1) or recorded.
func (rs *Routes) add(i int, p string) {
	if i < 0 {
		return
	}
	for j := range rs.N {
		if rs.Index[j] == i {
			return
		}
	}
	rs.Index[rs.N], rs.Path[rs.N] = i, p
	rs.N++
}

// MatchAll returns every policy route that a router in use may hand r to.
// Routers read a path differently, and a middleware in front of one cannot
// tell which it is in front of, so it matches each reading of the path:
//
//  1. http.ServeMux's (Match): the escaped path, cleaned of dot segments
//     and repeated slashes, each segment unescaped; a path it would redirect
//     takes the route the redirect leads to. gorilla/mux, by default, also
//     redirects an unclean path before any handler runs.
//  2. The path as the request carries it, not cleaned: URL.RawPath when it is
//     set, otherwise URL.Path, compared segment by segment as it is. This is
//     chi's routing path, and gorilla/mux's with SkipClean and UseEncodedPath.
//  3. URL.Path, decoded and not cleaned, when URL.RawPath is set (so an
//     encoded slash separates segments): gorilla/mux's reading, by default
//     and with SkipClean.
//
// A clean path without escapes reads the same every way, and so has at most
// one route (a path ServeMux redirects, /tree for /tree/, can have two: the
// redirect's and the one the path matches as it is). Paths that differ
// between readings (dot segments, "//", %2F, %2e) are what a client uses to
// reach a route the middleware did not decide; a middleware checks every
// route here, so that each route a router may pick was decided by its rule.
// As in every reading, a GET pattern covers HEAD and a pattern with a host
// matches only requests for that host.
//
// It allocates nothing but what Match does.
func (rt *Router) MatchAll(r *http.Request) (rs Routes) {
	// A literal path of the policy's, as most requests are: clean, plain,
	// one route every way it is read (matchServeMux's first case).
	if u := r.URL; u != nil && u.RawPath == "" && rt.direct != nil && r.Method != "CONNECT" {
		if i := rt.direct(r.Method, u.Path) - 1; i >= 0 {
			rs.N, rs.Index[0], rs.Path[0] = 1, i, u.Path
			return rs
		}
	}
	return rt.matchAll(r)
}

// matchAll is MatchAll past its first case.
func (rt *Router) matchAll(r *http.Request) Routes {
	var rs Routes
	i, p, asIs := rt.matchServeMux(r)
	rs.add(i, p)
	if asIs != -2 { // the request's own path is the clean one: reading 2 and 3 are the tree's match on it
		rs.add(asIs, p)
		return rs
	}
	if r.URL == nil {
		return rs
	}
	host := ""
	if rt.hasHost {
		host = stripHostPort(r.Host)
	}
	u := r.URL
	if u.RawPath == "" {
		rs.add(rt.matchAsIs(host, r.Method, u.Path), u.Path)
		return rs
	}
	rs.add(rt.matchAsIs(host, r.Method, u.RawPath), u.RawPath)
	rs.add(rt.matchAsIs(host, r.Method, u.Path), u.Path)
	return rs
}

// matchAsIs is the route of the routing tree for path p as it is: not
// cleaned, not redirected, segments compared without unescaping; -1 for
// none. An empty path is "/" (chi's reading); a path that does not begin
// with a slash ("*") matches nothing.
func (rt *Router) matchAsIs(host, method, p string) int {
	if p == "" {
		p = "/"
	}
	if p[0] != '/' {
		return -1
	}
	return rt.routeOf(rt.match(host, method, p, false, false))
}

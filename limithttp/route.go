package limithttp

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/limitgen/limitgen/internal/wire"
)

// Router finds which of a policy's route patterns covers a request, by
// net/http's own rules (http.ServeMux's patterns and precedence, Go 1.22 and
// later), whatever router the service uses and whether or not one has run: a
// middleware that relied on r.Pattern would limit nothing when it wraps a
// whole mux (r.Pattern is set inside it), under chi or gorilla/mux (they never
// set it), or when the service registered another spelling of a pattern.
//
// Match answers what http.ServeMux.Handler reports as the pattern for the
// request on a mux holding exactly the router's patterns: the most specific
// pattern that matches the cleaned path, host and method (GET patterns match
// HEAD); for a path ServeMux would redirect (an unclean path, or /tree when
// only /tree/ is registered) the pattern the redirect leads to; none when
// ServeMux would answer 404 or 405. The fuzz test FuzzRouter holds it to
// http.ServeMux itself. Unlike ServeMux.Handler it takes no lock and
// allocates nothing (but to unescape a %-escaped path segment, or to clean a
// path that is not clean).
//
// A Router is immutable once built, and safe for concurrent use.
type Router struct {
	root    rnode   // its children are hosts ("" for patterns without one), theirs methods ("" for none)
	routes  []route // by pattern index
	hasHost bool    // some pattern names a host
	// literal finds the patterns whose whole path is literal and plain
	// (isPlain), by that path,
	// when no pattern names a host: for a clean path equal to one, the most
	// specific pattern for the method is among them (a literal path is more
	// specific than any wildcard that matches it, and patterns for one path
	// differ only by method), so Match needs no walk of the tree.
	literal map[string][]literalRoute
	// direct, when set (MustRouterFunc), replaces literal: the index+1 of
	// the route for a method and a clean literal path, 0 for none, by a
	// switch the compiler builds over constants, which costs a fraction of
	// a map lookup and of choosing among the path's methods.
	direct func(method, path string) int
	// redirectSegs has bit k set when a pattern of k segments ends with a
	// trailing slash, a {x...} wildcard or {$}: only such a pattern can
	// match a path with a slash added, so redirect looks no further for a
	// path of k−1 slashes whose bit is clear. redirectAny: a pattern of 64
	// segments or more, which the mask cannot hold, so redirect always looks.
	redirectSegs uint64
	redirectAny  bool
}

// literalRoute is a pattern of a literal path: its method ("" for any) and
// index+1.
type literalRoute struct {
	method string
	route  int
}

// route is what exactMatch needs of a pattern.
type route struct {
	segs  int  // the pattern's path segments
	multi bool // its last segment is a multi wildcard ({x...}, or a trailing slash)
}

// rnode is a node of the routing tree, as net/http builds its own: children by
// literal segment, then one single-wildcard child, then one multi-wildcard
// child, tried in that order (literals are more specific).
type rnode struct {
	route    int // index+1 of the pattern that ends here; 0 for none
	children []redge
	wild     *rnode // a {name} segment
	multi    *rnode // a {name...} segment or a trailing slash: matches the rest
}

type redge struct {
	key string
	n   *rnode
}

// child is the child for key. As in net/http, the empty key is the
// wildcard's child: a host or method left out, an empty segment.
func (n *rnode) child(key string) *rnode {
	if n == nil {
		return nil
	}
	if key == "" {
		return n.wild
	}
	for i := range n.children {
		if n.children[i].key == key {
			return n.children[i].n
		}
	}
	return nil
}

func (n *rnode) add(key string) *rnode {
	if c := n.child(key); c != nil {
		return c
	}
	c := &rnode{}
	if key == "" {
		n.wild = c
		return c
	}
	n.children = append(n.children, redge{key, c})
	return c
}

// Pattern is a ServeMux pattern taken apart: "[METHOD ][HOST]/[PATH]".
type Pattern struct {
	Method, Host string
	Segments     []Segment
}

// Segment is one segment of a pattern's path: a literal (unescaped), a
// wildcard {Name}, a multi wildcard {Name...} (Multi; Name "" for a trailing
// slash), or the end anchor {$} (a literal "/").
type Segment struct {
	Name  string // the literal, or the wildcard's name
	Wild  bool
	Multi bool
}

// ErrPattern is wrapped by the errors of ParsePattern and NewRouter.
var ErrPattern = errors.New("limithttp: invalid route pattern")

// ParsePattern takes a ServeMux pattern apart as net/http does. It checks
// the pattern with an http.ServeMux, so that it accepts exactly what
// ServeMux.Handle accepts.
func ParsePattern(s string) (Pattern, error) {
	if msg := register(http.NewServeMux(), s); msg != "" {
		return Pattern{}, fmt.Errorf("%w %q: %s", ErrPattern, s, msg)
	}
	var p Pattern
	rest := s
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		p.Method, rest = s[:i], strings.TrimLeft(s[i+1:], " \t")
	}
	i := strings.IndexByte(rest, '/')
	p.Host, rest = rest[:i], rest[i:]
	for len(rest) > 0 {
		rest = rest[1:]
		if rest == "" { // a trailing slash: the rest of the path
			p.Segments = append(p.Segments, Segment{Wild: true, Multi: true})
			break
		}
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			j = len(rest)
		}
		var seg string
		seg, rest = rest[:j], rest[j:]
		if !strings.HasPrefix(seg, "{") {
			p.Segments = append(p.Segments, Segment{Name: pathUnescape(seg)})
			continue
		}
		name := seg[1 : len(seg)-1]
		if name == "$" {
			p.Segments = append(p.Segments, Segment{Name: "/"})
			break
		}
		name, multi := strings.CutSuffix(name, "...")
		p.Segments = append(p.Segments, Segment{Name: name, Wild: true, Multi: multi})
	}
	return p, nil
}

// Wildcard is the index of the segment that holds wildcard name, and whether
// it is a multi wildcard (it then holds the rest of the path); -1 when the
// pattern has no such wildcard. PathKeyAt reads its value from a path the
// pattern matched.
func (p Pattern) Wildcard(name string) (index int, multi bool) {
	for i, s := range p.Segments {
		if s.Wild && s.Name == name {
			return i, s.Multi
		}
	}
	return -1, false
}

// register registers pattern on mux and returns ServeMux's reason when it
// refuses it (it panics), or "".
func register(mux *http.ServeMux, pattern string) (msg string) {
	defer func() {
		if e := recover(); e != nil {
			msg = fmt.Sprint(e)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return ""
}

// NewRouter builds a router over patterns; Match reports a pattern by its
// index here. It refuses what http.ServeMux would: a pattern that does not
// parse, or two that conflict.
func NewRouter(patterns ...string) (*Router, error) {
	rt := &Router{routes: make([]route, len(patterns))}
	mux := http.NewServeMux()
	for i, s := range patterns {
		if msg := register(mux, s); msg != "" {
			return nil, fmt.Errorf("%w %q: %s", ErrPattern, s, msg)
		}
		p, err := ParsePattern(s)
		if err != nil {
			return nil, err
		}
		rt.hasHost = rt.hasHost || p.Host != ""
		n := rt.root.add(p.Host).add(p.Method)
		for _, seg := range p.Segments {
			switch {
			case seg.Multi:
				n.multi = &rnode{}
				n = n.multi
			case seg.Wild:
				n = n.add("")
			default:
				n = n.add(seg.Name)
			}
		}
		n.route = i + 1
		last := p.Segments[len(p.Segments)-1]
		rt.routes[i] = route{segs: len(p.Segments), multi: last.Multi}
		if last.Multi || !last.Wild && last.Name == "/" {
			if k := len(p.Segments); k < 64 {
				rt.redirectSegs |= 1 << k
			} else {
				rt.redirectAny = true
			}
		}
		if path, ok := literalPath(s, p); ok && isPlain(path) {
			if rt.literal == nil {
				rt.literal = map[string][]literalRoute{}
			}
			rt.literal[path] = append(rt.literal[path], literalRoute{p.Method, i + 1})
		}
	}
	if rt.hasHost {
		rt.literal = nil // a pattern for the host would be more specific
	}
	return rt, nil
}

// literalPath is the path a pattern matches when its path is all literal
// segments ({$} included) written without %-escapes, as a clean request path
// that matches it spells it; false for any other pattern.
func literalPath(pattern string, p Pattern) (string, bool) {
	if strings.Contains(pattern, "%") {
		return "", false
	}
	path := ""
	for _, seg := range p.Segments {
		switch {
		case seg.Wild:
			return "", false
		case seg.Name == "/": // {$}
			path += "/"
		default:
			path += "/" + seg.Name
		}
	}
	return path, true
}

// isPlain reports whether a request path spelled path is clean and has
// nothing EscapedPath would escape: then a request whose URL.Path is path and
// whose RawPath is empty is matched on path as it is, and Match may look it
// up before it looks at the path.
func isPlain(path string) bool {
	p, clean := plainPath(&url.URL{Path: path})
	return clean && p == path
}

// pick is the most specific of a literal path's patterns for method: its
// own, then (for HEAD) GET's, then the one for any method; 0 for none.
func pick(routes []literalRoute, method string) int {
	get, anyMethod := 0, 0
	for _, r := range routes {
		switch r.method {
		case method:
			return r.route
		case "GET":
			get = r.route
		case "":
			anyMethod = r.route
		}
	}
	if method == "HEAD" && get != 0 {
		return get
	}
	return anyMethod
}

// LiteralPath is a path that patterns spell literally, as a clean request
// path that matches it spells it, and the route each method takes on it
// (LiteralRoutes).
type LiteralPath struct {
	Path string
	// Methods are the methods the path's patterns name, each with its
	// route; HEAD takes GET's route when no pattern names HEAD, and is
	// listed with it.
	Methods []LiteralMethod
	// Any is the index+1 of the path's pattern for any method, 0 for none:
	// the route of every method not in Methods.
	Any int
}

// LiteralMethod is a method's route on a LiteralPath.
type LiteralMethod struct {
	Method string
	Route  int // the index+1 of its pattern
}

// LiteralRoutes returns, sorted by path, the paths of patterns whose whole
// path is literal and the route each method takes on them: the switch a
// generator gives MustRouterFunc. It is empty when a pattern names a host
// (such a pattern is more specific than any path alone).
func LiteralRoutes(patterns ...string) ([]LiteralPath, error) {
	rt, err := NewRouter(patterns...)
	if err != nil {
		return nil, err
	}
	paths := make([]LiteralPath, 0, len(rt.literal))
	for p, routes := range rt.literal {
		lp := LiteralPath{Path: p}
		hasHead := false
		for _, r := range routes {
			hasHead = hasHead || r.method == "HEAD"
		}
		for _, r := range routes {
			switch {
			case r.method == "":
				lp.Any = r.route
			case r.method == "GET" && !hasHead:
				lp.Methods = append(lp.Methods, LiteralMethod{"GET", r.route}, LiteralMethod{"HEAD", r.route})
			default:
				lp.Methods = append(lp.Methods, LiteralMethod{r.method, r.route})
			}
		}
		paths = append(paths, lp)
	}
	slices.SortFunc(paths, func(a, b LiteralPath) int { return strings.Compare(a.Path, b.Path) })
	return paths, nil
}

// MustRouterFunc is MustRouter with route in place of the router's map of
// literal paths: route(method, path) must be the index+1 of the pattern
// LiteralRoutes gives method on path, and 0 for any path not among them. It
// panics when route disagrees with LiteralRoutes on one of its paths.
func MustRouterFunc(route func(method, path string) int, patterns ...string) *Router {
	rt := MustRouter(patterns...)
	if len(rt.literal) == 0 {
		return rt
	}
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "QUERY", "BREW"}
	for _, rs := range rt.literal {
		for _, r := range rs {
			methods = append(methods, r.method)
		}
	}
	for p, rs := range rt.literal {
		for _, m := range methods {
			if m == "" {
				continue
			}
			if got, want := route(m, p), pick(rs, m); got != want {
				panic(fmt.Sprintf("limithttp: the literal-path switch gives %d for %s %q, want %d (regenerate the package)", got, m, p, want))
			}
		}
	}
	rt.direct, rt.literal = route, nil
	return rt
}

// MustRouter is NewRouter for patterns a generator checked: it panics on an
// error.
func MustRouter(patterns ...string) *Router {
	rt, err := NewRouter(patterns...)
	if err != nil {
		panic(err)
	}
	return rt
}

// Match returns the index of the pattern that covers r as http.ServeMux
// dispatches it (-1 for none), and the cleaned path it was matched on:
// PathKeyAt reads the pattern's wildcards from it. It is one of MatchAll's
// readings, and the only one a ServeMux behind the middleware needs.
func (rt *Router) Match(r *http.Request) (index int, cleanPath string) {
	index, cleanPath, _ = rt.matchServeMux(r)
	return index, cleanPath
}

// matchServeMux is Match, and asIs: the route the routing tree gives the
// request's own path without ServeMux's redirects, when that path is the
// clean one Match matched on (a clean, plain path without RawPath); -2 when
// it is not.
func (rt *Router) matchServeMux(r *http.Request) (index int, cleanPath string, asIs int) {
	if r.URL == nil {
		return -1, "", -1
	}
	if u := r.URL; u.RawPath == "" && r.Method != "CONNECT" {
		// A path equal to a literal one is clean (isPlain), and then the
		// literal route for the method is the most specific.
		if i := rt.literalRoute(u.Path, r.Method); i >= 0 {
			return i, u.Path, i
		}
	}
	p, clean := plainPath(r.URL)
	if r.Method == "CONNECT" { // not cleaned; the redirect judged on the URL's host, the match on r.Host
		esc := strings.IndexByte(p, '%') >= 0
		if n := rt.match(r.URL.Host, r.Method, p, false, esc); n == nil || !rt.exact(n, p, false) {
			if i := rt.redirect(r.URL.Host, r.Method, p, esc); i >= 0 {
				return i, p, -2
			}
		}
		return rt.routeOf(rt.match(r.Host, r.Method, p, false, esc)), p, -2
	}
	host := ""
	if rt.hasHost {
		host = stripHostPort(r.Host)
	}
	esc := false // a clean path holds no escapes (plainPath)
	if !clean {
		p = cleanURLPath(p)
		esc = strings.IndexByte(p, '%') >= 0
	}
	asIs = -2
	n := rt.match(host, r.Method, p, false, esc)
	if clean && r.URL.RawPath == "" {
		asIs = rt.routeOf(n)
	}
	if n == nil || !rt.exact(n, p, false) {
		if i := rt.redirect(host, r.Method, p, esc); i >= 0 {
			return i, p, asIs
		}
	}
	return rt.routeOf(n), p, asIs
}

// literalRoute is the index of the most specific pattern for method whose
// path is literally path, or -1.
func (rt *Router) literalRoute(path, method string) int {
	if rt.direct != nil {
		return rt.direct(method, path) - 1
	}
	return pick(rt.literal[path], method) - 1
}

func (rt *Router) routeOf(n *rnode) int {
	if n == nil {
		return -1
	}
	return n.route - 1
}

// redirect is ServeMux's trailing-slash redirect: for a path that has no
// exact match and no trailing slash, the pattern that matches it exactly with
// one (/tree for /tree/), or -1.
func (rt *Router) redirect(host, method, p string, esc bool) int {
	if p == "" || p[len(p)-1] == '/' {
		return -1
	}
	if k := strings.Count(p, "/") + 1; !rt.redirectAny && (k >= 64 || rt.redirectSegs&(1<<k) == 0) {
		return -1 // no pattern of k segments could match p with a slash added
	}
	if n := rt.match(host, method, p, true, esc); n != nil && rt.exact(n, p, true) {
		return n.route - 1
	}
	return -1
}

// exact is net/http's exactMatch: the match of n's pattern on p (followed by
// a slash when slash is set) leaves its multi wildcard, if any, empty.
func (rt *Router) exact(n *rnode, p string, slash bool) bool {
	r := rt.routes[n.route-1]
	if !r.multi {
		return true
	}
	if !slash && p != "" && p[len(p)-1] != '/' {
		return false
	}
	slashes := strings.Count(p, "/")
	if slash {
		slashes++
	}
	return r.segs == slashes
}

// match is the routing tree's: a pattern for the host (when there is one) wins
// over those for any host; the method's patterns (GET's for HEAD) over those
// for any method. slash appends a "/" to p without building the string. esc
// says whether p holds an escape (one look for them, not one a segment).
func (rt *Router) match(host, method, p string, slash, esc bool) *rnode {
	if host != "" {
		if n := matchMethod(rt.root.child(host), method, p, slash, esc); n != nil {
			return n
		}
	}
	return matchMethod(rt.root.child(""), method, p, slash, esc)
}

func matchMethod(n *rnode, method, p string, slash, esc bool) *rnode {
	if n == nil {
		return nil
	}
	if method != "" {
		if l := matchPath(n.child(method), p, slash, esc); l != nil {
			return l
		}
	}
	if method == "HEAD" {
		if l := matchPath(n.child("GET"), p, slash, esc); l != nil {
			return l
		}
	}
	return matchPath(n.child(""), p, slash, esc)
}

// matchPath is net/http's routingNode.matchPath without recording the
// wildcards' values: a literal child first, then a single wildcard (never on
// a trailing slash), then a multi wildcard, which takes the rest.
func matchPath(n *rnode, p string, slash, esc bool) *rnode {
	if n == nil {
		return nil
	}
	if p == "" {
		if !slash {
			if n.route == 0 {
				return nil
			}
			return n
		}
		p, slash = "/", false
	}
	seg, rest := firstSegment(p, esc)
	if l := matchPath(n.child(seg), rest, slash, esc); l != nil {
		return l
	}
	if seg != "/" {
		if l := matchPath(n.wild, rest, slash, esc); l != nil {
			return l
		}
	}
	return n.multi
}

// firstSegment is net/http's: the first segment of p, unescaped ("/" for the
// path "/"), and the rest of p from its next slash. esc says whether p may
// hold escapes at all: when not, no segment is looked at for them.
func firstSegment(p string, esc bool) (seg, rest string) {
	if p == "/" {
		return "/", ""
	}
	p = p[1:]
	i := 0 // a loop: segments are short, shorter than IndexByte's call
	for i < len(p) && p[i] != '/' {
		i++
	}
	if !esc {
		return p[:i], p[i:]
	}
	return pathUnescape(p[:i]), p[i:]
}

// PathKeyAt returns the value of the wildcard at segment index of a path that
// a pattern matched (Match's cleanPath; Pattern.Wildcard gives the index):
// that segment, unescaped, or for a multi wildcard the rest of the path from
// it. False when it is empty or longer than MaxKeyLen, as PathKey.
func PathKeyAt(cleanPath string, index int, multi bool) (string, bool) {
	p := cleanPath
	for range index + 1 {
		i := strings.IndexByte(p, '/')
		if i < 0 {
			return "", false
		}
		p = p[i+1:]
	}
	if !multi {
		if i := strings.IndexByte(p, '/'); i >= 0 {
			p = p[:i]
		}
	}
	v := pathUnescape(p)
	if !wire.KeyOK(v) {
		return "", false
	}
	return v, true
}

// pathUnescape is net/http's: the unescaped segment, or the segment as it is
// when it is badly escaped.
func pathUnescape(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// plainPath is u.EscapedPath(), and whether it is clean (cleanURLPath would
// return it as it is), found in one pass over a path of the bytes a path
// holds unescaped; any other path takes EscapedPath and is cleaned.
func plainPath(u *url.URL) (p string, clean bool) {
	p = u.Path
	if u.RawPath != "" || p == "" || p[0] != '/' {
		return u.EscapedPath(), false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if plainByte[c] || c == '.' {
			continue
		}
		if c != '/' { // escaped by EscapedPath
			return u.EscapedPath(), false
		}
		// "//", "/./", "/../", and "/." or "/.." at the end are not clean.
		if i+1 == len(p) {
			break
		}
		switch p[i+1] {
		case '/':
			return u.EscapedPath(), false
		case '.':
			if j := i + 2; j == len(p) || p[j] == '/' || p[j] == '.' && (j+1 == len(p) || p[j+1] == '/') {
				return u.EscapedPath(), false
			}
		}
	}
	return p, true
}

// plainByte holds the bytes other than '/' and '.' that url.URL.EscapedPath
// leaves as they are: letters, digits, and -_~$&+,:;=@.
var plainByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_~$&+,:;=@", byte(c)) >= 0
	}
	return t
}()

// cleanURLPath is net/http's cleanPath: a path with a leading slash, without
// . and .. elements or repeated slashes, keeping a trailing slash. A path
// that is clean already comes back as it is, without allocating.
func cleanURLPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			np = p
		} else {
			np += "/"
		}
	}
	return np
}

// stripHostPort is net/http's: h without a trailing ":port".
func stripHostPort(h string) string {
	if strings.IndexByte(h, ':') < 0 {
		return h
	}
	host, _, err := net.SplitHostPort(h)
	if err != nil {
		return h
	}
	return host
}

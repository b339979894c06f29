package limithttp

import (
	"net/http"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/clientip"
	"github.com/limitgen/limitgen/verdict"
)

// Door is what every generated Middleware is, whatever its policy: the
// settings a service may change before serving (ClientIP, Clock, Config) and
// the wrapping of handlers (Wrap, NewServeMux) around the policy's routes,
// whose checks the generated code holds. A generated Middleware embeds it.
type Door struct {
	// ClientIP finds the client address that ip key sources read; it starts
	// as the policy's client_ip (set TrustedProxies here when they differ by
	// deployment).
	ClientIP clientip.Config
	// Clock, when set, is read instead of atomicbucket.Now: tests drive the
	// middleware through time with it.
	Clock func() atomicbucket.Time
	// Config is what every route shares: the field style, the jitter, the
	// counters, the observer, and Denied, the response to a denied request
	// when problem+json will not do. Set it before serving.
	Config Config

	router   *Router
	patterns []string
	check    func(w http.ResponseWriter, r *http.Request, route int, path string) bool
	acquire  func(w http.ResponseWriter, r *http.Request, route int, path string) (bool, atomicslot.Set)
	// admit is the check of a policy of settled routes: check's, with what
	// a settlement needs of it (verdict.Mark); settle settles.
	admit  func(w http.ResponseWriter, r *http.Request, route int, path string) (bool, verdict.Mark)
	settle func(w http.ResponseWriter, r *http.Request, route int, path string, mk verdict.Mark) int64
	// fromContext says which routes settle from a cost their handler
	// reports through its context; nil when none does.
	fromContext func(route int) bool
	settled     verdict.SettleCounts
}

// InitDoor makes d the door of a policy's routes: router over patterns (in
// policy order), each request checked by check against the route (an index of
// patterns) whose wildcards it reads from path; check reports whether the
// request may go on. A nil check (every route off) checks nothing. A
// generated NewMiddleware calls it once, before the Middleware is served.
func InitDoor(d *Door, router *Router, patterns []string,
	check func(w http.ResponseWriter, r *http.Request, route int, path string) bool) {
	d.router, d.patterns, d.check = router, patterns, check
}

// InitSlots gives d the acquisitions of its policy's in-flight routes:
// acquire takes the slots of route's in-flight rules (its rule's, or its
// tier's), or answers the request when it cannot (giving back what it took),
// and reports whether the request may go on (true and the zero Set for a
// route of no in-flight rule). The door acquires before any route's check,
// gives every slot back when a check denies, so that a request holds its
// slots only if every route and rule let it on (all or nothing), and
// releases every slot when the handler returns: normally, by a panic, after
// a Hijack, or at the end of a streamed response, whichever way it returns.
// A generated NewMiddleware calls it once, after InitDoor, when its policy
// routes to in-flight rules.
func InitSlots(d *Door, acquire func(w http.ResponseWriter, r *http.Request, route int, path string) (bool, atomicslot.Set)) {
	d.acquire = acquire
}

// Now reads the clock once for a check: Clock, or atomicbucket.Now.
func (d *Door) Now() atomicbucket.Time {
	if d.Clock != nil {
		return d.Clock()
	}
	return atomicbucket.Now()
}

// Wrap returns next behind the limits of every policy route a router may
// hand each request to (Router.MatchAll), however the router behind it reads
// the request's path: wrap a whole router, or each handler. The request goes
// on when all of them allow it.
func (d *Door) Wrap(next http.Handler) http.Handler {
	switch {
	case d.acquire != nil:
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.serveHeld(w, r, next, d.router.MatchAll(r)) })
	case d.settle != nil:
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.serveSettled(w, r, next, d.router.MatchAll(r)) })
	case d.check == nil:
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		routes := d.router.MatchAll(r)
		for i := range routes.N {
			if !d.check(w, r, routes.Index[i], routes.Path[i]) {
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// serveHeld serves r with next when every one of routes lets it on: first
// each route's acquisitions (the slots of its in-flight rules, if any), then
// each route's check, every slot taken given back when an acquisition or a
// check denies: a request holds slots only when it goes on, and a rate rule
// is charged only when every slot was had. When next returns normally, each
// route that settles its cost settles it; the slots are released when next
// returns, whichever way it does.
func (d *Door) serveHeld(w http.ResponseWriter, r *http.Request, next http.Handler, routes Routes) {
	var held [len(routes.Index)]atomicslot.Set
	n := 0
	if d.acquire != nil {
		for i := range routes.N {
			ok, s := d.acquire(w, r, routes.Index[i], routes.Path[i])
			if !ok {
				d.release(held[:n])
				return
			}
			if s.Len() > 0 {
				held[n], n = s, n+1
			}
		}
	}
	var marks routeMarks
	if !d.checkAll(w, r, &routes, &marks) {
		d.release(held[:n])
		return
	}
	if n > 0 {
		defer d.release(held[:n])
	}
	r = d.withCostCell(r, &routes)
	next.ServeHTTP(w, r)
	if d.settle != nil {
		d.settleAll(w, r, &routes, &marks)
	}
}

// routeMarks are the marks of a request's checks (verdict.Mark), one per
// entry of its Routes.
type routeMarks [len(Routes{}.Index)]verdict.Mark

// checkAll checks r against each of routes, and reports whether every one
// lets it on; with settled routes, each check's mark is kept in marks for
// its settlement.
func (d *Door) checkAll(w http.ResponseWriter, r *http.Request, routes *Routes, marks *routeMarks) bool {
	for i := range routes.N {
		ok := true
		switch {
		case d.admit != nil:
			ok, marks[i] = d.admit(w, r, routes.Index[i], routes.Path[i])
		case d.check != nil:
			ok = d.check(w, r, routes.Index[i], routes.Path[i])
		}
		if !ok {
			return false
		}
	}
	return true
}

// serveSettled is serveHeld for a policy of settled routes and no in-flight
// rules: every route's check, then next, then each settled route's
// settlement when next returns normally (no slots to carry).
func (d *Door) serveSettled(w http.ResponseWriter, r *http.Request, next http.Handler, routes Routes) {
	var marks routeMarks
	if !d.checkAll(w, r, &routes, &marks) {
		return
	}
	r = d.withCostCell(r, &routes)
	next.ServeHTTP(w, r)
	d.settleAll(w, r, &routes, &marks)
}

// withCostCell is r with a cell for verdict.ReportCost in its context when
// one of routes settles from it; r itself otherwise.
func (d *Door) withCostCell(r *http.Request, routes *Routes) *http.Request {
	if d.fromContext == nil {
		return r
	}
	for i := range routes.N {
		if d.fromContext(routes.Index[i]) {
			return r.WithContext(verdict.WithCostCell(r.Context()))
		}
	}
	return r
}

// release returns the slots a request held, at one reading of the door's
// clock, the last taken first.
func (d *Door) release(held []atomicslot.Set) {
	if len(held) == 0 {
		return
	}
	now := d.Now()
	for i := len(held) - 1; i >= 0; i-- {
		held[i].ReleaseAt(now)
	}
}

// wrapServeMux is Wrap for the ServeMux of NewServeMux: ServeMux's reading of
// a path is the only one it dispatches (Router.Match).
func (d *Door) wrapServeMux(next http.Handler) http.Handler {
	switch {
	case d.acquire != nil:
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var routes Routes
			routes.add(d.router.Match(r))
			d.serveHeld(w, r, next, routes)
		})
	case d.settle != nil:
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var routes Routes
			routes.add(d.router.Match(r))
			d.serveSettled(w, r, next, routes)
		})
	case d.check == nil:
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if route, path := d.router.Match(r); d.check(w, r, route, path) {
			next.ServeHTTP(w, r)
		}
	})
}

// NewServeMux returns an empty ServeMux behind the door: every request it
// serves is checked first, those its handlers answer and those it answers
// itself alike; Uncovered lists the registered patterns no policy route
// covers (served unlimited).
func (d *Door) NewServeMux() *ServeMux { return newServeMux(d.wrapServeMux, d.router, d.patterns) }

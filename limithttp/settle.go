package limithttp

import (
	"net/http"
	"strings"

	"github.com/limitgen/limitgen/verdict"
)

// Settled costs: a route whose cost is settled after the response (the
// policy's settle:) is checked at an estimate, and when its handler returns
// the door reads the actual cost from the response's header map, where the
// handler set it as a header or a trailer, and settles the difference with
// each rule the route charged: given back when lower, owed as debt when
// higher (atomicbucket.Table.SettleAt).

// InitSettle gives d the settlements of its policy's settled routes: admit
// is the check of every route (check's, for a route that does not settle),
// returning with its answer what the route's settlement needs of the check
// (the time its local rules read, what a store's window counted); settle
// settles a request of route (reading its keys' wildcards from path) whose
// handler has returned, with the mark its check returned, reading the
// actual cost from w's header map, and returns the tokens forgiven,
// verdict.KeptEstimate, verdict.SettleFailed (a shared rule's store could
// not settle), or verdict.NoSettle for a route that does not settle. The
// door calls it for each route a request went through, after the handler
// returns normally (not by a panic). A generated NewMiddleware calls it
// once, after InitDoor, when its policy settles costs. A nil admit leaves
// the door's checks to InitDoor's check, and every mark zero: a window's
// settlement then gives nothing back (it keeps the estimate).
//
// fromContext, when not nil, says which routes' handlers report their cost
// through their request's context (verdict.ReportCost): a request to one of
// them reaches its handler with a context that holds a cell for it
// (verdict.WithCostCell; a request's context and a copy of the request, a
// few allocations those routes only pay).
func InitSettle(d *Door, admit func(w http.ResponseWriter, r *http.Request, route int, path string) (bool, verdict.Mark),
	settle func(w http.ResponseWriter, r *http.Request, route int, path string, mk verdict.Mark) int64, fromContext func(route int) bool) {
	d.admit, d.settle, d.fromContext = admit, settle, fromContext
}

// SettleStats returns the door's settlement counts.
func (d *Door) SettleStats() verdict.SettleStats { return d.settled.Stats() }

// settleAll settles r on each of routes that settles, with its check's
// mark.
func (d *Door) settleAll(w http.ResponseWriter, r *http.Request, routes *Routes, marks *routeMarks) {
	for i := range routes.N {
		d.settled.Add(d.settle(w, r, routes.Index[i], routes.Path[i], marks[i]))
	}
}

// ActualCost reads a settled request's actual cost from the response header
// map h after its handler returned: the first value of the header name
// (canonical), or of the trailer name (set as a declared trailer, or under
// http.TrailerPrefix), by verdict.ParseActual. ok is false when there is no
// value or it is malformed: the request keeps its estimate.
func ActualCost(h http.Header, name string) (cost int64, ok bool) {
	v, found := h[name]
	if !found {
		v, found = h[http.TrailerPrefix+name]
	}
	if !found {
		for k, vs := range h { // a trailer whose name the handler did not write canonically
			if len(k) > len(http.TrailerPrefix) && strings.HasPrefix(k, http.TrailerPrefix) && strings.EqualFold(k[len(http.TrailerPrefix):], name) {
				v, found = vs, true
				break
			}
		}
	}
	if !found || len(v) == 0 {
		return 0, false
	}
	return verdict.ParseActual(v[0])
}

package limithttp

import (
	"net/http"
	"strings"
	"sync/atomic"
)

// Settled costs: a route whose cost is settled after the response (the
// policy's settle:) is checked at an estimate, and when its handler returns
// the door reads the actual cost from the response's header map, where the
// handler set it as a header or a trailer, and settles the difference with
// each rule the route charged: given back when lower, owed as debt when
// higher (atomicbucket.Table.SettleAt).

// What a generated settle function returns instead of the tokens forgiven.
const (
	// NoSettle: the route does not settle its cost.
	NoSettle int64 = -2
	// KeptEstimate: the route settles, but this request has no readable
	// actual cost (or no key when the handler returned): it keeps the
	// estimate it was admitted at.
	KeptEstimate int64 = -1
	// SettleFailed: a shared rule's store could not settle (it could not be
	// reached in the request's context): that rule's bucket keeps the
	// estimate, as a request that never settles does.
	SettleFailed int64 = -3
)

// SettleStats counts a door's settlements since it was made.
type SettleStats struct {
	// Settled is the requests whose actual cost was read and settled.
	Settled uint64
	// Kept is the requests of settled routes that kept their estimate: no
	// readable actual cost when the handler returned. A handler that
	// panicked settles nothing and is not counted.
	Kept uint64
	// Failed is the requests a shared rule's store could not settle: its
	// bucket keeps the estimate (a debt it should owe is not charged).
	Failed uint64
	// Forgiven is the tokens of excess beyond the rules' debt bounds
	// (atomicbucket.Rule.MaxDebt), not charged.
	Forgiven uint64
}

type settleCounts struct{ settled, kept, failed, forgiven atomic.Uint64 }

// InitSettle gives d the settlements of its policy's settled routes: settle
// settles a request of route (reading its keys' wildcards from path) whose
// handler has returned, reading the actual cost from w's header map, and
// returns the tokens forgiven, KeptEstimate, SettleFailed (a shared rule's
// store could not settle), or NoSettle for a route that does not settle. The door calls it for each route a request went through,
// after the handler returns normally (not by a panic). A generated
// NewMiddleware calls it once, after InitDoor, when its policy settles costs.
func InitSettle(d *Door, settle func(w http.ResponseWriter, r *http.Request, route int, path string) int64) {
	d.settle = settle
}

// SettleStats returns the door's settlement counts.
func (d *Door) SettleStats() SettleStats {
	return SettleStats{Settled: d.settled.settled.Load(), Kept: d.settled.kept.Load(), Failed: d.settled.failed.Load(), Forgiven: d.settled.forgiven.Load()}
}

// settleAll settles r on each of routes that settles.
func (d *Door) settleAll(w http.ResponseWriter, r *http.Request, routes *Routes) {
	for i := range routes.N {
		switch f := d.settle(w, r, routes.Index[i], routes.Path[i]); {
		case f == KeptEstimate:
			d.settled.kept.Add(1)
		case f == SettleFailed:
			d.settled.failed.Add(1)
		case f >= 0:
			d.settled.settled.Add(1)
			if f > 0 {
				d.settled.forgiven.Add(uint64(f))
			}
		}
	}
}

// ActualCost reads a settled request's actual cost from the response header
// map h after its handler returned: the first value of the header name
// (canonical), or of the trailer name (set as a declared trailer, or under
// http.TrailerPrefix). The value is ASCII decimal digits, 0 included (a
// request that used nothing gives its whole estimate back); more than 18
// significant digits read as the largest cost, which settles as the most
// debt the rules may hold. ok is false when there is no value or it is
// malformed: the request keeps its estimate.
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
	return parseActual(v[0])
}

// parseActual reads ASCII decimal digits (no sign, no spaces).
func parseActual(v string) (int64, bool) {
	if v == "" {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	v = strings.TrimLeft(v, "0")
	if len(v) > 18 {
		return 1<<63 - 1, true
	}
	var n int64
	for i := 0; i < len(v); i++ {
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}

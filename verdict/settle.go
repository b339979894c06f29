package verdict

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Settled costs at a door: a route (an entry) whose cost is settled after
// the response is checked at an estimate, and when its handler returns the
// door reads the actual cost (an HTTP response header or trailer, gRPC
// trailer metadata) with ParseActual and settles the difference with each
// rule the request was charged by (atomicbucket.Table.SettleAt, or a shared
// rule's store). A generated settlement answers the tokens forgiven, or one
// of these.
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

// Mark is what a settled request's check leaves for its settlement, the
// door keeping it from one to the other: the time its local rules read, and
// where each of its shared window rules' stores counted it (a window gives
// back from the units it counted then). The zero Mark is a check's that
// read nothing and counted nothing on a store.
type Mark struct {
	At atomicbucket.Time
	// Windows are the route's shared window rules' marks, in the order of
	// its rules (a generated package refuses a settled route of more); nil
	// for a route of none. A Mark is copied from check to settlement for
	// every request of a settled policy: the marks of the few routes that
	// have them are behind a pointer (one allocation a request of a shared
	// window, beside its store call), so that the others copy two words.
	Windows *[MaxWindowMarks]WindowMark
}

// Window is the i-th shared window's mark of m: none when m has no marks.
func (m Mark) Window(i int) WindowMark {
	if m.Windows == nil {
		return WindowMark{}
	}
	return m.Windows[i]
}

// MaxWindowMarks is how many shared window rules a settled route (or its
// tier) may have: a Mark holds one WindowMark for each.
const MaxWindowMarks = 4

// WindowMark is where a shared window's store counted an admission, for its
// settlement to give back from: the store's slot (its microsecond, or its
// sub-window; a lease's grant: the grant's) and the generation of the key's
// slots then. The zero WindowMark is none: nothing was counted on the store
// (a failure setting decided, the store had no key's window to count in).
type WindowMark struct{ Slot, Gen int64 }

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

// SettleCounts are a door's settlement counts, safe for concurrent use;
// the zero value counts from nothing.
type SettleCounts struct{ settled, kept, failed, forgiven atomic.Uint64 }

// Add counts one request's settlement, as a generated settlement answers
// it (the tokens forgiven, KeptEstimate or SettleFailed; NoSettle counts
// nothing).
func (c *SettleCounts) Add(answer int64) {
	switch {
	case answer == KeptEstimate:
		c.kept.Add(1)
	case answer == SettleFailed:
		c.failed.Add(1)
	case answer >= 0:
		c.settled.Add(1)
		if answer > 0 {
			c.forgiven.Add(uint64(answer))
		}
	}
}

// Stats returns the counts.
func (c *SettleCounts) Stats() SettleStats {
	return SettleStats{Settled: c.settled.Load(), Kept: c.kept.Load(), Failed: c.failed.Load(), Forgiven: c.forgiven.Load()}
}

// ParseActual reads a settled request's actual cost: ASCII decimal digits
// (no sign, no spaces), 0 included (a request that used nothing gives its
// whole estimate back); more than 18 significant digits read as the largest
// cost, which settles as the most debt the rules may hold. ok is false for
// an empty or malformed value: the request keeps its estimate.
func ParseActual(v string) (cost int64, ok bool) {
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

// An actual cost reported from a handler's context: a route (an entry)
// that settles "from: context" gives its handler a context holding a cell
// that ReportCost fills; the door reads it when the handler returns
// (ReportedCost).

type costCellKey struct{}

// costCell holds a reported actual cost; set is 0 until one is reported.
type costCell struct {
	cost atomic.Int64
	set  atomic.Bool
}

// WithCostCell returns ctx with a cell for ReportCost, for a door to give
// the handler of a request that settles from its context.
func WithCostCell(ctx context.Context) context.Context {
	return context.WithValue(ctx, costCellKey{}, &costCell{})
}

// ReportCost reports a request's actual cost from its handler, through the
// request's context (an http.Request's Context(), a gRPC handler's ctx):
// the door settles the request at it when the handler returns. It reports
// false when the request's route does not settle from its context (the
// cost is then not recorded), or the cost is negative. A second report
// replaces the first; one made after the handler returned is not read.
func ReportCost(ctx context.Context, cost int64) bool {
	c, ok := ctx.Value(costCellKey{}).(*costCell)
	if !ok || cost < 0 {
		return false
	}
	c.cost.Store(cost)
	c.set.Store(true)
	return true
}

// ReportedCost is the cost reported with ReportCost on ctx (a context from
// WithCostCell), and whether one was.
func ReportedCost(ctx context.Context) (int64, bool) {
	c, ok := ctx.Value(costCellKey{}).(*costCell)
	if !ok || !c.set.Load() {
		return 0, false
	}
	return c.cost.Load(), true
}

// Package tier decides one request against several rules at once, all or
// nothing: a request a tier denies takes nothing from any of its rules. A
// rule's part in a request is a Step (Table, Bucket, WindowTable and Window
// make them from atomicbucket's and atomicwindow's types; a reference model
// or a store's fallback can be one too); At decides the steps. Generated
// packages unroll the same logic for each tier of their policy, with typed
// calls.
package tier

import (
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
)

// Step is one rule of a tier for one request, with its key and cost
// chosen: AllowNAt takes the cost if the rule allows it, RefundAt gives it back.
// Table, Bucket, WindowTable and Window make them; anything with the same two methods
// (a reference model, a store) can stand in a tier too.
type Step interface {
	AllowNAt(now atomicbucket.Time) atomicbucket.Decision
	RefundAt(now atomicbucket.Time)
}

// At checks a request against the steps, all or nothing: when a step
// denies, what the steps before it took is given back (last first) and At
// returns that step's decision and index with denied set. When every step
// allows, it returns the decision of the most constraining one (the fewest
// tokens remaining; the first on a tie), which is what rate-limit headers
// should show, and its index. With no steps it allows, reporting index −1.
//
// Steps that cannot give back (Look: windows) are looked at first, in
// order, and a look that denies ends the request with nothing taken; the
// other steps then take in order, and the looked-at ones last. Checked by one
// goroutine at a time, a request is all or nothing; one that loses a race on a
// window between the look and the take is denied with what that window's
// earlier fellows took kept (never more admitted than the policy).
//
// It is the tier logic of every dynamic caller (gen simulate, the tests'
// reference composition). Generated packages unroll the same logic for each
// tier, with typed calls and no interface (their checkTIER functions): keep
// the two in step.
func At(now atomicbucket.Time, steps ...Step) (d atomicbucket.Decision, index int, denied bool) {
	index = -1
	d.Allowed = true
	looks := false
	for i, s := range steps {
		if l, ok := s.(Look); ok {
			looks = true
			if di := l.PeekAt(now); !di.Allowed {
				return di, i, true
			}
		}
	}
	// Pass 0 takes from the steps that can give back, pass 1 from the
	// looked-at ones; a denial gives back what was taken, last first.
	for pass := range 2 {
		if pass == 1 && !looks {
			break
		}
		for i, s := range steps {
			if _, look := s.(Look); look != (pass == 1) {
				continue
			}
			di := s.AllowNAt(now)
			if !di.Allowed {
				if pass == 1 {
					for j := i - 1; j >= 0; j-- {
						if _, look := steps[j].(Look); look {
							steps[j].RefundAt(now)
						}
					}
				}
				for j := len(steps) - 1; j >= 0; j-- {
					if _, look := steps[j].(Look); !look && (pass == 1 || j < i) {
						steps[j].RefundAt(now)
					}
				}
				return di, i, true
			}
			if index < 0 || di.Remaining < d.Remaining || di.Remaining == d.Remaining && i < index {
				d, index = di, i
			}
		}
	}
	return d, index, false
}

// Look is a Step that cannot give back what it takes (a window's
// step): At looks at every such step before it takes anything, and takes
// from them last, so that a request it denies has taken nothing from them.
// Their RefundAt does nothing.
type Look interface {
	Step
	PeekAt(now atomicbucket.Time) atomicbucket.Decision
}

// Table is key's part in a request of cost against a table of buckets.
func Table[K comparable](t *atomicbucket.Table[K], key K, cost int64) Step {
	return tableStep[K]{t, key, cost}
}

// Bucket is a bucket's part in a request of cost.
func Bucket(b *atomicbucket.Bucket, cost int64) Step { return bucketStep{b, cost} }

// WindowTable is key's part in a request of cost against a table of windows:
// a Look.
func WindowTable[K comparable](t *atomicwindow.Table[K], key K, cost int64) Step {
	return windowTableStep[K]{t, key, cost}
}

// Window is a window's part in a request of cost: a Look.
func Window(w *atomicwindow.Window, cost int64) Step { return windowStep{w, cost} }

type tableStep[K comparable] struct {
	t    *atomicbucket.Table[K]
	key  K
	cost int64
}

func (s tableStep[K]) AllowNAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.t.AllowNAt(s.key, now, s.cost)
}
func (s tableStep[K]) RefundAt(now atomicbucket.Time) { s.t.RefundAt(s.key, now, s.cost) }

type bucketStep struct {
	b    *atomicbucket.Bucket
	cost int64
}

func (s bucketStep) AllowNAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.b.AllowNAt(now, s.cost)
}
func (s bucketStep) RefundAt(now atomicbucket.Time) { s.b.RefundAt(now, s.cost) }

type windowTableStep[K comparable] struct {
	t    *atomicwindow.Table[K]
	key  K
	cost int64
}

func (s windowTableStep[K]) AllowNAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.t.AllowNAt(s.key, now, s.cost)
}
func (s windowTableStep[K]) PeekAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.t.PeekAt(s.key, now, s.cost)
}
func (s windowTableStep[K]) RefundAt(atomicbucket.Time) {}

type windowStep struct {
	w    *atomicwindow.Window
	cost int64
}

func (s windowStep) AllowNAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.w.AllowNAt(now, s.cost)
}
func (s windowStep) PeekAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.w.PeekAt(now, s.cost)
}
func (s windowStep) RefundAt(atomicbucket.Time) {}

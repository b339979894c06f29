package atomicbucket

// TierStep is one rule of a tier for one request, with its key and cost
// chosen: AllowNAt takes the cost if the rule allows it, RefundAt gives it back.
// Table.Step and Bucket.Step make them; anything with the same two methods
// (a reference model, a store) can stand in a tier too.
type TierStep interface {
	AllowNAt(now Time) Decision
	RefundAt(now Time)
}

// TierAt checks a request against the steps, all or nothing: when a step
// denies, what the steps before it took is given back (last first) and TierAt
// returns that step's decision and index with denied set. When every step
// allows, it returns the decision of the most constraining one (the fewest
// tokens remaining; the first on a tie), which is what rate-limit headers
// should show, and its index. With no steps it allows, reporting index −1.
//
// Steps that cannot give back (TierLook: windows) are looked at first, in
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
func TierAt(now Time, steps ...TierStep) (d Decision, index int, denied bool) {
	index = -1
	d.Allowed = true
	looks := false
	for i, s := range steps {
		if l, ok := s.(TierLook); ok {
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
			if _, look := s.(TierLook); look != (pass == 1) {
				continue
			}
			di := s.AllowNAt(now)
			if !di.Allowed {
				if pass == 1 {
					for j := i - 1; j >= 0; j-- {
						if _, look := steps[j].(TierLook); look {
							steps[j].RefundAt(now)
						}
					}
				}
				for j := len(steps) - 1; j >= 0; j-- {
					if _, look := steps[j].(TierLook); !look && (pass == 1 || j < i) {
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

// Step is key's part in a tier request of the given cost (see TierAt).
func (t *Table[K]) Step(key K, cost int64) TierStep { return tableStep[K]{t, key, cost} }

// Step is the bucket's part in a tier request of the given cost (see TierAt).
func (b *Bucket) Step(cost int64) TierStep { return bucketStep{b, cost} }

type tableStep[K comparable] struct {
	t    *Table[K]
	key  K
	cost int64
}

func (s tableStep[K]) AllowNAt(now Time) Decision { return s.t.AllowNAt(s.key, now, s.cost) }
func (s tableStep[K]) RefundAt(now Time)          { s.t.RefundAt(s.key, now, s.cost) }

type bucketStep struct {
	b    *Bucket
	cost int64
}

func (s bucketStep) AllowNAt(now Time) Decision { return s.b.AllowNAt(now, s.cost) }
func (s bucketStep) RefundAt(now Time)          { s.b.RefundAt(now, s.cost) }

// TierLook is a TierStep that cannot give back what it takes (a window's
// step): TierAt looks at every such step before it takes anything, and takes
// from them last, so that a request it denies has taken nothing from them.
// Their RefundAt does nothing.
type TierLook interface {
	TierStep
	PeekAt(now Time) Decision
}

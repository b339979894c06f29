package atomicbucket

// FOR GENERATED CODE ONLY. Units and the AllowGreedyAt methods are
// the runtime's side of generated packages, in the manner of protobuf's
// protoimpl: they are exported only because generated code lives in other
// packages, are not meant to be called by hand, and may change in any release
// (genimpl.APIVersion5 guards them). The generator computes a greedy rule's
// fixed-point units when it generates, emits them as constants, and passes
// them to these functions, which inline (the Bucket one) so that the compiler
// folds the constants into the check.

// Units is for generated code only (see above). It returns a greedy rule's fixed-point numbers: units per nanosecond, the
// units one token is worth, and the units the TAT may run ahead of now
// (Burst·emit). ok is false for interval rules, which have no such constants.
func (r *Rule) Units() (scale, emit, tau int64, ok bool) {
	return r.scale, r.emit, r.tau, r.mode == modeGreedy
}

// AllowGreedyAt is for generated code only (see above): AllowAt (any cost: inc
// is cost·emit) for a greedy rule whose units are passed as constants; they
// must be the bucket's rule's (genimpl.MustUnits). It is called, not inlined: the
// admission's time it records (see) takes it past the inliner's budget.
// word is the bucket's word after the call; it is negative once the
// bucket's numbers have changed (SetNumbersAt): its own word is then dead for
// good, nothing was decided, and the caller asks AllowAt, which judges by the
// numbers in force.
//
// Keep in step with Bucket.AllowAt.
func (b *Bucket) AllowGreedyAt(now Time, scale, inc, tau int64) (word int64, ok bool) {
	n := clampNow(now)
	nowU := n * scale
	for {
		// advance, for inc > 0 (a policy's cost is at least 1), in the
		// inliner's budget
		old := b.tat.Load()
		tat := max(old, nowU) + inc
		if old < 0 || tat-nowU > tau {
			return old, false
		}
		see(&b.seen, n)
		if b.tat.CompareAndSwap(old, tat) {
			return tat, true
		}
	}
}

// AllowGreedyAt is for generated code only (see above): AllowAt (any cost: inc
// is cost·emit) for a greedy rule whose units are passed as constants; they
// must be the table's rule's (genimpl.MustUnits).
//
// Keep in step with Table.AllowAt, whose loop this is with the units as arguments.
func (t *Table[K]) AllowGreedyAt(key K, now Time, scale, inc, tau int64) bool {
	n := clampNow(now)
	for {
		if ov := t.ov.Load(); ov != nil {
			return t.allowOver(ov, key, n, inc/t.rule.emit)
		}
		s := t.m.load(key)
		if s == nil {
			if s, _ = t.create(key, n); s == nil {
				return t.allowAtCap && t.rule.debt+inc <= tau
			}
		}
		if t.m.hasNums(s) {
			continue // written in other numbers: the table's have changed since ov was loaded
		}
		nowU := n * scale
		tat, ok := advance(&s.tat, &s.seen, n, nowU, inc, nowU+tau)
		if tat >= 0 {
			return ok
		}
		retry()
	}
}

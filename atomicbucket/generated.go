package atomicbucket

import "fmt"

// GeneratedAPIVersion4 is referenced by every package limitgen generates
// (`const _ = atomicbucket.GeneratedAPIVersion4`). A runtime that changes what
// generated code relies on renames it, so that an out-of-date generated package
// fails to build instead of misbehaving. (Version 2: times are Time. Version
// 3: numbers change at run time; Bucket.AllowGreedyAt says whether it decided.
// Version 4: a keyed rule's limiter embeds Keyed, overlay.KeyedTarget and
// overlay.Numbers serve it, limithttp.MustRouterFunc and ServeMux the
// middleware.)
const GeneratedAPIVersion4 = true

// FOR GENERATED CODE ONLY. Units, MustUnits and the AllowGreedyAt methods are
// the runtime's side of generated packages, in the manner of protobuf's
// protoimpl: they are exported only because generated code lives in other
// packages, are not meant to be called by hand, and may change in any release
// (GeneratedAPIVersion4 guards them). The generator computes a greedy rule's
// fixed-point units when it generates, emits them as constants, and passes
// them to these functions, which inline (the Bucket one) so that the compiler
// folds the constants into the check.

// Units is for generated code only (see above). It returns a greedy rule's fixed-point numbers: units per nanosecond, the
// units one token is worth, and the units the TAT may run ahead of now
// (Burst·emit). ok is false for interval rules, which have no such constants.
func (r *Rule) Units() (scale, emit, tau int64, ok bool) {
	return r.scale, r.emit, r.tau, r.mode == modeGreedy
}

// MustUnits is for generated code only (see above). It returns r after checking that its units are the given ones: the
// generated constants and this runtime agree. It panics otherwise, when the
// package initialises — a generator and a runtime that disagree, which
// GeneratedAPIVersion4 exists to stop at build time.
func MustUnits(r Rule, scale, emit, tau int64) Rule {
	if s, e, t, ok := r.Units(); !ok || s != scale || e != emit || t != tau {
		panic(fmt.Sprintf("atomicbucket: generated units (%d, %d, %d) are not this runtime's for %v (%d, %d, %d, greedy=%v): regenerate",
			scale, emit, tau, r.String(), s, e, t, ok))
	}
	return r
}

// AllowGreedyAt is for generated code only (see above): AllowAt (any cost: inc
// is cost·emit) for a greedy rule whose units are passed as constants; they
// must be the bucket's rule's (MustUnits). It is called, not inlined: the
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
// must be the table's rule's (MustUnits).
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
				return t.atCap == AllowAtCap && t.rule.debt+inc <= tau
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

package atomicbucket

import "fmt"

// GeneratedAPIVersion2 is referenced by every package limitgen generates
// (`const _ = atomicbucket.GeneratedAPIVersion2`). A runtime that changes what
// generated code relies on renames it, so that an out-of-date generated package
// fails to build instead of misbehaving. (Version 2: times are Time.)
const GeneratedAPIVersion2 = true

// FOR GENERATED CODE ONLY. Units, MustUnits and the AllowGreedyAt methods are
// the runtime's side of generated packages, in the manner of protobuf's
// protoimpl: they are exported only because generated code lives in other
// packages, are not meant to be called by hand, and may change in any release
// (GeneratedAPIVersion2 guards them). The generator computes a greedy rule's
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
// GeneratedAPIVersion2 exists to stop at build time.
func MustUnits(r Rule, scale, emit, tau int64) Rule {
	if s, e, t, ok := r.Units(); !ok || s != scale || e != emit || t != tau {
		panic(fmt.Sprintf("atomicbucket: generated units (%d, %d, %d) are not this runtime's for %v (%d, %d, %d, greedy=%v): regenerate",
			scale, emit, tau, r.String(), s, e, t, ok))
	}
	return r
}

// AllowGreedyAt is for generated code only (see above): AllowAt (any cost: inc
// is cost·emit) for a greedy rule whose units are passed as constants; they
// must be the bucket's rule's (MustUnits). It inlines into generated code.
//
// Keep in step with Bucket.AllowAt.
func (b *Bucket) AllowGreedyAt(now Time, scale, inc, tau int64) bool {
	nowU := clampNow(now) * scale
	_, ok := advance(&b.tat, nowU, inc, nowU+tau)
	return ok
}

// AllowGreedyAt is for generated code only (see above): AllowAt (any cost: inc
// is cost·emit) for a greedy rule whose units are passed as constants; they
// must be the table's rule's (MustUnits).
//
// Keep in step with Table.AllowAt, whose loop this is with the units as arguments.
func (t *Table[K]) AllowGreedyAt(key K, now Time, scale, inc, tau int64) bool {
	n := clampNow(now)
	for {
		s, ok := t.m.Load(key)
		if !ok {
			if s, _ = t.create(key, n); s == nil {
				return t.atCap == AllowAtCap && t.rule.debt+inc <= tau
			}
		}
		nowU := n * scale
		tat, ok := advance(&s.tat, nowU, inc, nowU+tau)
		if tat >= 0 {
			return ok
		}
		retry()
	}
}

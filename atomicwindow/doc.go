// Package atomicwindow is limitgen's runtime for strict sliding windows: at
// most Limit cost units in any interval of length Window, with no burst on top.
// It sits beside atomicbucket (token buckets), shares its clock (atomicbucket.Time,
// read once per check) and its table options, and knows nothing of YAML or HTTP.
//
// The types a user meets:
//
//   - Rule, from NewRule or MustRule: a limit and a window, checked.
//   - Window: one window for the whole process (a global limit).
//   - Table: a window per key, in a concurrent map (xsync), created on a key's
//     first admission and reclaimed once empty; TableOptions caps the keys.
//   - Keyed and Global: a generated limiter's window, as it embeds them (a
//     request's default cost, numbers changed at run time).
//   - atomicbucket.Decision: what every check returns.
//
// A window rule admits at most Limit cost units in any interval of length
// Window, sliding: what a request finds in the window is what was admitted in
// (now − Window, now]. Its state, per key, is a few words updated by
// compare-and-swap, in one of two forms chosen by the limit:
//
//   - exact (Limit ≤ RingMax): a ring of Limit admission times, one per
//     unit, kept to the microsecond, and a head word holding how many units
//     were ever admitted and the newest time. A request of cost c is admitted
//     when the unit admitted Limit − c + 1 units before the newest has left
//     the window: units are admitted in time order, so every older one has
//     left too. 8 + 8·Limit bytes a key.
//   - counted (larger limits): Slices sub-windows of Window/Slices
//     each, and a count per sub-window: a unit counts until its whole
//     sub-window has left the window, so it may come back up to a sixteenth of
//     the window late (never early). 8 + 8·(Slices+1) bytes a key.
//
// Both are exact at a grain (Grain): they decide as the sliding log would if
// every admission were made at the last nanosecond of its grain (its
// microsecond, or its sub-window). The grain only delays when units leave the
// window; it never admits more than Limit in any interval of length Window.
//
// A window has no Refund or Reserve (an exact window cannot take units out
// of its ring in place): a tier decides its windows last, after a look that
// takes nothing (tier.At). SettleAt settles a request's actual cost: the
// excess of a higher actual is counted then, even beyond the limit; a lower
// actual gives the difference back from what the window counted at the
// admission's grain (see settle.go).
package atomicwindow

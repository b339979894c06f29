// Package atomicbucket is limitgen's runtime: lock-free token buckets, each held
// in one atomic int64 and updated by compare-and-swap, alone or keyed in a
// concurrent map. It knows nothing of YAML or HTTP; generated limiters call it
// with their numbers folded in as constants. Strict sliding windows are the
// sibling package atomicwindow, on this package's clock; tiers of rules are
// package tier.
//
// The types a user meets:
//
//   - Limit (Tokens per Period, Burst, Refill: Greedy or Interval) and Rule, a
//     Limit checked and turned into fixed-point units by NewRule or MustRule.
//   - Bucket: one bucket (a global limit). Table: a bucket per key, with
//     TableOptions (a key cap, AllowAtCap) and TableStats.
//   - Decision: what a check returns (Allowed, Remaining, RetryAfter, Reset;
//     Never when waiting cannot help). Reservation: tokens taken ahead of
//     time by ReserveAt.
//   - Time: the monotonic clock's reading (Now), which every check but Allow
//     and Wait takes, so that a request reads the clock once.
//   - Numbers, Carry and Origin: a rule's numbers changed at run time
//     (SetNumbersAt, SetKeyNumbersAt), how buckets carry into them, and where
//     the numbers in force come from.
//
// # Semantics
//
// A bucket holds at most Burst tokens and regains them at Tokens per Period,
// continuously (Greedy) or Tokens at a time at each boundary of a grid of the
// Period (Interval: placed by the key in a Table, started at creation for a
// Bucket, or at wall-clock multiples of the Period when Aligned). A request of
// cost c is allowed iff c is
// at most the tokens held at that moment; an allowed request takes c tokens, a
// denied one changes nothing. A new bucket is full unless the Limit sets Initial.
//
// Each bucket is one word, its theoretical arrival time (TAT) in the sense of
// the Generic Cell Rate Algorithm (GCRA; ITU-T I.371, and
// https://en.wikipedia.org/wiki/Generic_cell_rate_algorithm): the time at which
// the bucket would be full again if nothing more were taken. With T the time one
// token is worth (the emission interval, Period/Tokens) and τ = Burst·T (the
// tolerance), a request of cost c is allowed iff max(TAT, now) + c·T − now ≤ τ;
// then TAT ← max(TAT, now) + c·T. A full bucket has TAT ≤ now, so the zero word
// is a full bucket and removing a full bucket from a table loses nothing. The
// code calls T emit, τ tau, and counts both in the rule's fixed-point units.
//
// # Exactness
//
// NewRule picks units in which the rule's numbers are whole: 1/k ns for greedy
// rules, with k the least integer that makes T whole, and token slots of the
// grid for interval rules. When those units fit 64 bits for MaxUptime (ten
// years) of process uptime, every decision, remaining count, retry-after and
// reset equals the exact rational reference (package fuzz) to the nanosecond.
// A greedy rate whose exact unit does not fit is rounded so that each token
// costs slightly more time: it never admits more than Burst + r·Δ in any window
// Δ, and NewRule refuses it unless the admitted rate is within MaxRelativeError
// (1e-6) of the written one. With one 64-bit word and ten years of range, k is
// at most about 29, so such rounded rates meet 1e-6 only up to roughly 29,000
// tokens per second; faster rates must be exactly representable (any rate whose
// token count divides the period in nanoseconds times a small k, such as
// 1,000,000/s or 3/s). NewRule says which and why.
//
// # Time
//
// The clock is the runtime's monotonic clock (Now), read once per check; every
// check has an At form that takes a Time instead. Times may come out of order:
// each check is judged at its own time against every admission recorded so far,
// and only admissions and refunds are recorded (a check that takes nothing
// leaves no trace), so an earlier-stamped check never sees tokens that accrued
// after its stamp. Times are clamped to [0, MaxUptime]; past MaxUptime buckets
// stop refilling rather than overflow.
//
// # Limits
//
//   - cost 0 is allowed while the bucket is not in debt from reservations, and
//     takes nothing;
//   - a negative cost, or one above Burst, is denied with RetryAfter Never and
//     changes nothing;
//   - rate 0, burst 0, and numbers that cannot fit are refused by NewRule;
//   - reservations run at most MaxWait ahead.
//
// # Tables
//
// A Table creates a key's bucket on the key's first check that takes tokens (one
// map insertion) and keeps itself: buckets full for SweepGrace are reclaimed
// when a new key meets the key cap, and by a sweep the table runs when new keys
// double it; SweepAt and RunSweeper only return memory sooner. Reclaiming loses
// nothing, because an interval grid is placed by its key (phase.go), not by the
// key's first use. At the cap with nothing to reclaim, a new key is denied,
// or with TableOptions.AllowAtCap decided against a fresh bucket that is not
// stored; Len and Stats make this observable. Checks on existing keys never
// lock and never allocate.
package atomicbucket

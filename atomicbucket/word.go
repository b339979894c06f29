package atomicbucket

import (
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// The word operations below are the whole concurrency story: a bucket is one
// int64, the theoretical arrival time (TAT), in its rule's units, and every
// change is one compare-and-swap from a value just loaded. A TAT at or before now
// means a full bucket, so the zero word is a full bucket and a full bucket carries
// no information beyond "full".
//
// Every TAT a live bucket holds is ≥ 0 (times are clamped to [0, MaxUptime] and
// every write is max(TAT, now) + something ≥ 0). A negative word is dead: a table
// sweep wrote it to retire the bucket, and no operation changes a dead word.

// dead is the word a sweep leaves in a bucket it removes from its table.
const dead int64 = -1

// moved is the word a change of numbers leaves in a bucket it carries into
// new numbers (a new word): dead too, but what it held lives on, converted.
const moved int64 = -2

// Never is the RetryAfter of a request that can never be allowed: its cost is
// negative or exceeds the burst.
const Never = time.Duration(math.MaxInt64)

// advance adds inc units to the TAT in w if the result stays at or below bound:
// TAT ← max(TAT, now) + inc. now is the current time in units; bound is
// now + tau for a check, or later-time-in-units + tau for a reservation.
// It returns the TAT after the call (the new one when ok) and whether it
// advanced; a negative result means w is dead and nothing was done.
// A cost of 0 (inc == 0) never writes: rewriting a full bucket's TAT to now would
// move the moment it became full, which sweeps depend on.
// Assumes inc ≥ 0 and that the rule's budget keeps max(TAT, now) + inc in range.
//
// An admission that takes tokens records its time (at, ns) in seen first
// (see); a denial writes nothing, so that checks a full or empty bucket
// denies share its cache line without contending for it.
func advance(w, seen *atomic.Int64, at, now, inc, bound int64) (tat int64, ok bool) {
	for {
		old := w.Load()
		tat = max(old, now) + inc
		if old < 0 || tat > bound {
			return old, false
		}
		if inc == 0 {
			return tat, true
		}
		see(seen, at)
		if w.CompareAndSwap(old, tat) {
			return tat, true
		}
	}
}

// see records in seen that a check stamped now (ns) is about to change a
// word: seen is the latest such time. It comes before the check's
// compare-and-swap, so that a change that kills the word afterwards reads a
// time no earlier than any check's that the word holds, and converts it as of
// no earlier than that when that matters (settle, Bucket.change): a change
// stamped before checks already made never lets their time be refilled at
// the new, faster rate.
func see(seen *atomic.Int64, now int64) {
	for {
		v := seen.Load()
		if v >= now || seen.CompareAndSwap(v, now) {
			return
		}
	}
}

// giveBack returns inc units to the bucket in w at now (both in units), never
// filling it beyond full: TAT ← max(TAT − inc, now). A full or dead bucket is
// left as it is; alive is false for a dead one (swept, or converted to other
// numbers: the caller may look for its successor).
func giveBack(w, seen *atomic.Int64, at, now, inc int64) (alive bool) {
	return giveBackWord(w, seen, at, now, inc) >= 0
}

// giveBackWord is giveBack returning the word it found: negative (dead or
// moved) when it gave nothing back for that reason.
func giveBackWord(w, seen *atomic.Int64, at, now, inc int64) int64 {
	for {
		old := w.Load()
		if old <= now { // full (old ≥ 0) or dead (old < 0): nothing to give back
			return old
		}
		see(seen, at) // as advance does
		if w.CompareAndSwap(old, max(old-inc, now)) {
			return old
		}
	}
}

// clampNow maps a time in ns since the epoch into [0, MaxUptime]: times before
// the epoch are the epoch, and time stops at MaxUptime, after which buckets no
// longer refill (they deny rather than overflow).
func clampNow(now Time) int64 {
	return min(max(int64(now), 0), int64(MaxUptime))
}

// units converts now (ns since epoch, clamped) into the rule's units for a bucket
// whose grid is anchored at anchor (interval rules; ignored by greedy ones).
func (r *Rule) units(now, anchor int64) int64 {
	if r.mode == modeGreedy {
		return now * r.scale
	}
	if now < anchor {
		return 0
	}
	return (now - anchor) / r.period * r.tokens
}

// waitFor is the least wait in ns after now at which the bucket's time in units
// reaches target: 0 when it already has.
func (r *Rule) waitFor(target, now, nowU, anchor int64) time.Duration {
	if target <= nowU {
		return 0
	}
	if r.mode == modeGreedy {
		return time.Duration((target - nowU + r.scale - 1) / r.scale)
	}
	periods := (target + r.tokens - 1) / r.tokens // first boundary whose slot count reaches target
	return time.Duration(anchor + periods*r.period - now)
}

// fullAt is the first time (ns) at which a bucket whose word holds tat is
// full, with no other traffic: now, or earlier, when it already is.
func (r *Rule) fullAt(tat, anchor int64) int64 {
	if r.mode == modeGreedy {
		return (tat + r.scale - 1) / r.scale
	}
	return anchor + (tat+r.tokens-1)/r.tokens*r.period
}

// decide builds the Decision for a request of cost units inc (already checked to
// be in range) at now (ns) / nowU (units); tat is advance's result.
func (r *Rule) decide(ok bool, tat, inc, now, nowU, anchor int64) Decision {
	d := Decision{Allowed: ok}
	if !ok {
		d.RetryAfter = r.waitFor(max(tat, nowU)+inc-r.tau, now, nowU, anchor)
	}
	d.Remaining = max(r.tau-max(tat-nowU, 0), 0) / r.emit
	d.Reset = r.waitFor(tat, now, nowU, anchor)
	return d
}

// Decision is the outcome of a check, returned by value (32 bytes, no pointers).
// The zero Decision is a denial that says nothing more.
//
// For an HTTP answer, RetryAfterHeader gives the Retry-After value; a denial
// whose RetryAfter is Never cannot be fixed by waiting (the cost exceeds the
// burst) and gets no Retry-After.
type Decision struct {
	// RetryAfter is 0 when allowed; when denied, the least wait after which the
	// same request would be allowed with no other traffic, or Never when its cost
	// is negative or exceeds the burst.
	RetryAfter time.Duration
	// Reset is the time until the bucket is full again, with no other traffic.
	Reset time.Duration
	// Remaining is the number of whole tokens left after the decision (0 while
	// reservations have taken tokens ahead).
	Remaining int64
	// Allowed reports whether the request was admitted (and its tokens taken).
	Allowed bool
}

// RetryAfterHeader returns the value of an HTTP Retry-After header (RFC 9110,
// delay-seconds) for a denied decision: RetryAfter in whole seconds, rounded up
// so that a client that waits that long is not denied again for want of a
// fraction of a second. ok is false when the decision allowed the request, or
// when RetryAfter is Never: no wait can help a request whose cost exceeds the
// burst, so no Retry-After should be sent (answer it as a request that must
// change, not one that must wait).
func (d Decision) RetryAfterHeader() (value string, ok bool) {
	if d.Allowed || d.RetryAfter == Never || d.RetryAfter < 0 {
		return "", false
	}
	secs := (d.RetryAfter + time.Second - 1) / time.Second
	return strconv.FormatInt(int64(secs), 10), true
}

// Package atomicslot is limitgen's runtime for in-flight limits: at most
// Limit requests of a key hold a slot at once, each slot returned by its
// release or, when none comes (a crashed handler), by its expiry at the rule's
// maximum hold. It sits beside atomicbucket and atomicwindow, shares their
// clock (atomicbucket.Time, read once per call) and their decision type, and
// knows nothing of YAML or HTTP.
//
// The types a user meets:
//
//   - Rule, from NewRule: a limit and a maximum hold, checked.
//   - Gate: one set of slots for the whole process (a global limit).
//   - Table: a set of slots per key, in a concurrent map (xsync), made on a
//     key's first acquisition and reclaimed once nothing is held;
//     atomicbucket.TableOptions caps the keys.
//   - Slot: what an admitted acquisition holds; its Release returns it.
//   - atomicbucket.Decision: what every acquisition returns. Remaining is the
//     slots free after it; RetryAfter, for a denial, is the wait until the
//     first held slot expires, the latest a slot comes back if none is
//     released (a release may free one sooner); Reset is the wait until every
//     held slot has expired.
//
// A key's slots are Limit words, one per slot, each holding the slot's expiry
// (the acquisition's time plus the hold, rounded up to the microsecond) and a
// count of the word's acquisitions. An acquisition takes, by compare-and-swap,
// a word that is free or whose expiry has passed; a release puts the word back
// to free by compare-and-swap from the value its acquisition wrote, so a
// second release, or one after the slot expired and was taken again, finds
// another value and changes nothing. Expiry is the only way a slot returns
// without a release, and never before its time. Slots that expired
// unreleased are counted (Stats.Expired): a leak, seen.
//
// Nothing here takes a lock or allocates on an existing key's acquisition or
// release. An acquisition reads every word of its key: Limit is meant for
// tens of slots, and MaxLimit bounds it.
//
// The semantics, exactly, are internal/reference's InFlight; the tests hold
// every method to it.
package atomicslot

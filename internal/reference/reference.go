// Package reference is the exact reference token bucket that package fuzz's
// tests hold every optimised path of atomicbucket (and of generated limiters)
// against, and that the stores' tests (storetest) hold Redis and
// PostgreSQL to.
//
// It is written from the contract, not from the implementation: exact
// rationals (math/big), a mutex, a plain map, and nothing clever, so that it
// can be read against the README's "What the runtime guarantees" line by
// line. Its state for a bucket is the
// moment the bucket will be full again if nothing more is taken; everything
// else (tokens at any time, waits) is derived from that by the definitions.
package reference

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sync"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/tier"
)

// The runtime's sweep thresholds (package keycap's AutoSweepMin and
// CapSweepSpacing), written again here so that the reference builds outside
// limitgen's module; TestSweepConstants holds them equal.
const (
	autoSweepMin    = 4096
	capSweepSpacing = 256 * time.Nanosecond
)

// Params are a rule's numbers as written.
type Params struct {
	Tokens   int64 // tokens per Period
	Period   int64 // ns
	Burst    int64
	Initial  int64 // tokens of a new bucket
	Interval bool  // interval refill (else greedy)
	Aligned  bool  // interval grid at Anchor + k·Period for every bucket
	Anchor   int64 // aligned grid anchor, ns
	// KeyAnchor places the grid of a key's bucket under anchored interval
	// refill (atomicbucket.Rule.KeyAnchor); nil anchors each bucket's grid at
	// its creation, as a single atomicbucket.Bucket does.
	KeyAnchor func(key string) int64
	MaxKeys   int64 // key cap; 0 means none
	AllowCap  bool  // at the cap: allow untracked (else deny)
	// MaxDebt is the most tokens a bucket may owe after settlements
	// (atomicbucket.Rule.MaxDebt): the burst, or what the rule refills in
	// atomicbucket.MaxWait when that is less.
	MaxDebt int64
}

// ParamsOf returns the reference parameters for the keyed buckets of an
// atomicbucket rule (a Table's).
func ParamsOf(r *atomicbucket.Rule, maxKeys int64, allowAtCap bool) Params {
	l := r.Limit()
	initial := l.Burst
	if l.InitialSet {
		initial = l.Initial
	}
	p := Params{
		Tokens: l.Tokens, Period: int64(l.Period), Burst: l.Burst, Initial: initial,
		Interval: l.Refill == atomicbucket.Interval, Aligned: l.Aligned, Anchor: r.GridAnchor(),
		MaxKeys: maxKeys, AllowCap: allowAtCap, MaxDebt: r.MaxDebt(),
	}
	if p.Interval && !p.Aligned {
		p.KeyAnchor = r.KeyAnchor
	}
	return p
}

// SingleParamsOf returns the reference parameters for a single
// atomicbucket.Bucket of the rule: one key, "", its grid anchored at creation.
func SingleParamsOf(r *atomicbucket.Rule) Params {
	p := ParamsOf(r, 0, false)
	p.KeyAnchor = nil
	return p
}

// state is one key's bucket: the moment it is full again if nothing more is
// taken, and where its grid is.
//
// The contract's token count follows from it. With ω the amount of "due" one
// token is worth and clock(t) the bucket's clock at t:
//   - greedy refill: due is a time in ns (a rational), ω = Period/Tokens ns,
//     clock(t) = t;
//   - interval refill: due counts grid tokens, ω = 1, clock(t) = Tokens · (the
//     number of grid boundaries from the anchor to t), so tokens arrive
//     Tokens at a time at each boundary;
//
// and tokens(t) = Burst − max(0, due − clock(t)) / ω: the bucket owes what it
// took until the clock catches up with due, and is full from then on. Taking c
// at t makes due = max(due, clock(t)) + c·ω (what it owed, or nothing if full,
// plus c); giving c back makes due = max(due − c·ω, clock(t)) (never more than
// full).
//
// Times out of order: a check at t is judged by tokens(t), against every
// admission recorded before it whatever its time. Only what changes the
// tokens is recorded (admissions, refunds, creation); a check that takes
// nothing (cost 0, a denial, a peek) leaves no trace, so it never makes a later
// check looser or stricter. An earlier-stamped check sees no tokens that
// accrued after its stamp.
type state struct {
	due    *big.Rat
	anchor int64 // interval grid anchor (ns)
}

// Reference is the exact token bucket: one per key, or one for key "" when used
// as a single bucket. Safe for concurrent use (one mutex).
//
// Keyed buckets are created by a key's first check that takes tokens (a cost in
// [1, Burst]); other checks on a key without a bucket are answered from the
// bucket it would get, which is not stored. A bucket full for at least
// atomicbucket.SweepGrace is reclaimable. The reference reclaims as a table
// does, by the table's documented rules (they say when a table may forget a
// key, which is observable under Initial < Burst):
//   - a table knows when its next bucket may become reclaimable (next): it
//     learns each bucket's reclaim time when the bucket is created or given
//     tokens back, and all of them exactly at each sweep; taking tokens makes
//     the true time later, never earlier, and is not told (checks never write
//     anything shared), so next is a lower bound;
//   - a new key that meets the cap sweeps when the last sweep at the cap is
//     MaxKeys × capSweepSpacing behind; when none can be
//     reclaimed it is denied with RetryAfter until max(next, the next sweep
//     at the cap may run) (a sweep learns next exactly, so right after one
//     this is exact); a fresh bucket short of the cost tells its own wait
//     when it is made;
//   - a new key that takes the number of keys past sweepAt (twice what the last
//     sweep left, at least autoSweepMin) sweeps;
//   - Sweep sweeps.
type Reference struct {
	mu      sync.Mutex
	p       Params
	omega   *big.Rat // greedy: ns per token; interval: 1
	keys    map[string]*state
	sweepAt int
	next    int64 // ns; math.MaxInt64 when no bucket is known
	// horizon is the latest time a reclaim judged buckets by (its time less
	// the grace): a check stamped before it may find a key reclaimed whose
	// bucket was not full at the check's stamp, and is then judged against a
	// fresh bucket. Reclaiming loses nothing for checks stamped at or after it.
	horizon int64
	// capSwept is the time of the last sweep at the cap; the next may start
	// MaxKeys × capSweepSpacing after it.
	capSwept int64
}

// NewReference returns an empty reference for p.
func NewReference(p Params) *Reference {
	omega := big.NewRat(p.Period, p.Tokens)
	if p.Interval {
		omega = rat(1)
	}
	return &Reference{p: p, omega: omega, keys: map[string]*state{}, sweepAt: autoSweepMin, next: math.MaxInt64,
		capSwept: math.MinInt64 / 2}
}

// Params are the parameters the reference was made with.
func (r *Reference) Params() Params { return r.p }

// NeverSweep makes the reference keep every bucket (its own Sweep and the
// reclaims at the key cap aside): the tests' unswept twin, to which a reclaim
// that changed a later decision shows.
func (r *Reference) NeverSweep() { r.sweepAt = math.MaxInt }

func rat(v int64) *big.Rat { return new(big.Rat).SetInt64(v) }

// floorDiv is ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// ceilRat is ⌈x⌉ as an int64.
func ceilRat(x *big.Rat) int64 {
	n, d := x.Num(), x.Denom()
	q, m := new(big.Int).QuoRem(n, d, new(big.Int)) // truncated
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// floorRat is ⌊x⌋ as an int64.
func floorRat(x *big.Rat) int64 {
	n, d := x.Num(), x.Denom()
	q, m := new(big.Int).QuoRem(n, d, new(big.Int))
	if m.Sign() < 0 {
		q.Sub(q, big.NewInt(1))
	}
	return q.Int64()
}

// clock is the bucket's clock at t, in the units of due. A grid starts at its
// anchor: a time before it (a single bucket asked about a time before its
// creation) reads as the anchor.
func (r *Reference) clock(s *state, t int64) *big.Rat {
	if r.p.Interval {
		return rat(r.p.Tokens * max(floorDiv(t-s.anchor, r.p.Period), 0))
	}
	return rat(t)
}

// times multiplies c tokens by ω.
func (r *Reference) times(c int64) *big.Rat { return new(big.Rat).Mul(rat(c), r.omega) }

// tokens is the bucket's token count at t (negative while reservations run ahead).
func (r *Reference) tokens(s *state, t int64) *big.Rat {
	owed := new(big.Rat).Sub(s.due, r.clock(s, t))
	if owed.Sign() < 0 {
		owed.SetInt64(0)
	}
	return owed.Sub(rat(r.p.Burst), owed.Quo(owed, r.omega))
}

// newState is the bucket key gets when created at t: Initial tokens.
func (r *Reference) newState(key string, t int64) *state {
	s := &state{anchor: t}
	switch {
	case r.p.Aligned:
		s.anchor = r.p.Anchor
	case r.p.KeyAnchor != nil:
		s.anchor = r.p.KeyAnchor(key)
	}
	s.due = new(big.Rat).Add(r.clock(s, t), r.times(r.p.Burst-r.p.Initial))
	return s
}

// take records an admission of c at t; an admission of nothing records nothing.
func (r *Reference) take(s *state, t, c int64) {
	if c == 0 {
		return
	}
	s.due = new(big.Rat).Add(maxRat(s.due, r.clock(s, t)), r.times(c))
}

// give gives c back at t, never beyond full.
func (r *Reference) give(s *state, t, c int64) {
	now := r.clock(s, t)
	if s.due.Cmp(now) <= 0 {
		return // full
	}
	s.due = maxRat(new(big.Rat).Sub(s.due, r.times(c)), now)
	r.learn(s)
}

// learn lowers next to the time s becomes reclaimable.
func (r *Reference) learn(s *state) {
	r.next = min(r.next, r.fullFrom(s)+int64(atomicbucket.SweepGrace))
}

func maxRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) >= 0 {
		return new(big.Rat).Set(a)
	}
	return new(big.Rat).Set(b)
}

// fullFrom is the first time (ns) at which the bucket is full, with no other
// traffic.
func (r *Reference) fullFrom(s *state) int64 {
	if r.p.Interval {
		return s.anchor + ceilRat(new(big.Rat).Quo(s.due, rat(r.p.Tokens)))*r.p.Period
	}
	return ceilRat(s.due)
}

// waitFor is the least wait w ≥ 0 (ns) such that s holds at least need tokens at
// t + w with no other traffic.
func (r *Reference) waitFor(s *state, t, need int64) time.Duration {
	if r.tokens(s, t).Cmp(rat(need)) >= 0 {
		return 0
	}
	// tokens(u) ≥ need ⇔ clock(u) ≥ due − (Burst − need)·ω
	target := new(big.Rat).Sub(s.due, r.times(r.p.Burst-need))
	var u int64
	if r.p.Interval {
		u = s.anchor + ceilRat(new(big.Rat).Quo(target, rat(r.p.Tokens)))*r.p.Period
	} else {
		u = ceilRat(target)
	}
	return time.Duration(max(u-t, 0))
}

// Decision mirrors atomicbucket.Decision.
type Decision = atomicbucket.Decision

// check decides cost against s at t, taking the tokens when take is set. The
// decision reports the bucket after it: Remaining whole tokens, Reset the wait
// until full, and for a denial RetryAfter.
func (r *Reference) check(s *state, t, cost int64, take bool) Decision {
	if cost < 0 || cost > r.p.Burst || r.tokens(s, t).Cmp(rat(cost)) < 0 {
		d := Decision{Remaining: max(floorRat(r.tokens(s, t)), 0), Reset: r.waitFor(s, t, r.p.Burst)}
		d.RetryAfter = atomicbucket.Never
		if cost >= 0 && cost <= r.p.Burst {
			d.RetryAfter = r.waitFor(s, t, cost)
		}
		return d
	}
	after := &state{due: s.due, anchor: s.anchor}
	r.take(after, t, cost)
	if take && cost > 0 {
		s.due = after.due
	}
	return Decision{Allowed: true, Remaining: max(floorRat(r.tokens(after, t)), 0), Reset: r.waitFor(after, t, r.p.Burst)}
}

// takes reports whether a check of cost could take tokens: only those create a
// bucket for a new key.
func (r *Reference) takes(cost int64) bool { return cost >= 1 && cost <= r.p.Burst }

// lookup returns key's bucket at t, creating it; nil when the key is new and
// the table is at its cap with nothing to reclaim.
func (r *Reference) lookup(key string, t int64) *state {
	if s := r.keys[key]; s != nil {
		return s
	}
	if r.p.MaxKeys > 0 && int64(len(r.keys)) >= r.p.MaxKeys {
		if t < r.capSwept+r.capSpacing() {
			return nil
		}
		r.capSwept = t
		if r.sweep(t); int64(len(r.keys)) >= r.p.MaxKeys {
			return nil
		}
	}
	s := r.newState(key, t)
	r.keys[key] = s
	r.learn(s)
	if len(r.keys) > r.sweepAt {
		r.sweep(t)
	}
	return s
}

// capSpacing is how far apart sweeps at the cap start.
func (r *Reference) capSpacing() int64 {
	return min(r.p.MaxKeys, int64(atomicbucket.MaxUptime/capSweepSpacing)) * int64(capSweepSpacing)
}

// capFree is the time from which a new key at the cap could be admitted, as
// far as the table knows: a bucket may be reclaimable (next), and a sweep at
// the cap may run.
func (r *Reference) capFree() int64 { return max(r.next, r.capSwept+r.capSpacing()) }

// atCap is the decision for a new key at the cap with nothing to reclaim: an
// untracked fresh bucket's, or a denial until the table may reclaim a bucket
// for it (a fresh bucket short of the cost then tells its own wait).
func (r *Reference) atCap(key string, t, cost int64) Decision {
	if r.p.AllowCap {
		return r.check(r.newState(key, t), t, cost, false)
	}
	return Decision{RetryAfter: time.Duration(r.capFree() - t)}
}

// Create makes key's bucket at t if it has none, as when a single
// atomicbucket.Bucket is built at t before any check.
func (r *Reference) Create(key string, t int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookup(key, t)
}

// AllowN decides a request of cost for key at t and takes its tokens if allowed.
func (r *Reference) AllowN(key string, t, cost int64) Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys[key] == nil && !r.takes(cost) {
		return r.check(r.newState(key, t), t, cost, false)
	}
	s := r.lookup(key, t)
	if s == nil {
		return r.atCap(key, t, cost)
	}
	return r.check(s, t, cost, true)
}

// Step is key's part, at cost, in a tier request (tier.At), so
// that tests compose references into tiers with the runtime's one tier logic.
func (r *Reference) Step(key string, cost int64) tier.Step { return refStep{r, key, cost} }

type refStep struct {
	r    *Reference
	key  string
	cost int64
}

func (s refStep) AllowNAt(now atomicbucket.Time) Decision {
	return s.r.AllowN(s.key, int64(now), s.cost)
}
func (s refStep) RefundAt(now atomicbucket.Time) { s.r.Refund(s.key, int64(now), s.cost) }

// Peek is what AllowN would decide, changing nothing (not even creating the key).
func (r *Reference) Peek(key string, t, cost int64) Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.keys[key]
	if s == nil {
		s = r.newState(key, t)
	}
	return r.check(s, t, cost, false)
}

// Tokens is what key's bucket holds at t: a rational, never below 0; Initial
// for a key without a bucket.
func (r *Reference) Tokens(key string, t int64) *big.Rat {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.keys[key]
	if s == nil {
		s = r.newState(key, t)
	}
	held := r.tokens(s, t)
	if held.Sign() < 0 {
		held.SetInt64(0)
	}
	return held
}

// Boundary is the last boundary of key's grid at or before t under interval
// refill (where a bucket key would get places it); t under greedy refill.
func (r *Reference) Boundary(key string, t int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.p.Interval {
		return t
	}
	s := r.keys[key]
	if s == nil {
		s = r.newState(key, t)
	}
	return s.anchor + floorDiv(t-s.anchor, r.p.Period)*r.p.Period
}

// Rebase makes key's bucket hold held tokens at t, as a store converts a
// bucket written with other numbers (a rolling deploy): at most Burst; under
// interval refill whole tokens (the fraction is dropped), on the key's grid;
// under greedy refill the time it owes is rounded up to a whole number of
// grains (ns, a rational: the unit the store counts in; nil for none), so
// that a conversion never adds tokens.
func (r *Reference) Rebase(key string, t int64, held, grain *big.Rat) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.newState(key, t)
	h := new(big.Rat).Set(held)
	if h.Cmp(rat(r.p.Burst)) > 0 {
		h.SetInt64(r.p.Burst)
	}
	if r.p.Interval {
		h.SetInt64(floorRat(h))
	}
	owed := new(big.Rat).Mul(new(big.Rat).Sub(rat(r.p.Burst), h), r.omega)
	if !r.p.Interval && grain != nil {
		owed.Mul(rat(ceilRat(new(big.Rat).Quo(owed, grain))), grain)
	}
	s.due = owed.Add(owed, r.clock(s, t))
	r.keys[key] = s
	r.learn(s)
}

// FullFrom is the first time (ns) at which key's bucket is full with no other
// traffic; ok is false when the key has no bucket.
func (r *Reference) FullFrom(key string) (at int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.keys[key]
	if s == nil {
		return 0, false
	}
	return r.fullFrom(s), true
}

// Held is what key's bucket holds at t and where its grid is anchored; ok is
// false when the key has no bucket.
func (r *Reference) Held(key string, t int64) (held *big.Rat, anchor int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.keys[key]
	if s == nil {
		return nil, 0, false
	}
	return r.tokens(s, t), s.anchor, true
}

// Place makes key's bucket hold held tokens at t on a grid anchored at
// anchor, as a change of numbers does (Rebase, with the grid kept).
func (r *Reference) Place(key string, t int64, held, grain *big.Rat, anchor int64) {
	r.Rebase(key, t, held, grain)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.keys[key]
	if s.anchor != anchor {
		// Rebase placed the grid where a new bucket's goes; move it and the
		// debt with it.
		owed := new(big.Rat).Sub(s.due, r.clock(s, t))
		s.anchor = anchor
		s.due = owed.Add(owed, r.clock(s, t))
	}
}

// Forget removes key's bucket: its next check finds a new one.
func (r *Reference) Forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.keys, key)
}

// Keys are the keys with a bucket, sorted.
func (r *Reference) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.keys))
	for k := range r.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Refund gives cost tokens back to key at t, never beyond the burst.
func (r *Reference) Refund(key string, t, cost int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.keys[key]; s != nil && cost > 0 && cost <= r.p.Burst {
		r.give(s, t, cost)
	}
}

// Settle settles a request for key admitted at estimate whose actual cost
// is actual, at t, and returns the tokens of the excess it forgave. A lower
// actual gives the difference back, as Refund does. A higher one charges the
// excess to key's bucket (made if the key has none; at the cap with nothing
// to reclaim, all of it is forgiven): due ← max(due, clock) + excess·ω, but
// never beyond clock + (Burst + MaxDebt)·ω, the bucket MaxDebt tokens below
// empty, and never lowered; what the bound keeps out is forgiven, in whole
// tokens rounded up. A negative estimate or actual settles nothing.
func (r *Reference) Settle(key string, t, estimate, actual int64) (forgiven int64) {
	switch {
	case estimate < 0 || actual < 0 || actual == estimate:
		return 0
	case actual < estimate:
		r.Refund(key, t, estimate-actual)
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	excess := actual - estimate
	s := r.lookup(key, t)
	if s == nil {
		return excess
	}
	clock := r.clock(s, t)
	want := new(big.Rat).Add(maxRat(s.due, clock), r.times(excess))
	limit := new(big.Rat).Add(clock, r.times(r.p.Burst))
	limit.Add(limit, r.times(r.p.MaxDebt))
	if want.Cmp(limit) <= 0 {
		s.due = want
		return 0
	}
	s.due = maxRat(s.due, limit)
	return ceilRat(new(big.Rat).Quo(new(big.Rat).Sub(want, s.due), r.omega))
}

// Reservation mirrors the observable part of atomicbucket.Reservation.
type Reservation struct {
	OK         bool
	Delay      time.Duration
	RetryAfter time.Duration
	Key        string
	Cost       int64
	At         int64
	cancelled  bool
	untracked  bool   // an admission with no bucket behind it: nothing to give back
	from       *state // the bucket the tokens were taken from
}

// Reserve takes cost for key at t if it can be served within maxWait.
func (r *Reference) Reserve(key string, t, cost int64, maxWait time.Duration) Reservation {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys[key] == nil && !r.takes(cost) {
		return immediate(r.check(r.newState(key, t), t, cost, false), t)
	}
	s := r.lookup(key, t)
	if s == nil {
		return immediate(r.atCap(key, t, cost), t)
	}
	if cost < 0 || cost > r.p.Burst {
		return Reservation{RetryAfter: atomicbucket.Never}
	}
	maxWait = min(max(maxWait, 0), atomicbucket.MaxWait)
	w := r.waitFor(s, t, cost)
	if w > maxWait {
		return Reservation{RetryAfter: w}
	}
	r.take(s, t, cost)
	return Reservation{OK: true, Delay: w, Key: key, Cost: cost, At: t + int64(w), from: s}
}

// immediate is a reservation that holds nothing for later (a key with no
// bucket): d's admission at t, which there is nothing to cancel, or its refusal.
func immediate(d Decision, t int64) Reservation {
	if !d.Allowed {
		return Reservation{RetryAfter: d.RetryAfter}
	}
	return Reservation{OK: true, At: t, untracked: true}
}

// Cancel gives a reservation's tokens back if t is before its time to act, once.
func (r *Reference) Cancel(res *Reservation, t int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !res.OK || res.cancelled || res.untracked || t >= res.At {
		return false
	}
	res.cancelled = true
	// The tokens go back to the bucket they were taken from, if the key still
	// has it: a bucket reclaimed since (it was full, so the tokens were spent)
	// takes nothing back, and the key's new bucket never lent them.
	if s := r.keys[res.Key]; s != nil && s == res.from && res.Cost > 0 {
		r.give(s, t, res.Cost)
	}
	return true
}

// Sweep removes the buckets full for at least atomicbucket.SweepGrace at t and
// returns how many it removed.
func (r *Reference) Sweep(t int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sweep(t)
}

func (r *Reference) sweep(t int64) int {
	graced := max(t-int64(atomicbucket.SweepGrace), 0)
	n := 0
	r.next = math.MaxInt64
	for k, s := range r.keys {
		if r.fullFrom(s) <= graced {
			delete(r.keys, k)
			n++
		} else {
			r.learn(s)
		}
	}
	if n > 0 {
		r.horizon = max(r.horizon, graced)
	}
	r.sweepAt = max(2*len(r.keys), autoSweepMin)
	return n
}

// Horizon is the time before which a check may find a key reclaimed that was
// not full at its stamp (see Reference.horizon); 0 before any reclaim.
func (r *Reference) Horizon() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.horizon
}

// Len is the number of keys held.
func (r *Reference) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keys)
}

// Clone returns an independent copy of the reference (for models that branch).
func (r *Reference) Clone() *Reference {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &Reference{p: r.p, omega: r.omega, keys: make(map[string]*state, len(r.keys)), sweepAt: r.sweepAt, next: r.next,
		horizon: r.horizon, capSwept: r.capSwept}
	for k, s := range r.keys {
		c.keys[k] = &state{due: new(big.Rat).Set(s.due), anchor: s.anchor}
	}
	return c
}

// Equal reports whether two references hold the same buckets.
func (r *Reference) Equal(o *Reference) bool {
	if r == o {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(r.keys) != len(o.keys) || r.next != o.next || r.capSwept != o.capSwept {
		return false
	}
	for k, s := range r.keys {
		u := o.keys[k]
		if u == nil || s.due.Cmp(u.due) != 0 || s.anchor != u.anchor {
			return false
		}
	}
	return true
}

// Admission is a cost admitted for a key at a time.
type Admission struct {
	Key      string
	At, Cost int64
	// Rounded marks a reservation's time to act: its exact time rounded up to a
	// whole ns, each on its own, so two of them can stand closer than their exact
	// spacing by less than 1ns. A window ending at one gets that 1ns. Admissions
	// at clock readings (whole ns already) get no slack.
	Rounded bool
}

// CheckEnvelope checks, key by key, that in every window [a, b] between two
// admissions the admitted cost is at most Burst + rate·(b − a) for greedy
// refill, or Burst + Tokens·(⌊(b − a)/Period⌋ + 1) for interval refill: what no
// rule may exceed, exact or not.
func CheckEnvelope(l atomicbucket.Limit, adm []Admission) error {
	byKey := map[string][]Admission{}
	for _, a := range adm {
		byKey[a.Key] = append(byKey[a.Key], a)
	}
	P := big.NewInt(int64(l.Period))
	for key, list := range byKey {
		slices.SortStableFunc(list, func(a, b Admission) int { return cmp.Compare(a.At, b.At) })
		for i := range list {
			sum := int64(0)
			for j := i; j < len(list); j++ {
				sum += list[j].Cost
				d := list[j].At - list[i].At
				if l.Refill != atomicbucket.Interval && (list[i].Rounded || list[j].Rounded) {
					d++
				}
				if l.Refill == atomicbucket.Interval {
					if sum > l.Burst+l.Tokens*(d/int64(l.Period)+1) {
						return fmt.Errorf("key %q: %d admitted in %dns", key, sum, d)
					}
					continue
				}
				lhs := new(big.Int).Mul(big.NewInt(sum), P)
				rhs := new(big.Int).Add(new(big.Int).Mul(big.NewInt(l.Burst), P), new(big.Int).Mul(big.NewInt(l.Tokens), big.NewInt(d)))
				if lhs.Cmp(rhs) > 0 {
					return fmt.Errorf("key %q: %d admitted in %dns, more than burst %d + %d per %v", key, sum, d, l.Burst, l.Tokens, l.Period)
				}
			}
		}
	}
	return nil
}

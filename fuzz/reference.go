// Package fuzz holds the exact reference token bucket and the tests that hold
// every optimised path of atomicbucket (and of generated limiters) against it.
//
// The reference is written the plain way, not as GCRA: a bucket is a rational
// number of tokens and the time they were counted at, refilled on each use with
// math/big, behind a mutex. Nothing in it is clever, so that it can be read
// against the contract in DESIGN.md line by line.
package fuzz

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
	"sync"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Params are a rule's numbers as written.
type Params struct {
	Tokens   int64 // tokens per Period
	Period   int64 // ns
	Burst    int64
	Initial  int64 // tokens of a new bucket
	Interval bool  // interval refill (else greedy)
	Aligned  bool  // interval grid at Anchor + k·Period instead of each bucket's first use
	Anchor   int64 // aligned grid anchor, ns
	MaxKeys  int64 // key cap; 0 means none
	AllowCap bool  // at the cap: allow untracked (else deny)
}

// ParamsOf returns the reference parameters for an atomicbucket rule.
func ParamsOf(r *atomicbucket.Rule, maxKeys int64, atCap atomicbucket.AtCap) Params {
	l := r.Limit()
	initial := l.Burst
	if l.InitialSet {
		initial = l.Initial
	}
	return Params{
		Tokens: l.Tokens, Period: int64(l.Period), Burst: l.Burst, Initial: initial,
		Interval: l.Refill == atomicbucket.Interval, Aligned: l.Aligned, Anchor: r.GridAnchor(),
		MaxKeys: maxKeys, AllowCap: atCap == atomicbucket.AllowAtCap,
	}
}

// state is one key's bucket.
type state struct {
	tokens *big.Rat // may be negative after reservations taken ahead
	last   int64    // the time tokens were counted at (ns); never decreases
	anchor int64    // interval grid anchor (ns)
	// fullSince is when the bucket last became full, valid while tokens == Burst.
	// Sweeps remove buckets full for at least atomicbucket.SweepGrace. For interval
	// rules it is a grid boundary: the one at which the bucket filled, or the one at
	// or before the event that filled it (creation, a refund).
	fullSince *big.Rat
}

// Reference is the exact token bucket: one per key, or one for key "" when used
// as a single bucket. Safe for concurrent use (one mutex).
type Reference struct {
	mu   sync.Mutex
	p    Params
	rate *big.Rat // tokens per ns
	keys map[string]*state
}

// NewReference returns an empty reference for p.
func NewReference(p Params) *Reference {
	return &Reference{p: p, rate: big.NewRat(p.Tokens, p.Period), keys: map[string]*state{}}
}

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

// boundary is the index of the last grid boundary at or before t.
func (r *Reference) boundary(s *state, t int64) int64 {
	return floorDiv(t-s.anchor, r.p.Period)
}

// newState is a bucket created at t.
func (r *Reference) newState(t int64) *state {
	s := &state{tokens: rat(r.p.Initial), last: t, anchor: t}
	if r.p.Aligned {
		s.anchor = r.p.Anchor
	}
	if r.p.Initial == r.p.Burst {
		s.fullSince = rat(t)
		if r.p.Interval {
			s.fullSince = rat(s.anchor + r.boundary(s, t)*r.p.Period)
		}
	}
	return s
}

// refill brings s to time t. A time earlier than one already seen creates no
// tokens and changes nothing.
func (r *Reference) refill(s *state, t int64) {
	if t <= s.last {
		return
	}
	b := rat(r.p.Burst)
	before := new(big.Rat).Set(s.tokens)
	var add *big.Rat
	if r.p.Interval {
		add = rat(r.p.Tokens * (r.boundary(s, t) - r.boundary(s, s.last)))
	} else {
		add = new(big.Rat).Mul(r.rate, rat(t-s.last))
	}
	s.tokens.Add(s.tokens, add)
	if s.tokens.Cmp(b) >= 0 && before.Cmp(b) < 0 {
		// It filled between last and t: at the exact instant for greedy refill,
		// at the first boundary that brought it to the burst for interval refill.
		missing := new(big.Rat).Sub(b, before)
		if r.p.Interval {
			k := ceilRat(new(big.Rat).Quo(missing, rat(r.p.Tokens)))
			s.fullSince = rat(s.anchor + (r.boundary(s, s.last)+k)*r.p.Period)
		} else {
			s.fullSince = new(big.Rat).Add(rat(s.last), new(big.Rat).Quo(missing, r.rate))
		}
	}
	if s.tokens.Cmp(b) > 0 {
		s.tokens.Set(b)
	}
	s.last = t
}

// waitFor is the least wait w ≥ 0 (ns) such that s holds at least need tokens at
// t + w with no other traffic.
func (r *Reference) waitFor(s *state, t int64, need *big.Rat) time.Duration {
	missing := new(big.Rat).Sub(need, s.tokens)
	if missing.Sign() <= 0 {
		return 0
	}
	if r.p.Interval {
		k := ceilRat(new(big.Rat).Quo(missing, rat(r.p.Tokens)))
		return time.Duration(s.anchor + (r.boundary(s, t)+k)*r.p.Period - t)
	}
	return time.Duration(ceilRat(new(big.Rat).Quo(missing, r.rate)))
}

// Decision mirrors atomicbucket.Decision.
type Decision = atomicbucket.Decision

func (r *Reference) decision(s *state, t int64, allowed bool, cost int64) Decision {
	d := Decision{Allowed: allowed, Remaining: max(floorRat(s.tokens), 0)}
	if !allowed {
		if cost < 0 || cost > r.p.Burst {
			d.RetryAfter = atomicbucket.Never
		} else {
			d.RetryAfter = r.waitFor(s, t, rat(cost))
		}
	}
	d.Reset = r.waitFor(s, t, rat(r.p.Burst))
	return d
}

// lookup returns key's bucket at t, creating it when allowed to; nil at the cap.
func (r *Reference) lookup(key string, t int64, create bool) *state {
	s := r.keys[key]
	if s == nil {
		fresh := r.newState(t)
		if !create {
			return fresh
		}
		if r.p.MaxKeys > 0 && int64(len(r.keys)) >= r.p.MaxKeys {
			return nil
		}
		r.keys[key] = fresh
		return fresh
	}
	r.refill(s, t)
	return s
}

// atCap is the decision for a new key at the cap.
func (r *Reference) atCap(t, cost int64) Decision {
	if !r.p.AllowCap {
		return Decision{RetryAfter: atomicbucket.SweepGrace}
	}
	return r.check(r.newState(t), t, cost, false)
}

// check decides cost against s at t, taking the tokens when take is set.
func (r *Reference) check(s *state, t, cost int64, take bool) Decision {
	if cost < 0 || cost > r.p.Burst || s.tokens.Cmp(rat(cost)) < 0 {
		return r.decision(s, t, false, cost)
	}
	if take && cost > 0 {
		s.tokens.Sub(s.tokens, rat(cost))
		s.fullSince = nil
	}
	d := r.decision(s, t, true, cost)
	if !take {
		d.Remaining = max(floorRat(new(big.Rat).Sub(s.tokens, rat(cost))), 0)
		d.Reset = r.waitFor(s, t, new(big.Rat).Add(rat(r.p.Burst), rat(cost)))
	}
	return d
}

// AllowN decides a request of cost for key at t and takes its tokens if allowed.
func (r *Reference) AllowN(key string, t, cost int64) Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.lookup(key, t, true)
	if s == nil {
		return r.atCap(t, cost)
	}
	return r.check(s, t, cost, true)
}

// Peek is what AllowN would decide, changing nothing (not even creating the key).
func (r *Reference) Peek(key string, t, cost int64) Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.keys[key]
	if s == nil {
		return r.check(r.newState(t), t, cost, false)
	}
	c := r.clone(s)
	r.refill(c, t)
	return r.check(c, t, cost, false)
}

func (r *Reference) clone(s *state) *state {
	c := *s
	c.tokens = new(big.Rat).Set(s.tokens)
	if s.fullSince != nil {
		c.fullSince = new(big.Rat).Set(s.fullSince)
	}
	return &c
}

// Refund gives cost tokens back to key at t, capped at the burst.
func (r *Reference) Refund(key string, t, cost int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.keys[key]
	if s == nil || cost <= 0 || cost > r.p.Burst {
		return
	}
	r.refill(s, t)
	r.give(s, t, cost)
}

func (r *Reference) give(s *state, t, cost int64) {
	b := rat(r.p.Burst)
	if s.tokens.Cmp(b) >= 0 {
		return
	}
	s.tokens.Add(s.tokens, rat(cost))
	if s.tokens.Cmp(b) >= 0 {
		s.tokens.Set(b)
		s.fullSince = rat(t)
		if r.p.Interval {
			s.fullSince = rat(s.anchor + r.boundary(s, t)*r.p.Period)
		}
	}
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
}

// Reserve takes cost for key at t if it can be served within maxWait.
func (r *Reference) Reserve(key string, t, cost int64, maxWait time.Duration) Reservation {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.lookup(key, t, true)
	if s == nil {
		d := r.atCap(t, cost)
		return Reservation{OK: d.Allowed, RetryAfter: d.RetryAfter, At: t}
	}
	if cost < 0 || cost > r.p.Burst {
		return Reservation{RetryAfter: atomicbucket.Never}
	}
	maxWait = min(max(maxWait, 0), atomicbucket.MaxWait)
	w := r.waitFor(s, t, rat(cost))
	if w > maxWait {
		return Reservation{RetryAfter: w}
	}
	if cost > 0 {
		s.tokens.Sub(s.tokens, rat(cost))
		s.fullSince = nil
	}
	return Reservation{OK: true, Delay: w, Key: key, Cost: cost, At: t + int64(w)}
}

// Cancel gives a reservation's tokens back if t is before its time to act, once.
func (r *Reference) Cancel(res *Reservation, t int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !res.OK || res.cancelled || t >= res.At {
		return false
	}
	res.cancelled = true
	if s := r.keys[res.Key]; s != nil && res.Cost > 0 {
		r.refill(s, t)
		r.give(s, t, res.Cost)
	}
	return true
}

// Sweep removes the buckets full for at least atomicbucket.SweepGrace at t and
// returns how many it removed.
func (r *Reference) Sweep(t int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	limit := rat(max(t-int64(atomicbucket.SweepGrace), 0))
	n := 0
	for k, s := range r.keys {
		r.refill(s, t)
		if s.tokens.Cmp(rat(r.p.Burst)) >= 0 && s.fullSince.Cmp(limit) <= 0 {
			delete(r.keys, k)
			n++
		}
	}
	return n
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
	c := &Reference{p: r.p, rate: r.rate, keys: make(map[string]*state, len(r.keys))}
	for k, s := range r.keys {
		c.keys[k] = r.clone(s)
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
	if len(r.keys) != len(o.keys) {
		return false
	}
	for k, s := range r.keys {
		t := o.keys[k]
		if t == nil || s.tokens.Cmp(t.tokens) != 0 || s.last != t.last || s.anchor != t.anchor ||
			(s.fullSince == nil) != (t.fullSince == nil) || s.fullSince != nil && s.fullSince.Cmp(t.fullSince) != 0 {
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

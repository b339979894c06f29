package fuzz

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/tier"
)

// Numbers that change at run time, held to the reference: a trace of checks
// (and tiers of two keys) over a few keys in which the numbers change at
// random points — for the whole table, for one key, back to the policy's, a
// key reset — with each carry, under every refill mode. The reference converts every bucket at the
// moment of each change (Place: the tokens held, carried, clamped, in whole
// units of the new numbers), which is what the contract says; the runtime
// converts lazily, when a bucket is next used, and must decide identically.

// numbersOp is one step of a numbers trace.
type numbersOp struct {
	kind  byte // see the numbers* constants
	key   string
	cost  int64
	dt    int64
	n     atomicbucket.Numbers
	carry atomicbucket.Carry
}

const (
	numbersAllowN byte = iota
	numbersAllow
	numbersPeek
	numbersRefund
	numbersSetPlan
	numbersSetKey
	numbersClearKey
	numbersClearPlan
	numbersReset
	numbersKinds
	// numbersTier is an AllowN made a tier (decodeNumbers: a table's AllowN
	// with cost byte 14 mod 16): op.key's bucket, then the next key's, all
	// or nothing through tier.At, the reference composed alike.
	numbersTier
)

// numbersProgram is a rule and a trace.
type numbersProgram struct {
	limit  atomicbucket.Limit
	single bool
	ops    []numbersOp
}

func (p numbersProgram) String() string {
	return fmt.Sprintf("limit=%+v single=%v ops=%d", p.limit, p.single, len(p.ops))
}

// decodeNumbers turns fuzz bytes into a trace; false for a rule NewRule refuses.
func decodeNumbers(data []byte) (numbersProgram, bool) {
	r := &reader{b: data}
	flags := r.byte()
	var p numbersProgram
	l := &p.limit
	switch flags % 3 {
	case 1:
		l.Refill = atomicbucket.Interval
	case 2:
		l.Refill, l.Aligned = atomicbucket.Interval, true
	}
	p.single = flags&8 != 0
	l.Period = fuzzPeriods[int(r.byte())%len(fuzzPeriods)]
	l.Tokens = 1 + int64(r.byte()%40)
	l.Burst = 1 + int64(r.byte()%40)
	if flags&4 != 0 {
		l.Initial, l.InitialSet = int64(r.byte())%(l.Burst+1), true
	}
	if _, err := atomicbucket.NewRule(*l); err != nil {
		return p, false
	}
	emitNs := max(int64(l.Period)/l.Tokens, 1)
	for len(r.b) > 0 && len(p.ops) < 300 {
		op := numbersOp{kind: r.byte() % numbersKinds, key: fuzzKeys[r.byte()%4]}
		if p.single {
			op.key = ""
		}
		switch v := r.byte(); {
		case v == 255:
			op.dt = int64(365 * 24 * time.Hour)
		case v >= 240:
			op.dt = int64(v - 240)
		default:
			op.dt = int64(v) * emitNs / 16
		}
		c := r.byte()
		op.cost = 1 + int64(c)%min(l.Burst, 8)
		if c%16 == 15 {
			op.cost = 0
		}
		switch op.kind {
		case numbersSetPlan, numbersSetKey:
			op.n = atomicbucket.Numbers{Tokens: 1 + int64(r.byte()%40), Period: fuzzPeriods[int(r.byte())%len(fuzzPeriods)], Burst: 1 + int64(r.byte()%40)}
			if l.Refill == atomicbucket.Interval {
				op.n.Period = l.Period
			}
			fallthrough
		case numbersClearKey, numbersClearPlan:
			op.carry = atomicbucket.Carry(r.byte() % 3)
		}
		if p.single && (op.kind == numbersSetKey || op.kind == numbersClearKey) {
			op.kind = numbersAllowN
		}
		if !p.single && op.kind == numbersAllowN && c%16 == 14 {
			op.kind = numbersTier
		}
		p.ops = append(p.ops, op)
	}
	return p, true
}

// changing is the reference with changing numbers: one reference per
// installation in force (the table's, and each key's own), each bucket moved
// between them at a change by Place.
type changing struct {
	rule  *atomicbucket.Rule
	plan  *reference.Reference
	keys  map[string]*reference.Reference
	limit map[*reference.Reference]atomicbucket.Limit
	// single: one bucket (key ""), made at start, its grid anchored there.
	single bool
	// The envelopes: the largest burst and the fastest rate of the rule's
	// numbers (the policy's and every plan-level change's, not keys' own),
	// each version from the change that made it.
	envs []envelopeAt
}

// envelopeAt is one version of the envelope, in force from from (ns).
type envelopeAt struct {
	burst, tokens, periodNs, from int64
}

// widen takes l into the envelope from t.
func (c *changing) widen(l atomicbucket.Limit, t int64) {
	if len(c.envs) == 0 {
		c.envs = []envelopeAt{{burst: l.Burst, tokens: l.Tokens, periodNs: int64(l.Period)}}
		return
	}
	e := c.envs[len(c.envs)-1]
	n := e
	n.burst = max(n.burst, l.Burst)
	if big.NewRat(l.Tokens, int64(l.Period)).Cmp(big.NewRat(e.tokens, e.periodNs)) > 0 {
		n.tokens, n.periodNs = l.Tokens, int64(l.Period)
	}
	if n != e {
		n.from = t
		c.envs = append(c.envs, n)
	}
}

// settledFull reports whether key's bucket in from, full at t, counts as full
// for a change at t: while one of the envelopes was in force, it had been
// full long enough that a bucket with that envelope's numbers would be full
// too: the time the envelope's rate takes to add what lf's burst lacks of its
// burst (whole periods under interval refill).
func (c *changing) settledFull(key string, from *reference.Reference, lf atomicbucket.Limit, t int64) bool {
	full, _ := from.FullFrom(key)
	if full <= 0 {
		return true // full since the epoch: as a key without a bucket
	}
	end := t
	for i := len(c.envs) - 1; i >= 0; i-- {
		e := c.envs[i]
		if new(big.Rat).Add(big.NewRat(full, 1), e.wait(lf)).Cmp(big.NewRat(end, 1)) <= 0 {
			return true
		}
		if e.from <= full {
			return false
		}
		end = min(end, e.from)
	}
	return false
}

// wait is the time (ns) e's rate takes to add what l's burst lacks of e's
// burst: whole periods under interval refill.
func (e envelopeAt) wait(l atomicbucket.Limit) *big.Rat {
	lack := e.burst - l.Burst
	if lack <= 0 {
		return new(big.Rat)
	}
	if l.Refill == atomicbucket.Interval {
		return new(big.Rat).Mul(ceil(big.NewRat(lack, e.tokens)), big.NewRat(e.periodNs, 1))
	}
	return ceil(new(big.Rat).Mul(big.NewRat(lack, 1), big.NewRat(e.periodNs, e.tokens)))
}

// envWait is the newest envelope's wait for l, in whole ns.
func (c *changing) envWait(l atomicbucket.Limit) int64 {
	w := c.envs[len(c.envs)-1].wait(l)
	return w.Num().Int64() / w.Denom().Int64()
}

// ceil is the least integer ≥ x, as a rational.
func ceil(x *big.Rat) *big.Rat {
	q, m := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return new(big.Rat).SetInt(q)
}

func newChanging(rule *atomicbucket.Rule, single bool, start int64) *changing {
	c := &changing{rule: rule, keys: map[string]*reference.Reference{},
		limit: map[*reference.Reference]atomicbucket.Limit{}, single: single}
	c.plan = c.ref(rule.Limit())
	c.widen(rule.Limit(), 0)
	if single {
		c.plan.Create("", start)
	}
	return c
}

// ref is a reference for l's numbers, placed as the table's buckets are.
func (c *changing) ref(l atomicbucket.Limit) *reference.Reference {
	r := atomicbucket.MustRule(l)
	var p reference.Params
	if c.single {
		p = reference.SingleParamsOf(&r)
	} else {
		p = reference.ParamsOf(&r, 0, false)
		// Grids are placed by the policy's rule (the period never changes).
		p.KeyAnchor = nil
		if p.Interval && !p.Aligned {
			p.KeyAnchor = c.rule.KeyAnchor
		}
	}
	ref := reference.NewReference(p)
	ref.NeverSweep()
	c.limit[ref] = l
	return ref
}

func (c *changing) of(key string) *reference.Reference {
	if r, ok := c.keys[key]; ok {
		return r
	}
	return c.plan
}

// grain is the unit a greedy rule's buckets count in (1/scale ns); nil for interval rules.
func grain(l atomicbucket.Limit) *big.Rat {
	r := atomicbucket.MustRule(l)
	scale, _, _, ok := r.Units()
	if !ok {
		return nil
	}
	return big.NewRat(1, scale)
}

// move carries key's bucket, if it has one, from one reference to another at t.
func (c *changing) move(key string, from, to *reference.Reference, t int64, carry atomicbucket.Carry) {
	held, anchor, ok := from.Held(key, t)
	if !ok {
		return
	}
	lf, lt := c.limit[from], c.limit[to]
	settled := held.Cmp(big.NewRat(lf.Burst, 1)) >= 0 && c.settledFull(key, from, lf, t)
	fullFrom, _ := from.FullFrom(key)
	from.Forget(key)
	switch {
	case settled:
		// Full stays full, and counts as full at the next change until used,
		// whatever its new burst: full since early enough for lt's burst to
		// be settled by the envelope.
		since := min(fullFrom, t-c.envWait(lt))
		to.Place(key, max(since, 0), big.NewRat(lt.Burst, 1), grain(lt), anchor)
		return
	case held.Sign() < 0: // debt is carried as it is
	case carry == atomicbucket.CarryProportional:
		held.Mul(held, big.NewRat(lt.Burst, lf.Burst))
	case carry == atomicbucket.CarryAdditive && lt.Burst > lf.Burst:
		held.Add(held, big.NewRat(lt.Burst-lf.Burst, 1))
	}
	to.Place(key, t, held, grain(lt), anchor)
}

func (c *changing) limitWith(n atomicbucket.Numbers) atomicbucket.Limit {
	r, err := c.rule.WithNumbers(n)
	if err != nil {
		panic(err) // only called for numbers the runtime took
	}
	return r.Limit()
}

func (c *changing) setPlan(l atomicbucket.Limit, t int64, carry atomicbucket.Carry) {
	c.widen(l, t)
	old := c.plan
	c.plan = c.ref(l)
	for _, k := range old.Keys() {
		c.move(k, old, c.plan, t, carry)
	}
}

func (c *changing) setKey(key string, l atomicbucket.Limit, t int64, carry atomicbucket.Carry) {
	old := c.of(key)
	c.keys[key] = c.ref(l)
	c.move(key, old, c.keys[key], t, carry)
}

func (c *changing) clearKey(key string, t int64, carry atomicbucket.Carry) {
	old, ok := c.keys[key]
	if !ok {
		return
	}
	delete(c.keys, key)
	c.move(key, old, c.plan, t, carry)
}

func (c *changing) reset(key string, t int64) {
	r := c.of(key)
	_, anchor, held := r.Held(key, t)
	r.Forget(key)
	if !c.single {
		if held {
			// A keyed bucket is made anew at t, as a key first seen then.
			r.Create(key, t)
		}
		return
	}
	// A bucket is never absent: reset makes it anew, with the initial
	// tokens, on the grid it always had.
	l := c.limit[r]
	initial := l.Burst
	if l.InitialSet {
		initial = l.Initial
	}
	r.Place("", t, big.NewRat(initial, 1), grain(l), anchor)
}

// carriesInexact reports whether op carries a bucket out of numbers that are
// not exact: the tokens such a bucket holds are the runtime's approximation,
// which the reference does not model.
func (c *changing) carriesInexact(op numbersOp, t int64, inForce map[string]*atomicbucket.Rule) bool {
	from := func(key string) (*atomicbucket.Rule, bool) {
		if r, ok := inForce[key]; ok {
			_, _, held := c.keys[key].Held(key, t)
			return r, held
		}
		_, _, held := c.plan.Held(key, t)
		return inForce[""], held
	}
	var r *atomicbucket.Rule
	var held bool
	switch op.kind {
	case numbersSetPlan, numbersClearPlan:
		r, held = inForce[""], len(c.plan.Keys()) > 0
	case numbersSetKey:
		r, held = from(op.key)
	case numbersClearKey:
		if _, ok := inForce[op.key]; ok {
			r, held = from(op.key)
		}
	}
	return held && !r.Exact()
}

// exactNow reports whether every installation in force is exact, so that
// decisions must be equal (otherwise only the envelope binds, which
// FuzzDifferential checks for fixed numbers).
func exactNow(rules ...*atomicbucket.Rule) bool {
	for _, r := range rules {
		if !r.Exact() {
			return false
		}
	}
	return true
}

// numbersTarget is a table or a bucket under test.
type numbersTarget interface {
	AllowNAt(key string, now atomicbucket.Time, cost int64) atomicbucket.Decision
	AllowAt(key string, now atomicbucket.Time) bool
	PeekAt(key string, now atomicbucket.Time, cost int64) atomicbucket.Decision
	RefundAt(key string, now atomicbucket.Time, cost int64)
	SetNumbersAt(now atomicbucket.Time, n atomicbucket.Numbers, c atomicbucket.Carry) error
	SetKeyNumbersAt(now atomicbucket.Time, key string, n atomicbucket.Numbers, c atomicbucket.Carry) error
	ClearKeyNumbersAt(now atomicbucket.Time, key string, c atomicbucket.Carry)
	ClearNumbersAt(now atomicbucket.Time, c atomicbucket.Carry)
	Reset(key string, now atomicbucket.Time)
	NumbersFor(key string) (atomicbucket.Numbers, atomicbucket.Origin)
}

type tableTarget struct{ *atomicbucket.Table[string] }

func (t tableTarget) Reset(key string, now atomicbucket.Time) { t.Table.ResetAt(key, now) }

type bucketTarget struct{ *atomicbucket.Bucket }

func (b bucketTarget) AllowNAt(_ string, now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return b.Bucket.AllowNAt(now, cost)
}
func (b bucketTarget) AllowAt(_ string, now atomicbucket.Time) bool { return b.Bucket.AllowAt(now) }
func (b bucketTarget) PeekAt(_ string, now atomicbucket.Time, cost int64) atomicbucket.Decision {
	return b.Bucket.PeekAt(now, cost)
}
func (b bucketTarget) RefundAt(_ string, now atomicbucket.Time, cost int64) {
	b.Bucket.RefundAt(now, cost)
}
func (b bucketTarget) SetKeyNumbersAt(atomicbucket.Time, string, atomicbucket.Numbers, atomicbucket.Carry) error {
	panic("a bucket has no keys")
}
func (b bucketTarget) ClearKeyNumbersAt(atomicbucket.Time, string, atomicbucket.Carry) {
	panic("a bucket has no keys")
}
func (b bucketTarget) Reset(_ string, now atomicbucket.Time) { b.Bucket.ResetAt(now) }
func (b bucketTarget) NumbersFor(string) (atomicbucket.Numbers, atomicbucket.Origin) {
	return b.Bucket.NumbersFor()
}

// runNumbers applies p to the changing reference and to the runtime, and
// returns the first difference. It reports how many decisions (and of them
// tiers) it compared// after a change.
func runNumbers(p numbersProgram) (compared, tiers int, err error) {
	rule, err := atomicbucket.NewRule(p.limit)
	if err != nil {
		return 0, 0, nil
	}
	start := int64(time.Hour)
	var target numbersTarget
	if p.single {
		target = bucketTarget{atomicbucket.NewBucketAt(rule, atomicbucket.Time(start))}
	} else {
		target = tableTarget{atomicbucket.NewTable[string](rule, atomicbucket.TableOptions{})}
	}
	ref := newChanging(&rule, p.single, start)
	inForce := map[string]*atomicbucket.Rule{"": &rule}
	changed := false
	planOrigin := atomicbucket.FromPolicy
	t := start
	for i, op := range p.ops {
		t = min(t+op.dt, maxFuzzTime)
		now := atomicbucket.Time(t)
		at := func(what string, got, want any) error {
			return fmt.Errorf("op %d (%+v) at t=%d: %s: runtime %v, reference %v", i, op, t, what, got, want)
		}
		if ref.carriesInexact(op, t, inForce) {
			// The buckets this change carries were written by inexact numbers
			// (the runtime's fixed point, not the reference's rationals): they
			// part from the reference for good, as after any inexact decision.
			return compared, tiers, nil
		}
		switch op.kind {
		case numbersSetPlan, numbersSetKey:
			var err error
			if op.kind == numbersSetPlan {
				err = target.SetNumbersAt(now, op.n, op.carry)
			} else {
				err = target.SetKeyNumbersAt(now, op.key, op.n, op.carry)
			}
			_, refuse := rule.WithNumbers(op.n)
			if (err == nil) != (refuse == nil) {
				return compared, tiers, at("refusal", err, refuse)
			}
			if err != nil {
				continue
			}
			l := ref.limitWith(op.n)
			r := atomicbucket.MustRule(l)
			if !r.Exact() {
				// Buckets carried through inexact numbers part from the exact
				// reference for good; FuzzDifferential holds inexact numbers to
				// the envelope.
				return compared, tiers, nil
			}
			if op.kind == numbersSetPlan {
				ref.setPlan(l, t, op.carry)
				inForce[""] = &r
				planOrigin = atomicbucket.FromOverride
			} else {
				ref.setKey(op.key, l, t, op.carry)
				inForce[op.key] = &r
			}
			changed = true
		case numbersClearKey:
			target.ClearKeyNumbersAt(now, op.key, op.carry)
			ref.clearKey(op.key, t, op.carry)
			delete(inForce, op.key)
		case numbersClearPlan:
			target.ClearNumbersAt(now, op.carry)
			if changed {
				ref.setPlan(p.limit, t, op.carry)
				inForce[""] = &rule
				planOrigin = atomicbucket.FromPolicy
			}
		case numbersReset:
			target.Reset(op.key, now)
			ref.reset(op.key, t)
		default:
			keys := []string{op.key}
			if op.kind == numbersTier {
				keys = append(keys, nextKey(op.key))
			}
			rules := []*atomicbucket.Rule{inForce[""]}
			for _, k := range keys {
				if r, ok := inForce[k]; ok {
					rules = append(rules, r)
				}
			}
			exact := exactNow(rules...)
			r := ref.of(op.key)
			switch op.kind {
			case numbersTier:
				tbl := target.(tableTarget).Table
				gd, gi, gden := tier.At(now, tier.Table(tbl, keys[0], op.cost), tier.Table(tbl, keys[1], op.cost))
				wd, wi, wden := tier.At(now, refStep{ref, keys[0], op.cost}, refStep{ref, keys[1], op.cost})
				if exact && (gd != wd || gi != wi || gden != wden) {
					return compared, tiers, at("Tier", fmt.Sprint(describe(gd), " step ", gi, " denied ", gden), fmt.Sprint(describe(wd), " step ", wi, " denied ", wden))
				}
			case numbersAllowN:
				got, want := target.AllowNAt(op.key, now, op.cost), r.AllowN(op.key, t, op.cost)
				if exact && got != want {
					return compared, tiers, at("AllowN", describe(got), describe(want))
				}
			case numbersAllow:
				got, want := target.AllowAt(op.key, now), r.AllowN(op.key, t, 1).Allowed
				if exact && got != want {
					return compared, tiers, at("Allow", got, want)
				}
			case numbersPeek:
				got, want := target.PeekAt(op.key, now, op.cost), r.Peek(op.key, t, op.cost)
				if exact && got != want {
					return compared, tiers, at("Peek", describe(got), describe(want))
				}
			case numbersRefund:
				target.RefundAt(op.key, now, op.cost)
				r.Refund(op.key, t, op.cost)
			}
			if !exact {
				return compared, tiers, nil // the reference and the runtime may part from here
			}
			if changed {
				compared++
				if op.kind == numbersTier {
					tiers++
				}
			}
		}
		// What is in force is reported as set.
		n, origin := target.NumbersFor(op.key)
		want, wantOrigin := atomicbucket.NumbersOf(ref.limit[ref.of(op.key)]), planOrigin
		if ref.of(op.key) != ref.plan {
			wantOrigin = atomicbucket.FromKeyOverride
		}
		if n != want || origin != wantOrigin {
			return compared, tiers, at("NumbersFor", fmt.Sprint(n, " ", origin), fmt.Sprint(want, " ", wantOrigin))
		}
	}
	return compared, tiers, nil
}

// nextKey is the key after key among fuzzKeys (a tier's second step).
func nextKey(key string) string {
	return fuzzKeys[(slices.Index(fuzzKeys, key)+1)%len(fuzzKeys)]
}

// refStep is a key's part in a tier on the changing reference: the
// reference in force for the key when the step runs.
type refStep struct {
	c    *changing
	key  string
	cost int64
}

func (s refStep) AllowNAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.c.of(s.key).AllowN(s.key, int64(now), s.cost)
}
func (s refStep) RefundAt(now atomicbucket.Time) { s.c.of(s.key).Refund(s.key, int64(now), s.cost) }

// FuzzNumbers holds the runtime, with numbers changing at random points of
// the trace, to the reference converting at each change.
func FuzzNumbers(f *testing.F) {
	for _, s := range numbersSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ok := decodeNumbers(data)
		if !ok {
			return
		}
		if _, _, err := runNumbers(p); err != nil {
			t.Fatalf("%v\n%v", p, err)
		}
	})
}

func numbersSeeds() [][]byte {
	rng := rand.New(rand.NewPCG(7, 11))
	var seeds [][]byte
	for _, flags := range []byte{0, 1, 2, 4, 8, 9, 10, 12} {
		b := []byte{flags, 5, 9, 19, 3}
		for range 400 {
			b = append(b, byte(rng.IntN(256)))
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// TestNumbersRandom runs random traces (a fixed seed: the same in every run),
// and fails unless enough decisions after a change were compared.
func TestNumbersRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	compared, tiers, programs := 0, 0, 0
	for range 3000 {
		b := make([]byte, 600)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		p, ok := decodeNumbers(b)
		if !ok {
			continue
		}
		n, nt, err := runNumbers(p)
		if err != nil {
			t.Fatalf("%v\n%v", p, err)
		}
		compared += n
		tiers += nt
		programs++
	}
	if compared < 50000 || tiers < 900 {
		t.Fatalf("only %d decisions (%d tiers) after a change compared in %d programs", compared, tiers, programs)
	}
	t.Logf("%d decisions (%d tiers) after a change equal to the reference's, in %d programs", compared, tiers, programs)
}

// Package storetest is the contract a shared store passes: Run(t, harness)
// runs every property, each on a server of its own, for Redis, PostgreSQL
// or a store written elsewhere. It holds the store to the exact reference
// (package internal/reference) with the same random rules, keys, costs and
// microsecond times for every store, each driven through its explicit-time
// variant (Backend), and drives generated packages over it as services do.
package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/tier"
)

// Store is a store's explicit-time check, as the tests drive it.
type Store interface {
	// Rule builds a rule of l named name; exact reports whether its units
	// hold the written rate exactly (only exact rules are compared).
	Rule(name string, l atomicbucket.Limit) (rule any, exact bool, err error)
	// Check decides steps (rules from Rule) all or nothing at Unix time sec
	// seconds and usec µs, taking their costs when take is set: the decision
	// and the index of the step it is from.
	Check(steps []Part, take bool, sec, usec int64) (atomicbucket.Decision, int, error)
}

// Part is one rule's part in a check.
type Part struct {
	Rule any
	Key  string
	Cost int64
}

// RandomGreedy draws a greedy limit with a period of whole microseconds.
func RandomGreedy(rng *rand.Rand) atomicbucket.Limit {
	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, time.Hour, 24 * time.Hour}
	l := atomicbucket.Limit{
		Tokens: 1 + rng.Int64N([]int64{3, 100, 1_000_000}[rng.IntN(3)]),
		Period: periods[rng.IntN(len(periods))],
		Burst:  1 + rng.Int64N([]int64{5, 1000, 1_000_000}[rng.IntN(3)]),
	}
	if rng.IntN(4) == 0 {
		l.Initial, l.InitialSet = rng.Int64N(l.Burst+1), true
	}
	return l
}

func referenceOf(l atomicbucket.Limit) *reference.Reference {
	r := atomicbucket.MustRule(l)
	return reference.NewReference(reference.ParamsOf(&r, 0, false))
}

// Greedy drives rules random greedy rules, 80 checks each (a fifth of them
// decide only), at random microsecond times from start (Unix seconds) on,
// and holds every decision (allowed, remaining, retry-after, reset) of the
// exact ones to the reference at the same times. It fails when fewer than a
// quarter of the rules are exact, and returns the rules and decisions compared.
func Greedy(t *testing.T, st Store, seed uint64, rules int, start int64) (exact, decisions int) {
	rng := rand.New(rand.NewPCG(seed, 5))
	for i := range rules {
		l := RandomGreedy(rng)
		r, ok, err := st.Rule(fmt.Sprintf("g%d_%d", seed, i), l)
		if err != nil || !ok {
			continue // a draw that does not fit 2^53 within the error bound, or not exact
		}
		exact++
		ref := referenceOf(l)
		sec, usec := start+rng.Int64N(1e6), rng.Int64N(1e6)
		keys := []string{"a", "b", "c"}
		step := max(int64(l.Period)/1000/max(l.Tokens, 1), 1) // one token's time, µs
		for range 80 {
			usec += rng.Int64N(3 * step)
			sec, usec = sec+usec/1e6, usec%1e6
			key := keys[rng.IntN(len(keys))]
			cost := rng.Int64N(l.Burst + 2) // 0 and burst+1 included
			take := rng.IntN(5) != 0
			got, _, err := st.Check([]Part{{r, key, cost}}, take, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			tns := sec*1e9 + usec*1e3
			var want atomicbucket.Decision
			if take {
				want = ref.AllowN(key, tns, cost)
			} else {
				want = ref.Peek(key, tns, cost)
			}
			decisions++
			if got != want {
				t.Fatalf("%+v key %s at %d.%06d cost %d take %v: store %+v, reference %+v", l, key, sec, usec, cost, take, got, want)
			}
		}
	}
	if exact < rules/4 {
		t.Fatalf("only %d of %d rules exact", exact, rules)
	}
	return exact, decisions
}

// Interval drives rules random interval rules (grids placed by the key, or
// aligned to the wall clock), 60 checks each, at random microsecond times
// from start on, against the reference with the local tables' grids
// (atomicbucket.Rule.KeyAnchor) at the same wall-clock times: the same
// decisions, so a key's grid is where every instance and every store puts it.
func Interval(t *testing.T, st Store, seed uint64, rules int, start int64) (decisions int) {
	rng := rand.New(rand.NewPCG(seed, 17))
	periods := []time.Duration{time.Millisecond, 250 * time.Millisecond, time.Second, 10 * time.Second, 90 * time.Second, time.Hour, 24 * time.Hour, 7*time.Millisecond + 3*time.Microsecond}
	for i := range rules {
		l := atomicbucket.Limit{
			Tokens: 1 + rng.Int64N(20), Period: periods[rng.IntN(len(periods))],
			Burst: 1 + rng.Int64N(60), Refill: atomicbucket.Interval, Aligned: rng.IntN(3) == 0,
		}
		if rng.IntN(3) == 0 {
			l.Initial, l.InitialSet = rng.Int64N(l.Burst+1), true
		}
		r, _, err := st.Rule(fmt.Sprintf("i%d_%d", seed, i), l)
		if err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		ref := referenceOf(l)
		sec, usec := start+rng.Int64N(86400), rng.Int64N(1e6)
		step := max(int64(l.Period)/1000/l.Tokens, 1)
		for range 60 {
			usec += rng.Int64N(2 * step)
			sec, usec = sec+usec/1e6, usec%1e6
			key := []string{"alice", "bob", "42"}[rng.IntN(3)]
			cost := rng.Int64N(l.Burst + 2)
			got, _, err := st.Check([]Part{{r, key, cost}}, true, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			want := ref.AllowN(key, int64(atomicbucket.FromWall(sec*1e9+usec*1e3)), cost)
			decisions++
			if got != want {
				t.Fatalf("%+v key %s at %d.%06d cost %d: store %+v, reference %+v", l, key, sec, usec, cost, got, want)
			}
		}
	}
	return decisions
}

// Tiers drives tiers tiers of 1 to 4 random exact rules (greedy, and interval
// ones among them), 60 requests each, against the reference composed with
// tier.At (ordered takes, refunded on a denial): the same
// decision, from the same rule, every time. It fails unless between a tenth
// and nine tenths of the requests are denied.
func Tiers(t *testing.T, st Store, seed uint64, tiers int, start int64) (decisions, denied int) {
	rng := rand.New(rand.NewPCG(seed, 9))
	for i := range tiers {
		n := 1 + rng.IntN(4)
		var rules []any
		var limits []atomicbucket.Limit
		var refs []*reference.Reference
		minStep := int64(1 << 62)
		for j := 0; len(rules) < n; j++ {
			l := RandomGreedy(rng)
			l.Burst = min(l.Burst, 50) // small bursts: tiers deny often
			l.Initial = min(l.Initial, l.Burst)
			if rng.IntN(3) == 0 { // an interval rule beside greedy ones
				l.Refill, l.Aligned, l.Tokens = atomicbucket.Interval, rng.IntN(2) == 0, 1+rng.Int64N(10)
			}
			r, ok, err := st.Rule(fmt.Sprintf("t%d_%d_%d", seed, i, j), l)
			if err != nil || !ok {
				continue
			}
			rules, limits = append(rules, r), append(limits, l)
			refs = append(refs, referenceOf(l))
			minStep = min(minStep, max(int64(l.Period)/1000/l.Tokens, 1))
		}
		sec, usec := start, rng.Int64N(1e6)
		for range 60 {
			usec += rng.Int64N(3 * minStep)
			sec, usec = sec+usec/1e6, usec%1e6
			steps := make([]Part, n)
			refSteps := make([]tier.Step, n)
			for k := range n {
				key := []string{"a", "b"}[rng.IntN(2)]
				cost := rng.Int64N(limits[k].Burst/2 + 2)
				steps[k] = Part{rules[k], key, cost}
				refSteps[k] = refs[k].Step(key, cost)
			}
			got, gi, err := st.Check(steps, true, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			want, wi, _ := tier.At(atomicbucket.FromWall(sec*1e9+usec*1e3), refSteps...)
			decisions++
			if !want.Allowed {
				denied++
			}
			if got != want || gi != wi {
				t.Fatalf("tier %d at %d.%06d steps %+v: store %+v from %d, reference %+v from %d", i, sec, usec, steps, got, gi, want, wi)
			}
		}
	}
	if denied < decisions/10 || denied > decisions*9/10 {
		t.Fatalf("%d of %d tier requests denied: the draw does not exercise both sides", denied, decisions)
	}
	return decisions, denied
}

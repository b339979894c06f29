package fuzz

import (
	"math/rand/v2"
	"testing"
)

// FuzzDifferential decodes the input into a rule and a sequence of operations
// (advance time, allow, peek, reserve, cancel, refund, sweep) over a few keys and
// applies it to the reference and every optimised implementation: decisions must
// be identical whenever the rule is exactly representable, and every admitted
// stream must stay inside the envelope b + r·Δ in every window.
func FuzzDifferential(f *testing.F) {
	for _, s := range seedPrograms() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ok := decode(data)
		if !ok {
			return
		}
		r := p.cfg.rule(t)
		if err := runGroups(p, impls(t, p.cfg, p.single), r.Exact()); err != nil {
			t.Fatalf("%v\n%v", p, err)
		}
	})
}

// seedPrograms are hand-picked inputs: one per refill mode, cap choice and
// single/keyed form, plus an inexact rate.
func seedPrograms() [][]byte {
	ops := func(n int, seed uint64) []byte {
		rng := rand.New(rand.NewPCG(seed, seed))
		b := make([]byte, 5*n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var seeds [][]byte
	for flags := range byte(64) {
		// flags, period index 5 (1s), token choice 0 (1 + next%10), 4 → 5 tokens, burst 10, initial 3
		head := []byte{flags, 5, 0, 4, 9, 3}
		seeds = append(seeds, append(head, ops(60, uint64(flags))...))
	}
	// 997 per hour: greedy, exact at scale 997; 1000003 per day: inexact
	seeds = append(seeds, append([]byte{0, 8, 2, 9, 20}, ops(80, 100)...))
	seeds = append(seeds, append([]byte{8, 9, 2, 11, 20}, ops(80, 101)...))
	return seeds
}

// TestDifferentialRandom runs many random programs through the differential
// check in every `go test`, beyond the committed corpus.
func TestDifferentialRandom(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 300
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ran, inexact := 0, 0
	for i := range n {
		data := make([]byte, 16+rng.IntN(600))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		p, ok := decode(data)
		if !ok {
			continue
		}
		r := p.cfg.rule(t)
		if !r.Exact() {
			inexact++
		}
		if err := runGroups(p, impls(t, p.cfg, p.single), r.Exact()); err != nil {
			t.Fatalf("program %d: %v\n%v", i, p, err)
		}
		ran++
	}
	if ran < n/2 || inexact == 0 {
		t.Fatalf("only %d of %d random programs were valid, %d inexact: the decoder needs attention", ran, n, inexact)
	}
	t.Logf("%d programs, %d of them inexact", ran, inexact)
}

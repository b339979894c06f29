package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Batches drives rules random exact rules (greedy, and interval ones among
// them), 25 batches each, through st's Batch (a Batcher: coalesced checks) at
// random microsecond times from start on: batches of up to 48 independent
// checks on three keys, in runs of the same key and cost (a hot key's batch
// is one long run), costs mostly 1, some 0, 2 or beyond the burst, with small
// bursts so that runs cross from admitted to denied. Every decision is held
// to the reference deciding the batch's checks one by one, in order, at the
// batch's time. It fails unless between a tenth and nine tenths of the
// checks are denied, and returns the decisions compared and the runs longer
// than one check.
func Batches(t *testing.T, st Store, seed uint64, rules int, start int64) (decisions, runs int) {
	b, ok := st.(Batcher)
	if !ok {
		t.Fatalf("storetest.Batches: %T decides no batches (Batcher)", st)
	}
	rng := rand.New(rand.NewPCG(seed, 23))
	denied := 0
	for i := range rules {
		l := RandomGreedy(rng)
		l.Burst = 1 + l.Burst%40
		l.Initial = min(l.Initial, l.Burst)
		if rng.IntN(3) == 0 {
			l.Refill, l.Aligned, l.Tokens = atomicbucket.Interval, rng.IntN(2) == 0, 1+rng.Int64N(10)
		}
		r, exact, err := st.Rule(fmt.Sprintf("b%d_%d", seed, i), l)
		if err != nil || !exact {
			continue
		}
		ref := referenceOf(l)
		sec, usec := start+rng.Int64N(86400), rng.Int64N(1e6)
		step := max(int64(l.Period)/1000/l.Tokens, 1) // one token's time, µs
		for range 25 {
			usec += rng.Int64N(8 * step)
			sec, usec = sec+usec/1e6, usec%1e6
			var keys []string
			var costs []int64
			for size := 1 + rng.IntN(48); len(keys) < size; {
				key := []string{"a", "b", "c"}[rng.IntN(3)]
				cost := []int64{1, 1, 1, 1, 0, 2, l.Burst + 1}[rng.IntN(7)]
				n := 1 + rng.IntN(12)
				if n > 1 {
					runs++
				}
				for range min(n, size-len(keys)) {
					keys, costs = append(keys, key), append(costs, cost)
				}
			}
			got, err := b.Batch(r, keys, costs, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			now := int64(atomicbucket.FromWall(sec*1e9 + usec*1e3))
			for j := range keys {
				want := ref.AllowN(keys[j], now, costs[j])
				decisions++
				if !want.Allowed {
					denied++
				}
				if got[j] != want {
					t.Fatalf("%+v: batch check %d of %d (%s, cost %d) at %d.%06d: store %+v, reference %+v",
						l, j, len(keys), keys[j], costs[j], sec, usec, got[j], want)
				}
			}
		}
	}
	if denied*10 < decisions || denied*10 > 9*decisions {
		t.Fatalf("%d of %d batched checks denied: the draws do not cross the burst often enough to hold runs to the reference", denied, decisions)
	}
	return decisions, runs
}

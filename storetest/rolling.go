package storetest

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
	rollingv1 "github.com/limitgen/limitgen/internal/rolling/v1"
	rollingv2 "github.com/limitgen/limitgen/internal/rolling/v2"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// DeployFigures are what RollingDeploy measured for one rule.
type DeployFigures struct {
	Rule     string
	Admitted [2]int // by v1's instances and by v2's
	// Worst is the largest count of admissions in one window less that
	// window's envelope (max burst + max rate·Δ): at most 0 when the stream
	// kept within it.
	Worst float64
	// Converted is how many admissions followed one by the other version:
	// each was decided on a bucket the other version wrote last.
	Converted int
}

func (f DeployFigures) String() string {
	return fmt.Sprintf("%s: v1 admitted %d, v2 %d (%d after the other version's write); worst window %+.2f against the envelope",
		f.Rule, f.Admitted[0], f.Admitted[1], f.Converted, f.Worst)
}

// admitted is one allowed check: when its call started and returned, and
// which version made it.
type admitted struct {
	start, end time.Duration
	version    int
}

// RollingDeploy: two generated versions of one service's shared rules
// (storetest/rolling: v1.yaml, then v2.yaml with other rates,
// bursts, units, and for Batch interval refill instead of greedy) check the
// same keys on one store, two instances of each, as during a rolling deploy
// that takes d: each version's first check of a full bucket in turn (both
// admitted), then both side by side, and v2 alone for the
// last quarter. A bucket is kept in the numbers it was written with
// and converted by a check with other numbers (tokens held carried, clamped
// to the new burst), so the admitted stream of each rule keeps, in every
// window of length Δ, within the larger rule's envelope: max burst (with an
// interval rule's boundary tokens) + max rate·Δ. A store that judged a bucket by the reader's numbers alone
// admitted about twice the burst at once (a TAT of 10/min read as 7 per 3 s
// is nearly full).
//
// The window is judged from the calls' start and end times on this
// machine's clock, so that the store's own decision times lie inside them.
func RollingDeploy(t *testing.T, open func(t *testing.T) shared.Store, d time.Duration) []DeployFigures {
	ctx := context.Background()
	var v1s []*rollingv1.Limits
	var v2s []*rollingv2.Limits
	for range 2 {
		v1s = append(v1s, rollingv1.New(rollingv1.WithStore(open(t))))
		v2s = append(v2s, rollingv2.New(rollingv2.WithStore(open(t))))
	}
	for _, l := range v1s {
		if err := l.SharedErr(); err != nil {
			t.Fatal(err)
		}
	}
	type rule struct {
		name  string
		key   string
		check [2]func(i int, key string) verdict.Result
		// The envelope: at most lead + rate·Δ in any window of length Δ.
		// lead is the larger burst, or for an interval rule its burst plus
		// the tokens of one boundary (a full bucket spent just before a
		// boundary is given them at once); rate is the larger version's.
		lead  int64
		rate  float64 // tokens a second
		least int64   // the smaller burst: admitted at least, from full
		order [2]int  // the versions' first checks, in turn: both admitted
	}
	rules := []rule{
		// v1 first: a v2 that read v1's TAT (a token in 6 s) in its own units
		// (a token in 3/7 s) would find the bucket empty.
		{name: "PerUser", key: "alice", lead: 10, rate: 7.0 / 3, least: 7, order: [2]int{0, 1},
			check: [2]func(int, string) verdict.Result{
				func(i int, key string) verdict.Result { return v1s[i].PerUser.AllowN(ctx, key, 1) },
				func(i int, key string) verdict.Result { return v2s[i].PerUser.AllowN(ctx, key, 1) },
			}},
		// v2 first: an interval checker judges what another version wrote at
		// its grid's last boundary, so v2 may rightly find a bucket v1 took
		// from after that boundary empty until the next one.
		{name: "Batch", key: "bob", lead: 8 + 4, rate: 5, least: 5, order: [2]int{1, 0},
			check: [2]func(int, string) verdict.Result{
				func(i int, key string) verdict.Result { return v1s[i].Batch.AllowN(ctx, key, 1) },
				func(i int, key string) verdict.Result { return v2s[i].Batch.AllowN(ctx, key, 1) },
			}},
	}
	// Every instance has its connections before the deploy starts (else
	// one version could empty a bucket before the other's first check).
	for i := range 2 {
		for _, r := range rules {
			for version := range 2 {
				r.check[version](i, "warm-up")
			}
		}
	}
	// Each version's first check of a full bucket, in the rule's order, is
	// admitted: a version that misread what the other wrote would be shut
	// out here (and, left to the race below, one version can take a whole
	// bucket before the other's first check on a loaded machine). Then both
	// versions check side by side, and v2 runs alone for the last quarter,
	// when the deploy is done.
	epoch := time.Now()
	streams := make([][]admitted, len(rules))
	for ri, r := range rules {
		for _, version := range r.order {
			start := time.Since(epoch)
			res := r.check[version](0, r.key)
			if res.Degraded || res.Err != nil || !res.Allowed {
				t.Fatalf("%s: v%d's first check of a full bucket (the versions in the order %v, from 0): %+v", r.name, version+1, r.order, res)
			}
			streams[ri] = append(streams[ri], admitted{start, time.Since(epoch), version})
		}
	}
	begin := time.Now()
	active := [2][2]time.Time{{begin, begin.Add(d * 3 / 4)}, {begin, begin.Add(d)}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for ri, r := range rules {
		for version := range 2 {
			for i := range 2 {
				wg.Go(func() {
					time.Sleep(time.Until(active[version][0]))
					for time.Now().Before(active[version][1]) {
						start := time.Since(epoch)
						res := r.check[version](i, r.key)
						end := time.Since(epoch)
						if res.Degraded || res.Err != nil {
							errs <- fmt.Errorf("%s v%d: degraded: %v", r.name, version+1, res.Err)
							return
						}
						if res.Allowed {
							mu.Lock()
							streams[ri] = append(streams[ri], admitted{start, end, version})
							mu.Unlock()
						}
						time.Sleep(time.Millisecond)
					}
				})
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var figures []DeployFigures
	for ri, r := range rules {
		adm := streams[ri]
		f := DeployFigures{Rule: r.name, Worst: envelopeExcess(adm, r.lead, r.rate)}
		slices.SortFunc(adm, func(a, b admitted) int { return int(a.end - b.end) })
		for j, a := range adm {
			f.Admitted[a.version]++
			if j > 0 && adm[j-1].version != a.version {
				f.Converted++
			}
		}
		figures = append(figures, f)
		if f.Worst > 0 {
			t.Errorf("%s: a window admitted %.2f beyond the larger version's envelope (%d + %.3g/s)", r.name, f.Worst, r.lead, r.rate)
		}
		if f.Admitted[0] == 0 || f.Admitted[1] == 0 {
			// Both check a full bucket from the start, so each admits part of
			// it (a version that read the other's TAT in its own units was
			// shut out for as long as a minute).
			t.Errorf("%s: one version admitted nothing", r.name)
		}
		if n := int64(f.Admitted[0] + f.Admitted[1]); n < r.least {
			t.Errorf("%s: the two versions admitted %d together; a full bucket holds at least %d", r.name, n, r.least)
		}
	}
	return figures
}

// envelopeExcess is the largest, over every window, of the admissions whose
// calls lie inside it less lead + rate·(its length): a window from one
// call's start to another's end holds at least the admissions whose calls
// started and ended within it, whatever the store's decision times were.
func envelopeExcess(adm []admitted, lead int64, rate float64) float64 {
	worst := -float64(lead)
	ends := make([]time.Duration, 0, len(adm))
	for _, first := range adm {
		ends = ends[:0]
		for _, a := range adm {
			if a.start >= first.start {
				ends = append(ends, a.end)
			}
		}
		slices.Sort(ends)
		for k, end := range ends {
			excess := float64(k+1) - float64(lead) - rate*(end-first.start).Seconds()
			worst = max(worst, excess)
		}
	}
	return worst
}

// Versions holds a store's conversions to the reference: pairs random
// pairs of rules of one name (greedy or interval, other rates, bursts and
// units: two versions of a rule), 100 checks each by either version at
// random microsecond times from start on, every decision equal to the
// reference's. The reference keeps each key's bucket in the numbers of the
// version whose check last wrote it (an admission that took tokens) and
// converts it for a check by the other version as a store must: what it
// holds by its writer's numbers at the check's time (for an interval
// checker, at its grid's last boundary: the next adds a period's tokens),
// never more than the checker's burst, whole tokens for interval refill, and
// for greedy refill the time owed rounded up to the checker's unit. Only rules whose units are
// exact are drawn. A check goes alone, in a tier beside a rule that always
// admits, or (taking, on a Batcher) in a batch: a store's paths for each must
// convert alike. It returns the decisions compared and how many were of a
// converted bucket.
func Versions(t *testing.T, st Store, seed uint64, pairs int, start int64) (decisions, converted int) {
	rng := rand.New(rand.NewPCG(seed, 23))
	draw := func() atomicbucket.Limit {
		if rng.IntN(2) == 0 {
			l := RandomGreedy(rng)
			l.Initial, l.InitialSet = 0, false
			return l
		}
		periods := []time.Duration{time.Millisecond, 250 * time.Millisecond, time.Second, 10 * time.Second, time.Hour, 7*time.Millisecond + 3*time.Microsecond}
		return atomicbucket.Limit{
			Tokens: 1 + rng.Int64N(20), Period: periods[rng.IntN(len(periods))],
			Burst: 1 + rng.Int64N(60), Refill: atomicbucket.Interval, Aligned: rng.IntN(3) == 0,
		}
	}
	loose, _, err := st.Rule(fmt.Sprintf("v%d_loose", seed), atomicbucket.Limit{Tokens: 1_000_000, Period: time.Second, Burst: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	batcher, _ := st.(Batcher)
	for p := 0; p < pairs; {
		name := fmt.Sprintf("v%d_%d", seed, p)
		var ls [2]atomicbucket.Limit
		var rules [2]any
		var refs [2]*reference.Reference
		var grains [2]*big.Rat
		ok := true
		for v := range 2 {
			ls[v] = draw()
			r, exact, err := st.Rule(name, ls[v])
			if err != nil || !exact {
				ok = false
				break
			}
			rules[v], refs[v] = r, referenceOf(ls[v])
			refs[v].NeverSweep()
			if u, _ := shared.MicroUnits(ls[v]); u.PerMicro > 0 {
				grains[v] = big.NewRat(1000, u.PerMicro)
			}
		}
		if !ok {
			continue
		}
		p++
		owner := map[string]int{} // the version whose check last wrote the key
		sec, usec := start+rng.Int64N(86400), rng.Int64N(1e6)
		for range 100 {
			v := rng.IntN(2)
			l := ls[rng.IntN(2)]
			usec += rng.Int64N(3 * max(int64(l.Period)/1000/l.Tokens, 1))
			sec, usec = sec+usec/1e6, usec%1e6
			key := []string{"a", "b"}[rng.IntN(2)]
			cost := rng.Int64N(max(ls[0].Burst, ls[1].Burst) + 2)
			take := rng.IntN(5) != 0
			tns := int64(atomicbucket.FromWall(sec*1e9 + usec*1e3))
			w, written := owner[key]
			if written && w != v {
				// An interval bucket converts what the other held at its own
				// grid's last boundary, at the store's µs before it.
				at := refs[v].Boundary(key, tns)
				wall := at - int64(atomicbucket.FromWall(0))
				at = int64(atomicbucket.FromWall(floorDiv(wall, 1000) * 1000))
				refs[v].Rebase(key, tns, refs[w].Tokens(key, at), grains[v])
				converted++
			}
			// The check goes alone, in a tier beside a rule that always
			// admits, or in a batch: each has its own path on a store that
			// must convert the bucket (Redis's short paths read only values
			// written with their own numbers).
			var got atomicbucket.Decision
			var err error
			switch via := rng.IntN(3); {
			case via == 1:
				var i int
				got, i, err = st.Check([]Part{{rules[v], key, cost}, {loose, key, 0}}, take, sec, usec)
				if err == nil && i != 0 {
					t.Fatalf("a tier with a rule that always admits decided by it: %+v", got)
				}
			case via == 2 && take && batcher != nil:
				var ds []atomicbucket.Decision
				if ds, err = batcher.Batch(rules[v], []string{key}, []int64{cost}, sec, usec); err == nil {
					got = ds[0]
				}
			default:
				got, _, err = st.Check([]Part{{rules[v], key, cost}}, take, sec, usec)
			}
			if err != nil {
				t.Fatal(err)
			}
			var want atomicbucket.Decision
			if take {
				want = refs[v].AllowN(key, tns, cost)
			} else {
				want = refs[v].Peek(key, tns, cost)
			}
			decisions++
			if got != want {
				t.Fatalf("v%d of %+v / %+v, key %s at %d.%06d cost %d take %v (written by v%d: %v): store %+v, reference %+v",
					v+1, ls[0], ls[1], key, sec, usec, cost, take, w+1, written, got, want)
			}
			if take && want.Allowed && cost > 0 {
				owner[key] = v
			}
		}
	}
	return decisions, converted
}

// KeptForTheLargerBurst: a bucket that one version drains and another
// (with a larger burst) then reads is kept until it is full by the reader's
// numbers too. v1's Batch (5/s, burst 5) takes its whole burst; v2's (4 per
// 1s, burst 8, interval) checks it at once, converted and denied; a second
// later, when v1's bucket is full by v1's numbers but not yet by v2's, v2
// asks for 8. The bucket holds at most v1's 5 then, so it is denied. A
// store that forgot the bucket when it was full by its writer's numbers (an
// expired Redis key, a swept row) gave v2 a new, full bucket of 8: a
// version's burst refilled by a version change. forget runs just before
// that check (a store that sweeps full buckets on a schedule sweeps then).
func KeptForTheLargerBurst(t *testing.T, open func(t *testing.T) shared.Store, forget func()) {
	ctx := context.Background()
	v1 := rollingv1.New(rollingv1.WithStore(open(t)))
	v2 := rollingv2.New(rollingv2.WithStore(open(t)))
	const v1Full = time.Second // v1's burst over its rate
	for attempt := range 10 {
		key := fmt.Sprintf("kept-%d-%d", time.Now().UnixNano(), attempt)
		drained := v1.Batch.AllowN(ctx, key, 5)
		if !drained.Allowed || drained.Err != nil {
			t.Fatalf("v1 could not take its full burst of a new bucket: %+v", drained)
		}
		read := v2.Batch.AllowN(ctx, key, 1)
		if read.Err != nil {
			t.Fatal(read.Err)
		}
		if read.Allowed {
			t.Fatalf("v2 took a token of a bucket v1 had just drained: %+v", read)
		}
		// v2's bucket is full only after its next two boundaries: when that
		// is too soon after v1's second, another key is tried.
		if read.Reset < v1Full+300*time.Millisecond {
			continue
		}
		time.Sleep(v1Full + 100*time.Millisecond)
		if forget != nil {
			forget()
		}
		got := v2.Batch.AllowN(ctx, key, 8)
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		if got.Allowed {
			t.Fatalf("v2 took 8 from a bucket v1 had drained %v before (it holds at most v1's burst of 5): the store forgot it and gave v2 a new one", v1Full+100*time.Millisecond)
		}
		if got.Remaining > 5 {
			t.Fatalf("v2 sees %d tokens in a bucket that holds at most v1's burst of 5", got.Remaining)
		}
		return
	}
	t.Fatal("v2's bucket was due full within 1.3 s in ten tries")
}

package fuzz

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/internal/reference"
)

// TestWindowConcurrentGiveBack: goroutines with clocks of their own admit
// requests at an estimate on a few keys of a window table and a global
// window, and settle most of them at a lower actual, at once or some checks
// later. A give-back racing a check or another give-back may be lost, never
// doubled: counting each admission at its actual cost, at the true times, no
// interval of the window's length holds more than the limit.
func TestWindowConcurrentGiveBack(t *testing.T) {
	rounds := 24
	if testing.Short() {
		rounds = 8
	}
	rng := rand.New(rand.NewPCG(30, 32))
	for round := range rounds {
		rule, tbl, global := concurrentWindow(rng, round, 2, 30, 20)
		limit, window := rule.Limit(), rule.Window()
		const workers, ops = 4, 3000
		base := int64(time.Hour)
		adm := make([][]reference.Admission, workers)
		var denied atomic.Int64
		admGlobal := make([][]reference.Admission, workers)
		var wg sync.WaitGroup
		for g := range workers {
			wg.Add(1)
			go func(g int, seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(g)))
				now := base + rng.Int64N(int64(window)/4+1)
				type open struct {
					key        string
					at         int64
					cost, used int64
					global     bool
				}
				var pending []open
				settle := func(o open) {
					if o.global {
						global.SettleAt(atomicbucket.Time(now), atomicbucket.Time(o.at), o.cost, o.used)
						admGlobal[g] = append(admGlobal[g], reference.Admission{Key: "g", At: o.at, Cost: o.used})
						return
					}
					tbl.SettleAt(o.key, atomicbucket.Time(now), atomicbucket.Time(o.at), o.cost, o.used)
					adm[g] = append(adm[g], reference.Admission{Key: o.key, At: o.at, Cost: o.used})
				}
				for range ops {
					now += rng.Int64N(int64(window)/(limit+1) + 1)
					cost := 1 + rng.Int64N(max(limit/3, 1))
					used := rng.Int64N(cost + 1)
					key := []string{"x", "y"}[rng.IntN(2)]
					if tbl.AllowNAt(key, atomicbucket.Time(now), cost).Allowed {
						pending = append(pending, open{key: key, at: now, cost: cost, used: used})
					} else {
						denied.Add(1)
					}
					if global.AllowNAt(atomicbucket.Time(now), cost).Allowed {
						pending = append(pending, open{at: now, cost: cost, used: used, global: true})
					}
					for len(pending) > 0 && (len(pending) > 6 || rng.IntN(3) == 0) {
						settle(pending[0])
						pending = pending[1:]
					}
				}
				for _, o := range pending {
					settle(o)
				}
			}(g, uint64(round))
		}
		wg.Wait()
		checkRound(t, round, rule, adm, admGlobal)
		if denied.Load() < ops/4 {
			t.Fatalf("round %d: %d denied: the draw hardly fills the window", round, denied.Load())
		}
	}
}

// TestWindowSkewedGiveBack is TestWindowConcurrentGiveBack in one
// goroutine: two callers whose clocks drift apart by up to a window take
// turns at random, so that a check or a settlement runs with a clock behind
// the window's newest admission (as a goroutine's that read the clock, then
// waited) in a replayable order. A give-back takes no unit out from under
// such a check: counting each admission at its actual cost, no interval of
// the window holds more than the limit.
func TestWindowSkewedGiveBack(t *testing.T) {
	runs := 2000
	if testing.Short() {
		runs = 400
	}
	for seed := range uint64(runs) {
		rng := rand.New(rand.NewPCG(seed, 33))
		limit := 2 + rng.Int64N(6)
		window := time.Duration(1+rng.Int64N(20)) * time.Millisecond
		if seed%4 == 3 {
			limit, window = 65+rng.Int64N(60), time.Duration(1+rng.Int64N(4))*atomicwindow.Slices*atomicwindow.SliceMin
		}
		tbl := atomicwindow.NewTable[string](atomicwindow.MustRule(limit, window), atomicbucket.TableOptions{})
		type open struct{ at, cost, used int64 }
		var clocks [2]int64
		var pending [2][]open
		var adm []reference.Admission
		for g := range clocks {
			clocks[g] = int64(time.Hour) + rng.Int64N(int64(window)/2+1)
		}
		for range 80 {
			g := rng.IntN(2)
			clocks[g] += rng.Int64N(int64(window)/(limit+1) + 1)
			now := clocks[g]
			if len(pending[g]) > 0 && rng.IntN(2) == 0 {
				o := pending[g][0]
				pending[g] = pending[g][1:]
				tbl.SettleAt("x", atomicbucket.Time(now), atomicbucket.Time(o.at), o.cost, o.used)
				adm = append(adm, reference.Admission{Key: "x", At: o.at, Cost: o.used})
				continue
			}
			cost := 1 + rng.Int64N(max(limit/2, 1))
			if tbl.AllowNAt("x", atomicbucket.Time(now), cost).Allowed {
				pending[g] = append(pending[g], open{now, cost, rng.Int64N(cost + 1)})
			}
		}
		for g := range pending {
			for _, o := range pending[g] {
				adm = append(adm, reference.Admission{Key: "x", At: o.at, Cost: o.cost})
			}
		}
		if err := reference.CheckWindow(limit, int64(window), adm); err != nil {
			t.Fatalf("seed %d, %d in %v: %v", seed, limit, window, err)
		}
	}
}

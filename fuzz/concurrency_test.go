package fuzz

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
)

// linInput is one operation of a concurrent history.
type linInput struct {
	kind opKind // opAllowN, opPeek, opRefund or opReserve
	key  string
	t    int64
	cost int64
}

// linOutput is what the implementation answered.
type linOutput struct {
	d   reference.Decision
	res reference.Reservation
}

// referenceModel checks histories against the reference: each step clones the
// state, applies the operation and compares the answer.
func referenceModel(p reference.Params) porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range h {
				k := op.Input.(linInput).key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() any { return reference.NewReference(p) },
		Step: func(state, input, output any) (bool, any) {
			in, out := input.(linInput), output.(linOutput)
			r := state.(*reference.Reference).Clone()
			switch in.kind {
			case opAllowN:
				return r.AllowN(in.key, in.t, in.cost) == out.d, r
			case opPeek:
				return r.Peek(in.key, in.t, in.cost) == out.d, r
			case opRefund:
				r.Refund(in.key, in.t, in.cost)
				return true, r
			case opReserve:
				w := r.Reserve(in.key, in.t, in.cost, time.Second)
				return w.OK == out.res.OK && w.Delay == out.res.Delay && w.RetryAfter == out.res.RetryAfter, r
			}
			return false, r
		},
		Equal: func(a, b any) bool { return a.(*reference.Reference).Equal(b.(*reference.Reference)) },
		DescribeOperation: func(input, output any) string {
			in, out := input.(linInput), output.(linOutput)
			return fmt.Sprintf("%v key=%q t=%d cost=%d -> %s %+v", in.kind, in.key, in.t, in.cost, describe(out.d), out.res)
		},
	}
}

// runRounds drives workers goroutines through rounds of operations on im. In each
// round time is fixed; between rounds it advances (a barrier orders the rounds).
// A sweeper, when sweep is set, sweeps continuously at the round's time.
func runRounds(t *testing.T, im impl, keys []string, workers, rounds, perRound int, step func(*rand.Rand) int64, sweep bool) []porcupine.Operation {
	var (
		clock   atomic.Int64 // orders call and return events
		now     atomic.Int64
		mu      sync.Mutex
		history []porcupine.Operation
	)
	now.Store(int64(time.Hour))
	rng := rand.New(rand.NewPCG(uint64(workers), uint64(rounds)))
	for range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{}) // starts the round: its sweeper, then its workers
		ready, stopSweeping := sweepWhile(start, func() { im.Sweep(now.Load()) }, sweep)
		for w := range workers {
			seed := rng.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-ready
				r := rand.New(rand.NewPCG(seed, 7))
				local := make([]porcupine.Operation, 0, perRound)
				for range perRound {
					in := linInput{kind: []opKind{opAllowN, opAllowN, opAllowN, opPeek, opRefund, opReserve}[r.IntN(6)],
						key: keys[r.IntN(len(keys))], t: now.Load(), cost: int64(r.IntN(3))}
					call := clock.Add(1)
					var out linOutput
					switch in.kind {
					case opAllowN:
						out.d = im.AllowN(in.key, in.t, in.cost)
					case opPeek:
						out.d = im.Peek(in.key, in.t, in.cost)
					case opRefund:
						im.Refund(in.key, in.t, in.cost)
					case opReserve:
						out.res = im.Reserve(in.key, in.t, in.cost, time.Second)
						out.res.Key, out.res.Cost, out.res.At = "", 0, 0
					}
					local = append(local, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: clock.Add(1)})
				}
				mu.Lock()
				history = append(history, local...)
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		stopSweeping()
		now.Add(step(rng))
	}
	return history
}

// sweepWhile starts, when on, a goroutine that waits for start, sweeps once,
// closes ready (which releases the round's checks), and then sweeps over and over
// until stop is called. The first sweep comes before the checks, so a round that
// follows a step past the grace always removes the buckets that were full,
// however the scheduler orders goroutines (without it, a run in twenty under
// -race had no removal at all); the later sweeps overlap the checks.
func sweepWhile(start <-chan struct{}, sweep func(), on bool) (ready <-chan struct{}, stop func()) {
	if !on {
		return start, func() {}
	}
	var done atomic.Bool
	finished, first := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		<-start
		sweep()
		close(first)
		for {
			sweep()
			if done.Load() {
				return
			}
			runtime.Gosched()
		}
	}()
	return first, func() {
		done.Store(true)
		<-finished
	}
}

// TestLinearizable checks histories of concurrent operations on a Bucket and on
// tables (with a concurrent sweeper) for linearizability against the reference.
// A sweep at the rule's initial = burst is unobservable, so the model ignores it:
// a history that needs it to be observable (a lost consumption) fails.
func TestLinearizable(t *testing.T) {
	l := atomicbucket.Limit{Tokens: 100, Period: time.Second, Burst: 3} // a token per 10ms
	cfg := config{limit: l}
	r := cfg.rule(t)
	// Steps: mostly within a token's time, sometimes past the sweep grace.
	step := func(rng *rand.Rand) int64 {
		if rng.IntN(4) == 0 {
			return int64(atomicbucket.SweepGrace) + int64(rng.IntN(int(50*time.Millisecond)))
		}
		return int64(rng.IntN(int(25 * time.Millisecond)))
	}
	rounds := 60
	if testing.Short() {
		rounds = 20
	}
	for _, c := range []struct {
		name  string
		im    impl
		keys  []string
		sweep bool
	}{
		{"bucket", &bucketImpl{rule: r}, []string{""}, false},
		{"table=string", &tableImpl[string]{t: atomicbucket.NewTable[string](r, atomicbucket.TableOptions{}), key: func(s string) string { return s }}, []string{"a", "b"}, true},
		{"table=int64", &tableImpl[int64]{t: atomicbucket.NewTable[int64](r, atomicbucket.TableOptions{}), key: intKey}, []string{"a", "b", "c"}, true},
	} {
		t.Run("impl="+c.name, func(t *testing.T) {
			if c.name == "bucket" {
				c.im.(*bucketImpl).b = atomicbucket.NewBucketAt(r, atomicbucket.Time(time.Hour))
			}
			h := runRounds(t, c.im, c.keys, 4, rounds, 6, step, c.sweep)
			res := porcupine.CheckOperationsTimeout(referenceModel(reference.ParamsOf(&r, 0, false)), h, 60*time.Second)
			if res != porcupine.Ok {
				t.Fatalf("history of %d operations is %v against the reference", len(h), res)
			}
			if tb, ok := c.im.(*tableImpl[string]); ok && tb.t.Stats().Evictions == 0 {
				t.Fatal("the sweeper never removed a bucket: the test did not exercise eviction")
			}
		})
	}
}

// TestContentionEnvelope: many goroutines on one bucket or key, on the real clock,
// never admit more than burst + rate·elapsed (golang/go#71360).
func TestContentionEnvelope(t *testing.T) {
	l := atomicbucket.Limit{Tokens: 10_000, Period: time.Second, Burst: 50}
	r := atomicbucket.MustRule(l)
	b := atomicbucket.NewBucketAt(r, atomicbucket.Now())
	tb := atomicbucket.NewTable[int](r, atomicbucket.TableOptions{})
	for name, allow := range map[string]func() bool{
		"bucket": b.Allow,
		"table":  func() bool { return tb.Allow(7) },
	} {
		t.Run("impl="+name, func(t *testing.T) {
			var admitted atomic.Int64
			start := atomicbucket.Now()
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for atomicbucket.Now().Sub(start) < 100*time.Millisecond {
						if allow() {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := atomicbucket.Now().Sub(start)
			limit := l.Burst + l.Tokens*int64(elapsed)/int64(l.Period)
			if got := admitted.Load(); got > limit || got < l.Burst {
				t.Fatalf("admitted %d in %v: want between the burst %d and burst + rate·elapsed = %d", got, elapsed, l.Burst, limit)
			}
		})
	}
}

// TestKeyCapUnderFlood: a flood of distinct keys from many goroutines never
// makes a capped table hold more than its cap. The rule is slow enough that no
// bucket becomes reclaimable during the test.
func TestKeyCapUnderFlood(t *testing.T) {
	r := atomicbucket.MustRule(atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 1})
	for _, atCap := range []bool{false, true} {
		tb := atomicbucket.NewTable[int](r, atomicbucket.TableOptions{MaxKeys: 100, AllowAtCap: atCap})
		var wg sync.WaitGroup
		var maxSeen, allowedBeyond atomic.Int64
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 5000 {
					ok := tb.Allow(g*1_000_000 + i)
					if n := tb.Len(); n > maxSeen.Load() {
						maxSeen.Store(n)
					}
					if ok && i >= 100 {
						allowedBeyond.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if tb.Len() != 100 || maxSeen.Load() > 100 {
			t.Fatalf("allow at cap %v: Len %d, most seen %d, want exactly the cap 100", atCap, tb.Len(), maxSeen.Load())
		}
		if hits := tb.Stats().AtCapHits; hits != 8*5000-100 {
			t.Fatalf("allow at cap %v: %d requests met the cap, want %d", atCap, hits, 8*5000-100)
		}
		if !atCap && allowedBeyond.Load() > 100 {
			t.Fatalf("a table that denies at its cap allowed %d new keys beyond the cap", allowedBeyond.Load())
		}
	}
}

// TestCapReclaimUnderFlood: goroutines flood a capped table with new keys at
// explicit times far enough apart that every earlier key is reclaimable. The
// table must reclaim (new keys keep being admitted), and its count must never
// pass the cap while sweeps, creations and reclaims race.
func TestCapReclaimUnderFlood(t *testing.T) {
	r := atomicbucket.MustRule(atomicbucket.Limit{Tokens: 1, Period: time.Millisecond, Burst: 1})
	const capKeys, workers, perWorker = 50, 8, 2000
	tb := atomicbucket.NewTable[int](r, atomicbucket.TableOptions{MaxKeys: capKeys})
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	var maxSeen, admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				// Each request moves time on by more than the grace plus a token.
				at := atomicbucket.Time(clock.Add(int64(atomicbucket.SweepGrace) + int64(2*time.Millisecond)))
				if tb.AllowAt(g*1_000_000+i, at) {
					admitted.Add(1)
				}
				if n := tb.Len(); n > maxSeen.Load() {
					maxSeen.Store(n)
				}
			}
		}()
	}
	wg.Wait()
	if maxSeen.Load() > capKeys || tb.Len() > capKeys {
		t.Fatalf("Len reached %d (now %d) with a cap of %d", maxSeen.Load(), tb.Len(), capKeys)
	}
	if tb.Stats().Evictions == 0 || admitted.Load() <= capKeys {
		t.Fatalf("%d evictions, %d new keys admitted: the table did not reclaim at its cap", tb.Stats().Evictions, admitted.Load())
	}
	t.Logf("%d of %d new keys admitted, %d evictions, %d at-cap denials", admitted.Load(), workers*perWorker, tb.Stats().Evictions, tb.Stats().AtCapHits)
}

// TestSweepLosesNothing races checks against a sweeper on buckets that are
// always eligible for removal when a round starts. Time is frozen within a
// round, so a round can admit at most the burst; a consumption recorded in a
// bucket the sweep removed (and then recreated full) would admit more.
func TestSweepLosesNothing(t *testing.T) {
	const burst, workers = 2, 4
	r := atomicbucket.MustRule(atomicbucket.Limit{Tokens: 1, Period: time.Millisecond, Burst: burst})
	tb := atomicbucket.NewTable[int](r, atomicbucket.TableOptions{})
	rounds := 20000 // a lost consumption shows in about one run in two at 3000 rounds
	if testing.Short() {
		rounds = 3000
	}
	// The sweeper runs freely through all rounds, so it is already sweeping hot on
	// the other core when a round's time moves past the grace: that is when checks
	// and the removal of their bucket overlap most. (A sweeper started with each
	// round tends to finish its one effective sweep before the checks start.)
	var now, sweeps atomic.Int64
	now.Store(int64(time.Hour))
	stop := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Add(1)
	go func() {
		defer sweeper.Done()
		for {
			select {
			case <-stop:
				return
			default:
				tb.SweepAt(atomicbucket.Time(now.Load()))
				sweeps.Add(1)
			}
		}
	}()
	defer func() { close(stop); sweeper.Wait() }()
	for round := range rounds {
		for s := sweeps.Load(); sweeps.Load() == s; { // the sweeper is running: time may move
			runtime.Gosched()
		}
		at := now.Add(int64(atomicbucket.SweepGrace) + int64(time.Millisecond)) // every bucket full for the grace
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range burst {
					if tb.AllowNAt(round%3, atomicbucket.Time(at), 1).Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if n := admitted.Load(); n > burst {
			t.Fatalf("round %d admitted %d with time frozen, want at most the burst %d: a sweep lost a consumption", round, n, burst)
		}
	}
	// The sweeper can be starved on a loaded machine (as few as 14 evictions in
	// 20,000 rounds under a fuzzer on both cores), which weakens this test but does
	// not void it; TestSweepTombstone in atomicbucket plays the same interleaving
	// deterministically. Here the race must have happened at least once.
	if tb.Stats().Evictions == 0 {
		t.Fatalf("only %d evictions in %d rounds: the race was not exercised", tb.Stats().Evictions, rounds)
	}
	t.Logf("%d rounds, %d evictions", rounds, tb.Stats().Evictions)
}

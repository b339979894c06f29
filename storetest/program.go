package storetest

import (
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/tier"
)

// Batcher is a store that decides a batch of independent checks of one rule
// at one time, each on its own (Redis's coalesced calls).
type Batcher interface {
	Batch(rule any, keys []string, costs []int64, sec, usec int64) ([]atomicbucket.Decision, error)
}

// program reads a fuzzed program's bytes, 0 when they run out.
type program struct{ b []byte }

func (p *program) next() int64 {
	if len(p.b) == 0 {
		return 0
	}
	v := p.b[0]
	p.b = p.b[1:]
	return int64(v)
}

func (p *program) done() bool { return len(p.b) == 0 }

// ProgramSeeds are programs worth starting a fuzz target from.
var ProgramSeeds = [][]byte{
	{9, 2, 20, 0, 0, 0, 10, 1, 1, 0, 3, 0, 5, 2, 7, 2, 1, 3},
	{3, 4, 5, 1, 1, 2, 2, 0, 0, 2, 1, 0, 1, 2, 0, 50, 1, 2, 3, 2, 2, 6, 0, 1, 1},
	{200, 0, 255, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 255, 2, 0, 3, 0, 0, 3, 2, 1, 4},
}

var programPeriods = []time.Duration{time.Millisecond, 7*time.Millisecond + 3*time.Microsecond, 250 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, time.Hour, 24 * time.Hour}

// Program runs a fuzzed program on st at explicit times from start (Unix
// seconds, after the process started: the reference's times are
// atomicbucket.FromWall of them): a rule named name (greedy or interval,
// aligned or not, with or without initial tokens) and checks at microsecond
// times, single (taking or not), tiers of up to three of the rule's keys,
// and on a Batcher batches of up to four independent checks at one time;
// and on a Settler settlements (refunds and debts); every decision equal
// to the exact reference's at the same time, for every rule whose units are
// exact.
func Program(t *testing.T, st Store, name string, data []byte, start int64) {
	p := &program{data}
	l := atomicbucket.Limit{
		Tokens: 1 + p.next()*p.next()%100_000,
		Period: programPeriods[p.next()%int64(len(programPeriods))],
		Burst:  1 + p.next()*4 + p.next(),
	}
	switch flags := p.next(); {
	case flags&1 != 0:
		l.Refill, l.Aligned, l.Tokens = atomicbucket.Interval, flags&2 != 0, 1+l.Tokens%50
	case flags&4 != 0:
		l.Initial, l.InitialSet = p.next()%(l.Burst+1), true
	}
	if flags := l.Refill; flags == atomicbucket.Interval && p.next()%2 == 1 {
		l.Initial, l.InitialSet = min(p.next(), l.Burst), true
	}
	r, exact, err := st.Rule(name, l)
	if err != nil || !exact {
		return // not held exactly: the envelope tests cover it
	}
	if _, err := atomicbucket.NewRule(l); err != nil {
		return
	}
	ref := storeReference(r, l)
	step := max(int64(l.Period)/1000/l.Tokens, 1) // one token's time, µs
	sec, usec := start, int64(0)
	keys := []string{"a", "b", "42"}
	batcher, batches := st.(Batcher)
	// Settlements, on a store that settles, for rules whose new buckets
	// start full (a store forgets a bucket given back to full, and one
	// starting below full would start again, stricter: see Settle).
	settler, settles := st.(Settler)
	settles = settles && (!l.InitialSet || l.Initial == l.Burst)
	for !p.done() {
		usec += p.next() * step / 64 * p.next() / 4
		sec, usec = sec+usec/1e6, usec%1e6
		now := atomicbucket.FromWall(sec*1e9 + usec*1e3)
		op := p.next()
		switch {
		case settles && op%7 == 6: // a settlement: an actual from nothing to twice the burst and more
			key, estimate, actual := keys[p.next()%3], p.next()%(l.Burst+1), p.next()%(2*l.Burst+3)
			got, err := settler.Settle(r, key, estimate, actual, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			if want := ref.Settle(key, int64(now), estimate, actual); got != want {
				t.Fatalf("%+v: settling %s at %d.%06d, %d at %d: store forgave %d, reference %d", l, key, sec, usec, estimate, actual, got, want)
			}
		case op%3 < 2: // one check, taking (0) or not (1)
			key, cost := keys[p.next()%3], p.next()%(l.Burst+2)
			got, _, err := st.Check([]Part{{r, key, cost}}, op%3 == 0, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			var want atomicbucket.Decision
			if op%3 == 0 {
				want = ref.AllowN(key, int64(now), cost)
			} else {
				want = ref.Peek(key, int64(now), cost)
			}
			if got != want {
				t.Fatalf("%+v: %s at %d.%06d cost %d take %v: store %+v, reference %+v", l, key, sec, usec, cost, op%3 == 0, got, want)
			}
		case batches && op/3%2 == 0: // a batch of independent checks at one time
			bk, bc := make([]string, 1+op/3%4), make([]int64, 1+op/3%4)
			for i := range bk {
				bk[i], bc[i] = keys[p.next()%3], p.next()%(l.Burst+1)
			}
			got, err := batcher.Batch(r, bk, bc, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			for i := range bk {
				if want := ref.AllowN(bk[i], int64(now), bc[i]); got[i] != want {
					t.Fatalf("%+v: batch check %d of %d (%s, cost %d) at %d.%06d: store %+v, reference %+v",
						l, i, len(bk), bk[i], bc[i], sec, usec, got[i], want)
				}
			}
		default: // a tier of the rule's buckets for up to three keys, all or nothing
			first := p.next()
			steps := make([]Part, 1+op/3%3)
			ts := make([]tier.Step, len(steps))
			for i := range steps {
				key, cost := keys[(first+int64(i))%3], p.next()%(l.Burst+2)
				steps[i], ts[i] = Part{r, key, cost}, ref.Step(key, cost)
			}
			got, gi, err := st.Check(steps, true, sec, usec)
			if err != nil {
				t.Fatal(err)
			}
			if want, wi, _ := tier.At(now, ts...); got != want || gi != wi {
				t.Fatalf("%+v: tier %+v at %d.%06d: store %+v from %d, reference %+v from %d", l, steps, sec, usec, got, gi, want, wi)
			}
		}
	}
}

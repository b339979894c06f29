package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/fuzz"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
)

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

// FuzzScript runs fuzzed programs through the script's explicit-time variant
// on a redis-server the fuzz process starts: a rule (greedy or interval,
// aligned or not, with or without initial tokens) and checks at microsecond
// times, single (taking or not) or coalesced batches of up to four at one
// time (the script's mode 4, each check on its own), every decision equal to
// the exact reference's at the same time, for every rule whose units are exact.
func FuzzScript(f *testing.F) {
	f.Add([]byte{9, 2, 20, 0, 0, 0, 10, 1, 1, 0, 3, 0, 5, 2, 7, 2, 1, 3})
	f.Add([]byte{3, 4, 5, 1, 1, 2, 2, 0, 0, 2, 1, 0, 1, 2, 0, 50, 1, 2, 3, 2, 2, 6, 0, 1, 1})
	f.Add([]byte{200, 0, 255, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 255, 2, 0, 3, 0, 0, 3, 2, 1, 4})
	srv := redistest.Start(f)
	st := newStore(srv.Client(f), true)
	ctx := context.Background()
	periods := []time.Duration{time.Millisecond, 7*time.Millisecond + 3*time.Microsecond, 250 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, time.Hour, 24 * time.Hour}
	n, start := 0, time.Now().Unix()+86400
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &program{data}
		l := atomicbucket.Limit{
			Tokens: 1 + p.next()*p.next()%100_000,
			Period: periods[p.next()%int64(len(periods))],
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
		n++
		r, err := NewRule(fmt.Sprintf("fz%d", n), l)
		if err != nil || !r.Exact() {
			return // not held exactly: the envelope tests cover it
		}
		ar, err := atomicbucket.NewRule(l)
		if err != nil {
			return
		}
		ref := fuzz.NewReference(fuzz.ParamsOf(&ar, 0, atomicbucket.DenyAtCap))
		step := max(int64(l.Period)/1000/l.Tokens, 1) // one token's time, µs
		sec, usec := start, int64(0)                  // a wall-clock time after the process started (atomicbucket.FromWall)
		keys := []string{"a", "b", "42"}
		for !p.done() {
			usec += p.next() * step / 64 * p.next() / 4
			sec, usec = sec+usec/1e6, usec%1e6
			now := atomicbucket.FromWall(sec*1e9 + usec*1e3)
			op := p.next()
			switch op % 3 {
			case 0, 1: // one check, taking (0) or not (1)
				key, cost := keys[p.next()%3], p.next()%(l.Burst+2)
				got, err := st.run(ctx, r, key, cost, op%3 == 0, atTime(sec, usec))
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
					t.Fatalf("%+v: %s at %d.%06d cost %d take %v: Redis %+v, reference %+v", l, key, sec, usec, cost, op%3 == 0, got, want)
				}
			case 2: // a coalesced batch at one time
				batch := make([]*pending, 1+op/3%4)
				for i := range batch {
					batch[i] = &pending{step: Step{r, keys[p.next()%3], p.next() % (l.Burst + 1)}}
				}
				got, err := st.each(ctx, batch, atTime(sec, usec)...)
				if err != nil {
					t.Fatal(err)
				}
				for i, pd := range batch {
					if want := ref.AllowN(pd.step.Key, int64(now), pd.step.Cost); got[i] != want {
						t.Fatalf("%+v: batch check %d of %d (%s, cost %d) at %d.%06d: Redis %+v, reference %+v",
							l, i, len(batch), pd.step.Key, pd.step.Cost, sec, usec, got[i], want)
					}
				}
			}
		}
	})
}

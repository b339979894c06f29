package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/fuzz"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
)

// randomGreedy draws a greedy limit with a period of whole microseconds.
func randomGreedy(rng *rand.Rand) atomicbucket.Limit {
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

// TestScriptMatchesReference drives the script's explicit-time variant on a
// real redis-server with random rules, keys, microsecond times and costs, and
// holds every decision (allowed, remaining, retry-after, reset) to the exact
// reference evaluated at the same times, for every rule whose units are exact.
func TestScriptMatchesReference(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(srv.Client(t), true)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	exact, decisions := 0, 0
	for i := range 200 {
		l := randomGreedy(rng)
		r, err := NewRule("r"+string(rune('a'+i%26))+time.Now().Format("150405.000000"), l)
		if err != nil {
			continue // a draw that does not fit 2^53 within the error bound
		}
		if !r.Exact() {
			continue
		}
		exact++
		ref := fuzz.NewReference(fuzz.ParamsOf(ptr(atomicbucket.MustRule(l)), 0, atomicbucket.DenyAtCap))
		sec, usec := int64(1_790_000_000)+rng.Int64N(1e6), rng.Int64N(1e6)
		keys := []string{"a", "b", "c"}
		step := max(int64(l.Period)/1000/max(l.Tokens, 1), 1) // one token's time, µs
		for range 80 {
			usec += rng.Int64N(3 * step)
			sec, usec = sec+usec/1e6, usec%1e6
			key := keys[rng.IntN(len(keys))]
			cost := rng.Int64N(l.Burst + 2) // 0 and burst+1 included
			take := rng.IntN(5) != 0
			got, err := st.run(ctx, r, key, cost, take, atTime(sec, usec))
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
				t.Fatalf("%+v key %s at %d.%06d cost %d take %v: Redis %+v, reference %+v", l, key, sec, usec, cost, take, got, want)
			}
		}
	}
	if exact < 50 {
		t.Fatalf("only %d exact rules drawn", exact)
	}
	t.Logf("%d exact rules, %d decisions equal to the reference", exact, decisions)
}

func ptr[T any](v T) *T { return &v }

// On Redis's own clock: an allowed check sets the key to expire when the
// bucket is full again (so expiry loses nothing), a denied one writes nothing,
// and a full bucket is absent.
func TestKeyExpiresWhenFull(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := NewRule("ttl", atomicbucket.Limit{Tokens: 1, Period: 10 * time.Second, Burst: 3})
	if err != nil {
		t.Fatal(err)
	}
	key := st.Key(r, "k")
	d, err := st.AllowN(ctx, r, "k", 2) // 20 s until full
	if err != nil || !d.Allowed || d.Remaining != 1 || d.Reset != 20*time.Second {
		t.Fatalf("first check: %+v, %v", d, err)
	}
	ttl := c.PTTL(ctx, key).Val()
	if ttl <= 19*time.Second || ttl > 20*time.Second {
		t.Errorf("PTTL %v after taking 2 tokens at 1 per 10 s, want just under 20 s", ttl)
	}
	before := c.Get(ctx, key).Val()
	if d, err := st.AllowN(ctx, r, "k", 3); err != nil || d.Allowed || d.RetryAfter <= 19*time.Second || d.RetryAfter > 20*time.Second {
		t.Fatalf("a check of 3 with 1 left: %+v, %v", d, err)
	}
	if after := c.Get(ctx, key).Val(); after != before {
		t.Errorf("a denied check wrote %q over %q", after, before)
	}
	if d, err := st.AllowN(ctx, r, "other", 0); err != nil || !d.Allowed || c.Exists(ctx, st.Key(r, "other")).Val() != 0 {
		t.Errorf("a check of cost 0 created a key: %+v, %v", d, err)
	}
	if d, err := st.AllowN(ctx, r, "k", 4); err != nil || d.Allowed || d.RetryAfter != atomicbucket.Never {
		t.Errorf("a cost above the burst: %+v, %v", d, err)
	}
}

// TestTierMatchesReference: tiers of 1 to 4 random exact rules (greedy, and
// interval ones among them) in one script
// call, at explicit microsecond times, against the exact reference composed
// with atomicbucket.TierAt (ordered takes, refunded on a denial): the same
// decision, from the same rule, every time.
func TestTierMatchesReference(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(srv.Client(t), true)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 9))
	decisions, denied := 0, 0
	for i := range 60 {
		n := 1 + rng.IntN(4)
		var rules []*Rule
		var refs []*fuzz.Reference
		minStep := int64(1 << 62)
		for j := 0; len(rules) < n; j++ {
			l := randomGreedy(rng)
			l.Burst = min(l.Burst, 50) // small bursts: tiers deny often
			l.Initial = min(l.Initial, l.Burst)
			if rng.IntN(3) == 0 { // an interval rule beside greedy ones
				l.Refill, l.Aligned, l.Tokens = atomicbucket.Interval, rng.IntN(2) == 0, 1+rng.Int64N(10)
			}
			r, err := NewRule(fmt.Sprintf("t%d_%d", i, j), l)
			if err != nil || !r.Exact() {
				continue
			}
			rules = append(rules, r)
			refs = append(refs, fuzz.NewReference(fuzz.ParamsOf(ptr(atomicbucket.MustRule(l)), 0, atomicbucket.DenyAtCap)))
			minStep = min(minStep, max(int64(l.Period)/1000/l.Tokens, 1))
		}
		sec, usec := time.Now().Unix()+86400, rng.Int64N(1e6)
		for range 60 {
			usec += rng.Int64N(3 * minStep)
			sec, usec = sec+usec/1e6, usec%1e6
			steps := make([]Step, n)
			refSteps := make([]atomicbucket.TierStep, n)
			for k := range n {
				key := []string{"a", "b"}[rng.IntN(2)]
				cost := rng.Int64N(rules[k].n.Limit.Burst/2 + 2)
				steps[k] = Step{rules[k], key, cost}
				refSteps[k] = refs[k].Step(key, cost)
			}
			tns := atomicbucket.FromWall(sec*1e9 + usec*1e3) // interval grids are placed on the wall clock
			got, gi, err := st.tier(ctx, steps, true, atTime(sec, usec))
			if err != nil {
				t.Fatal(err)
			}
			want, wi, _ := atomicbucket.TierAt(tns, refSteps...)
			decisions++
			if !want.Allowed {
				denied++
			}
			if got != want || gi != wi {
				t.Fatalf("tier %d at %d.%06d steps %+v: Redis %+v from %d, reference %+v from %d", i, sec, usec, steps, got, gi, want, wi)
			}
		}
	}
	if denied < decisions/10 || denied > decisions*9/10 {
		t.Fatalf("%d of %d tier requests denied: the draw does not exercise both sides", denied, decisions)
	}
	t.Logf("%d tier decisions (%d denied) equal to the reference", decisions, denied)
}

// SCRIPT FLUSH between checks: the next check loads the script again (EVALSHA
// answered NOSCRIPT, then EVAL) and the bucket's state is intact.
func TestScriptFlushSurvived(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := NewRule("flush", atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if i == 3 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := st.AllowN(ctx, r, "k", 1)
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if d.Allowed != (i < 5) || (i < 5 && d.Remaining != int64(4-i)) {
			t.Fatalf("check %d: %+v", i, d)
		}
	}
	if n := c.ScriptExists(ctx, st.check.Hash()).Val(); len(n) != 1 || !n[0] {
		t.Errorf("the script is not loaded again after SCRIPT FLUSH: %v", n)
	}
}

// TestIntervalMatchesReference: interval rules (grids placed by the key, or
// aligned to the wall clock) on Redis's microsecond clock, against the exact
// reference with the local tables' grids (atomicbucket.Rule.KeyAnchor), at
// the same wall-clock times: the same decisions, so a key's grid is where
// every instance and every store puts it.
func TestIntervalMatchesReference(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(srv.Client(t), true)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 17))
	periods := []time.Duration{time.Millisecond, 250 * time.Millisecond, time.Second, 10 * time.Second, 90 * time.Second, time.Hour, 24 * time.Hour, 7*time.Millisecond + 3*time.Microsecond}
	decisions := 0
	for i := range 120 {
		l := atomicbucket.Limit{
			Tokens: 1 + rng.Int64N(20), Period: periods[rng.IntN(len(periods))],
			Burst: 1 + rng.Int64N(60), Refill: atomicbucket.Interval, Aligned: rng.IntN(3) == 0,
		}
		if rng.IntN(3) == 0 {
			l.Initial, l.InitialSet = rng.Int64N(l.Burst+1), true
		}
		r, err := NewRule(fmt.Sprintf("i%d", i), l)
		if err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		ar := atomicbucket.MustRule(l)
		ref := fuzz.NewReference(fuzz.ParamsOf(&ar, 0, atomicbucket.DenyAtCap))
		sec, usec := time.Now().Unix()+86400+rng.Int64N(86400), rng.Int64N(1e6)
		step := max(int64(l.Period)/1000/l.Tokens, 1)
		for range 60 {
			usec += rng.Int64N(2 * step)
			sec, usec = sec+usec/1e6, usec%1e6
			key := []string{"alice", "bob", "42"}[rng.IntN(3)]
			cost := rng.Int64N(l.Burst + 2)
			got, err := st.run(ctx, r, key, cost, true, atTime(sec, usec))
			if err != nil {
				t.Fatal(err)
			}
			want := ref.AllowN(key, int64(atomicbucket.FromWall(sec*1e9+usec*1e3)), cost)
			decisions++
			if got != want {
				t.Fatalf("%+v key %s at %d.%06d cost %d: Redis %+v, reference %+v", l, key, sec, usec, cost, got, want)
			}
		}
	}
	t.Logf("%d interval decisions equal to the reference", decisions)
}

// atTime is the explicit-time arguments of the test variant of the script.
func atTime(sec, usec int64) []any {
	return []any{strconv.FormatInt(sec, 10), strconv.FormatInt(usec, 10)}
}

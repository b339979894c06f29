package verdict

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/limitgen/limitgen/atomicbucket"
)

// randomLimit draws a limit NewRule accepts and holds exactly.
func randomLimit(t *testing.T, rng *rand.Rand) atomicbucket.Limit {
	periods := []time.Duration{time.Millisecond, 100 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour}
	for {
		l := atomicbucket.Limit{
			Tokens: 1 + rng.Int64N(50),
			Period: periods[rng.IntN(len(periods))],
			Burst:  1 + rng.Int64N(200),
		}
		if rng.IntN(5) == 0 { // a burst whose r is shown to three digits, refilled within days
			l.Burst = 1000 + rng.Int64N(10_000_000)
			l.Tokens = 1 + l.Burst/1000 + rng.Int64N(l.Burst)
		}
		if rng.IntN(3) == 0 {
			l.Refill = atomicbucket.Interval
		}
		if rng.IntN(4) == 0 {
			l.Initial, l.InitialSet = rng.Int64N(l.Burst+1), true
		}
		r, err := atomicbucket.NewRule(l)
		if err == nil && r.Exact() {
			return l
		}
	}
}

// Every field a client reads holds: a client that believes r, t, q, w and
// Retry-After is never denied for it, and never told to wait longer than it
// must (to the second). Random exact rules, random traffic; the bucket is the
// judge (its Peek), the fields are what Respond sends.
func TestFieldsKeepTheirPromises(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const s = int64(time.Second)
	for range 300 {
		l := randomLimit(t, rng)
		p := MustPolicy("P", l)
		b := atomicbucket.NewBucketAt(atomicbucket.MustRule(l), 0)
		now := atomicbucket.Time(0)
		for range 60 {
			now = now.Add(time.Duration(rng.Int64N(max(int64(l.Period)*2/(1+l.Tokens), 1))))
			cost := 1 + rng.Int64N(l.Burst+1)
			d := b.AllowNAt(now, cost)
			r, tv := p.fields(d, cost)
			left := max(d.Remaining, 0)
			if r > left || left < 1000 && r != left || left >= 1000 && r*100 <= left*99 {
				t.Fatalf("%+v: r = %d, decision %+v", l, r, d)
			}
			if r > 0 && !b.PeekAt(now, r).Allowed {
				t.Fatalf("%+v at %v: r = %d but %d tokens are not there", l, now, r, r)
			}
			if r > 0 && new(big.Int).Mul(big.NewInt(r), big.NewInt(int64(l.Period))).Cmp(new(big.Int).Mul(big.NewInt(tv*s), big.NewInt(l.Tokens))) > 0 {
				t.Fatalf("%+v: r/t = %d/%d is faster than the rate", l, r, tv)
			}
			never := !d.Allowed && d.RetryAfter == atomicbucket.Never
			if r == 0 && !never {
				if !b.PeekAt(now.Add(time.Duration(tv*s)), cost).Allowed {
					t.Fatalf("%+v at %v cost %d: t = %d s, but the cost is not there then (decision %+v)", l, now, cost, tv, d)
				}
				if tv > 0 && b.PeekAt(now.Add(time.Duration((tv-1)*s)), cost).Allowed {
					t.Fatalf("%+v at %v cost %d: t = %d s, but the cost is there a second earlier (decision %+v)", l, now, cost, tv, d)
				}
			}
			if !d.Allowed && !never {
				j := Judge{Jitter: 0.5}
				res := Result{Decision: d, Policy: &p, Cost: cost}
				v := j.Verdict(Enforce, &res, "k")
				if v.Retry < tv || !b.PeekAt(now.Add(time.Duration(v.Retry*s)), cost).Allowed {
					t.Fatalf("%+v: Retry-After %d (t %d) does not admit the request", l, v.Retry, tv)
				}
				if v.Wait < d.RetryAfter || v.Wait%time.Millisecond != 0 || !b.PeekAt(now.Add(v.Wait), cost).Allowed {
					t.Fatalf("%+v: wait %v (decision's %v) does not admit the request", l, v.Wait, d.RetryAfter)
				}
			}
		}
		// q per w: from full, q tokens now and q again w seconds later.
		b = atomicbucket.NewBucketAt(atomicbucket.MustRule(l), 0)
		start := atomicbucket.Time(rng.Int64N(int64(l.Period)))
		if !b.AllowNAt(start, p.Quota).Allowed && (!l.InitialSet || l.Initial == l.Burst) {
			t.Fatalf("%+v: q = %d not admitted by a full bucket", l, p.Quota)
		}
		b.AllowNAt(start, p.Quota) // empty it, whatever it held
		if d := b.AllowNAt(start.Add(time.Duration(p.Window*s)), p.Quota); !d.Allowed {
			t.Fatalf("%+v: q = %d not admitted w = %d s after the bucket was emptied: %+v", l, p.Quota, p.Window, d)
		}
	}
}

func TestPolicyWindow(t *testing.T) {
	const s = time.Second
	for _, c := range []struct {
		l    atomicbucket.Limit
		q, w int64
	}{
		{atomicbucket.Limit{Tokens: 10, Period: s, Burst: 50}, 50, 5},
		{atomicbucket.Limit{Tokens: 1000, Period: time.Minute, Burst: 200}, 200, 12},
		{atomicbucket.Limit{Tokens: 3, Period: s, Burst: 10}, 10, 4},  // 3.33 s, rounded up
		{atomicbucket.Limit{Tokens: 1000, Period: s, Burst: 5}, 5, 1}, // refills in 5 ms: one second at least
		{atomicbucket.Limit{Tokens: 100, Period: 24 * time.Hour, Burst: 100, Refill: atomicbucket.Interval, Aligned: true}, 100, 86400},
		{atomicbucket.Limit{Tokens: 2, Period: 10 * s, Burst: 5, Refill: atomicbucket.Interval}, 5, 30}, // 3 boundaries
	} {
		p := MustPolicy("x", c.l)
		if p.Quota != c.q || p.Window != c.w {
			t.Errorf("%+v: q=%d w=%d, want q=%d w=%d", c.l, p.Quota, p.Window, c.q, c.w)
		}
	}
}

// RateLimit-Policy and RateLimit parse as the draft's grammar says:
// Structured Fields lists of strings with integer parameters, names
// round-tripped however they are spelt.
func TestFieldsParseAsStructuredFields(t *testing.T) {
	names := []string{"PerUser", `a"b\c`, " spaced name ", "~!@#$%^&*()_+{}|:<>?", "x"}
	var ps []*Policy
	for i, name := range names {
		p, err := NewPolicy(name, atomicbucket.Limit{Tokens: int64(i + 1), Period: time.Second, Burst: int64(10 * (i + 1))})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, &p)
	}
	var items []string
	for _, p := range ps {
		items = append(items, p.Item)
	}
	value := strings.Join(items, ", ") // as a door joins a route's rules
	list, err := httpsfv.UnmarshalList([]string{value})
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", value, err)
	}
	if len(list) != len(ps) {
		t.Fatalf("RateLimit-Policy has %d members, want %d", len(list), len(ps))
	}
	for i, m := range list {
		item := m.(httpsfv.Item)
		checkItem(t, item, ps[i].Name, map[string]int64{paramQuota: ps[i].Quota, paramWindow: ps[i].Window})
	}
	for _, p := range ps {
		v := string(AppendRateLimit(nil, p, 17, 4))
		item, err := httpsfv.UnmarshalItem([]string{v})
		if err != nil {
			t.Fatalf("RateLimit %q: %v", v, err)
		}
		checkItem(t, item, p.Name, map[string]int64{paramRemaining: 17, paramReset: 4})
	}
}

func checkItem(t *testing.T, item httpsfv.Item, name string, params map[string]int64) {
	t.Helper()
	if item.Value != name {
		t.Errorf("item %v: name %q, want %q", item.Value, item.Value, name)
	}
	if got := item.Params.Names(); len(got) != len(params) {
		t.Errorf("%q: parameters %v, want %d", name, got, len(params))
	}
	for k, want := range params {
		v, ok := item.Params.Get(k)
		if !ok || v != want {
			t.Errorf("%q: %s = %v (%T), want %d", name, k, v, v, want)
		}
	}
}

func TestPolicyNames(t *testing.T) {
	l := atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1}
	for _, bad := range []string{"", "tab\there", "new\nline", "é", "\x7f", string(make([]byte, 65))} {
		if _, err := NewPolicy(bad, l); err == nil {
			t.Errorf("NewPolicy(%q) accepted", bad)
		}
	}
	if _, err := NewPolicy("ok", atomicbucket.Limit{Tokens: 0, Period: time.Second, Burst: 1}); err == nil {
		t.Error("NewPolicy accepted rate 0")
	}
}

// Jitter: the same key always gets the same Retry-After; keys spread over
// [wait, wait·(1+Jitter)], rounded up; never below the wait.
func TestRetryAfterJitter(t *testing.T) {
	cfg := Judge{Jitter: 0.5}
	const wait = 10 * time.Second
	seen := map[int64]int{}
	for i := range 1000 {
		key := "client-" + strconv.Itoa(i)
		ra := ceilSeconds(cfg.wait(wait, seedOf(key, 0)))
		if ra != ceilSeconds(cfg.wait(wait, seedOf(key, 0))) {
			t.Fatalf("%s: Retry-After differs between calls", key)
		}
		if ra < 10 || ra > 15 {
			t.Fatalf("%s: Retry-After %d outside [10, 15]", key, ra)
		}
		seen[ra]++
	}
	if len(seen) < 5 { // 10 needs a jitter of exactly 0; 11..15 must all occur
		t.Errorf("1000 keys spread over only %v", seen)
	}
	for ra, n := range seen {
		if ra > 10 && (n < 120 || n > 280) { // each second gets ~1/5 of the keys
			t.Errorf("Retry-After %d for %d of 1000 keys: not uniform (%v)", ra, n, seen)
		}
	}
	seedA := seedOf("a", 0)
	if (&Judge{}).wait(wait, seedA) != wait || (&Judge{Jitter: 7}).wait(time.Second, seedA) > 2*time.Second {
		t.Error("jitter 0 changes the wait, or jitter above 1 is not clamped")
	}
	if got := (&Judge{Jitter: 1}).wait(atomicbucket.Never-1, seedA); got <= 0 {
		t.Errorf("a huge wait overflows to %d", got)
	}
}

// shown: exact below 1000, three significant digits from there, never more
// than what is left.
func TestShown(t *testing.T) {
	for _, c := range []struct{ in, want int64 }{
		{-5, 0}, {0, 0}, {1, 1}, {999, 999}, {1000, 1000}, {1009, 1000}, {1010, 1010}, {9999, 9990},
		{10_000, 10_000}, {12_345, 12_300}, {999_999, 999_000}, {1_234_567, 1_230_000},
		{999_999_999, 999_000_000}, {1_000_000_000, 1_000_000_000}, {math.MaxInt64, 9_220_000_000_000_000_000},
	} {
		if got := shown(c.in); got != c.want {
			t.Errorf("shown(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

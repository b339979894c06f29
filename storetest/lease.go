package storetest

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// LeaseStore is a store's explicit-time lease call (shared.LeaseFunc at a
// given time) beside its check.
type LeaseStore interface {
	Store
	Lease(rule any, key string, cost, want int64, prev shared.Settlement, sec, usec int64) (shared.Granted, error)
}

// admission is count tokens admitted at t (ns, the explicit time).
type admission struct{ t, count int64 }

// windowExcess is the most the admissions exceed the limit's envelope over any
// window [a, b]: burst plus, for greedy refill, Tokens per Period of b − a;
// for interval refill, Tokens per grid boundary in (a, b] (the grid of key,
// phase from the rule). 0 when every window is inside.
func windowExcess(n *shared.Integers, key string, adm []admission) int64 {
	l := n.Limit
	var worst int64
	for i := range adm {
		var sum int64
		for j := i; j < len(adm); j++ {
			sum += adm[j].count
			a, b := adm[i].t, adm[j].t
			var excess int64
			if n.Interval {
				ph := n.Phase(key)
				boundaries := floorDiv(b-ph, n.Period) - floorDiv(a-ph, n.Period)
				excess = sum - l.Burst - boundaries*l.Tokens
			} else {
				// sum − burst − Tokens·(b−a)/Period, in Period·tokens
				// (the test's limits keep these below 2^63)
				over := (sum-l.Burst)*int64(l.Period) - l.Tokens*(b-a)
				if over > 0 {
					excess = (over + int64(l.Period) - 1) / int64(l.Period)
				}
			}
			worst = max(worst, excess)
		}
	}
	return worst
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// LeaseEnvelope drives leases at explicit times: three lessees and a
// per-request client on one key, at random microsecond times that sometimes
// jump across seconds (so grants expire); lessees spend what the store
// granted until their grant's expiry, settle and release; every admitted
// token is recorded at its time, and no window of the combined stream may
// exceed the envelope, for greedy and interval rules. It returns the rules
// drawn, the tokens admitted and those from leases.
func LeaseEnvelope(t *testing.T, st LeaseStore) (rules int, total, leased int64) {
	rng := rand.New(rand.NewPCG(11, 17))
	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 3 * time.Second, time.Minute}
	for i := range 60 {
		l := atomicbucket.Limit{Tokens: 1 + rng.Int64N(100), Period: periods[rng.IntN(len(periods))], Burst: 1 + rng.Int64N(1000)}
		if i%3 == 2 {
			l.Refill = atomicbucket.Interval
		}
		r, _, err := st.Rule("lease"+strconv.Itoa(i), l)
		if err != nil {
			continue // a rate the local runtime cannot hold either
		}
		n, err := shared.NewIntegers(l)
		if err != nil {
			t.Fatal(err)
		}
		rules++
		key := "k" + strconv.Itoa(i)
		sec, usec := int64(1_790_000_000)+rng.Int64N(1e6), rng.Int64N(1e6)
		step := max(int64(l.Period)/1000/l.Tokens, 1) // one token's time, µs
		type lessee struct {
			g       *shared.Granted // nil: none held
			expires int64
			left    int64
		}
		lessees := make([]lessee, 3)
		var adm []admission
		for range 150 {
			switch rng.IntN(10) {
			case 0:
				usec += 500_000 + rng.Int64N(2_000_000) // across seconds: grants expire
			case 1, 2: // up to a burst's time, within a grant's life: the bucket refills while leases hold
				usec += rng.Int64N(min(l.Burst*step, 1_500_000) + 1)
			default:
				usec += rng.Int64N(3 * step)
			}
			sec, usec = sec+usec/1e6, usec%1e6
			now := sec*1e9 + usec*1e3
			le := &lessees[rng.IntN(len(lessees))]
			valid := le.g != nil && now < le.expires
			prev := shared.Settlement{}
			if valid {
				prev = shared.Settlement{Second: le.g.Second, Size: le.g.Size, Unspent: le.left}
			}
			switch a := rng.IntN(8); {
			case a < 3 && valid && le.left > 0: // spend from the grant
				k := 1 + rng.Int64N(le.left)
				le.left -= k
				adm = append(adm, admission{now, k})
				leased += k
			case a < 6: // refill: settle, then at least cost, up to want
				cost := 1 + rng.Int64N(min(l.Burst, 3))
				g, err := st.Lease(r, key, cost, cost+rng.Int64N(l.Burst), prev, sec, usec)
				if err != nil {
					t.Fatal(err)
				}
				le.g, le.left = nil, 0
				if g.Allowed {
					le.g, le.expires, le.left = &g, g.Expires(now), g.Size-cost
					adm = append(adm, admission{now, cost})
					leased += cost
				}
			case a == 6 && valid: // release
				if _, err := st.Lease(r, key, 0, 0, prev, sec, usec); err != nil {
					t.Fatal(err)
				}
				le.g, le.left = nil, 0
			default: // checks per request at one time, until one is denied
				for range 50 {
					cost := 1 + rng.Int64N(min(l.Burst, 5))
					d, _, err := st.Check([]Part{{r, key, cost}}, true, sec, usec)
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						break
					}
					adm = append(adm, admission{now, cost})
				}
			}
		}
		for _, a := range adm {
			total += a.count
		}
		if e := windowExcess(&n, key, adm); e > 0 {
			t.Fatalf("%+v: a window admits %d beyond the envelope", l, e)
		}
	}
	if leased < total/4 {
		t.Fatalf("leases spent %d of %d tokens admitted: the test hardly leased", leased, total)
	}
	if rules < 40 {
		t.Fatalf("only %d of 60 rules drawn could be held", rules)
	}
	return rules, total, leased
}

// LeaseExpiry: a grant spent entirely just before it expires frees nothing
// early: right after its expiry, a flood of checks gets the burst minus the
// grant (plus what the bucket's rate adds), with or without a check between
// grant and expiry (which moves the grant from the store's current second to
// the previous).
func LeaseExpiry(t *testing.T, st LeaseStore) {
	for _, between := range []bool{false, true} {
		name := "expiry" + strconv.FormatBool(between)
		r, _, err := st.Rule(name, atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 20}) // 100 ms a token
		if err != nil {
			t.Fatal(err)
		}
		sec := int64(1_790_000_000)
		g, err := st.Lease(r, "k", 1, 20, shared.Settlement{}, sec, 900_000)
		if err != nil || !g.Allowed || g.Size != 10 { // half of the 19 beyond the cost, and the cost
			t.Fatalf("grant: %+v %v", g, err)
		}
		if want, got := (sec+2)*1e9+0, g.Expires(sec*1e9+900_000_000); got != want {
			t.Fatalf("the grant expires at %d, want %d", got, want)
		}
		if between { // a check at sec+1.1 s: the grant is now the previous second's
			if d, _, err := st.Check([]Part{{r, "k", 1}}, true, sec+1, 100_000); err != nil || !d.Allowed {
				t.Fatalf("%+v %v", d, err)
			}
		}
		// The lessee spends its 9 other tokens at sec+1.999999; the grant
		// expires at sec+2; a flood at sec+2.000001.
		admitted := int64(0)
		for range 30 {
			d, _, err := st.Check([]Part{{r, "k", 1}}, true, sec+2, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			admitted++
		}
		// In [sec+1.999999, sec+2.000001] the envelope is the burst: 9 spent
		// by the lessee leaves 11 (10 if the check between took one that had
		// not come back yet).
		if limit := int64(20 - 9); admitted > limit {
			t.Errorf("%s: %d admitted right after the grant expired, with 9 of its tokens spent just before: the envelope allows %d", name, admitted, limit)
		}
	}
}

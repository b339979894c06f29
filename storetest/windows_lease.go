package storetest

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/shared"
)

// WindowLease is a store's window lease call: redisstore.Window's or
// pgstore.Window's Lease (shared.WindowLeaser).
type WindowLease func(ctx context.Context, key string, cost, want int64, prev shared.Settlement) (shared.Granted, error)

// OpenLeasedWindow is OpenWindow of a store whose windows lease: one
// window's check and lease call, deciding at the time at gives.
type OpenLeasedWindow func(t *testing.T, name string, rule atomicbucket.WindowRule, at func() time.Time) (WindowCheck, WindowLease)

// WindowLeaseEnvelope drives window leases at explicit microsecond times:
// three lessees and a per-request client on two keys, exact and counted
// windows, random steps that sometimes jump past a grant's term or the whole
// window. Lessees spend what the store granted until their grant's term is
// over (at its last microsecond, at times), and settle what they did not
// spend at their next call, whether or not the term is over, or release it.
// Every admission is recorded at its time, and no interval of the window
// may hold more than the limit for a key (reference.CheckWindow). It returns
// the units admitted, and those of them admitted from leases.
func WindowLeaseEnvelope(t *testing.T, open OpenLeasedWindow, runs int, seed uint64) (total, leased int64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 23))
	var grantsAbove int // grants of more than their cost: leases that batch
	for run := range runs {
		limit := 1 + rng.Int64N(64)
		window := time.Duration(1+rng.Int64N(3000)) * time.Millisecond
		if run%2 == 1 { // counted: sub-windows of whole microseconds
			limit = 65 + rng.Int64N(300)
			window = time.Duration(1+rng.Int64N(1000)) * 48 * time.Millisecond
		}
		rule := atomicbucket.MustWindowRule(limit, window)
		term := shared.WindowLeaseTerm(window)
		now := time.Unix(1_800_000_000, int64(rng.IntN(1e6))*1000)
		check, lease := open(t, "lease"+strconv.Itoa(run), rule, func() time.Time { return now })
		type lessee struct {
			g       *shared.Granted // nil: none held
			key     string
			expires time.Time
			left    int64
		}
		lessees := make([]lessee, 3)
		keys := []string{"a", "b"}
		var adm []reference.Admission
		for range 200 {
			switch r := rng.IntN(20); {
			case r == 0:
				now = now.Add(window + time.Duration(rng.Int64N(int64(window))))
			case r < 3:
				now = now.Add(term + time.Duration(rng.Int64N(int64(term))))
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(window)/limit*2 + 1)))
			}
			now = now.Truncate(time.Microsecond)
			le := &lessees[rng.IntN(len(lessees))]
			valid := le.g != nil && now.Before(le.expires)
			prev := shared.Settlement{}
			if le.g != nil {
				prev = shared.Settlement{Second: le.g.Second, Size: le.g.Size, Unspent: le.left, Gen: le.g.Gen}
			}
			switch a := rng.IntN(10); {
			case a < 4 && valid && le.left > 0: // spend from the grant, at times at its term's last microsecond
				at := now
				if rng.IntN(3) == 0 {
					at = le.expires.Add(-time.Microsecond)
				}
				k := 1 + rng.Int64N(le.left)
				le.left -= k
				adm = append(adm, reference.Admission{Key: le.key, At: at.UnixNano(), Cost: k})
				leased += k
			case a < 7: // settle, then at least cost, up to want
				key := le.key
				if key == "" || rng.IntN(4) == 0 {
					key = keys[rng.IntN(len(keys))]
				}
				if key != le.key {
					prev = shared.Settlement{} // a grant of another key: let it lapse
				}
				cost := []int64{0, 1, 1, 2, limit / 4, limit, limit + 1}[rng.IntN(7)]
				g, err := lease(ctx, key, cost, cost+rng.Int64N(limit), prev)
				if err != nil {
					t.Fatal(err)
				}
				le.g, le.left, le.key = nil, 0, key
				if g.Allowed != (cost <= limit && g.RetryAfter == 0) || g.Allowed && (g.Size < cost || g.Term != term) {
					t.Fatalf("run %d: a lease of cost %d in a window of %d: %+v (term %v)", run, cost, limit, g, term)
				}
				if cost > limit && g.RetryAfter != atomicbucket.Never {
					t.Fatalf("run %d: a lease of cost %d above the limit %d: %+v", run, cost, limit, g)
				}
				if g.Allowed {
					le.g, le.expires, le.left = &g, time.Unix(0, g.Expires(now.UnixNano())), g.Size-cost
					if cost > 0 {
						adm = append(adm, reference.Admission{Key: key, At: now.UnixNano(), Cost: cost})
						leased += cost
					}
					if g.Size > max(cost, 1) {
						grantsAbove++
					}
				}
			case a == 7 && le.g != nil: // release
				if _, err := lease(ctx, le.key, 0, 0, prev); err != nil {
					t.Fatal(err)
				}
				le.g, le.left = nil, 0
			default: // checks per request at one time, until one is denied
				key := keys[rng.IntN(len(keys))]
				for range 8 {
					cost := 1 + rng.Int64N(min(limit, 4))
					d, err := check(ctx, key, cost)
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						break
					}
					adm = append(adm, reference.Admission{Key: key, At: now.UnixNano(), Cost: cost})
				}
			}
		}
		for _, a := range adm {
			total += a.Cost
		}
		if err := reference.CheckWindow(limit, int64(window), adm); err != nil {
			t.Fatalf("run %d (%d in %v, exact %v): %v", run, limit, window, rule.Exact(), err)
		}
	}
	if leased < total/4 || grantsAbove < runs {
		t.Fatalf("leases admitted %d of %d units, %d grants beyond their cost: the test hardly leased", leased, total, grantsAbove)
	}
	return total, leased
}

// WindowLeaseSettles, by hand: a grant's unspent units go back at the next
// call, also after its term; a release gives them back; the store grants at
// most half the room beyond the cost; a spent grant's units stay in the
// window until the window after its term is over.
func WindowLeaseSettles(t *testing.T, open OpenLeasedWindow) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	rule := atomicbucket.MustWindowRule(20, 4*time.Second) // term: 1 s
	check, lease := open(t, "settles", rule, func() time.Time { return now })
	g, err := lease(ctx, "k", 2, 20, shared.Settlement{})
	if err != nil || !g.Allowed || g.Size != 11 || g.Remaining != 9 || g.Term != time.Second { // 2 and half of the 18 beyond
		t.Fatalf("first grant: %+v %v", g, err)
	}
	// Spend 3 more of the 11 (5 in all), then after the term settle: 6 go back.
	now = now.Add(1500 * time.Millisecond)
	g2, err := lease(ctx, "k", 1, 1, shared.Settlement{Second: g.Second, Size: g.Size, Unspent: 6, Gen: g.Gen})
	if err != nil || !g2.Allowed || g2.Size != 1 || g2.Remaining != 20-5-1 {
		t.Fatalf("after settling 6 of 11: %+v %v", g2, err)
	}
	// A release of the 1 unit, unspent: it goes back.
	if _, err := lease(ctx, "k", 0, 0, shared.Settlement{Second: g2.Second, Size: 1, Unspent: 1, Gen: g2.Gen}); err != nil {
		t.Fatal(err)
	}
	// The 5 spent count until the window after the first grant's term: at
	// 1 s + 4 s they are still in; 15 fit, not 16.
	now = time.Unix(1_800_000_005, 0)
	admitted := int64(0)
	for range 20 {
		d, err := check(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		admitted++
	}
	if admitted != 15 {
		t.Fatalf("at the end of the window after the term, %d admitted with 5 of a grant spent: want 15", admitted)
	}
	// A settlement of another generation of the key's slots (made after a
	// carry, or in a key made anew) takes nothing back; of this one, it does.
	now = now.Add(time.Hour)
	g3, err := lease(ctx, "k", 1, 1, shared.Settlement{})
	if err != nil || !g3.Allowed || g3.Size != 1 {
		t.Fatalf("an hour later: %+v %v", g3, err)
	}
	s := shared.Settlement{Second: g3.Second, Size: 1, Unspent: 1, Gen: g3.Gen + 1}
	if d, err := lease(ctx, "k", 0, 0, s); err != nil || !d.Allowed || d.Remaining != 19 {
		t.Fatalf("a settlement of another generation: %+v %v, want 19 remaining", d, err)
	}
	s.Gen = g3.Gen
	if d, err := lease(ctx, "k", 0, 0, s); err != nil || !d.Allowed || d.Remaining != 20 {
		t.Fatalf("a settlement of the grant: %+v %v, want 20 remaining", d, err)
	}
}

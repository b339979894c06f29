package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// Many instances at once, each with its own client, on one key and on a tier,
// on Redis's own clock: what they admit together never exceeds the rule's
// envelope, burst + rate·Δ over the run as Redis's clock measured it.
func TestInstancesStayInsideTheEnvelope(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	l := atomicbucket.Limit{Tokens: 200, Period: time.Second, Burst: 50}
	single, err := NewRule("env", l)
	if err != nil {
		t.Fatal(err)
	}
	global, err := NewRule("envglobal", atomicbucket.Limit{Tokens: 300, Period: time.Second, Burst: 20})
	global = global.AsGlobal()
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t)
	const instances, perInstance = 8, 4
	start := admin.Time(ctx).Val()
	var admitted, tierAdmitted atomic.Int64
	var wg sync.WaitGroup
	for range instances {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		st, err := New(context.Background(), c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for range perInstance {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 150 {
					d, err := st.AllowN(ctx, single, "shared-key", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
					td, _, err := st.AllowTier(ctx, []shared.Call{{Rule: single, Key: "tier-key", Cost: 1}, {Rule: global, Key: "", Cost: 1}})
					if err != nil {
						t.Error(err)
						return
					}
					if td.Allowed {
						tierAdmitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := admin.Time(ctx).Val().Sub(start) + time.Millisecond // TIME is read in µs; a ms of slack for its rounding
	envelope := func(l atomicbucket.Limit) int64 {
		return l.Burst + int64(float64(l.Tokens)*elapsed.Seconds()/l.Period.Seconds())
	}
	if got, most := admitted.Load(), envelope(l); got > most || got < l.Burst {
		t.Errorf("one key: %d admitted in %v; the envelope is %d (and the burst, %d, must pass)", got, elapsed, most, l.Burst)
	}
	most := min(envelope(l), envelope(global.Limit()))
	if got := tierAdmitted.Load(); got > most || got < global.Limit().Burst {
		t.Errorf("tier: %d admitted in %v; the tightest envelope is %d", got, elapsed, most)
	}
	t.Logf("%d checks in %v: %d admitted on one key (envelope %d), %d by the tier (envelope %d)",
		instances*perInstance*150*2, elapsed, admitted.Load(), envelope(l), tierAdmitted.Load(), most)
}

package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
	"github.com/redis/go-redis/v9"
)

// Four instances, each with its own client and lease of one shared bucket,
// checking as fast as they can on Redis's clock: together they never admit
// more than the bucket's envelope, and they ask Redis far less often than
// once a decision.
func TestLeasesStayInsideTheEnvelope(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		l        atomicbucket.Limit
		maxBatch int64
		checks   int           // per goroutine
		pause    time.Duration // between a goroutine's checks
	}{
		// Over its limit for half a second: refills, grants shrinking as the
		// bucket runs low, denials.
		{"tight", atomicbucket.Limit{Tokens: 200, Period: time.Second, Burst: 50}, 100, 2_000, 250 * time.Microsecond},
		{"steady", atomicbucket.Limit{Tokens: 1_000_000, Period: time.Second, Burst: 1_000_000}, 1000, 20_000, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewRule("lease_"+c.name, c.l)
			if err != nil {
				t.Fatal(err)
			}
			admin := srv.Client(t)
			start := admin.Time(ctx).Val()
			var admitted, decisions, calls atomic.Int64
			var wg sync.WaitGroup
			var leases []*shared.Lease
			for range 4 {
				cl := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
				t.Cleanup(func() { cl.Close() })
				st, err := New(context.Background(), cl, Options{})
				if err != nil {
					t.Fatal(err)
				}
				lease := st.NewLease(r, "k", c.maxBatch)
				leases = append(leases, lease)
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range c.checks {
							if c.pause > 0 {
								time.Sleep(c.pause)
							}
							d, err := lease.AllowN(ctx, 1)
							if err != nil {
								t.Error(err)
								return
							}
							decisions.Add(1)
							if d.Allowed {
								admitted.Add(1)
							}
						}
					}()
				}
			}
			wg.Wait()
			elapsed := admin.Time(ctx).Val().Sub(start) + time.Millisecond
			for _, l := range leases {
				calls.Add(l.Calls())
			}
			most := c.l.Burst + int64(float64(c.l.Tokens)*elapsed.Seconds()/c.l.Period.Seconds())
			if got := admitted.Load(); got > most {
				t.Errorf("%d admitted in %v; the envelope is %d", got, elapsed, most)
			}
			perThousand := float64(calls.Load()) * 1000 / float64(decisions.Load())
			t.Logf("%d decisions in %v: %d admitted (envelope %d), %d script calls (%.2f per 1,000 decisions)",
				decisions.Load(), elapsed, admitted.Load(), most, calls.Load(), perThousand)
			if c.name == "steady" && perThousand > 10 {
				t.Errorf("%.2f script calls per 1,000 decisions at a steady rate, want at most 10 (100× fewer than one a decision)", perThousand)
			}
			for _, l := range leases {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A lease's tokens are accounted for: what Redis still holds plus what the
// lease holds plus what it spent is the burst, whatever batches it took; and
// Release gives back what it holds.
func TestLeaseRelease(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, _ := NewRule("release", atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 100})
	l := st.NewLease(r, "k", 50)
	for spent := int64(1); spent <= 12; spent++ {
		if d, err := l.AllowN(ctx, 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		inRedis, _ := st.PeekN(ctx, r, "k", 0)
		if inRedis.Remaining+l.Held()+spent != 100 {
			t.Fatalf("after %d spent: %d in Redis + %d held ≠ 100 − %d", spent, inRedis.Remaining, l.Held(), spent)
		}
	}
	if l.Held() == 0 {
		t.Fatal("the lease holds nothing after a dozen requests: its batch did not grow")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if after, _ := st.PeekN(ctx, r, "k", 0); after.Remaining != 88 || l.Held() != 0 {
		t.Fatalf("after release %d in Redis and %d held, want 88 and 0", after.Remaining, l.Held())
	}
}

// Tokens a lease holds stay counted while the bucket refills: after the
// bucket's time says it is full again, another instance gets the burst minus
// what the lease still holds, and the lease's tokens and the other's together
// stay inside burst + rate·Δ (before leases were held in Redis, the two
// admitted the burst plus everything the lease held).
func TestLeaseHeldWhileTheBucketRefills(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const burst, rate = 10, 100 // a burst refills in 100 ms
	r, _ := NewRule("held", atomicbucket.Limit{Tokens: rate, Period: time.Second, Burst: burst})
	l := st.NewLease(r, "k", burst)
	for i := 0; l.Held() < 3; i++ {
		if i == 20 {
			t.Fatalf("the lease holds %d tokens after 20 requests", l.Held())
		}
		if d, err := l.AllowN(ctx, 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	time.Sleep(150 * time.Millisecond) // the bucket's TAT has passed; the grant (valid ≥ 1 s) has not
	held := l.Held()
	if held < 3 {
		t.Fatalf("the lease's grant was dropped within 150 ms: it holds %d", held)
	}
	start := time.Now()
	var others int64
	for {
		d, err := st.AllowN(ctx, r, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		others++
	}
	var lessee int64
	for range held {
		if d, err := l.AllowN(ctx, 1); err != nil {
			t.Fatal(err)
		} else if d.Allowed {
			lessee++
		}
	}
	elapsed := time.Since(start)
	envelope := burst + int64(rate*elapsed.Seconds())
	t.Logf("held %d; in %v the others got %d and the lease spent %d (envelope %d)", held, elapsed, others, lessee, envelope)
	if lessee != held {
		t.Errorf("the lease spent %d of the %d tokens it held", lessee, held)
	}
	if others+lessee > envelope {
		t.Errorf("%d + %d admitted in %v: beyond the envelope %d", others, lessee, elapsed, envelope)
	}
}

// A check whose context ends while it waits for another check's refill of
// the same lease is decided by the rule's failure setting, without counting
// as a failure of Redis's: ten such waits, behind a refill that Redis holds
// up (CLIENT PAUSE, lifted by Redis's next cron, up to 100 ms later), do not
// open the breaker.
func TestLeaseWaitIsNoRedisFailure(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{Timeout: 2 * time.Second}) // the refill outlasts the pause
	if err != nil {
		t.Fatal(err)
	}
	r, _ := NewRule("wait", atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 10})
	l := st.NewLease(r, "k", 10)
	check := func(ctx context.Context) verdict.Result {
		return st.CheckLease(ctx, l, r, "k", 1)
	}
	if err := srv.Client(t).Do(context.Background(), "CLIENT", "PAUSE", "20", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	first := make(chan verdict.Result, 1)
	go func() { first <- check(context.Background()) }() // the refill, held up by the pause
	time.Sleep(5 * time.Millisecond)
	results := make(chan verdict.Result, 2*shared.BreakerFailures)
	for range 2 * shared.BreakerFailures {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer cancel()
			results <- check(ctx)
		}()
	}
	for range 2 * shared.BreakerFailures {
		if res := <-results; res.Allowed || !res.Degraded || !errors.Is(res.Err, shared.ErrLeaseWait) {
			t.Fatalf("a check that waited out its context: %+v", res)
		}
	}
	if res := <-first; !res.Allowed || res.Degraded {
		t.Fatalf("the refill after the pause: %+v", res)
	}
	for _, b := range st.Breakers() {
		if b.Failures != 0 || b.Open {
			t.Fatalf("waits counted as Redis failures: %+v", b)
		}
	}
}

// A leased bucket that starts empty (initial: 0) is created by its first
// lease call, as a per-request check creates it: it fills at its rate from
// then on, so the lease is granted once a token's time has passed (before,
// every lease call saw a new, empty bucket and was denied forever).
func TestLeaseOfABucketThatStartsEmpty(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRule("empty", atomicbucket.Limit{Tokens: 20, Period: time.Second, Burst: 5, InitialSet: true})
	if err != nil {
		t.Fatal(err)
	}
	l := st.NewLease(r, "k", 5)
	ctx := context.Background()
	d, err := l.AllowN(ctx, 1)
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 50*time.Millisecond {
		t.Fatalf("the first check of an empty bucket: %+v, %v; want a denial for at most a token's time (50ms)", d, err)
	}
	time.Sleep(d.RetryAfter + 10*time.Millisecond)
	if d, err := l.AllowN(ctx, 1); err != nil || !d.Allowed {
		t.Fatalf("a token's time later: %+v, %v; want it admitted", d, err)
	}
}

// Leased keys under load on a healthy Redis: 64 callers, each checking one
// of 1e4 leased keys after another through the seam (as the RLS door's 64
// callers do), for a second. A healthy store never gives an overload answer
// the caller did not cause: no check is degraded.
func TestLeasedKeysUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Bind([]shared.Rule{{Name: "Leased", Limit: atomicbucket.Limit{Tokens: 100, Period: time.Second, Burst: 100}, Lease: 20}})
	if err != nil {
		t.Fatal(err)
	}
	bound := b.(*shared.Binding)
	const keys = 10_000
	var checks, degraded atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for c := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; time.Now().Before(stop); i += 64 {
				res, _ := bound.Check(context.Background(), []shared.Step{{Rule: 0, Key: "k" + strconv.Itoa(i%keys), Cost: 1}})
				checks.Add(1)
				if res.Degraded {
					degraded.Add(1)
					firstErr.CompareAndSwap(nil, res.Err.Error())
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d checks of %d leased keys from 64 callers, %d Redis calls, %d degraded", checks.Load(), keys, st.Stats().Calls, degraded.Load())
	if degraded.Load() > 0 {
		t.Errorf("%d of %d checks degraded on a healthy Redis, the first: %v", degraded.Load(), checks.Load(), firstErr.Load())
	}
}

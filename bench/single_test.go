package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	juju "github.com/juju/ratelimit"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	"golang.org/x/time/rate"
)

var sinkBool bool

// singleCase is a rate for one bucket: allow-heavy (every request admitted) or
// deny-heavy (drained first, then every request denied).
type singleCase struct {
	name   string
	tokens int64         // per period
	period time.Duration // tokens/period is the rate
	burst  int64
}

var singleCases = []singleCase{
	{"allow", 1_000_000_000, time.Second, 1_000_000_000},
	{"deny", 1, time.Hour, 1},
}

func (c singleCase) perSecond() float64 { return float64(c.tokens) / c.period.Seconds() }

// floor is the least a lock-free check can cost: one clock read, one atomic
// load and one compare-and-swap.
func floor(w *atomic.Int64) bool {
	now := int64(atomicbucket.Now())
	old := w.Load()
	return w.CompareAndSwap(old, max(old, now)+1)
}

func newBucket(b *testing.B, c singleCase) *atomicbucket.Bucket {
	r, err := atomicbucket.NewRule(atomicbucket.Limit{Tokens: c.tokens, Period: c.period, Burst: c.burst})
	if err != nil {
		b.Fatal(err)
	}
	lb := atomicbucket.NewBucketAt(r, atomicbucket.Now())
	lb.AllowNAt(atomicbucket.Now(), c.burst)
	return lb
}

func newXRate(c singleCase) *rate.Limiter {
	l := rate.NewLimiter(rate.Limit(c.perSecond()), int(c.burst))
	l.AllowN(time.Now(), int(c.burst))
	return l
}

func newJuju(c singleCase) *juju.Bucket {
	l := juju.NewBucketWithRate(c.perSecond(), c.burst)
	l.TakeAvailable(c.burst)
	return l
}

// newSethvargo builds a memorystore for c. Its refill does not add to the count:
// at each new interval it sets the count to ticks × interval/tokens, so a fast
// allow-everything rate drops to about a token per interval after the first one.
// Allow-heavy runs therefore give it one 24-hour interval holding more tokens
// than any run takes, so that, like every other implementation, it admits each
// request and the benchmark measures an admitted check.
func newSethvargo(b *testing.B, c singleCase) (take func(string) bool, stop func()) {
	cfg := &memorystore.Config{Tokens: uint64(c.tokens), Interval: c.period}
	if c.name == "allow" {
		cfg.Tokens, cfg.Interval = 1<<40, 24*time.Hour
	}
	s, err := memorystore.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	take = func(key string) bool {
		_, _, _, ok, _ := s.Take(ctx, key)
		return ok
	}
	return take, func() { s.Close(ctx) }
}

func newThrottled(b *testing.B, c singleCase, maxKeys int) func(string) bool {
	st, err := memstore.NewCtx(maxKeys)
	if err != nil {
		b.Fatal(err)
	}
	q := throttled.RateQuota{MaxRate: throttled.Rate{}, MaxBurst: int(c.burst) - 1}
	if c.period == time.Second {
		q.MaxRate = throttled.PerSec(int(c.tokens))
	} else {
		q.MaxRate = throttled.PerHour(int(c.tokens))
	}
	l, err := throttled.NewGCRARateLimiterCtx(st, q)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return func(key string) bool {
		limited, _, _ := l.RateLimitCtx(ctx, key, 1)
		return !limited
	}
}

// BenchmarkSingle is one bucket checked from one goroutine.
func BenchmarkSingle(b *testing.B) {
	for _, c := range singleCases {
		b.Run("case="+c.name+"/impl=floor", func(b *testing.B) {
			var w atomic.Int64
			for b.Loop() {
				sinkBool = floor(&w)
			}
		})
		b.Run("case="+c.name+"/impl=limitgen", func(b *testing.B) {
			l := newBucket(b, c)
			for b.Loop() {
				sinkBool = l.Allow()
			}
		})
		b.Run("case="+c.name+"/impl=xrate", func(b *testing.B) {
			l := newXRate(c)
			for b.Loop() {
				sinkBool = l.Allow()
			}
		})
		b.Run("case="+c.name+"/impl=juju", func(b *testing.B) {
			l := newJuju(c)
			for b.Loop() {
				sinkBool = l.TakeAvailable(1) == 1
			}
		})
		b.Run("case="+c.name+"/impl=sethvargo", func(b *testing.B) {
			take, stop := newSethvargo(b, c)
			defer stop()
			for b.Loop() {
				sinkBool = take("k")
			}
		})
		b.Run("case="+c.name+"/impl=throttled", func(b *testing.B) {
			take := newThrottled(b, c, 0)
			for b.Loop() {
				sinkBool = take("k")
			}
		})
	}
}

// BenchmarkSingleParallel is one bucket checked from every core at once: on a
// 2-core machine it shows contention, not scaling.
func BenchmarkSingleParallel(b *testing.B) {
	for _, c := range singleCases {
		b.Run("case="+c.name+"/impl=floor", func(b *testing.B) {
			var w atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					floor(&w)
				}
			})
		})
		b.Run("case="+c.name+"/impl=limitgen", func(b *testing.B) {
			l := newBucket(b, c)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Allow()
				}
			})
		})
		b.Run("case="+c.name+"/impl=xrate", func(b *testing.B) {
			l := newXRate(c)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Allow()
				}
			})
		})
		b.Run("case="+c.name+"/impl=juju", func(b *testing.B) {
			l := newJuju(c)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.TakeAvailable(1)
				}
			})
		})
		b.Run("case="+c.name+"/impl=sethvargo", func(b *testing.B) {
			take, stop := newSethvargo(b, c)
			defer stop()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					take("k")
				}
			})
		})
		b.Run("case="+c.name+"/impl=throttled", func(b *testing.B) {
			take := newThrottled(b, c, 0)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					take("k")
				}
			})
		})
	}
}

package bench

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
)

// benchRedis starts a redis-server on 127.0.0.1 on a free port for the
// benchmarks of one run, without persistence; it is stopped by its pid when
// the benchmark ends.
func benchRedis(b *testing.B) string {
	b.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		b.Fatalf("redis-server is not installed (apt-get install -y redis-server): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", b.TempDir())
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			b.Fatalf("redis-server on %s did not start", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr
}

// The shared limit every Redis implementation checks: 1e6 a second in bursts
// of 1e6 on one key, so that every check is admitted and the benchmark
// measures a decision's path, not denials.
const redisRate = 1_000_000

// redisImpls builds each implementation's check over a client of addr.
var redisImpls = []struct {
	name string
	make func(b *testing.B, addr string) func(ctx context.Context) (bool, error)
}{
	{"limitgen", func(b *testing.B, addr string) func(context.Context) (bool, error) {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		st, err := redisstore.New(c)
		if err != nil {
			b.Fatal(err)
		}
		r, err := redisstore.NewRule("bench", atomicbucket.Limit{Tokens: redisRate, Period: time.Second, Burst: redisRate})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context) (bool, error) {
			d, err := st.AllowN(ctx, r, "k", 1)
			return d.Allowed, err
		}
	}},
	{"limitgen-coalesced", func(b *testing.B, addr string) func(context.Context) (bool, error) {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		st, err := redisstore.New(c)
		if err != nil {
			b.Fatal(err)
		}
		st.Coalesce(256)
		b.Cleanup(st.Close)
		r, err := redisstore.NewRule("benchcoalesced", atomicbucket.Limit{Tokens: redisRate, Period: time.Second, Burst: redisRate})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context) (bool, error) {
			d, err := st.AllowN(ctx, r, "k", 1)
			return d.Allowed, err
		}
	}},
	{"limitgen-lease", func(b *testing.B, addr string) func(context.Context) (bool, error) {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		st, err := redisstore.New(c)
		if err != nil {
			b.Fatal(err)
		}
		r, err := redisstore.NewRule("benchlease", atomicbucket.Limit{Tokens: redisRate, Period: time.Second, Burst: redisRate})
		if err != nil {
			b.Fatal(err)
		}
		l := st.NewLease(r, "k", 1000)
		return func(ctx context.Context) (bool, error) {
			d, err := l.AllowN(ctx, 1)
			return d.Allowed, err
		}
	}},
	{"redis_rate", func(b *testing.B, addr string) func(context.Context) (bool, error) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		b.Cleanup(func() { c.Close() })
		l := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: redisRate, Burst: redisRate, Period: time.Second}
		return func(ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, "k", limit)
			return err == nil && res.Allowed > 0, err
		}
	}},
	{"redis_rate-autopipeline", func(b *testing.B, addr string) func(context.Context) (bool, error) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		b.Cleanup(func() { c.Close() })
		ap, err := c.AutoPipeline()
		if err != nil {
			b.Fatal(err)
		}
		l := redis_rate.NewLimiter(ap)
		limit := redis_rate.Limit{Rate: redisRate, Burst: redisRate, Period: time.Second}
		return func(ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, "k", limit)
			return err == nil && res.Allowed > 0, err
		}
	}},
	{"throttled", func(b *testing.B, addr string) func(context.Context) (bool, error) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		b.Cleanup(func() { c.Close() })
		st, err := goredisstore.NewCtx(c, "throttled:")
		if err != nil {
			b.Fatal(err)
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(redisRate), MaxBurst: redisRate - 1})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context) (bool, error) {
			limited, _, err := rl.RateLimitCtx(ctx, "k", 1)
			return !limited, err
		}
	}},
}

// BenchmarkRedis is one shared check on a redis-server started for the run,
// from 64 concurrent callers (b.SetParallelism over 2 cores), every check
// admitted: ns/op is the time per decision of the whole process, so
// decisions/s = 1e9 / ns/op. limitgen checks one key per script call;
// limitgen-coalesced sends the checks that wait meanwhile together, each
// decided on its own; limitgen-lease spends batches locally. errors/op counts
// checks that failed (throttled's store gives up when its compare-and-swap
// keeps losing under contention); limitgen's must be 0, and every check that
// did not fail must be admitted.
func BenchmarkRedis(b *testing.B) {
	addr := benchRedis(b)
	for _, impl := range redisImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			check := impl.make(b, addr)
			ctx := context.Background()
			if ok, err := check(ctx); !ok || err != nil {
				b.Fatalf("%s: the first check: %v, %v", impl.name, ok, err)
			}
			var errs, denied atomic.Int64
			b.SetParallelism(32) // 64 callers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ok, err := check(ctx)
					switch {
					case err != nil:
						errs.Add(1)
					case !ok:
						denied.Add(1)
					}
				}
			})
			b.ReportMetric(float64(errs.Load())/float64(b.N), "errors/op")
			if denied.Load() > 0 || (errs.Load() > 0 && impl.name != "throttled") {
				b.Fatalf("%s: %d denied, %d failed of %d", impl.name, denied.Load(), errs.Load(), b.N)
			}
		})
	}
}

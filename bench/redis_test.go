package bench

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/bench/sharedlimits"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
)

// benchRedis starts a redis-server on 127.0.0.1 on a free port for the
// benchmarks of one run, without persistence; it is stopped by its pid when
// the benchmark ends.
func benchRedis(b testing.TB) string {
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
		return generatedOnRedis(b, addr, 0)
	}},
	{"limitgen-coalesced", func(b *testing.B, addr string) func(context.Context) (bool, error) {
		return generatedOnRedis(b, addr, 256)
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
		l := redis_rate.NewLimiter(autoPipeline(b, addr))
		limit := redis_rate.Limit{Rate: redisRate, Burst: redisRate, Period: time.Second}
		return func(ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, "k", limit)
			return err == nil && res.Allowed > 0, err
		}
	}},
	{"ping-autopipeline", func(b *testing.B, addr string) func(context.Context) (bool, error) {
		// The physical anchor: one PING a decision through go-redis's
		// AutoPipeline, no limit at all (what a round trip costs here).
		ap := autoPipeline(b, addr)
		return func(ctx context.Context) (bool, error) {
			err := ap.Ping(ctx).Err()
			return err == nil, err
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

// autoPipeline is go-redis's AutoPipeline over a new client of addr, both
// closed when the benchmark ends.
func autoPipeline(b *testing.B, addr string) *redis.AutoPipeliner {
	c := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { c.Close() })
	ap, err := c.AutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
	return ap
}

// redisKeys is how many keys BenchmarkRedisKeys draws from, at random.
const redisKeys = 10_000

// BenchmarkRedisKeys is BenchmarkRedis's check on 1e4 keys drawn at random
// (as a per-user limit sees them), 64 callers: limitgen a call a check and
// coalesced (256), against redis_rate plain and on go-redis's AutoPipeline.
// Same metrics as BenchmarkRedis.
func BenchmarkRedisKeys(b *testing.B) {
	addr := benchRedis(b)
	keys := make([]string, redisKeys)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	key := func() string { return keys[rand.IntN(len(keys))] }
	limit := redis_rate.Limit{Rate: redisRate, Burst: redisRate, Period: time.Second}
	rateOn := func(c redis.Cmdable) func(context.Context) (bool, error) {
		l := redis_rate.NewLimiter(c)
		return func(ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, key(), limit)
			return err == nil && res.Allowed > 0, err
		}
	}
	impls := []struct {
		name string
		make func(b *testing.B) func(context.Context) (bool, error)
	}{
		{"limitgen", func(b *testing.B) func(context.Context) (bool, error) { return generatedKeysOnRedis(b, addr, 0, key) }},
		{"limitgen-coalesced", func(b *testing.B) func(context.Context) (bool, error) { return generatedKeysOnRedis(b, addr, 256, key) }},
		{"redis_rate", func(b *testing.B) func(context.Context) (bool, error) {
			c := redis.NewClient(&redis.Options{Addr: addr})
			b.Cleanup(func() { c.Close() })
			return rateOn(c)
		}},
		{"redis_rate-autopipeline", func(b *testing.B) func(context.Context) (bool, error) { return rateOn(autoPipeline(b, addr)) }},
	}
	for _, impl := range impls {
		b.Run("keys=10000/callers=64/impl="+impl.name, func(b *testing.B) {
			runRedis(b, addr, 64, impl.make(b))
		})
	}
}

// generatedKeysOnRedis is generatedOnRedis with the key each check draws.
func generatedKeysOnRedis(b *testing.B, addr string, coalesce int, key func() string) func(context.Context) (bool, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	st, err := redisstore.New(context.Background(), c, redisstore.Options{Coalesce: coalesce})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	watchBreakers(b, st)
	lims := sharedlimits.New(sharedlimits.WithStore(st))
	if err := lims.SharedErr(); err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context) (bool, error) {
		res := lims.Hot.AllowN(ctx, key(), 1)
		return res.Allowed, res.Err
	}
}

// generatedOnRedis is limitgen as a service uses it: the generated package
// (bench/sharedlimits, rule Hot) bound to a store on addr, coalescing at most
// coalesce checks a script call (0: none). A check the store did not decide
// counts as an error.
func generatedOnRedis(b *testing.B, addr string, coalesce int) func(context.Context) (bool, error) {
	return generatedKeysOnRedis(b, addr, coalesce, func() string { return "k" })
}

// callerCounts are the concurrent callers each Redis benchmark runs with.
var callerCounts = []int{1, 16, 64}

// BenchmarkRedis is one shared check on a redis-server started for the run,
// every check admitted, from 1, 16 and 64 concurrent callers (16 and 64 by
// b.SetParallelism over the machine's processors). limitgen is the generated
// package (bench/sharedlimits) on redisstore, as a service checks a shared
// rule: one script call a check; limitgen-coalesced is the same with the
// store's Options.Coalesce: 256 (the checks that wait meanwhile go together,
// each decided on its own); ping-autopipeline is no limit at all, a PING a
// decision on go-redis's AutoPipeline: the round trip's cost here, the
// anchor coalesced checks are measured against. Metrics: decisions/s of the whole
// process; p50-µs and p99-µs, each check's latency as its caller sees it;
// cmds/op, the commands Redis ran per decision (INFO commandstats, the
// commands a script calls included); scripts/op, the script calls (EVALSHA
// and EVAL) per decision; redis-µs/op, the time Redis spent running
// commands per decision (INFO commandstats' usec: the script's cost on the
// server, which shares the machine's two cores); errors/op, the checks that failed (throttled's store
// gives up when its compare-and-swap keeps losing under contention);
// denied/op, the checks denied (none should be: see reportMisses).
func BenchmarkRedis(b *testing.B) {
	addr := benchRedis(b)
	for _, callers := range callerCounts {
		for _, impl := range redisImpls {
			b.Run(fmt.Sprintf("callers=%d/impl=%s", callers, impl.name), func(b *testing.B) {
				check := impl.make(b, addr)
				runRedis(b, addr, callers, check)
			})
		}
	}
}

// runRedis runs check b.N times from callers goroutines and reports the
// metrics BenchmarkRedis describes.
func runRedis(b *testing.B, addr string, callers int, check func(context.Context) (bool, error)) {
	monitor := redis.NewClient(&redis.Options{Addr: addr})
	defer monitor.Close()
	var before, after commands
	runCallers(b, callers, check,
		func() { before = commandStats(b, monitor) },
		func() { after = commandStats(b, monitor) })
	n := float64(b.N)
	b.ReportMetric(float64(after.all-before.all)/n, "cmds/op")
	b.ReportMetric(float64(after.scripts-before.scripts)/n, "scripts/op")
	b.ReportMetric(float64(after.usec-before.usec)/n, "redis-µs/op")
	b.ReportMetric((after.cpu-before.cpu)*1e6/n, "redis-cpu-µs/op")
}

// runCallers runs check b.N times from callers goroutines (above 1, by
// b.SetParallelism over the machine's processors), after a first check that
// must be admitted, with start and stop called just inside the timed part. It
// reports decisions/s of the whole process, p50-µs and p99-µs (each check's
// latency as its caller sees it), errors/op and denied/op (reportMisses).
func runCallers(b *testing.B, callers int, check func(context.Context) (bool, error), start, stop func()) {
	ctx := context.Background()
	firstCheck(b, ctx, check)
	var nerr, ndenied atomic.Int64
	hists := make([]latencies, callers) // one per caller, allocated before the timer
	var next atomic.Int64
	start()
	b.ResetTimer()
	run := func(h *latencies, next func() bool) {
		for next() {
			start := time.Now()
			ok, err := check(ctx)
			h.add(time.Since(start))
			switch {
			case err != nil:
				nerr.Add(1)
			case !ok:
				ndenied.Add(1)
			}
		}
	}
	if callers == 1 {
		n := 0
		run(&hists[0], func() bool { n++; return n <= b.N })
	} else {
		b.SetParallelism(max(callers/runtime.GOMAXPROCS(0), 1))
		b.RunParallel(func(pb *testing.PB) {
			run(&hists[next.Add(1)-1], pb.Next)
		})
	}
	b.StopTimer()
	stop()
	var all latencies
	for i := range hists {
		all.merge(&hists[i])
	}
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(all.quantile(0.50))/1e3, "p50-µs")
	b.ReportMetric(float64(all.quantile(0.99))/1e3, "p99-µs")
	reportMisses(b, nerr.Load(), ndenied.Load())
	reportBreakers(b)
}

// breakerStores are the stores of the cells running now, by benchmark, whose
// breaker openings the cell reports (watchBreakers).
var breakerStores sync.Map // *testing.B → interface{ Stats() shared.Stats }

// watchBreakers makes b's cell report how many times st's circuit breakers
// opened during it (breaker-opens, a count for the cell, not per check):
// a healthy server should open none, and a cell where one opened measured
// local decisions for a while, not the store.
func watchBreakers(b *testing.B, st interface{ Stats() shared.Stats }) {
	breakerStores.Store(b, st)
	b.Cleanup(func() { breakerStores.Delete(b) })
}

// reportBreakers reports the openings of b's store's breakers so far
// (watchBreakers), logging any.
func reportBreakers(b *testing.B) {
	v, ok := breakerStores.Load(b)
	if !ok {
		return
	}
	n := v.(interface{ Stats() shared.Stats }).Stats().BreakerOpenings
	b.ReportMetric(float64(n), "breaker-opens")
	if n > 0 {
		b.Logf("the store's breakers opened %d times in this cell: some checks were decided without it", n)
	}
}

// firstCheck makes sure that check admits before anything is timed: on a busy
// machine a healthy server can miss a store's timeout now and then, so it
// tries a few times before it gives up on the benchmark (a server that never
// answers, a limit that denies).
func firstCheck(b *testing.B, ctx context.Context, check func(context.Context) (bool, error)) {
	b.Helper()
	var ok bool
	var err error
	for range 10 {
		if ok, err = check(ctx); ok && err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("the first check, tried 10 times: admitted %v, error %v", ok, err)
}

// reportMisses reports the checks that failed (errors/op) and those denied
// (denied/op) beside the benchmark's figures. Every limit here admits every
// check, so either is a check that did not do what the figures measure: a
// store's timeout missed on a busy machine, throttled's compare-and-swap
// giving up under contention. They are figures, not failures: one slow
// moment must not stop the main job, and the table shows them for every
// implementation alike. Any above 0 is also logged, so the run says so.
func reportMisses(b *testing.B, errs, denied int64) {
	n := float64(b.N)
	b.ReportMetric(float64(errs)/n, "errors/op")
	b.ReportMetric(float64(denied)/n, "denied/op")
	if errs > 0 || denied > 0 {
		b.Logf("%d of %d checks failed and %d were denied: see errors/op and denied/op", errs, b.N, denied)
	}
}

// commands is what INFO commandstats counts: every command Redis ran (those
// a script calls included, INFO itself left out) and the script calls.
// commands are a redis-server's counts: the commands it ran (all: a
// script's own calls counted too; scripts: EVAL and EVALSHA, the calls a
// client sent), their time as commandstats sums it (a script's and its
// calls' both), and cpu, the seconds of CPU its process used (INFO cpu:
// user and system), the one measure of its load that counts nothing twice.
type commands struct {
	all, scripts, usec int64
	cpu                float64
}

func commandStats(b *testing.B, c *redis.Client) commands {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n commands
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			b.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		n.all += v
		if _, u, ok := strings.Cut(rest, "usec="); ok {
			u, _, _ = strings.Cut(u, ",")
			if us, err := strconv.ParseInt(u, 10, 64); err == nil {
				n.usec += us
			}
		}
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			n.scripts += v
		}
	}
	cpu, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(cpu, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %q: %v", line, err)
			}
			n.cpu += f
		}
	}
	return n
}

// latencies is a histogram of durations in log-linear buckets: exact below
// 64 ns, then 32 buckets to each power of two (within 3%).
type latencies [2048]uint64

func latencyBucket(ns uint64) int {
	if ns < 64 {
		return int(ns)
	}
	e := bits.Len64(ns) - 6
	return 64 + (e-1)*32 + int(ns>>e) - 32
}

func (h *latencies) add(d time.Duration) { h[latencyBucket(uint64(max(d, 0)))]++ }

func (h *latencies) merge(o *latencies) {
	for i, v := range o {
		h[i] += v
	}
}

// quantile is the middle of the bucket holding quantile q.
func (h *latencies) quantile(q float64) time.Duration {
	var total uint64
	for _, v := range h {
		total += v
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, v := range h {
		seen += v
		if seen >= max(want, 1) {
			if i < 64 {
				return time.Duration(i)
			}
			e := (i-64)/32 + 1
			m := uint64((i-64)%32 + 32)
			return time.Duration(m<<e + 1<<(e-1))
		}
	}
	return 0
}

// BenchmarkRedisTier is a 3-rule tier (per user, per endpoint, global: three
// keys) on the same server from 64 callers: limitgen decides it in one script
// call, all or nothing; redis_rate has no tiers, so it makes three calls,
// which admit a request's first rules even when its last denies.
func BenchmarkRedisTier(b *testing.B) {
	addr := benchRedis(b)
	limit := atomicbucket.Limit{Tokens: redisRate, Period: time.Second, Burst: redisRate}
	impls := []struct {
		name string
		make func(b *testing.B) func(context.Context) (bool, error)
	}{
		{"limitgen", func(b *testing.B) func(context.Context) (bool, error) {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			b.Cleanup(func() { c.Close() })
			st, err := redisstore.New(context.Background(), c, redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			var steps []shared.Call
			for _, name := range []string{"user", "endpoint", "global"} {
				r, err := redisstore.NewRule("tier"+name, limit)
				if err != nil {
					b.Fatal(err)
				}
				steps = append(steps, shared.Call{Rule: r, Key: name + "-k", Cost: 1})
			}
			return func(ctx context.Context) (bool, error) {
				d, _, err := st.AllowTier(ctx, steps)
				return d.Allowed, err
			}
		}},
		{"redis_rate-3-calls", func(b *testing.B) func(context.Context) (bool, error) {
			c := redis.NewClient(&redis.Options{Addr: addr})
			b.Cleanup(func() { c.Close() })
			l := redis_rate.NewLimiter(c)
			rl := redis_rate.Limit{Rate: redisRate, Burst: redisRate, Period: time.Second}
			return func(ctx context.Context) (bool, error) {
				for _, key := range []string{"user-k", "endpoint-k", "global-k"} {
					res, err := l.Allow(ctx, key, rl)
					if err != nil || res.Allowed == 0 {
						return false, err
					}
				}
				return true, nil
			}
		}},
	}
	for _, impl := range impls {
		b.Run("callers=64/impl="+impl.name, func(b *testing.B) {
			runRedis(b, addr, 64, impl.make(b))
		})
	}
}

// BenchmarkLease is a leased shared check beside a local rule's on one key:
// a lease spends the tokens Redis granted it with one atomic operation, so its
// check should cost about what a local rule's does (target: at most 2×).
// redis-cmds/1000 is the commands Redis ran per 1,000 leased decisions;
// degraded/op, the checks of lease-bound that the failure setting decided
// because a refill did not come within the store's 100 ms (64 goroutines that
// never block can starve the one waiting for Redis's reply).
func BenchmarkLease(b *testing.B) {
	addr := benchRedis(b)
	// 1e9 a second in bursts of 1e9: nothing is denied, or waits for Redis
	// to grant what the rate has not yet added.
	limit := atomicbucket.Limit{Tokens: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d/impl=local-rule", callers), func(b *testing.B) {
			rule, err := atomicbucket.NewRule(limit)
			if err != nil {
				b.Fatal(err)
			}
			t := atomicbucket.NewTable[string](rule, atomicbucket.TableOptions{})
			runLocal(b, callers, func() bool { return t.AllowNAt("k", atomicbucket.Now(), 1).Allowed })
		})
		b.Run(fmt.Sprintf("callers=%d/impl=lease", callers), func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			b.Cleanup(func() { c.Close() })
			st, err := redisstore.New(context.Background(), c, redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			r, err := redisstore.NewRule("benchlease", limit)
			if err != nil {
				b.Fatal(err)
			}
			l := st.NewLease(r, "k", 1_000_000)
			ctx := context.Background()
			before := commandStats(b, c)
			runLocal(b, callers, func() bool {
				d, err := l.AllowN(ctx, 1)
				return err == nil && d.Allowed
			})
			after := commandStats(b, c)
			b.ReportMetric(float64(after.all-before.all)*1000/float64(b.N), "redis-cmds/1000")
		})
		// Through the seam a generated package calls: a leased rule bound
		// with shared.Rule.Lease, checked as a generated Check does.
		b.Run(fmt.Sprintf("callers=%d/impl=lease-bound", callers), func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			b.Cleanup(func() { c.Close() })
			st, err := redisstore.New(context.Background(), c, redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			bound, err := st.Bind([]shared.Rule{{Name: "benchleasebound", Limit: limit, Lease: 1_000_000}})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			before := commandStats(b, c)
			var degraded atomic.Int64
			runLocal(b, callers, func() bool {
				res := bound.CheckStep(ctx, shared.Step{Rule: 0, Key: "k", Cost: 1})
				if res.Degraded { // its refill did not come within the store's timeout
					degraded.Add(1)
					return true
				}
				return res.Allowed
			})
			after := commandStats(b, c)
			b.ReportMetric(float64(after.all-before.all)*1000/float64(b.N), "redis-cmds/1000")
			b.ReportMetric(float64(degraded.Load())/float64(b.N), "degraded/op")
		})
	}
}

// runLocal runs allow b.N times from callers goroutines; every call must admit.
func runLocal(b *testing.B, callers int, allow func() bool) {
	var denied atomic.Int64
	b.ResetTimer()
	if callers == 1 {
		for range b.N {
			if !allow() {
				denied.Add(1)
			}
		}
	} else {
		b.SetParallelism(max(callers/runtime.GOMAXPROCS(0), 1))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !allow() {
					denied.Add(1)
				}
			}
		})
	}
	b.StopTimer()
	if denied.Load() > 0 {
		b.Fatalf("%d of %d denied", denied.Load(), b.N)
	}
}

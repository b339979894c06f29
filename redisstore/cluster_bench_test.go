package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkCluster is a generated package's shared check (internal/
// sharedlimits' Wide, admitting every check) on a 3-master Cluster started
// for the run, on 1e4 keys drawn at random from 64 callers, without and with
// coalescing (Options.Coalesce: 256: a batch goes to each master once, the
// masters in parallel, each master's slots pipelined). Metrics:
// decisions/s, and degraded/op (checks the store did not decide: 0 on a
// quiet machine).
func BenchmarkCluster(b *testing.B) {
	servers := redistest.StartCluster(b, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	for _, coalesce := range []int{0, 256} {
		b.Run(fmt.Sprintf("keys=1e4/callers=64/coalesce=%d", coalesce), func(b *testing.B) {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
			b.Cleanup(func() { c.Close() })
			st, err := redisstore.New(context.Background(), c, redisstore.Options{Coalesce: coalesce})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(st.Close)
			lims := sharedlimits.New(sharedlimits.WithStore(st))
			if err := lims.SharedErr(); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var degraded atomic.Int64
			b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
				for pb.Next() {
					if res := lims.Wide.AllowN(ctx, keys[rng.IntN(len(keys))], 1); res.Degraded || !res.Allowed {
						degraded.Add(1)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(float64(degraded.Load())/float64(b.N), "degraded/op")
		})
	}
}

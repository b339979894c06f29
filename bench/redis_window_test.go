package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// windowKeys numbers the keys of BenchmarkRedisWindow: each run of a case
// (testing runs one for every b.N it tries) checks a fresh key, so that its
// first check is admitted and a draining case drains it anew.
var windowKeys atomic.Int64

// seedSlidingLog is the sliding-window log of seed 003 as it is written
// there: in one MULTI, ZREMRANGEBYSCORE drops what is older than the window,
// ZADD logs this request (its time as score and member, admitted or not),
// ZCARD counts, EXPIRE keeps the key a window and a second; admitted when
// the count is at most the limit. Its times come from the caller's clock.
func seedSlidingLog(c *redis.Client, key string, limit int64, window time.Duration) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		now := float64(time.Now().UnixMicro()) / 1e6
		pipe := c.TxPipeline()
		pipe.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatFloat(now-window.Seconds(), 'f', 6, 64))
		pipe.ZAdd(ctx, key, redis.Z{Score: now, Member: strconv.FormatFloat(now, 'f', 6, 64)})
		card := pipe.ZCard(ctx, key)
		pipe.Expire(ctx, key, window+time.Second)
		if _, err := pipe.Exec(ctx); err != nil {
			return false, err
		}
		return card.Val() <= limit, nil
	}
}

// BenchmarkRedisWindow is a window rule on Redis, 64 callers on one key,
// beside seed 003's sorted-set log: limitgen's window (redisstore.Window,
// one script call a check), the same coalescing at most 256 checks a call,
// the same leased (lease: 100, shared.BindLeasedWindow: a script call a
// grant), and the seed's MULTI of four commands. case=allow: a limit no run reaches
// (every check admitted: 67,108,863 an hour, counted); case=deny: 1,000 an
// hour (counted), drained by the run's first thousand checks and denying
// the rest, as a hot key over its quota does. Metrics as BenchmarkRedis's
// (cmds/op: the commands a decision cost Redis).
func BenchmarkRedisWindow(b *testing.B) {
	addr := benchRedis(b)
	for _, c := range []struct {
		name  string
		limit int64
	}{{"allow", atomicwindow.LimitMax}, {"deny", 1000}} {
		rule := atomicwindow.MustRule(c.limit, time.Hour)
		impls := []struct {
			name string
			make func(b *testing.B) func(context.Context) (bool, error)
		}{
			{"limitgen", func(b *testing.B) func(context.Context) (bool, error) { return windowOnRedis(b, addr, rule, 0) }},
			{"limitgen-coalesced", func(b *testing.B) func(context.Context) (bool, error) { return windowOnRedis(b, addr, rule, 256) }},
			{"limitgen-leased", func(b *testing.B) func(context.Context) (bool, error) { return leasedWindowOnRedis(b, addr, rule, 100) }},
			{"seed003-sorted-set", func(b *testing.B) func(context.Context) (bool, error) {
				cl := redis.NewClient(&redis.Options{Addr: addr})
				b.Cleanup(func() { cl.Close() })
				return seedSlidingLog(cl, "seed:"+strconv.FormatInt(windowKeys.Add(1), 10), c.limit, time.Hour)
			}},
		}
		for _, impl := range impls {
			b.Run(fmt.Sprintf("case=%s/callers=64/impl=%s", c.name, impl.name), func(b *testing.B) {
				runRedis(b, addr, 64, impl.make(b))
			})
		}
	}
}

// windowOnRedis is a redisstore.Window of rule on addr, coalescing at most
// coalesce checks a call (0: none), checking a fresh key.
func windowOnRedis(b *testing.B, addr string, rule atomicwindow.Rule, coalesce int) func(context.Context) (bool, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	w, err := redisstore.NewWindow(c, "bench", rule, redisstore.WindowOptions{Coalesce: coalesce})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Close)
	key := "k" + strconv.FormatInt(windowKeys.Add(1), 10)
	return func(ctx context.Context) (bool, error) {
		d, err := w.AllowN(ctx, key, 1)
		return d.Allowed, err
	}
}

// leasedWindowOnRedis is a window of rule on addr checked from leases of at
// most lease units (shared.BindLeasedWindow on a redisstore.Store), checking
// a fresh key.
func leasedWindowOnRedis(b *testing.B, addr string, rule atomicwindow.Rule, lease int64) func(context.Context) (bool, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	st, err := redisstore.New(context.Background(), c, redisstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	w, err := shared.BindLeasedWindow(st, "", "bench-leased", rule, shared.Failure{Mode: shared.FailDeny}, lease)
	if err != nil {
		b.Fatal(err)
	}
	key := "k" + strconv.FormatInt(windowKeys.Add(1), 10)
	return func(ctx context.Context) (bool, error) {
		res := w.AllowN(ctx, key, 1)
		return res.Allowed, res.Err
	}
}

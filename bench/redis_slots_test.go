package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// zsetSemaphoreAcquire is the sorted-set semaphore most Redis semaphores
// are built on (one script call an acquisition, the caller's clock): drop
// the members older than the hold, count, and add this holder's token
// scored by now when fewer than the limit remain; a release is ZREM of the
// token. KEYS[1] the key; ARGV now (ms), the hold (ms), the limit, the token.
const zsetSemaphoreAcquire = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`

// zsetSemaphore is the peer on addr: an acquisition of key's slots (limit,
// hold) and, when held, its release, as a request does.
func zsetSemaphore(b *testing.B, addr, key string, limit int64, hold time.Duration) func(context.Context) (bool, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	b.Cleanup(func() { c.Close() })
	acquire := redis.NewScript(zsetSemaphoreAcquire)
	ms := hold.Milliseconds()
	return func(ctx context.Context) (bool, error) {
		var tok [8]byte
		binary.BigEndian.PutUint64(tok[:], rand.Uint64())
		got, err := acquire.Run(ctx, c, []string{key}, time.Now().UnixMilli(), ms, limit, string(tok[:])).Int64()
		if err != nil || got == 0 {
			return false, err
		}
		return true, c.ZRem(ctx, key, string(tok[:])).Err()
	}
}

// slotsOnRedis is limitgen's shared in-flight rule on addr (shared.BindSlots
// over a redisstore.Store coalescing at most coalesce calls a batch; 0:
// none): an acquisition of key's slots and, when held, its release.
func slotsOnRedis(b *testing.B, addr, key string, rule atomicslot.Rule, coalesce, lease int) func(context.Context) (bool, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	b.Cleanup(func() { c.Close() })
	co := coalesce
	if co == 0 {
		co = -1
	}
	st, err := redisstore.New(context.Background(), c, redisstore.Options{Coalesce: co})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	s, err := shared.BindSlots(st, "", "bench-slots", rule, shared.Failure{Mode: shared.FailDeny})
	if err != nil {
		b.Fatal(err)
	}
	if lease > 0 {
		if err := s.Lease(lease, 0); err != nil {
			b.Fatal(err)
		}
	}
	return func(ctx context.Context) (bool, error) {
		slot, res := s.Acquire(ctx, key)
		if !res.Allowed || res.Err != nil {
			return false, res.Err
		}
		if !slot.Release() {
			return true, fmt.Errorf("a held slot's release was not in effect: %+v", s.Stats())
		}
		return true, nil
	}
}

// BenchmarkRedisSlots is a shared in-flight rule on Redis, 64 callers on one
// key, each op an acquisition and, when it is had, its release (as a
// request holds a slot while it runs), beside the sorted-set semaphore
// script most Redis semaphores use: limitgen's (redisstore.Store through
// shared.Slots, a script call an acquisition and one a release), the same
// coalescing at most 256 calls a batch script, the same leasing a quarter
// of the key's slots at a time (lease: limit/4, as one of four instances
// would), and the peer (a script call and a ZREM). case=free: 64 slots, none ever refused; case=full: 16 slots
// for 64 callers, most acquisitions refused. Metrics as BenchmarkRedis's.
func BenchmarkRedisSlots(b *testing.B) {
	addr := benchRedis(b)
	for _, c := range []struct {
		name  string
		limit int64
	}{{"free", 64}, {"full", 16}} {
		rule := atomicslot.MustRule(c.limit, time.Minute)
		impls := []struct {
			name string
			make func(b *testing.B, key string) func(context.Context) (bool, error)
		}{
			{"limitgen", func(b *testing.B, key string) func(context.Context) (bool, error) {
				return slotsOnRedis(b, addr, key, rule, 0, 0)
			}},
			{"limitgen-coalesced", func(b *testing.B, key string) func(context.Context) (bool, error) {
				return slotsOnRedis(b, addr, key, rule, 256, 0)
			}},
			{"limitgen-leased", func(b *testing.B, key string) func(context.Context) (bool, error) {
				return slotsOnRedis(b, addr, key, rule, 256, int(c.limit/4)) // a quarter of the slots: one of four instances' share
			}},
			{"zset-semaphore", func(b *testing.B, key string) func(context.Context) (bool, error) {
				return zsetSemaphore(b, addr, "zsem:"+key, c.limit, time.Minute)
			}},
		}
		for _, impl := range impls {
			b.Run(fmt.Sprintf("case=%s/callers=64/impl=%s", c.name, impl.name), func(b *testing.B) {
				runRedis(b, addr, 64, impl.make(b, "k"+strconv.FormatInt(windowKeys.Add(1), 10)))
			})
		}
	}
}

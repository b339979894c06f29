package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/storetest"
	"github.com/redis/go-redis/v9"
)

// timed is the backend of the script's explicit-time variant
// (storetest.Timed), for package storetest's differential tests.
type timed struct{ b *backend }

func (t timed) TierAt(calls []shared.Call, mode shared.Mode, sec, usec int64) (shared.Reply, error) {
	return t.b.tierAt(context.Background(), calls, mode, atTime(sec, usec)...)
}

func (t timed) EachAt(calls []shared.Call, sec, usec int64) ([]shared.Reply, error) {
	return t.b.eachAt(context.Background(), calls, atTime(sec, usec)...)
}

func (t timed) LeaseAt(c shared.Call, want int64, prev shared.Settlement, sec, usec int64) (shared.LeaseReply, error) {
	return t.b.leaseAt(context.Background(), c, want, prev, atTime(sec, usec)...)
}

// scriptStore is the explicit-time script on client, as package storetest
// drives it.
func scriptStore(client redis.UniversalClient) *storetest.TimedStore {
	return storetest.Backend(timed{newStore(client, true, Options{}).b}, NewRule)
}

func ptr[T any](v T) *T { return &v }

// On Redis's own clock: an allowed check sets the key to expire when the
// bucket is full again (so expiry loses nothing), a denied one writes nothing,
// and a full bucket is absent.
func TestKeyExpiresWhenFull(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := NewRule("ttl", atomicbucket.Limit{Tokens: 1, Period: 10 * time.Second, Burst: 3})
	if err != nil {
		t.Fatal(err)
	}
	key := st.Key(r, "k")
	d, err := st.AllowN(ctx, r, "k", 2) // 20 s until full
	if err != nil || !d.Allowed || d.Remaining != 1 || d.Reset != 20*time.Second {
		t.Fatalf("first check: %+v, %v", d, err)
	}
	ttl := c.PTTL(ctx, key).Val()
	if ttl <= 19*time.Second || ttl > 20*time.Second {
		t.Errorf("PTTL %v after taking 2 tokens at 1 per 10 s, want just under 20 s", ttl)
	}
	before := c.Get(ctx, key).Val()
	if d, err := st.AllowN(ctx, r, "k", 3); err != nil || d.Allowed || d.RetryAfter <= 19*time.Second || d.RetryAfter > 20*time.Second {
		t.Fatalf("a check of 3 with 1 left: %+v, %v", d, err)
	}
	if after := c.Get(ctx, key).Val(); after != before {
		t.Errorf("a denied check wrote %q over %q", after, before)
	}
	if d, err := st.AllowN(ctx, r, "other", 0); err != nil || !d.Allowed || c.Exists(ctx, st.Key(r, "other")).Val() != 0 {
		t.Errorf("a check of cost 0 created a key: %+v, %v", d, err)
	}
	if d, err := st.AllowN(ctx, r, "k", 4); err != nil || d.Allowed || d.RetryAfter != atomicbucket.Never {
		t.Errorf("a cost above the burst: %+v, %v", d, err)
	}
}

// SCRIPT FLUSH between checks: the next check loads the script again (EVALSHA
// answered NOSCRIPT, then EVAL) and the bucket's state is intact.
func TestScriptFlushSurvived(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := NewRule("flush", atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if i == 3 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := st.AllowN(ctx, r, "k", 1)
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if d.Allowed != (i < 5) || (i < 5 && d.Remaining != int64(4-i)) {
			t.Fatalf("check %d: %+v", i, d)
		}
	}
	if n := c.ScriptExists(ctx, st.b.scripts[opCheck].Hash()).Val(); len(n) != 1 || !n[0] {
		t.Errorf("the check script is not loaded again after SCRIPT FLUSH: %v", n)
	}
}

// A bucket's value ends with the numbers it was written with; a value an
// earlier version wrote (without them, with and without a lease's holds) is
// read by the checker's numbers, and a value whose numbers cannot be read
// holds nothing.
func TestScriptValueNumbers(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := srv.Client(t)
	st := newStore(c, false, Options{})
	r, err := NewRule("legacy", atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	k := st.b.key(r, "k")
	if d, err := st.AllowN(ctx, r, "k", 2); err != nil || !d.Allowed || d.Remaining != 3 {
		t.Fatalf("%+v, %v", d, err)
	}
	v, err := c.Get(ctx, k).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := r.Integers()
	numbers := fmt.Sprintf(" g %d %d %d", n.Emit, n.Tau, n.PerSecond)
	if !strings.HasSuffix(v, numbers) {
		t.Fatalf("value %q does not end with the rule's numbers %q", v, numbers)
	}
	tat := strings.TrimSuffix(v, numbers)
	for _, c0 := range []struct {
		value string
		left  int64 // after taking 1
	}{
		{tat, 2},                       // an earlier version's value
		{tat + " 0 0 0", 2},            // … with a lease's (expired) holds
		{tat + " g 1 2", -1},           // numbers it cannot read: nothing held
		{tat + " q 1 2 3 4 5 6 7", -1}, // nor these
	} {
		if err := c.Set(ctx, k, c0.value, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		d, err := st.AllowN(ctx, r, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if c0.left < 0 {
			if d.Allowed {
				t.Errorf("value %q: %+v, want a denial", c0.value, d)
			}
			continue
		}
		if !d.Allowed || d.Remaining != c0.left {
			t.Errorf("value %q: %+v, want %d left", c0.value, d, c0.left)
		}
	}
}

// atTime is the explicit-time arguments of the test variant of the script.
func atTime(sec, usec int64) []any {
	return []any{strconv.FormatInt(sec, 10), strconv.FormatInt(usec, 10)}
}

// A tier naming one bucket twice is refused without a call, and without
// counting as a failure of Redis's.
func TestTierNamingABucketTwice(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRule("twice", atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res, i := st.CheckTier(context.Background(), []shared.Call{{Rule: r, Key: "k", Cost: 1}, {Rule: r, Key: "k", Cost: 1}}); res.Allowed || res.Degraded || res.Err == nil || i != 1 {
		t.Fatalf("a tier naming a bucket twice: %+v from %d", res, i)
	}
	if st.Stats().Calls != 0 {
		t.Error("a tier naming a bucket twice went to Redis")
	}
}

// Keys the shared APIs refuse before Redis is asked: the empty key for a
// keyed rule, a key for a global one, and one of 1 MB (before, it was sent,
// and denied as "deadline exceeded" when Redis could not take it in time).
func TestKeysRefused(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	monitor := srv.Client(t)
	ctx := context.Background()
	r, _ := NewRule("keyed", atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 2})
	g := r.AsGlobal()
	before := redistest.ScriptCalls(t, monitor)
	for _, c := range []shared.Call{{Rule: r, Key: ""}, {Rule: r, Key: strings.Repeat("k", 1<<20)}, {Rule: g, Key: "alice"}} {
		if _, err := st.AllowN(ctx, c.Rule, c.Key, 1); !errors.Is(err, shared.ErrInvalidStep) {
			t.Errorf("AllowN(%s, a key of %d bytes): %v, want ErrInvalidStep", c.Rule.Name(), len(c.Key), err)
		}
		if res := st.Check(ctx, c.Rule, c.Key, 1); res.Allowed || res.Degraded || !errors.Is(res.Err, shared.ErrInvalidStep) {
			t.Errorf("Check(%s, a key of %d bytes): %+v", c.Rule.Name(), len(c.Key), res)
		}
	}
	if n := redistest.ScriptCalls(t, monitor) - before; n != 0 {
		t.Errorf("%d script calls for refused keys", n)
	}
	if d, err := st.AllowN(ctx, g, "", 1); err != nil || !d.Allowed {
		t.Errorf("a global rule's empty key: %+v, %v", d, err)
	}
	if d, err := st.AllowN(ctx, r, strings.Repeat("k", shared.MaxKeyLen), 1); err != nil || !d.Allowed {
		t.Errorf("a key of MaxKeyLen bytes: %+v, %v", d, err)
	}
}

// A store's namespace is in its keys, and one that would change a key's
// hash tag is refused (that two never share a bucket is storetest.Run's
// Namespaces).
func TestNamespaceInKeys(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{Namespace: "staging"})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := NewRule("billing/Global", atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 3})
	if k := st.Key(r, "alice"); k != "limitgen:staging:{alice}:billing/Global" {
		t.Errorf("key %q", k)
	}
	if _, err := New(context.Background(), srv.Client(t), Options{Namespace: "x{y}"}); err == nil {
		t.Error("New took a namespace that would change the key's hash tag")
	}
}

// Store.Coalesce says what runs: on Redis, 0 (the default) is a call a
// check.
func TestCoalesceAsRun(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range []struct{ set, runs int }{{0, 0}, {-1, 0}, {8, 8}} {
		st, err := New(context.Background(), srv.Client(t), Options{Coalesce: c.set})
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Coalesce(); got != c.runs {
			t.Errorf("Options.Coalesce %d: the store carries up to %d checks a call; want %d", c.set, got, c.runs)
		}
		if st.Timeout() != 200*time.Millisecond {
			t.Errorf("a store's default timeout is %v; the README and shared.DefaultTimeout say 200ms", st.Timeout())
		}
		st.Close()
	}
}

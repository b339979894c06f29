package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
	"github.com/redis/go-redis/v9"
)

// Redis killed under a store: each rule's failure setting decides, the
// breaker stops asking Redis after five failures in a row, and when Redis is
// back a probe closes it and decisions come from Redis again.
func TestRedisKilledAndRestarted(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 10}
	base, err := NewRule("killed", l)
	if err != nil {
		t.Fatal(err)
	}
	deny, _ := base.WithFailure(shared.Failure{Mode: shared.FailDeny})
	allow, _ := base.WithFailure(shared.Failure{Mode: shared.FailAllow})
	local, err := base.WithFailure(shared.Failure{Mode: shared.FailLocal, Share: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if res := st.Check(ctx, deny, "k", 1); !res.Allowed || res.Degraded || res.Remaining != int64(9-i) {
			t.Fatalf("check %d with Redis up: %+v", i, res)
		}
	}

	srv.Stop()
	if res := st.Check(ctx, deny, "k", 1); res.Allowed || !res.Degraded || res.Err == nil {
		t.Errorf("deny on failure: %+v", res)
	}
	if res := st.Check(ctx, allow, "k", 1); !res.Allowed || !res.Degraded {
		t.Errorf("allow on failure: %+v", res)
	}
	admitted := 0
	for range 10 { // half the burst of 10, locally
		if res := st.Check(ctx, local, "k", 1); res.Allowed {
			admitted++
		} else if !res.Degraded {
			t.Fatalf("a local decision not marked degraded: %+v", res)
		}
	}
	if admitted != 5 {
		t.Errorf("the local share of 0.5 admitted %d of 10 from a fresh bucket, want 5", admitted)
	}
	calls := st.Stats().Calls
	for range 100 {
		if res := st.Check(ctx, deny, "k", 1); !errors.Is(res.Err, shared.ErrCircuitOpen) {
			t.Fatalf("with the breaker open: %+v", res)
		}
	}
	if got := st.Stats().Calls - calls; got != 0 {
		t.Errorf("100 checks with the breaker open went to Redis %d times", got)
	}

	srv.Restart(t) // the same port, empty: its state is lost, and the limit starts again full
	time.Sleep(shared.BreakerPause + 50*time.Millisecond)
	var res verdict.Result
	for i := 0; i < 50; i++ { // the probe may meet the pool's dead connections first
		if res = st.Check(ctx, deny, "k", 1); !res.Degraded {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if res.Degraded || !res.Allowed || res.Remaining != 9 {
		t.Fatalf("after Redis came back: %+v", res)
	}
}

// A Redis that accepts connections and never answers: New returns within a
// second, its Health naming the address; and a store whose Redis went silent after New
// (made here without New's check) returns from Check within its timeout,
// decided by the failure setting, instead of hanging the request.
func TestSilentRedisTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	start := time.Now()
	if st, err := New(context.Background(), c, Options{Timeout: 50 * time.Millisecond}); err != nil {
		t.Errorf("New on a silent Redis: %v, want a store that waits for it", err)
	} else if h := st.Health(); h == nil || !strings.Contains(h.Error(), ln.Addr().String()) {
		t.Errorf("Health of a store made on a silent Redis: %v, want an error naming %s", h, ln.Addr())
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("New on a silent Redis took %v", elapsed)
	}
	st := newStore(c, false, Options{Timeout: 50 * time.Millisecond})
	r, _ := NewRule("silent", atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1})
	r, _ = r.WithFailure(shared.Failure{Mode: shared.FailAllow})
	start = time.Now()
	res := st.Check(context.Background(), r, "k", 1)
	if elapsed := time.Since(start); !res.Degraded || !res.Allowed || elapsed > 5*time.Second {
		t.Fatalf("silent Redis: %+v after %v", res, elapsed)
	}
}

// New refuses a client whose calls a context cannot bound.
func TestNewRefusesUnboundedClient(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := New(context.Background(), c, Options{}); err == nil {
		t.Error("New accepted a client without ContextTimeoutEnabled")
	}
}

// Callers that give up (a cancelled context) are decided by the failure
// setting, but say nothing of Redis: ten of them do not open the breaker.
func TestCallersGivingUpDoNotOpenTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRule("gone", atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 100})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 2 * shared.BreakerFailures {
		if res := st.Check(cancelled, r, "k", 1); res.Allowed || !res.Degraded || !errors.Is(res.Err, context.Canceled) {
			t.Fatalf("check %d with a cancelled context: %+v", i, res)
		}
	}
	if res := st.Check(context.Background(), r, "k", 1); !res.Allowed || res.Degraded {
		t.Fatalf("the next check: %+v; the breaker opened for callers that gave up", res)
	}
}

// New on a port where no Redis listens returns a store whose Health names
// the address and the fix (before New failed, and a service had to run
// without a store, each instance enforcing the whole limit, nothing counted
// degraded; earlier still, it succeeded and nothing said so).
func TestNewOnDeadRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	st, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatalf("New on a dead port: %v, want a store that waits for Redis", err)
	}
	if h := st.Health(); !errors.Is(h, shared.ErrUnhealthy) || !strings.Contains(h.Error(), addr) || !strings.Contains(h.Error(), "start it") {
		t.Fatalf("Health of a store on a dead port: %v, want ErrUnhealthy naming %s and the fix", h, addr)
	}
}

package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/storetest"
	"github.com/redis/go-redis/v9"
)

// openSlots is storetest.OpenSlots on client, coalescing at most coalesce
// calls a batch (0: a script call each).
func openSlots(c redis.UniversalClient, coalesce int) storetest.OpenSlots {
	return func(t *testing.T, name string, rule atomicslot.Rule, at func() time.Time) shared.SlotChecker {
		s, err := newSlots(c, DefaultPrefix, name+"-c"+strconv.Itoa(coalesce), rule, 0, at != nil)
		if err != nil {
			t.Fatal(err)
		}
		s.now = at
		if coalesce > 0 {
			s.coalesce(coalesce)
			t.Cleanup(s.co.Close)
		}
		return s
	}
}

// The store's in-flight slots against the reference, under a crowd, and
// across two instances, one of which dies holding slots (storetest).
func TestSlotsContract(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	t.Run("MatchesReference", func(t *testing.T) { storetest.SlotsMatchReference(t, openSlots(c, 0), 30, 300, 43) })
	t.Run("MatchesReferenceCoalesced", func(t *testing.T) { storetest.SlotsMatchReference(t, openSlots(c, 64), 30, 300, 44) })
	t.Run("NeverAboveLimit", func(t *testing.T) { storetest.SlotsNeverAboveLimit(t, openSlots(c, 0), 64, 20) })
	t.Run("Linearizable", func(t *testing.T) { storetest.SlotsLinearizable(t, openSlots(c, 0)) })
	t.Run("LinearizableCoalesced", func(t *testing.T) { storetest.SlotsLinearizable(t, openSlots(c, 64)) })
	t.Run("NeverAboveLimitCoalesced", func(t *testing.T) { storetest.SlotsNeverAboveLimit(t, openSlots(c, 64), 64, 20) })
	t.Run("AcrossInstancesCoalesced", func(t *testing.T) {
		ctx := context.Background()
		a, err := New(ctx, srv.Client(t), Options{Coalesce: 64, Namespace: "co"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(ctx, srv.Client(t), Options{Coalesce: 64, Namespace: "co"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Close)
		t.Cleanup(b.Close)
		storetest.SlotsAcrossInstances(t, a, b)
	})
	t.Run("AcrossInstances", func(t *testing.T) {
		ctx := context.Background()
		a, err := New(ctx, srv.Client(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(ctx, srv.Client(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Close)
		t.Cleanup(b.Close)
		storetest.SlotsAcrossInstances(t, a, b)
	})
}

// TestSlotsKeyLeavesWithItsSlots: a key holds a sorted set of its slots,
// set to expire 10 s after its last one, and is gone once its slots are
// released: a key with nothing in flight costs Redis nothing.
func TestSlotsKeyLeavesWithItsSlots(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	s, err := newSlots(c, DefaultPrefix, "ttl", atomicslot.MustRule(2, 30*time.Second), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	key := DefaultPrefix + "slots:ttl:k"
	if d, _, err := s.Acquire(ctx, "k", 5); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("acquisition: %+v, %v", d, err)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 39*time.Second || ttl > 40*time.Second+2*time.Millisecond {
		t.Errorf("PTTL %v with one slot held for 30 s", ttl)
	}
	if got, err := s.Release(ctx, "k", 5); err != nil || got != shared.SlotReleased {
		t.Fatalf("release: %v, %v", got, err)
	}
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("the key is still there with no slot held")
	}
	if _, _, err := s.Acquire(ctx, string(make([]byte, shared.MaxKeyLen+1)), 1); err == nil {
		t.Error("a key longer than shared.MaxKeyLen was taken")
	}
}

// TestSlotsRedisDown: with Redis gone, each failure setting decides: deny
// answers an outage within the timeout, allow admits with nothing to
// release, local acquires from this process's share; a release Redis cannot
// take is counted, and the slot comes back on Redis by its expiry once
// Redis is back (nothing lost, nothing held for longer).
func TestSlotsRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	st, err := New(ctx, srv.Client(t), Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	bind := func(name string, f shared.Failure) *shared.Slots {
		s, err := shared.BindSlots(st, "", name, atomicslot.MustRule(4, 600*time.Millisecond), f)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	deny, allow, local := bind("deny", shared.Failure{Mode: shared.FailDeny}), bind("allow", shared.Failure{Mode: shared.FailAllow}),
		bind("local", shared.Failure{Mode: shared.FailLocal, Share: 0.5})
	held, r := deny.Acquire(ctx, "k")
	if !r.Allowed || r.Degraded {
		t.Fatalf("with Redis up: %+v", r)
	}
	srv.Stop()
	start := time.Now()
	if s, r := deny.Acquire(ctx, "k"); r.Allowed || s.Held() || !r.Outage || !r.Degraded || r.Err == nil || r.RetryAfter != time.Second {
		t.Errorf("deny, Redis down: %+v", r)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("a denial with Redis down took %v; the timeout is 200ms", el)
	}
	if s, r := allow.Acquire(ctx, "k"); !r.Allowed || s.Held() || !r.Degraded {
		t.Errorf("allow, Redis down: %+v (slot held %v)", r, s.Held())
	}
	var shares []atomicslot.Slot
	for i := range 3 {
		s, r := local.Acquire(ctx, "k")
		if want := i < 2; r.Allowed != want || !r.Degraded || s.Held() != want {
			t.Fatalf("local share of 2, acquisition %d with Redis down: %+v", i, r)
		}
		shares = append(shares, s)
	}
	if !shares[0].Release() || shares[0].Release() {
		t.Error("a local share's slot: want released once")
	}
	if held.Release() || held.Release() {
		t.Error("a release with Redis down reported the slot returned")
	}
	if got := deny.Stats(); got.ReleaseFailed != 1 || got.Held != 0 {
		t.Errorf("stats after a release Redis could not take: %+v", got)
	}
	if err := deny.Health(); err == nil {
		t.Error("Health is nil with Redis down")
	}
	srv.Restart(t)
	// Redis restarted empty here; on a Redis that kept the slot (a replica,
	// persistence), its expiry frees it. Either way the rule answers again
	// and no slot is held longer than its hold.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, r := deny.Acquire(ctx, "k")
		if r.Allowed && !r.Degraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deny after Redis came back: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := deny.Health(); err != nil {
		t.Errorf("Health after Redis came back: %v", err)
	}
}

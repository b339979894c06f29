package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// On a 3-master Cluster: a key's buckets live in the slot of its hash tag;
// a tier over one key's rules is one script call; a tier that spans slots (a
// per-user rule beside a global one) runs as ordered takes with refunds and
// admits exactly what the single-call tier does, taking nothing on a denial.
func TestCluster(t *testing.T) {
	_, c, st := clusterStore(t, 0, 0)
	ctx := context.Background()
	perUser, _ := NewRule("PerUser", atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 5})
	perUserDaily, _ := NewRule("PerUserDaily", atomicbucket.Limit{Tokens: 100, Period: 24 * time.Hour, Burst: 3})
	global, _ := NewRule("Global", atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 4})
	global = global.AsGlobal()

	if a, b := slot(st.Key(perUser, "alice")), slot(st.Key(perUserDaily, "alice")); a != b {
		t.Fatalf("one key's buckets in slots %d and %d", a, b)
	}
	if got, want := slot("123456789"), uint16(12739); got != want { // the Cluster specification's example
		t.Fatalf("slot(123456789) = %d, want %d", got, want)
	}
	for _, k := range []string{"alice", "bob", "carol", "dave"} { // keys on every master
		key := st.Key(perUser, k)
		if got := c.ClusterKeySlot(ctx, key).Val(); got != int64(slot(key)) {
			t.Fatalf("slot(%q) = %d, Redis says %d", key, slot(key), got)
		}
	}

	// One key's rules: one call; the daily rule (burst 3) denies the fourth.
	for i := range 4 {
		d, idx, err := st.AllowTier(ctx, []shared.Call{{Rule: perUser, Key: "alice", Cost: 1}, {Rule: perUserDaily, Key: "alice", Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 3) || (i == 3 && idx != 1) {
			t.Fatalf("same-slot tier, request %d: %+v from step %d", i, d, idx)
		}
	}
	if d, _ := st.PeekN(ctx, perUser, "alice", 1); d.Remaining != 1 { // 5 − 3 taken: 2 left, 1 after a peek of 1
		t.Fatalf("PerUser after three admitted and one denied: %+v", d)
	}

	// Across slots: per-user beside global. Global's burst of 4 runs out on the
	// fifth request; the per-user tokens taken by it are given back.
	users := []string{"bob", "carol", "dave", "erin", "frank"}
	for i, u := range users {
		d, idx, err := st.AllowTier(ctx, []shared.Call{{Rule: perUser, Key: u, Cost: 1}, {Rule: global, Key: "", Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 4) || (i == 4 && idx != 1) {
			t.Fatalf("cross-slot tier, %s: %+v from step %d", u, d, idx)
		}
	}
	if d, _ := st.PeekN(ctx, perUser, "frank", 5); !d.Allowed {
		t.Fatalf("frank's per-user token was not given back after the global rule denied: %+v", d)
	}
	if n := c.Exists(ctx, st.Key(perUser, "frank")).Val(); n != 0 {
		t.Fatalf("frank's bucket, full again, still has a key")
	}
}

// A Cluster master stopped: checks on its slots fail over to the rule's
// failure setting at once (and the rest keep deciding on Redis until the
// Cluster marks itself down); none hangs or panics.
func TestClusterMasterStopped(t *testing.T) {
	servers, _, st := clusterStore(t, 1, 0)
	ctx := context.Background()
	base, _ := NewRule("PerUser", atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 5})
	r, err := base.WithFailure(shared.Failure{Mode: shared.FailLocal, Share: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
	for _, u := range users {
		if res := st.Check(ctx, r, u, 1); res.Degraded || !res.Allowed {
			t.Fatalf("%s with every master up: %+v", u, res)
		}
	}
	servers[0].Stop()
	degraded := 0
	for _, u := range users {
		start := time.Now()
		res := st.Check(ctx, r, u, 1)
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%s: a check took %v with a master down", u, time.Since(start))
		}
		if res.Degraded {
			degraded++
			if res.Err == nil {
				t.Errorf("%s: degraded without an error", u)
			}
		} else if !res.Allowed || res.Remaining != 3 {
			t.Errorf("%s decided on Redis: %+v, want its second token taken", u, res)
		}
	}
	if degraded == 0 {
		t.Errorf("no key of %d fell on the stopped master's slots", len(users))
	}
	t.Logf("%d of %d checks decided by the local share with a master down", degraded, len(users))
}

// Coalesced checks on a Cluster: a batch whose keys fall in several slots is
// sent as one script call per slot; each key's burst is admitted exactly.
func TestClusterCoalesced(t *testing.T) {
	_, _, st := clusterStore(t, 0, 64)
	t.Cleanup(st.Close)
	ctx := context.Background()
	r, _ := NewRule("coalesced", atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 10})
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank"} // on every master
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 12 {
				u := users[(g+i)%len(users)]
				d, err := st.AllowN(ctx, r, u, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted[u]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, u := range users {
		if admitted[u] != 10 {
			t.Errorf("%s: %d admitted of 64 checks, want the burst of 10", u, admitted[u]) // 32·12 checks over 6 users
		}
	}
}

// clusterStore starts a 3-master Cluster and returns its servers, a client of
// it (redirects followed at most maxRedirects times; 0: go-redis's default)
// and a store over that client (coalescing at most coalesce checks a call;
// 0: none).
func clusterStore(t *testing.T, maxRedirects, coalesce int) ([]*redistest.Server, *redis.ClusterClient, *Store) {
	servers := redistest.StartCluster(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRedirects: maxRedirects})
	t.Cleanup(func() { c.Close() })
	st, err := New(context.Background(), c, Options{Coalesce: coalesce})
	if err != nil {
		t.Fatal(err)
	}
	return servers, c, st
}

// One master of three stalled (CLIENT PAUSE for 1.5 s, shorter than the
// Cluster's node timeout, so the Cluster stays up) while 8 callers check
// 300 keys: the keys on the two healthy masters keep being decided by Redis
// (each master has its own breaker), and only the stalled master's keys fall
// to the failure setting: none of theirs is degraded. Before (one breaker
// per store), 99.9% of the healthy masters' checks were degraded too; then,
// coalesced, a few (overload: they waited behind batches held up by the
// stalled master's part) until each master got its own batcher.
func TestClusterStalledMasterDegradesOnlyItsSlots(t *testing.T) {
	for _, coalesce := range []int{0, 64} {
		t.Run(fmt.Sprintf("coalesce=%d", coalesce), func(t *testing.T) {
			servers, c, st := clusterStore(t, 1, coalesce)
			ctx := context.Background()
			r, keys, stalled := stallKeys(t, c, st, "Stall", servers[0].Addr)
			if err := servers[0].Client(t).Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
				t.Fatal(err)
			}
			var healthy, healthyDegraded, sick, sickDegraded atomic.Int64
			var wg sync.WaitGroup
			until := time.Now().Add(1200 * time.Millisecond)
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; time.Now().Before(until); i++ {
						k := keys[i%len(keys)]
						res := st.Check(ctx, r, k, 1)
						switch {
						case stalled[k]:
							sick.Add(1)
							if res.Degraded {
								sickDegraded.Add(1)
							}
						default:
							healthy.Add(1)
							if res.Degraded {
								if healthyDegraded.Add(1) == 1 {
									t.Logf("a healthy master's check degraded: %v", res.Err)
								}
							}
						}
					}
				}()
			}
			wg.Wait()
			share := float64(healthyDegraded.Load()) / float64(max(healthy.Load(), 1))
			t.Logf("stalled master: %d of %d checks degraded; healthy masters: %d of %d (%.2f%%)",
				sickDegraded.Load(), sick.Load(), healthyDegraded.Load(), healthy.Load(), 100*share)
			if sick.Load() == 0 || sickDegraded.Load() == 0 {
				t.Errorf("no check of the stalled master's keys was degraded (%d checks)", sick.Load())
			}
			if healthy.Load() < 100 || healthyDegraded.Load() > 0 {
				t.Errorf("%d of %d checks of healthy masters' keys degraded (%.2f%%); want none: a stalled master touches only its own slots", healthyDegraded.Load(), healthy.Load(), 100*share)
			}
			open := 0
			for _, b := range st.Breakers() {
				if b.Open {
					open++
					if b.Node != servers[0].Addr {
						t.Errorf("the breaker of %s opened; only %s stalled", b.Node, servers[0].Addr)
					}
				}
			}
			t.Logf("%d breaker(s) open at the end", open)
		})
	}
}

// A stalled master recovers: one master of three stopped (SIGSTOP) for 3 s,
// within the Cluster's node timeout (10 s here, so the Cluster stays up),
// while 8 callers check 300 keys; from 1 s after it is resumed, at most 1%
// of its keys' checks are degraded (over the next second) (the breaker's pause is at most a second,
// and its half-open probe closes it once the master answers), and the other
// masters' keys were never more than 1% degraded. Before, 50-55% of the
// stalled master's checks stayed degraded after it answered again (the pause
// had grown to 10 s).
func TestClusterStalledMasterRecovers(t *testing.T) {
	for _, coalesce := range []int{0, 64} {
		t.Run(fmt.Sprintf("coalesce=%d", coalesce), func(t *testing.T) {
			servers := redistest.StartClusterTimeout(t, 3, 10*time.Second)
			addrs := make([]string, len(servers))
			for i, s := range servers {
				addrs[i] = s.Addr
			}
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRedirects: 1})
			t.Cleanup(func() { c.Close() })
			st, err := New(context.Background(), c, Options{Coalesce: coalesce})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			r, keys, stalled := stallKeys(t, c, st, "Recover", servers[0].Addr)
			// Phases: 0 stopped, 1 the first second after it resumed, 2 the
			// second after that.
			var phase atomic.Int32
			var checks, degraded [3][2]atomic.Int64 // [phase][stalled master's key]
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						k := keys[i%len(keys)]
						p := phase.Load()
						res := st.Check(ctx, r, k, 1)
						s := 0
						if stalled[k] {
							s = 1
						}
						checks[p][s].Add(1)
						if res.Degraded {
							degraded[p][s].Add(1)
						}
					}
				}()
			}
			if err := servers[0].Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second)
			if err := servers[0].Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			phase.Store(1)
			time.Sleep(time.Second)
			phase.Store(2)
			time.Sleep(time.Second)
			close(stop)
			wg.Wait()
			pct := func(p, s int) float64 {
				return 100 * float64(degraded[p][s].Load()) / float64(max(checks[p][s].Load(), 1))
			}
			for p, name := range []string{"stopped 3 s", "first second after", "then 1 s"} {
				t.Logf("%s: stalled master %d of %d degraded (%.2f%%); others %d of %d (%.2f%%)", name,
					degraded[p][1].Load(), checks[p][1].Load(), pct(p, 1), degraded[p][0].Load(), checks[p][0].Load(), pct(p, 0))
			}
			if checks[2][1].Load() < 100 || pct(2, 1) > 1 {
				t.Errorf("from 1 s after the master resumed, %.2f%% of its %d checks degraded; want at most 1%%", pct(2, 1), checks[2][1].Load())
			}
			for p := range 3 {
				if pct(p, 0) > 1 {
					t.Errorf("phase %d: %.2f%% of the healthy masters' checks degraded; want at most 1%%", p, pct(p, 0))
				}
			}
		})
	}
}

// stallKeys is a rule named name that allows when the store cannot decide,
// 300 keys for it, and which of them live on the master at addr (the one a
// test stalls).
func stallKeys(t *testing.T, c *redis.ClusterClient, st *Store, name, addr string) (*shared.StoreRule, []string, map[string]bool) {
	t.Helper()
	base, _ := NewRule(name, atomicbucket.Limit{Tokens: 1_000_000, Period: time.Second, Burst: 1_000_000})
	r, err := base.WithFailure(shared.Failure{Mode: shared.FailAllow})
	if err != nil {
		t.Fatal(err)
	}
	stalled := map[string]bool{}
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("user%d", i)
		m, err := c.MasterForKey(context.Background(), st.Key(r, keys[i]))
		if err != nil {
			t.Fatal(err)
		}
		stalled[keys[i]] = m.Options().Addr == addr
	}
	return r, keys, stalled
}

package atomicslot

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

func slotNumbers(limit int64, hold time.Duration) atomicbucket.Numbers {
	return atomicbucket.Numbers{Tokens: limit, Period: hold, Burst: limit}
}

// TestNumbersCut cuts a key's numbers below what it holds: nothing is admitted
// until enough slots are released or expire, RetryAfter names the expiry that
// brings the count under the new limit, and a release of a slot taken under
// the old numbers frees room under the new ones.
func TestNumbersCut(t *testing.T) {
	tab := NewTable[string](mustRule(t, 4, 10*time.Second), atomicbucket.TableOptions{})
	now := atomicbucket.Time(time.Hour)
	var held []Slot
	for i := range 4 {
		s, d := tab.AcquireAt("k", now+atomicbucket.Time(i)*atomicbucket.Time(time.Second))
		if !d.Allowed {
			t.Fatalf("acquisition %d denied", i)
		}
		held = append(held, s)
	}
	if err := tab.SetNumbers(slotNumbers(2, time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, o := tab.NumbersFor(); n.Tokens != 2 || o != atomicbucket.FromOverride {
		t.Fatalf("NumbersFor = %v, %v", n, o)
	}
	at := now + atomicbucket.Time(4*time.Second)
	_, d := tab.AcquireAt("k", at)
	// 4 held, limit 2: under it once 3 have gone, the third expiry (now+12s).
	if d.Allowed || d.RetryAfter != 8*time.Second || d.Remaining != 0 {
		t.Fatalf("after the cut: %+v, want a denial retrying in 8s", d)
	}
	if !held[3].ReleaseAt(at) || !held[2].ReleaseAt(at) {
		t.Fatal("releases of slots of the old numbers not in effect")
	}
	if _, d := tab.AcquireAt("k", at); d.Allowed {
		t.Fatalf("2 held under a limit of 2, yet admitted: %+v", d)
	}
	held[1].ReleaseAt(at)
	s, d := tab.AcquireAt("k", at)
	if !d.Allowed || d.Remaining != 0 || d.Reset != 6*time.Second {
		t.Fatalf("1 held under a limit of 2: %+v", d)
	}
	if st := tab.Stats(); st.Held != 2 {
		t.Fatalf("Stats.Held = %d, want 2 (one slot of each numbers)", st.Held)
	}
	s.ReleaseAt(at)
	tab.ClearNumbers()
	if n, o := tab.NumbersFor(); n.Tokens != 4 || o != atomicbucket.FromPolicy {
		t.Fatalf("after ClearNumbers: %v, %v", n, o)
	}
	for i := range 3 {
		if _, d := tab.AcquireAt("k", at); !d.Allowed {
			t.Fatalf("policy numbers back, acquisition %d denied", i)
		}
	}
	if _, d := tab.AcquireAt("k", at); d.Allowed {
		t.Fatal("a fifth slot held under a limit of 4")
	}
}

// TestNumbersRefused: numbers that are not an in-flight rule's change nothing.
func TestNumbersRefused(t *testing.T) {
	g := NewGate(mustRule(t, 2, time.Second))
	for _, n := range []atomicbucket.Numbers{
		{Tokens: 3, Period: time.Second, Burst: 4},
		{Tokens: 0, Period: time.Second},
		{Tokens: MaxLimit + 1, Period: time.Second, Burst: MaxLimit + 1},
		{Tokens: 3, Period: 0, Burst: 3},
	} {
		if err := g.SetNumbers(n); !errors.Is(err, ErrNumbers) {
			t.Errorf("SetNumbers(%+v) = %v, want ErrNumbers", n, err)
		}
	}
	if n, o := g.NumbersFor(); n.Tokens != 2 || o != atomicbucket.FromPolicy {
		t.Fatalf("after refusals: %v, %v", n, o)
	}
}

// TestNumbersSweep: a key holding slots of older numbers is not reclaimed,
// and older slots no longer held are forgotten, their leaks counted once.
func TestNumbersSweep(t *testing.T) {
	tab := NewTable[string](mustRule(t, 2, time.Second), atomicbucket.TableOptions{})
	now := atomicbucket.Time(time.Hour)
	tab.AcquireAt("k", now)
	tab.AcquireAt("k", now)
	if err := tab.SetNumbers(slotNumbers(3, time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, d := tab.AcquireAt("k", now); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("third slot under a limit of 3: %+v", d)
	}
	if n := tab.SweepAt(now + atomicbucket.Time(500*time.Millisecond)); n != 0 {
		t.Fatalf("swept %d keys holding slots", n)
	}
	later := now + atomicbucket.Time(time.Second+atomicbucket.SweepGrace)
	if _, d := tab.AcquireAt("k", later); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("every slot expired: %+v", d)
	}
	if st := tab.Stats(); st.Expired != 3 {
		t.Fatalf("Expired = %d, want 3 (each leak once)", st.Expired)
	}
	if n := tab.SweepAt(later + atomicbucket.Time(2*time.Second+atomicbucket.SweepGrace)); n != 1 {
		t.Fatalf("swept %d keys, want 1", n)
	}
}

// TestWaitAcrossNumbers: a waiter queued before a raise is admitted by the
// release of a slot taken under the old numbers.
func TestWaitAcrossNumbers(t *testing.T) {
	g := NewGate(mustRule(t, 1, time.Minute))
	s, _ := g.Acquire()
	got := make(chan atomicbucket.Decision)
	go func() {
		_, d := g.AcquireWait(context.Background(), 5*time.Second)
		got <- d
	}()
	for g.c.waits.Load() == nil || g.c.waits.Load().n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := g.SetNumbers(slotNumbers(1, time.Minute)); err != nil { // the same limit: new slots all the same
		t.Fatal(err)
	}
	if _, d := g.Acquire(); d.Allowed {
		t.Fatal("a second slot held under a limit of 1")
	}
	start := time.Now()
	s.Release()
	select {
	case d := <-got:
		if !d.Allowed {
			t.Fatalf("waiter denied: %+v", d)
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("waiter admitted only after %v: the release did not reach it", time.Since(start))
		}
	case <-time.After(4 * time.Second):
		t.Fatal("waiter not admitted by the release")
	}
	if _, d := g.Acquire(); d.Allowed {
		t.Fatal("the waiter's slot not counted")
	}
}

// TestConcurrentNumbersChange flips a key's limit among 1, 2 and 3 while
// workers acquire and release, then cuts it to 1: no instant holds more
// than 3, and once every slot taken before the cut is back, none more than 1.
func TestConcurrentNumbersChange(t *testing.T) {
	const workers = 8
	hold := 50 * time.Millisecond
	tab := NewTable[int](mustRule(t, 3, hold), atomicbucket.TableOptions{})
	type span struct{ from, to int64 }
	spans := make([][]span, workers)
	var cut atomic.Int64 // when the last SetNumbers(1) returned
	stop := time.Now().Add(400 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for time.Now().Before(stop) {
				s, d := tab.Acquire(0)
				from := int64(atomicbucket.Now())
				if !d.Allowed {
					time.Sleep(20 * time.Microsecond) // not a spin: the holders must run to release
					continue
				}
				if rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.Int64N(int64(time.Millisecond))))
				}
				to := int64(atomicbucket.Now())
				if !s.ReleaseAt(atomicbucket.Time(to)) {
					to = expiry(s.v)
				}
				spans[g] = append(spans[g], span{from, to})
			}
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for time.Until(stop) > 150*time.Millisecond {
		if err := tab.SetNumbers(slotNumbers(1+rng.Int64N(3), hold)); err != nil {
			t.Error(err)
		}
		time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
	}
	if err := tab.SetNumbers(slotNumbers(1, hold)); err != nil {
		t.Fatal(err)
	}
	cut.Store(int64(atomicbucket.Now()))
	wg.Wait()
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	settled := cut.Load() // the instant after which only slots taken under the cut are held
	n := 0
	for _, ss := range spans {
		n += len(ss)
		for _, s := range ss {
			if s.from < s.to {
				edges = append(edges, edge{s.from, 1}, edge{s.to, -1})
			}
			if s.from < cut.Load() {
				settled = max(settled, s.to)
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d admitted: the test did not load the table", n)
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta
	})
	h, after := 0, 0
	for _, e := range edges {
		h += e.delta
		if h > 3 {
			t.Fatalf("%d slots held at %d, above every limit", h, e.at)
		}
		if e.at > settled && h > 1 {
			t.Fatalf("%d slots held at %d, after the cut to 1 settled at %d", h, e.at, settled)
		}
		if e.at > settled && e.delta > 0 {
			after++
		}
	}
	if after == 0 {
		t.Fatal("no acquisition after the cut settled: the test checked nothing")
	}
}

package atomicslot

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// waiting blocks until n acquisitions wait on c.
func waiting(t *testing.T, c *counters, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		if r := c.waits.Load(); r != nil && r.n.Load() == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %d waiting", n)
		}
	}
}

// TestWaitFIFO: five acquisitions wait, one after the other, on a gate of
// one slot; each release hands the slot to the longest waiter, in the order
// they came. The handed-over slot's second release changes nothing: the
// next holder keeps it.
func TestWaitFIFO(t *testing.T) {
	g := NewGate(MustRule(1, time.Minute))
	held, d := g.Acquire()
	if !d.Allowed {
		t.Fatal(d)
	}
	order := make(chan int, 5)
	slots := make(chan Slot, 5)
	for i := range 5 {
		go func() {
			s, d := g.AcquireWait(context.Background(), 10*time.Second)
			if !d.Allowed || d.Remaining != 0 {
				t.Errorf("waiter %d: %+v", i, d)
			}
			order <- i
			slots <- s
		}()
		waiting(t, &g.c, int64(i+1))
	}
	if !held.Release() || held.Release() {
		t.Fatal("the first holder's release: want true once")
	}
	for want := range 5 {
		if got := <-order; got != want {
			t.Fatalf("waiter %d had the slot %dth", got, want)
		}
		s := <-slots
		if d := g.PeekAt(atomicbucket.Now()); d.Allowed {
			t.Fatalf("the slot was free while waiter %d held it: %+v", want, d)
		}
		if !s.Release() {
			t.Fatalf("waiter %d's release", want)
		}
	}
	if d := g.PeekAt(atomicbucket.Now()); !d.Allowed {
		t.Fatalf("after every waiter released: %+v", d)
	}
	if n := g.c.waits.Load().n.Load(); n != 0 {
		t.Fatalf("%d still waiting", n)
	}
}

// TestWaitBounded: a wait ends, denied as an acquisition then would be, at
// maxWait, or as soon as its context is done; a slot that comes back by its
// expiry goes to the waiter.
func TestWaitBounded(t *testing.T) {
	tb := NewTable[string](MustRule(1, time.Minute), atomicbucket.TableOptions{})
	if _, d := tb.Acquire("k"); !d.Allowed {
		t.Fatal(d)
	}
	start := time.Now()
	s, d := tb.AcquireWait(context.Background(), "k", 50*time.Millisecond)
	if el := time.Since(start); d.Allowed || s.Held() || el < 50*time.Millisecond || d.RetryAfter <= 59*time.Second {
		t.Fatalf("a wait of 50ms for a slot held a minute: %+v after %v", d, el)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	start = time.Now()
	if _, d := tb.AcquireWait(ctx, "k", time.Hour); d.Allowed || time.Since(start) > 5*time.Second {
		t.Fatalf("a wait whose context ended: %+v after %v", d, time.Since(start))
	}
	if n := tb.c.waits.Load().n.Load(); n != 0 {
		t.Fatalf("%d still waiting after both ended", n)
	}
	short := NewTable[string](MustRule(1, 80*time.Millisecond), atomicbucket.TableOptions{})
	short.Acquire("k") // never released: back at its expiry
	start = time.Now()
	if s, d := short.AcquireWait(context.Background(), "k", 5*time.Second); !d.Allowed || !s.Held() || time.Since(start) < 70*time.Millisecond {
		t.Fatalf("a wait for a slot that expires in 80ms: %+v after %v", d, time.Since(start))
	}
	if st := short.Stats(); st.Expired != 1 {
		t.Fatalf("the expired slot was not counted: %+v", st)
	}
}

// TestWaitNeverAboveLimit: 16 goroutines acquire one key's 3 slots with
// waits of up to 2ms, hold them for a moment and release; some waits time
// out while a release hands them a slot. No moment sees more than 3 inside,
// and at the end no slot is held and nobody waits: no handed slot is lost.
func TestWaitNeverAboveLimit(t *testing.T) {
	tb := NewTable[string](MustRule(3, time.Minute), atomicbucket.TableOptions{})
	var inside, peak, ok, denied atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 300 {
				s, d := tb.AcquireWait(context.Background(), "k", time.Duration((g+i)%3)*time.Millisecond)
				if !d.Allowed {
					denied.Add(1)
					continue
				}
				ok.Add(1)
				n := inside.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Duration(i%4) * 50 * time.Microsecond)
				inside.Add(-1)
				if !s.Release() {
					t.Error("a held slot's release was not in effect")
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 3 || p < 2 {
		t.Fatalf("peak %d inside, want at most 3 (and the slots used)", p)
	}
	if st := tb.Stats(); st.Held != 0 || st.Expired != 0 {
		t.Fatalf("after every release: %+v", st)
	}
	if r := tb.c.waits.Load(); r == nil || r.n.Load() != 0 || len(r.q) != 0 {
		t.Fatalf("waiters left: %+v", r)
	}
	t.Logf("%d admitted, %d denied after waiting", ok.Load(), denied.Load())
	if ok.Load() < 16*300/5 {
		t.Fatalf("only %d of %d admitted", ok.Load(), 16*300)
	}
}

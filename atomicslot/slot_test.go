package atomicslot

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
)

func mustRule(t testing.TB, limit int64, hold time.Duration) Rule {
	t.Helper()
	r, err := NewRule(limit, hold)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAgainstReference drives tables and gates with random acquisitions,
// releases (second ones and late ones included), peeks and sweeps at
// non-decreasing times, and holds every answer to the reference's.
func TestAgainstReference(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 41))
		limit := 1 + rng.Int64N(5)
		hold := time.Duration(1 + rng.Int64N(int64(3*time.Millisecond)))
		if seed%3 == 0 {
			hold = time.Duration(1+rng.Int64N(5)) * time.Millisecond // whole microseconds
		}
		r := mustRule(t, limit, hold)
		tab := NewTable[string](r, atomicbucket.TableOptions{})
		gate := NewGate(r)
		ref := NewReferenceSet(limit, hold)
		type held struct {
			key string
			id  uint64
			s   Slot
		}
		var slots []held
		now := int64(rng.Int64N(int64(time.Second)))
		for step := range 400 {
			switch rng.IntN(10) {
			case 0, 1:
				now += rng.Int64N(int64(hold)) / 3
			case 2:
				now += rng.Int64N(2 * int64(hold))
			case 3:
				now += int64(atomicbucket.SweepGrace) + rng.Int64N(int64(hold))
			}
			key := fmt.Sprint(rng.IntN(3))
			where := fmt.Sprintf("seed %d step %d (limit %d, hold %v, key %s, now %d)", seed, step, limit, hold, key, now)
			switch op := rng.IntN(10); {
			case op < 5:
				var s Slot
				var d atomicbucket.Decision
				if key == "2" {
					s, d = gate.AcquireAt(atomicbucket.Time(now))
				} else {
					s, d = tab.AcquireAt(key, atomicbucket.Time(now))
				}
				id, want := ref.Acquire(key, now)
				if d != want || s.Held() != want.Allowed {
					t.Fatalf("%s: acquire = %+v (held %v), reference %+v", where, d, s.Held(), want)
				}
				if s.Held() {
					slots = append(slots, held{key, id, s})
				}
			case op < 8 && len(slots) > 0:
				i := rng.IntN(len(slots))
				h := slots[i]
				got := h.s.ReleaseAt(atomicbucket.Time(now))
				if want := ref.Release(h.key, h.id, now); got != want {
					t.Fatalf("%s: release of slot %d = %v, reference %v", where, h.id, got, want)
				}
				if rng.IntN(2) == 0 {
					slots = slices.Delete(slots, i, i+1) // else: released again later
				}
			case op == 8:
				var d atomicbucket.Decision
				if key == "2" {
					d = gate.PeekAt(atomicbucket.Time(now))
				} else {
					d = tab.PeekAt(key, atomicbucket.Time(now))
				}
				if want := ref.Peek(key, now); d != want {
					t.Fatalf("%s: peek = %+v, reference %+v", where, d, want)
				}
			case op == 9 && rng.IntN(2) == 0: // new numbers: raised, cut below what is held, or put back
				n := atomicbucket.Numbers{Tokens: 1 + rng.Int64N(6), Period: hold/2 + time.Duration(rng.Int64N(int64(2*hold)))}
				n.Burst = n.Tokens
				if rng.IntN(4) == 0 {
					tab.ClearNumbers()
					gate.ClearNumbers()
					ref.SetNumbers(limit, hold)
					continue
				}
				if err := tab.SetNumbers(n); err != nil {
					t.Fatal(err)
				}
				if err := gate.SetNumbers(n); err != nil {
					t.Fatal(err)
				}
				ref.SetNumbers(n.Tokens, n.Period)
			default:
				tab.SweepAt(atomicbucket.Time(now))
			}
		}
	}
}

// NewReferenceSet is the reference for one table and one gate (key "2").
func NewReferenceSet(limit int64, hold time.Duration) *reference.InFlight {
	return reference.NewInFlight(limit, hold)
}

func TestReleaseOnceInEffect(t *testing.T) {
	tab := NewTable[string](mustRule(t, 1, time.Second), atomicbucket.TableOptions{})
	now := atomicbucket.Time(time.Hour)
	a, d := tab.AcquireAt("k", now)
	if !d.Allowed {
		t.Fatal("first acquisition denied")
	}
	if !a.ReleaseAt(now) {
		t.Fatal("first release not in effect")
	}
	b, d := tab.AcquireAt("k", now) // the same word, in the same microsecond
	if !d.Allowed {
		t.Fatal("acquisition after the release denied")
	}
	if a.ReleaseAt(now) {
		t.Fatal("a second release of the first slot returned a slot")
	}
	if _, d := tab.AcquireAt("k", now); d.Allowed {
		t.Fatal("the second release freed the slot the second acquisition holds")
	}
	if !b.ReleaseAt(now) || b.ReleaseAt(now) {
		t.Fatal("the second slot's releases: want true then false")
	}
	var zero Slot
	if zero.Release() {
		t.Fatal("the zero Slot released something")
	}
}

func TestExpiryReturnsSlot(t *testing.T) {
	tab := NewTable[int](mustRule(t, 2, 10*time.Millisecond), atomicbucket.TableOptions{})
	t0 := atomicbucket.Time(time.Minute)
	a, _ := tab.AcquireAt(1, t0)
	tab.AcquireAt(1, t0+atomicbucket.Time(time.Millisecond))
	_, d := tab.AcquireAt(1, t0+atomicbucket.Time(2*time.Millisecond))
	if d.Allowed || d.RetryAfter != 8*time.Millisecond || d.Reset != 9*time.Millisecond {
		t.Fatalf("full: %+v, want denied, RetryAfter 8ms, Reset 9ms", d)
	}
	if _, d := tab.AcquireAt(1, t0+atomicbucket.Time(10*time.Millisecond)-1); d.Allowed {
		t.Fatal("a slot came back before its expiry")
	}
	if _, d := tab.AcquireAt(1, t0+atomicbucket.Time(10*time.Millisecond)); !d.Allowed {
		t.Fatal("an expired slot did not come back at its expiry")
	}
	if a.ReleaseAt(t0 + atomicbucket.Time(11*time.Millisecond)) {
		t.Fatal("a release after expiry, of a slot held again, was in effect")
	}
	if got := tab.Stats().Expired; got != 1 {
		t.Fatalf("Stats.Expired = %d, want 1", got)
	}
	late := t0 + atomicbucket.Time(time.Hour)
	if n := tab.SweepAt(late); n != 1 || tab.Len() != 0 {
		t.Fatalf("sweep removed %d keys, %d left; want 1, 0", n, tab.Len())
	}
	if got := tab.Stats().Expired; got != 3 {
		t.Fatalf("Stats.Expired after the sweep = %d, want 3", got)
	}
}

func TestSweepKeepsHeldKeys(t *testing.T) {
	tab := NewTable[string](mustRule(t, 1, time.Hour), atomicbucket.TableOptions{})
	now := atomicbucket.Time(time.Hour)
	s, _ := tab.AcquireAt("held", now)
	r, _ := tab.AcquireAt("released", now)
	r.ReleaseAt(now)
	if n := tab.SweepAt(now + atomicbucket.Time(2*atomicbucket.SweepGrace)); n != 1 {
		t.Fatalf("sweep removed %d keys, want 1 (the released one)", n)
	}
	if _, d := tab.AcquireAt("held", now+atomicbucket.Time(3*atomicbucket.SweepGrace)); d.Allowed {
		t.Fatal("the sweep freed a held slot")
	}
	if !s.ReleaseAt(now + atomicbucket.Time(3*atomicbucket.SweepGrace)) {
		t.Fatal("the held slot's release not in effect after a sweep")
	}
}

func TestKeyCap(t *testing.T) {
	tab := NewTable[int](mustRule(t, 1, time.Hour), atomicbucket.TableOptions{MaxKeys: 2})
	now := atomicbucket.Time(time.Hour)
	a, _ := tab.AcquireAt(1, now)
	tab.AcquireAt(2, now)
	if s, d := tab.AcquireAt(3, now); d.Allowed || s.Held() || d.RetryAfter <= 0 {
		t.Fatalf("a third key at a cap of 2: %+v, want denied with a wait", d)
	}
	a.ReleaseAt(now)
	later := now + atomicbucket.Time(time.Second)
	if _, d := tab.AcquireAt(3, later); !d.Allowed {
		t.Fatalf("a third key after one was released: %+v, want admitted", d)
	}
	if tab.Len() != 2 || tab.Stats().AtCapHits != 1 {
		t.Fatalf("Len %d, AtCapHits %d; want 2, 1", tab.Len(), tab.Stats().AtCapHits)
	}
	open := NewTable[int](mustRule(t, 1, time.Hour), atomicbucket.TableOptions{MaxKeys: 1, AllowAtCap: true})
	open.AcquireAt(1, now)
	if s, d := open.AcquireAt(2, now); !d.Allowed || s.Held() {
		t.Fatalf("AllowAtCap: %+v held %v, want admitted untracked", d, s.Held())
	}
}

func TestNewRuleRefuses(t *testing.T) {
	for _, c := range []struct {
		limit int64
		hold  time.Duration
	}{{0, time.Second}, {MaxLimit + 1, time.Second}, {1, 0}, {1, time.Microsecond - 1}, {1, MaxHold + 1}} {
		if _, err := NewRule(c.limit, c.hold); err == nil {
			t.Errorf("NewRule(%d, %v) accepted", c.limit, c.hold)
		}
	}
}

// TestConcurrentNeverAboveLimit acquires and releases from many goroutines at
// real time, some slots left to expire, with sweeps running, and checks that
// at no instant did more than the limit of a key's slots overlap. Each hold
// is taken from a clock reading after its acquisition returned to one before
// its release was made (or its expiry, when the release was not in effect):
// a sub-interval of when the table held it.
func TestConcurrentNeverAboveLimit(t *testing.T) {
	const limit, keys, workers = 3, 2, 8
	hold := 2 * time.Millisecond
	tab := NewTable[int](mustRule(t, limit, hold), atomicbucket.TableOptions{})
	type span struct{ from, to int64 }
	spans := make([][]span, workers)
	var admitted atomic.Int64
	deadline := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for time.Now().Before(deadline) {
				key := rng.IntN(keys)
				s, d := tab.Acquire(key)
				from := int64(atomicbucket.Now())
				if !d.Allowed {
					continue
				}
				admitted.Add(1)
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.Int64N(int64(2 * hold)))) // sometimes past the hold
				}
				to := int64(atomicbucket.Now())
				if !s.ReleaseAt(atomicbucket.Time(to)) {
					to = expiry(s.v)
				}
				spans[g] = append(spans[g], span{from<<1 | int64(key), to})
			}
		})
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				tab.Sweep()
				time.Sleep(time.Millisecond)
			}
		}
	}()
	wg.Wait()
	close(stop)
	if admitted.Load() < 100 {
		t.Fatalf("only %d admitted: the test did not load the table", admitted.Load())
	}
	for key := range int64(keys) {
		type edge struct {
			at    int64
			delta int
		}
		var edges []edge
		for _, ss := range spans {
			for _, s := range ss {
				if s.from&1 == key && s.from>>1 < s.to {
					edges = append(edges, edge{s.from >> 1, 1}, edge{s.to, -1})
				}
			}
		}
		slices.SortFunc(edges, func(a, b edge) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return a.delta - b.delta // ends before starts at one instant
		})
		n := 0
		for _, e := range edges {
			if n += e.delta; n > limit {
				t.Fatalf("key %d: %d slots held at %d, limit %d", key, n, e.at, limit)
			}
		}
	}
}

func TestStatsHeld(t *testing.T) {
	tab := NewTable[string](mustRule(t, 3, time.Hour), atomicbucket.TableOptions{})
	gate := NewGate(mustRule(t, 2, time.Hour))
	a, _ := tab.Acquire("a")
	tab.Acquire("a")
	tab.Acquire("b")
	g, _ := gate.Acquire()
	if s := tab.Stats(); s.Held != 3 || s.Keys != 2 {
		t.Fatalf("table Stats after 3 acquisitions on 2 keys: %+v", s)
	}
	a.Release()
	g.Release()
	if s := tab.Stats(); s.Held != 2 {
		t.Fatalf("table Stats after a release: %+v, want 2 held", s)
	}
	if s := gate.Stats(); s.Held != 0 {
		t.Fatalf("gate Stats after its release: %+v, want 0 held", s)
	}
}

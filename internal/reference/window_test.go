package reference

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/keycap"
)

// At most 3 in any 10 s, by hand: what counts, the waits, and the edge (an
// admission at a counts until a + W, not at it).
func TestWindowByHand(t *testing.T) {
	s := int64(time.Second)
	w := NewWindow(WindowParams{Limit: 3, Window: 10 * s})
	for i, c := range []struct {
		at, cost int64
		want     Decision
	}{
		{0, 1, Decision{Allowed: true, Remaining: 2, Reset: 10 * time.Second}},
		{1 * s, 2, Decision{Allowed: true, Remaining: 0, Reset: 10 * time.Second}},
		{2 * s, 1, Decision{Remaining: 0, Reset: 9 * time.Second, RetryAfter: 8 * time.Second}}, // the one at 0 leaves at 10 s
		{10*s - 1, 1, Decision{Remaining: 0, Reset: time.Second + 1, RetryAfter: 1}},
		{10 * s, 1, Decision{Allowed: true, Remaining: 0, Reset: 10 * time.Second}},
		{10*s + s/2, 3, Decision{Remaining: 0, Reset: 9*time.Second + 500*time.Millisecond, RetryAfter: 9*time.Second + 500*time.Millisecond}},
		{10*s + s/2, 4, Decision{Remaining: 0, Reset: 9*time.Second + 500*time.Millisecond, RetryAfter: atomicbucket.Never}},
		{10*s + s/2, 0, Decision{Allowed: true, Remaining: 0, Reset: 9*time.Second + 500*time.Millisecond}},
		{11 * s, 2, Decision{Allowed: true, Remaining: 0, Reset: 10 * time.Second}}, // the two at 1 s left at 11 s
		{25 * s, 3, Decision{Allowed: true, Remaining: 0, Reset: 10 * time.Second}}, // empty again
	} {
		if got := w.AllowN("k", c.at, c.cost); got != c.want {
			t.Errorf("step %d, at %v, cost %d: %+v, want %+v", i, time.Duration(c.at), c.cost, got, c.want)
		}
	}
	// A fixed window would admit 2N across its edge; the sliding one N.
	e := NewWindow(WindowParams{Limit: 10, Window: s})
	admitted := 0
	for i := range 20 {
		at := s - 50*int64(time.Millisecond) + int64(i)*5*int64(time.Millisecond) // 950 ms to 1045 ms
		if e.AllowN("edge", at, 1).Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("20 requests within 100 ms across a second's edge: %d admitted, want 10", admitted)
	}
}

// Random requests against random windows: what the reference admits never
// holds more than N in any window (CheckWindow); each denial is needed (the
// request admitted would make a window hold more than N); each RetryAfter is
// the least wait (the same request is admitted then, not 1 ns before); a
// refund takes back the newest admissions; and a key whose window is empty
// holds nothing.
func TestWindowProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 1))
	for run := range 200 {
		n := 1 + rng.Int64N(12)
		win := 1 + rng.Int64N(int64(time.Second))
		w := NewWindow(WindowParams{Limit: n, Window: win})
		var adm []Admission
		now := int64(0)
		keys := []string{"a", "b"}
		for step := range 300 {
			now += rng.Int64N(win/3 + 1)
			key := keys[rng.IntN(len(keys))]
			cost := rng.Int64N(n + 2)
			if rng.IntN(10) == 0 && cost > 0 {
				in := w.In(key, now)
				w.Refund(key, now, cost)
				if got := w.In(key, now); got != max(in-cost, 0) {
					t.Fatalf("run %d step %d: a refund of %d from %d leaves %d", run, step, cost, in, got)
				}
				// The refunded admissions are no longer admitted: drop the
				// newest of key's, as the reference does.
				for i := len(adm) - 1; i >= 0 && cost > 0; i-- {
					if adm[i].Key != key || adm[i].At+win <= now {
						continue
					}
					take := min(cost, adm[i].Cost)
					adm[i].Cost -= take
					cost -= take
				}
				continue
			}
			peek := w.Peek(key, now, cost)
			d := w.AllowN(key, now, cost)
			if d != peek {
				t.Fatalf("run %d step %d: Peek %+v, AllowN %+v", run, step, peek, d)
			}
			if d.Allowed {
				if cost > 0 {
					adm = append(adm, Admission{Key: key, At: now, Cost: cost})
				}
				continue
			}
			if cost > n {
				if d.RetryAfter != atomicbucket.Never {
					t.Fatalf("run %d step %d: cost %d over N %d: RetryAfter %v, want Never", run, step, cost, n, d.RetryAfter)
				}
				continue
			}
			if CheckWindow(n, win, append(adm[:len(adm):len(adm)], Admission{Key: key, At: now, Cost: cost})) == nil {
				t.Fatalf("run %d step %d: cost %d denied at %d though no window would hold more than %d", run, step, cost, now, n)
			}
			ra := int64(d.RetryAfter)
			if ra <= 0 || !w.Peek(key, now+ra, cost).Allowed || w.Peek(key, now+ra-1, cost).Allowed {
				t.Fatalf("run %d step %d: RetryAfter %v is not the least wait (N %d, W %d, cost %d at %d: %+v then %+v)", run, step, d.RetryAfter, n, win, cost, now, w.Peek(key, now+ra-1, cost), w.Peek(key, now+ra, cost))
			}
		}
		if err := CheckWindow(n, win, adm); err != nil {
			t.Fatalf("run %d (N %d, W %v): %v", run, n, time.Duration(win), err)
		}
		if w.Len(now+win) != 0 {
			t.Fatalf("run %d: %d keys hold something a window after the last request", run, w.Len(now+win))
		}
	}
}

// A key cap counts the keys whose window is not empty: at the cap a new key
// is denied until one empties (or admitted untracked), and a key whose window
// emptied frees its place.
func TestWindowKeyCap(t *testing.T) {
	s := int64(time.Second)
	for _, allow := range []bool{false, true} {
		w := NewWindow(WindowParams{Limit: 1, Window: 10 * s, MaxKeys: 2, AllowCap: allow})
		w.AllowN("a", 0, 1)
		w.AllowN("b", 3*s, 1)
		d := w.AllowN("c", 5*s, 1)
		if d.Allowed != allow || !allow && d.RetryAfter != 5*time.Second {
			t.Errorf("allow at cap %v: a third key at 5 s: %+v", allow, d)
		}
		if got := w.Len(5 * s); got != 2 {
			t.Errorf("allow at cap %v: %d keys held, want 2 (an untracked key holds nothing)", allow, got)
		}
		if d := w.AllowN("c", 10*s, 1); !d.Allowed {
			t.Errorf("allow at cap %v: the third key once a's window is empty: %+v", allow, d)
		}
	}
}

// TestSweepConstants: the reference sweeps by the runtime's thresholds.
func TestSweepConstants(t *testing.T) {
	if autoSweepMin != keycap.AutoSweepMin || capSweepSpacing != keycap.CapSweepSpacing {
		t.Errorf("the reference's sweep constants (%d, %v) are not the runtime's (%d, %v)",
			autoSweepMin, capSweepSpacing, keycap.AutoSweepMin, keycap.CapSweepSpacing)
	}
}

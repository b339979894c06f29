package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// OpenSlots returns a store's checker of the in-flight rule named name with
// rule's numbers, deciding at at's time (the store's test variant) or, with
// at nil, on the server's clock.
type OpenSlots func(t *testing.T, name string, rule atomicslot.Rule, at func() time.Time) shared.SlotChecker

// SlotsMatchReference holds a store's in-flight rules to the reference,
// answer for answer, at explicit microsecond times: random keys,
// acquisitions, releases (first, second, and late ones, after a slot's
// expiry), steps of up to one and a half holds, and changes of the numbers
// (shared.SlotRuler: raised, or cut below the slots held).
func SlotsMatchReference(t *testing.T, open OpenSlots, runs, steps int, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 11))
	for run := range runs {
		limit := 1 + rng.Int64N(6)
		hold := time.Duration(1+rng.Int64N(5_000_000)) * time.Nanosecond * 997 // not whole µs: the expiry rounds up
		grain := time.Microsecond
		if run%2 == 0 { // whole milliseconds: steps land on expiries
			hold, grain = time.Duration(1+rng.Int64N(8))*time.Millisecond, time.Millisecond
		}
		rule := atomicslot.MustRule(limit, hold)
		now := time.Unix(1_800_000_000, 0)
		c := open(t, "s"+strconv.Itoa(run), rule, func() time.Time { return now })
		ref := reference.NewInFlight(limit, hold)
		type held struct {
			key   string
			token uint64
			id    uint64
		}
		var all []held
		keys := []string{"a", "b", "c"}
		for step := range steps {
			now = now.Add(time.Duration(rng.Int64N(int64(hold)*3/2/int64(limit)+1)) / grain * grain)
			if rng.IntN(25) == 0 {
				nr := atomicslot.MustRule(1+rng.Int64N(6), hold/2+time.Duration(rng.Int64N(int64(hold)))/grain*grain)
				sr, ok := c.(shared.SlotRuler)
				if !ok {
					t.Fatalf("%T is not a shared.SlotRuler: its numbers cannot change", c)
				}
				sr.SetRule(nr)
				ref.SetNumbers(nr.Limit(), nr.Hold())
				continue
			}
			if len(all) > 0 && rng.IntN(5) < 2 {
				h := all[rng.IntN(len(all))]
				got, err := c.Release(ctx, h.key, h.token)
				if err != nil {
					t.Fatal(err)
				}
				if want := ref.Release(h.key, h.id, now.UnixNano()); (got == shared.SlotReleased) != want {
					t.Fatalf("run %d (%d, %v) step %d: release of %s's slot %d: %v, reference held %v", run, limit, hold, step, h.key, h.id, got, want)
				}
				continue
			}
			key := keys[rng.IntN(len(keys))]
			token := uint64(step + 1)
			got, _, err := c.Acquire(ctx, key, token)
			if err != nil {
				t.Fatal(err)
			}
			id, want := ref.Acquire(key, now.UnixNano())
			if got != want {
				t.Fatalf("run %d (%d, %v) step %d, acquiring %s: %+v, reference %+v", run, limit, hold, step, key, got, want)
			}
			if got.Allowed {
				all = append(all, held{key, token, id})
			}
		}
	}
}

// SlotsNeverAboveLimit: callers acquire, hold for a moment and release one
// key's slots at once, on the server's clock; no moment sees more than the
// limit inside (counted after each acquisition and before each release),
// the slots are all used, and each release is in effect once.
func SlotsNeverAboveLimit(t *testing.T, open OpenSlots, callers, rounds int) {
	const limit = 3
	c := open(t, "crowd", atomicslot.MustRule(limit, time.Minute), nil)
	ctx := context.Background()
	var inside, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				token := uint64(g*rounds+i) + 1
				d, _, err := c.Acquire(ctx, "k", token)
				if err != nil {
					errs <- err
					return
				}
				if !d.Allowed {
					continue
				}
				admitted.Add(1)
				n := inside.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				if got, err := c.Release(ctx, "k", token); err != nil || got != shared.SlotReleased {
					errs <- errors.Join(err, errors.New("a held slot's release was "+strconv.Itoa(int(got))))
					return
				}
				if got, err := c.Release(ctx, "k", token); err != nil || got != shared.SlotGone {
					errs <- errors.Join(err, errors.New("a second release was "+strconv.Itoa(int(got))+", want gone"))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p := peak.Load(); p > limit || p < 2 {
		t.Fatalf("%d callers saw %d inside at once, want at most %d (and the slots used: at least 2)", callers, p, limit)
	}
	if admitted.Load() < int64(rounds) {
		t.Fatalf("%d callers × %d rounds admitted %d", callers, rounds, admitted.Load())
	}
	if d, _, err := c.Acquire(ctx, "k", 1<<40); err != nil || !d.Allowed || d.Remaining != limit-1 {
		t.Fatalf("after every release, an acquisition: %+v, %v; want all %d free", d, err, limit)
	}
}

// SlotsAcrossInstances: instances a and b (stores on one server, as two
// processes have) share each key's slots: what a holds, b cannot take; a
// release on one frees a slot for the other; an instance that dies holding
// slots (never releasing) keeps them until the hold has passed on the
// server's clock, never less, and its slots are then counted expired; a
// second Release makes no call and reports false. Waits (slotsWait) see
// releases on either instance; leases (slotsLeased) hold the limit across
// both.
func SlotsAcrossInstances(t *testing.T, a, b shared.Store) {
	ctx := context.Background()
	bind := func(st shared.Store, name string, limit int64, hold time.Duration) *shared.Slots {
		s, err := shared.BindSlots(st, "storetest", name, atomicslot.MustRule(limit, hold), shared.Failure{Mode: shared.FailDeny})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sa, sb := bind(a, "Two", 2, time.Minute), bind(b, "Two", 2, time.Minute)
	s1, r1 := sa.Acquire(ctx, "k")
	s2, r2 := sb.Acquire(ctx, "k")
	if !r1.Allowed || !r2.Allowed || r1.Remaining != 1 || r2.Remaining != 0 || r1.Err != nil || r2.Err != nil {
		t.Fatalf("two acquisitions of 2 slots: %+v, %+v", r1, r2)
	}
	if s, r := sa.Acquire(ctx, "k"); r.Allowed || s.Held() || r.RetryAfter <= 59*time.Second || r.RetryAfter > time.Minute || r.Degraded {
		t.Fatalf("a third, with both slots held (one by each instance): %+v, want denied until the first expires", r)
	}
	if _, r := sb.Acquire(ctx, "other"); !r.Allowed {
		t.Fatalf("another key has slots of its own: %+v", r)
	}
	if !s2.Release() || s2.Release() {
		t.Fatal("b's release: want true once, then false")
	}
	s3, r3 := sa.Acquire(ctx, "k")
	if !r3.Allowed {
		t.Fatalf("after b's release, a acquires: %+v", r3)
	}
	if st := sa.Stats(); st.Held != 2 || st.ReleaseFailed != 0 {
		t.Fatalf("a's stats with two slots held: %+v", st)
	}
	s1.Release()
	s3.Release()
	if st := sa.Stats(); st.Held != 0 {
		t.Fatalf("a's stats after its releases: %+v", st)
	}
	slotsWait(t, bind(a, "Wait", 1, time.Minute), bind(b, "Wait", 1, time.Minute))
	slotsLeased(t, func(st shared.Store, name string) *shared.Slots {
		s := bind(st, name, 3, time.Minute)
		if err := s.Lease(2, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		return s
	}, a, b)

	// A dead instance: a holds both of Dead's slots and never releases.
	const hold = 700 * time.Millisecond
	da, db := bind(a, "Dead", 2, hold), bind(b, "Dead", 2, hold)
	start := time.Now()
	for range 2 {
		if _, r := da.Acquire(ctx, "k"); !r.Allowed {
			t.Fatalf("a's acquisition: %+v", r)
		}
	}
	for {
		before := time.Since(start)
		_, r := db.Acquire(ctx, "k")
		after := time.Since(start)
		if r.Allowed {
			if before < hold-50*time.Millisecond { // the server's clock may run a little apart from ours, never by this
				t.Fatalf("b acquired a dead instance's slot %v after it was taken; its hold is %v", before, hold)
			}
			break
		}
		if after > hold+5*time.Second {
			t.Fatalf("b is still denied %v after the dead instance's slots were taken (hold %v): %+v", after, hold, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // both of a's slots past their expiry, taken a moment apart
	if _, r := db.Acquire(ctx, "k"); !r.Allowed {
		t.Fatalf("b's second acquisition of the dead instance's slots: %+v", r)
	}
	if st := db.Stats(); st.Expired != 2 {
		t.Fatalf("b found %d of the dead instance's slots expired, want 2: %+v", st.Expired, st)
	}
}

// slotsWait: a and b share a rule of 1 slot. A wait on b for the slot a
// holds is admitted once a releases it (another instance's release: seen at
// b's next asking); a wait on a, behind a's own slot, once a releases it;
// a wait nobody ends is denied after its maxWait, as an acquisition then
// is; a wait whose context ends is denied then.
func slotsWait(t *testing.T, a, b *shared.Slots) {
	ctx := context.Background()
	held, r := a.Acquire(ctx, "w")
	if !r.Allowed {
		t.Fatalf("the first slot: %+v", r)
	}
	for _, waiter := range []*shared.Slots{b, a} {
		type acquired struct {
			s atomicslot.Slot
			r verdict.Result
		}
		got := make(chan acquired, 1)
		go func() {
			s, r := waiter.AcquireWait(ctx, "w", 20*time.Second)
			got <- acquired{s, r}
		}()
		time.Sleep(30 * time.Millisecond)
		select {
		case g := <-got:
			t.Fatalf("a wait ended with the slot still held: %+v", g.r)
		default:
		}
		held.Release()
		select {
		case g := <-got:
			if !g.r.Allowed || g.r.Degraded {
				t.Fatalf("a wait after the slot's release: %+v", g.r)
			}
			held = g.s
		case <-time.After(10 * time.Second):
			t.Fatal("a wait not admitted 10 s after the slot's release")
		}
	}
	start := time.Now()
	if s, r := b.AcquireWait(ctx, "w", 150*time.Millisecond); r.Allowed || s.Held() || r.RetryAfter <= 0 {
		t.Fatalf("a wait nobody ends: %+v, want denied", r)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("a wait of 150ms denied after %v", waited)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, r := b.AcquireWait(cctx, "w", time.Minute); r.Allowed {
		t.Fatalf("a wait whose context ended: %+v, want denied", r)
	}
	held.Release()
}

// slotsLeased: a and b lease up to 2 of a key's 3 slots for 300 ms windows.
// a's first acquisition leases 2 (1 handed out), b's the one left; a's
// second is handed out of its lease with no call; a's third (its lease all
// held) and b's second find the store full. A slot a's request releases
// goes back to a's lease, still held on the store, so b is refused until
// a's window has passed and the lease gave it back. Then 8 goroutines on
// each instance acquire and release at once, and no instant sees more than
// 3 inside; when they are done and the windows have passed, nothing is
// leased.
func slotsLeased(t *testing.T, bind func(st shared.Store, name string) *shared.Slots, a, b shared.Store) {
	ctx := context.Background()
	la, lb := bind(a, "Leased"), bind(b, "Leased")
	want := func(s *shared.Slots, allowed bool, what string) atomicslot.Slot {
		t.Helper()
		slot, r := s.Acquire(ctx, "k")
		if r.Allowed != allowed || r.Degraded || slot.Held() != allowed {
			t.Fatalf("%s: %+v, want allowed %v", what, r, allowed)
		}
		return slot
	}
	a1 := want(la, true, "a's first (leasing 2)")
	if st := la.Stats(); st.Leased != 2 || st.Held != 1 {
		t.Fatalf("a's stats after its first: %+v, want 2 leased, 1 held", st)
	}
	b1 := want(lb, true, "b's first (the 1 left)")
	a2 := want(la, true, "a's second, from its lease")
	want(la, false, "a's third, its lease all held and the store full")
	want(lb, false, "b's second, the store full")
	if !a2.Release() || a2.Release() {
		t.Fatal("a's release of a leased slot: want true once, then false")
	}
	want(lb, false, "b, with a's released slot still leased by a")
	time.Sleep(450 * time.Millisecond) // a's window is over: its idle slot is back on the store
	b2 := want(lb, true, "b, after a's window")
	for _, s := range []atomicslot.Slot{a1, b1, b2} {
		if !s.Release() {
			t.Fatal("a release of a held slot not in effect")
		}
	}

	var inside, most atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(500 * time.Millisecond)
	admitted := atomic.Int64{}
	for g := range 16 {
		s := []*shared.Slots{la, lb}[g%2]
		wg.Go(func() {
			for time.Now().Before(stop) {
				slot, r := s.Acquire(ctx, "many")
				if !r.Allowed {
					time.Sleep(time.Millisecond)
					continue
				}
				admitted.Add(1)
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Duration(rand.Int64N(int64(time.Millisecond))))
				inside.Add(-1)
				slot.Release()
			}
		})
	}
	wg.Wait()
	if most.Load() > 3 || admitted.Load() < 50 {
		t.Fatalf("leased on two instances: %d inside at most (limit 3), %d admitted", most.Load(), admitted.Load())
	}
	time.Sleep(450 * time.Millisecond)
	if sa, sb := la.Stats(), lb.Stats(); sa.Leased+sb.Leased != 0 || sa.Held+sb.Held != 0 || sa.Keys+sb.Keys != 0 {
		t.Fatalf("after every release and window: a %+v, b %+v, want nothing leased, held or tracked", sa, sb)
	}
	// A flood of keys leaves nothing behind once their windows have passed.
	for i := range 200 {
		slot, r := la.Acquire(ctx, fmt.Sprintf("flood%d", i))
		if !r.Allowed {
			t.Fatalf("flood key %d: %+v", i, r)
		}
		slot.Release()
	}
	if st := la.Stats(); st.Keys != 200 || st.Leased != 400 {
		t.Fatalf("200 keys leased: %+v, want 200 keys tracked, 400 slots leased", st)
	}
	time.Sleep(450 * time.Millisecond)
	if st := la.Stats(); st.Keys != 0 || st.Leased != 0 {
		t.Fatalf("after the flood's windows: %+v, want no key tracked, nothing leased", st)
	}
}

package storetest

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/internal/reference"
	"github.com/limitgen/limitgen/shared"
)

// WindowLease is a store's window lease call: redisstore.Window's or
// pgstore.Window's Lease (shared.WindowLeaser).
type WindowLease func(ctx context.Context, key string, cost, want int64, prev shared.Settlement) (shared.Granted, error)

// OpenLeasedWindow is OpenWindow of a store whose windows lease: one
// window's check and lease call, deciding at the time at gives.
type OpenLeasedWindow func(t *testing.T, name string, rule atomicwindow.Rule, at func() time.Time) (WindowCheck, WindowLease)

// WindowLeaseEnvelope drives window leases at explicit microsecond times:
// three lessees and a per-request client on two keys, exact and counted
// windows, random steps that sometimes jump past a grant's term or the whole
// window. Lessees spend what the store granted until their grant's term is
// over (at its last microsecond, at times), and settle what they did not
// spend at their next call, whether or not the term is over, or release it.
// Every admission is recorded at its time, and no interval of the window
// may hold more than the limit for a key (reference.CheckWindow). It returns
// the units admitted, and those of them admitted from leases.
func WindowLeaseEnvelope(t *testing.T, open OpenLeasedWindow, runs int, seed uint64) (total, leased int64) {
	rng := rand.New(rand.NewPCG(seed, 23))
	var grantsAbove int // grants of more than their cost: leases that batch
	for run := range runs {
		r := windowLeaseRun(t, open, "lease"+strconv.Itoa(run), run%2 == 1, 200, rng.Int64N)
		total, leased, grantsAbove = total+r.total, leased+r.leased, grantsAbove+r.grantsAbove
	}
	if leased < total/4 || grantsAbove < runs {
		t.Fatalf("leases admitted %d of %d units, %d grants beyond their cost: the test hardly leased", leased, total, grantsAbove)
	}
	return total, leased
}

// WindowLeaseProgram is one run of WindowLeaseEnvelope whose every choice
// (the window, exact or counted, each step, action, cost and key) is read
// from prog, until it runs out (a step for every 4 bytes, at most 301): a
// fuzz target's input. It fails the test when an interval of the window
// holds more than the limit.
func WindowLeaseProgram(t *testing.T, open OpenLeasedWindow, name string, prog []byte) {
	if len(prog) == 0 {
		return
	}
	pick := func(n int64) int64 { // the next bytes, as many as n needs, mod n; 0 once prog is read
		var v uint64
		for b := uint64(n - 1); b > 0 && len(prog) > 0; b >>= 8 {
			v = v<<8 | uint64(prog[0])
			prog = prog[1:]
		}
		return int64(v % uint64(n))
	}
	counted := prog[0]&1 == 1
	prog = prog[1:]
	windowLeaseRun(t, open, name, counted, 1+min(len(prog)/4, 300), pick)
}

// windowLease is what a run of windowLeaseRun admitted: the units, those from
// leases, and the grants of more than their cost.
type windowLease struct {
	total, leased int64
	grantsAbove   int
}

// windowLeaseRun drives the window named name for steps steps, every choice
// from pick (a number in [0, n)): see WindowLeaseEnvelope.
func windowLeaseRun(t *testing.T, open OpenLeasedWindow, name string, counted bool, steps int, pick func(n int64) int64) (out windowLease) {
	ctx := context.Background()
	limit := 1 + pick(64)
	window := time.Duration(1+pick(3000)) * time.Millisecond
	if counted { // sub-windows of whole microseconds
		limit = 65 + pick(300)
		window = time.Duration(1+pick(1000)) * 48 * time.Millisecond
	}
	rule := atomicwindow.MustRule(limit, window)
	term := shared.WindowLeaseTerm(window)
	now := time.Unix(1_800_000_000, pick(1e6)*1000)
	check, lease := open(t, name, rule, func() time.Time { return now })
	type lessee struct {
		g       *shared.Granted // nil: none held
		key     string
		expires time.Time
		left    int64
	}
	lessees := make([]lessee, 3)
	keys := []string{"a", "b"}
	var adm []reference.Admission
	for range steps {
		switch r := pick(20); {
		case r == 0:
			now = now.Add(window + time.Duration(pick(int64(window))))
		case r < 3:
			now = now.Add(term + time.Duration(pick(int64(term))))
		default:
			now = now.Add(time.Duration(pick(int64(window)/limit*2 + 1)))
		}
		now = now.Truncate(time.Microsecond)
		le := &lessees[pick(int64(len(lessees)))]
		valid := le.g != nil && now.Before(le.expires)
		prev := shared.Settlement{}
		if le.g != nil {
			prev = shared.Settlement{Second: le.g.Second, Size: le.g.Size, Unspent: le.left, Gen: le.g.Gen}
		}
		switch a := pick(10); {
		case a < 4 && valid && le.left > 0: // spend from the grant, at times at its term's last microsecond
			at := now
			if pick(3) == 0 {
				at = le.expires.Add(-time.Microsecond)
			}
			k := 1 + pick(le.left)
			le.left -= k
			adm = append(adm, reference.Admission{Key: le.key, At: at.UnixNano(), Cost: k})
			out.leased += k
		case a < 7: // settle, then at least cost, up to want
			key := le.key
			if key == "" || pick(4) == 0 {
				key = keys[pick(int64(len(keys)))]
			}
			if key != le.key {
				prev = shared.Settlement{} // a grant of another key: let it lapse
			}
			cost := []int64{0, 1, 1, 2, limit / 4, limit, limit + 1}[pick(7)]
			g, err := lease(ctx, key, cost, cost+pick(limit), prev)
			if err != nil {
				t.Fatal(err)
			}
			le.g, le.left, le.key = nil, 0, key
			if g.Allowed != (cost <= limit && g.RetryAfter == 0) || g.Allowed && (g.Size < cost || g.Term != term) {
				t.Fatalf("%s: a lease of cost %d in a window of %d: %+v (term %v)", name, cost, limit, g, term)
			}
			if cost > limit && g.RetryAfter != atomicbucket.Never {
				t.Fatalf("%s: a lease of cost %d above the limit %d: %+v", name, cost, limit, g)
			}
			if g.Allowed {
				le.g, le.expires, le.left = &g, now.Add(term), g.Size-cost
				if cost > 0 {
					adm = append(adm, reference.Admission{Key: key, At: now.UnixNano(), Cost: cost})
					out.leased += cost
				}
				if g.Size > max(cost, 1) {
					out.grantsAbove++
				}
			}
		case a == 7 && le.g != nil: // release
			if _, err := lease(ctx, le.key, 0, 0, prev); err != nil {
				t.Fatal(err)
			}
			le.g, le.left = nil, 0
		default: // checks per request at one time, until one is denied
			key := keys[pick(int64(len(keys)))]
			for range 8 {
				cost := 1 + pick(min(limit, 4))
				d, err := check(ctx, key, cost)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					break
				}
				adm = append(adm, reference.Admission{Key: key, At: now.UnixNano(), Cost: cost})
			}
		}
	}
	for _, a := range adm {
		out.total += a.Cost
	}
	if err := reference.CheckWindow(limit, int64(window), adm); err != nil {
		t.Fatalf("%s (%d in %v, exact %v): %v", name, limit, window, rule.Exact(), err)
	}
	return out
}

// WindowLeaseSettles, by hand: a grant's unspent units go back at the next
// call, also after its term; a release gives them back; the store grants at
// most half the room beyond the cost; a spent grant's units stay in the
// window until the window after its term is over.
func WindowLeaseSettles(t *testing.T, open OpenLeasedWindow) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	rule := atomicwindow.MustRule(20, 4*time.Second) // term: 1 s
	check, lease := open(t, "settles", rule, func() time.Time { return now })
	g, err := lease(ctx, "k", 2, 20, shared.Settlement{})
	if err != nil || !g.Allowed || g.Size != 11 || g.Remaining != 9 || g.Term != time.Second { // 2 and half of the 18 beyond
		t.Fatalf("first grant: %+v %v", g, err)
	}
	// Spend 3 more of the 11 (5 in all), then after the term settle: 6 go back.
	now = now.Add(1500 * time.Millisecond)
	g2, err := lease(ctx, "k", 1, 1, shared.Settlement{Second: g.Second, Size: g.Size, Unspent: 6, Gen: g.Gen})
	if err != nil || !g2.Allowed || g2.Size != 1 || g2.Remaining != 20-5-1 {
		t.Fatalf("after settling 6 of 11: %+v %v", g2, err)
	}
	// A release of the 1 unit, unspent: it goes back.
	if _, err := lease(ctx, "k", 0, 0, shared.Settlement{Second: g2.Second, Size: 1, Unspent: 1, Gen: g2.Gen}); err != nil {
		t.Fatal(err)
	}
	// The 5 spent count until the window after the first grant's term: at
	// 1 s + 4 s they are still in; 15 fit, not 16.
	now = time.Unix(1_800_000_005, 0)
	admitted := int64(0)
	for range 20 {
		d, err := check(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		admitted++
	}
	if admitted != 15 {
		t.Fatalf("at the end of the window after the term, %d admitted with 5 of a grant spent: want 15", admitted)
	}
	// A settlement of another generation of the key's slots (made after a
	// carry, or in a key made anew) takes nothing back; of this one, it does.
	now = now.Add(time.Hour)
	g3, err := lease(ctx, "k", 1, 1, shared.Settlement{})
	if err != nil || !g3.Allowed || g3.Size != 1 {
		t.Fatalf("an hour later: %+v %v", g3, err)
	}
	s := shared.Settlement{Second: g3.Second, Size: 1, Unspent: 1, Gen: g3.Gen + 1}
	if d, err := lease(ctx, "k", 0, 0, s); err != nil || !d.Allowed || d.Remaining != 19 {
		t.Fatalf("a settlement of another generation: %+v %v, want 19 remaining", d, err)
	}
	s.Gen = g3.Gen
	if d, err := lease(ctx, "k", 0, 0, s); err != nil || !d.Allowed || d.Remaining != 20 {
		t.Fatalf("a settlement of the grant: %+v %v, want 20 remaining", d, err)
	}
}

// WindowLeases holds generated-style leased windows (shared.BindLeasedWindow)
// to their limit on the server's clock: three instances, each on its own
// store, three callers each, on one key of 40 in any 300 ms with leases of
// at most 8, for 1.2 s. Each admission is known to lie between the times
// taken before and after its check; no interval of 300 ms may surely hold
// more than 40 (a window from one check's start holding every check that
// started and ended in it). Then, under the limit, leases spare calls (60
// checks in at most 30); past its term a lease holds nothing, and what it
// did not spend goes back when released; a check from a lease's units
// allocates nothing; a store's Close gives back what its leased windows
// hold; a change of numbers replaces the leases.
func WindowLeases(t *testing.T, open func(t *testing.T) shared.Store) {
	const limit, lease = 40, 8
	window := 300 * time.Millisecond
	rule := atomicwindow.MustRule(limit, window)
	ctx := context.Background()
	ws := make([]*shared.Window, 3)
	for i := range ws {
		w, err := shared.BindLeasedWindow(open(t), "leases", "Hot", rule, shared.Failure{Mode: shared.FailDeny}, lease)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	type span struct{ from, to time.Duration } // since start
	var mu sync.Mutex
	var spans []span
	var degraded atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range ws {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < 1200*time.Millisecond {
					from := time.Since(start)
					res := w.AllowN(ctx, "k", 1)
					to := time.Since(start)
					if res.Degraded {
						degraded.Store(res.Err)
						return
					}
					if res.Allowed {
						mu.Lock()
						spans = append(spans, span{from, to})
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	if err := degraded.Load(); err != nil {
		t.Fatalf("a check was degraded: %v", err)
	}
	for _, a := range spans {
		in := 0
		for _, b := range spans {
			if b.from >= a.from && b.to < a.from+window {
				in++
			}
		}
		if in > limit {
			t.Fatalf("%d admitted in the %v from %v, more than %d", in, window, a.from, limit)
		}
	}
	var calls int64
	for _, w := range ws {
		if l, ok := w.Leases().Lookup(0, "k"); ok {
			calls += l.Calls()
		}
	}
	if len(spans) < 2*limit || calls == 0 {
		t.Fatalf("%d admitted in 1.2 s with %d lease calls: want at least %d admitted, from leases", len(spans), calls, 2*limit)
	}
	t.Logf("flood: %d admitted in 1.2 s (at most %d a window), %d lease calls", len(spans), limit, calls)

	// Under the limit, leases spare calls: 60 checks of 64 an hour, 20 an
	// instance, in turn, all admitted, in at most 30 calls.
	hour := make([]*shared.Window, 3)
	for i := range hour {
		w, err := shared.BindLeasedWindow(open(t), "leases", "Hour", atomicwindow.MustRule(64, time.Hour), shared.Failure{Mode: shared.FailDeny}, lease)
		if err != nil {
			t.Fatal(err)
		}
		hour[i] = w
	}
	admitted := 0
	for i := range 60 {
		if res := hour[i%3].AllowN(ctx, "k", 1); res.Allowed && !res.Degraded {
			admitted++
		}
	}
	calls = 0
	for _, w := range hour {
		if l, ok := w.Leases().Lookup(0, "k"); ok {
			calls += l.Calls()
		}
	}
	if admitted != 60 || calls > 30 {
		t.Fatalf("under the limit: %d of 60 admitted in %d lease calls, want 60 in at most 30", admitted, calls)
	}
	t.Logf("under the limit: 60 admitted in %d lease calls", calls)
	// After the grants' term (a second), their unspent units still go back:
	// released, the hour holds the 60 spent, and 3 more fit after this one.
	time.Sleep(shared.WindowLeaseTerm(time.Hour) + 50*time.Millisecond)
	for _, w := range hour {
		if l, ok := w.Leases().Lookup(0, "k"); ok && l.Held() != 0 {
			t.Fatalf("a lease holds %d units past its grant's term", l.Held())
		}
		if err := w.ReleaseLeases(ctx); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := shared.BindWindow(open(t), "leases", "Hour", atomicwindow.MustRule(64, time.Hour), shared.Failure{Mode: shared.FailDeny})
	if err != nil {
		t.Fatal(err)
	}
	if res := plain.AllowN(ctx, "k", 1); !res.Allowed || res.Remaining != 3 {
		t.Fatalf("after 60 spent from leases and the rest released past their term: %+v, want 3 remaining", res)
	}

	// A store's Close gives back what its leased windows hold: 14 checks of
	// 64 an hour, the store closed, and 49 more fit after the next.
	st := open(t)
	closing, err := shared.BindLeasedWindow(st, "leases", "Closing", atomicwindow.MustRule(64, time.Hour), shared.Failure{Mode: shared.FailDeny}, lease)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if res := closing.AllowN(ctx, "k", 1); !res.Allowed {
			t.Fatalf("closing: %+v", res)
		}
	}
	if l, ok := closing.Leases().Lookup(0, "k"); !ok || l.Held() != 5 {
		t.Fatal("closing: after grants of 1, 2, 4 and 8, 10 checks leave 5 held")
	}
	// A check from what the lease holds allocates nothing (4 checks, 1 left).
	if a := testing.AllocsPerRun(3, func() { closing.AllowN(ctx, "k", 1) }); a != 0 {
		t.Fatalf("a check from a lease's units allocates %v times", a)
	}
	c, ok := st.(interface{ Close() })
	if !ok {
		t.Fatalf("%T has no Close", st)
	}
	c.Close()
	plain, err = shared.BindWindow(open(t), "leases", "Closing", atomicwindow.MustRule(64, time.Hour), shared.Failure{Mode: shared.FailDeny})
	if err != nil {
		t.Fatal(err)
	}
	if res := plain.AllowN(ctx, "k", 1); !res.Allowed || res.Remaining != 49 {
		t.Fatalf("after 14 spent from a lease and its store closed: %+v, want 49 remaining", res)
	}

	// New numbers: the lease of the old ones is replaced, and the next check
	// takes a grant in the new.
	old, _ := ws[0].Leases().Lookup(0, "k")
	if err := ws[0].SetNumbers(atomicbucket.Numbers{Tokens: 60, Period: window, Burst: 60}, 1); err != nil {
		t.Fatal(err)
	}
	if l, ok := ws[0].Leases().Lookup(0, "k"); ok && l == old {
		t.Fatal("the lease of the old numbers is kept after a change")
	}
	time.Sleep(window + shared.WindowLeaseTerm(window) + 50*time.Millisecond) // every grant out of the window
	res := ws[0].AllowN(ctx, "k", 1)
	if !res.Allowed || res.Remaining > 59 || res.Remaining < 59-lease {
		t.Fatalf("the first check in 60 a window: %+v", res)
	}
	for _, w := range ws {
		if err := w.ReleaseLeases(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// WindowLeaseSeeds are WindowLeaseProgram's seed inputs: exact and counted
// windows, 400 random bytes each.
func WindowLeaseSeeds() [][]byte {
	rng := rand.New(rand.NewPCG(31, 37))
	seeds := make([][]byte, 4)
	for i := range seeds {
		seeds[i] = make([]byte, 400)
		for j := range seeds[i] {
			seeds[i][j] = byte(rng.IntN(256))
		}
		seeds[i][0] = byte(i % 2) // exact, counted
	}
	return seeds
}

// WindowLeaseThroughput: one lessee keeping a window full (it spends each
// grant at once, and after a denial waits its RetryAfter) admits, over 12
// windows, at least what the design says (docs/windows.md): N·W/(W + term)
// a window, exact; N·W/(W + term + W/8), counted; less one window's N for the
// edges. And never more than the window allows (reference.CheckWindow). It
// returns the share of N a window admitted, exact and counted.
func WindowLeaseThroughput(t *testing.T, open OpenLeasedWindow) (exact, counted float64) {
	ctx := context.Background()
	for _, c := range []struct {
		limit  int64
		window time.Duration
		extra  float64 // the part of the window a counted sixteenth adds
		share  *float64
	}{{40, 4 * time.Second, 0, &exact}, {1000, time.Hour, 1.0 / 8, &counted}} {
		now := time.Unix(1_800_000_000, 0)
		_, lease := open(t, "throughput"+strconv.FormatInt(c.limit, 10), atomicwindow.MustRule(c.limit, c.window), func() time.Time { return now })
		term := shared.WindowLeaseTerm(c.window)
		end := now.Add(12 * c.window)
		var adm []reference.Admission
		var total int64
		for now.Before(end) {
			g, err := lease(ctx, "k", 1, c.limit, shared.Settlement{})
			if err != nil {
				t.Fatal(err)
			}
			if !g.Allowed {
				now = now.Add(max(g.RetryAfter, time.Microsecond)).Truncate(time.Microsecond).Add(time.Microsecond)
				continue
			}
			adm = append(adm, reference.Admission{Key: "k", At: now.UnixNano(), Cost: g.Size})
			total += g.Size
		}
		if err := reference.CheckWindow(c.limit, int64(c.window), adm); err != nil {
			t.Fatalf("%d in %v: %v", c.limit, c.window, err)
		}
		w := c.window.Seconds()
		least := 12*float64(c.limit)*w/(w+term.Seconds()+c.extra*w) - float64(c.limit)
		if float64(total) < least {
			t.Fatalf("%d in %v, kept full by a lease for 12 windows: %d admitted, the design says at least %.0f", c.limit, c.window, total, least)
		}
		*c.share = float64(total) / 12 / float64(c.limit)
	}
	return exact, counted
}

package fuzz

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/internal/keycap"
	"github.com/limitgen/limitgen/internal/reference"
)

// windowProgram is a window rule, a key cap and a sequence of operations on a
// few keys at explicit times, run against the runtime's window table (and,
// for one key, its global window) and the reference sliding log at the
// runtime's grain.
type windowProgram struct {
	limit    int64
	window   time.Duration
	maxKeys  int64
	allowCap bool
	ops      []windowOp
}

type windowOp struct {
	kind   byte // 0 AllowN, 1 Peek, 2 AllowCost (yes or no), 3 Sweep, 4 Settle (cost the estimate)
	key    string
	dt     int64 // ns after the previous op
	cost   int64
	actual int64 // Settle
	ago    int   // Settle: the admission it settles, among the key's last ones (0: the newest)
}

func (p windowProgram) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "limit %d per %v, max keys %d (allow at cap %v):", p.limit, p.window, p.maxKeys, p.allowCap)
	for _, op := range p.ops {
		fmt.Fprintf(&b, " [%s +%d %s %d]", [...]string{"allow", "peek", "yes/no", "sweep", "settle"}[op.kind], op.dt, op.key, op.cost)
		if op.kind == 4 {
			fmt.Fprintf(&b, "(actual %d, admission -%d)", op.actual, op.ago)
		}
	}
	return b.String()
}

// decodeWindow reads a program from fuzz input: the numbers from its first
// bytes, then 6 bytes an operation. Limits are drawn around the exact ring's
// largest (64) so both forms are met; windows are whole microseconds, and
// counted ones multiples of 16 × 2.5 ms.
func decodeWindow(data []byte) (windowProgram, bool) {
	if len(data) < 6 {
		return windowProgram{}, false
	}
	var p windowProgram
	switch data[0] % 4 {
	case 0:
		p.limit = 1 + int64(data[1]%8)
	case 1:
		p.limit = 1 + int64(data[1]%64)
	case 2:
		p.limit = 65 + int64(data[1])
	default:
		p.limit = 60 + int64(data[1]%10)
	}
	unit := time.Microsecond
	if p.limit > atomicwindow.RingMax {
		unit = atomicwindow.Slices * atomicwindow.SliceMin
	}
	p.window = unit * time.Duration(1+binary.LittleEndian.Uint16(data[2:4])%2000)
	p.maxKeys = int64(data[4] % 5) // 0: no cap
	p.allowCap = data[5]&1 != 0
	keys := []string{"a", "b", "c", "d", "e", "f"}[:1+data[5]>>1%6]
	for b := data[6:]; len(b) >= 6; b = b[6:] {
		op := windowOp{kind: b[0] % 8, key: keys[int(b[1])%len(keys)]}
		switch {
		case op.kind == 7:
			op.kind = 4 // Settle
		case op.kind > 3:
			op.kind = 0 // AllowN, most of the time
		}
		// Time steps from 0 to about a window and a half, by fractions.
		frac := int64(binary.LittleEndian.Uint16(b[2:4]))
		switch b[4] % 4 {
		case 0:
			op.dt = 0
		case 1:
			op.dt = int64(p.window) * frac / 65536 / 64
		case 2:
			op.dt = int64(p.window) * frac / 65536
		default:
			op.dt = int64(p.window)*frac/65536 + int64(atomicbucket.SweepGrace)*int64(b[5]%2)
		}
		if op.dt > 0 {
			// A step is 0 or long enough for the key cap's sweeps to be
			// spaced (4 keys × 256 ns): a sweep frees a key whenever the
			// reference can forget one.
			op.dt = max(op.dt, 2*int64(time.Microsecond))
		}
		switch c := b[5] >> 1; {
		case c < 64:
			op.cost = 1
		case c < 120:
			op.cost = 1 + int64(binary.LittleEndian.Uint16(b[2:4]))%max(p.limit/4, 1)
		case c < 124:
			op.cost = p.limit
		case c == 124:
			op.cost = 0
		case c == 125:
			op.cost = p.limit + 1
		case c == 126:
			op.cost = -1
		default:
			op.cost = 1 + int64(c)%p.limit
		}
		if op.kind == 4 { // an actual from nothing to beyond the limit
			op.actual = op.cost + int64(b[3])%(2*p.limit+3) - 1
			if b[1]&0x80 != 0 && op.cost > 0 {
				op.actual = int64(b[3]) % op.cost
			}
			op.ago = int(b[1]>>4) & 7
		}
		p.ops = append(p.ops, op)
	}
	return p, true
}

// runWindow runs p against the runtime and the reference, decision by
// decision, and checks every admission stream against the window at the
// true times: no interval of the window's length holds more than the limit.
func runWindow(p windowProgram) error {
	rule, err := atomicwindow.NewRule(p.limit, p.window)
	if err != nil {
		return err
	}
	tbl := atomicwindow.NewTable[string](rule, atomicbucket.TableOptions{MaxKeys: p.maxKeys, AllowAtCap: p.allowCap})
	global := atomicwindow.NewWindow(rule)
	params := reference.WindowParams{Limit: p.limit, Window: int64(p.window), MaxKeys: p.maxKeys, AllowCap: p.allowCap,
		Grain: int64(rule.Grain()), Grace: int64(atomicbucket.SweepGrace), CapSpacing: p.maxKeys * int64(keycap.CapSweepSpacing)}
	ref := reference.NewWindow(params)
	params.MaxKeys = 0
	refGlobal := reference.NewWindow(params)
	var adm, admGlobal []reference.Admission
	settled := false        // a settlement counts beyond the limit: no envelope then
	now := int64(time.Hour) // past the epoch, so that nothing is clamped
	spacing := p.maxKeys * int64(keycap.CapSweepSpacing)
	lastCap := int64(math.MinInt64 / 2)
	admitted := map[string][]int64{} // each key's admission times, newest last (global: "a"'s own)
	admittedAt := func(key string, ago int) int64 {
		ts := admitted[key]
		if len(ts) == 0 {
			return now
		}
		return ts[max(len(ts)-1-ago, 0)]
	}
	for i, op := range p.ops {
		now += op.dt
		at := atomicbucket.Time(now)
		// A new key at the cap within the sweep spacing of the last one there
		// is told the earliest reclaim as of that sweep: a lower bound, since
		// the held keys may have admitted more at the same instant.
		takes := op.cost > 0 && op.cost <= p.limit
		if op.kind == 4 {
			takes = op.cost >= 0 && op.actual > op.cost
		}
		atCap := op.kind != 1 && op.kind != 3 && takes && p.maxKeys > 0 && !ref.Holds(op.key) && ref.Held() >= p.maxKeys
		bound := atCap && now < lastCap+spacing
		if atCap && !bound {
			lastCap = now
		}
		var got, want reference.Decision
		switch op.kind {
		case 0:
			got, want = decisionOf(tbl.AllowNAt(op.key, at, op.cost)), ref.AllowN(op.key, now, op.cost)
			if op.key == "a" {
				g, w := decisionOf(global.AllowNAt(at, op.cost)), refGlobal.AllowN("a", now, op.cost)
				if g != w {
					return fmt.Errorf("op %d at %d: global AllowN(%d) = %+v, reference %+v", i, now, op.cost, g, w)
				}
				if g.Allowed && op.cost > 0 {
					admGlobal = append(admGlobal, reference.Admission{Key: "a", At: now, Cost: op.cost})
					admitted["global"] = append(admitted["global"], now)
				}
			}
		case 1:
			got, want = decisionOf(tbl.PeekAt(op.key, at, op.cost)), ref.Peek(op.key, now, op.cost)
		case 2:
			ok := tbl.AllowCost(op.key, at, op.cost)
			want = ref.AllowN(op.key, now, op.cost)
			if ok != want.Allowed {
				return fmt.Errorf("op %d at %d: AllowCost(%s, %d) = %v, reference %+v", i, now, op.key, op.cost, ok, want)
			}
			got = want
		case 4:
			settled = true
			adm := admittedAt(op.key, op.ago)
			if f, g := tbl.SettleAt(op.key, at, atomicbucket.Time(adm), op.cost, op.actual), ref.Settle(op.key, now, adm, op.cost, op.actual); f != g {
				return fmt.Errorf("op %d at %d: Settle(%s, admitted %d, %d, %d) forgave %d, reference %d", i, now, op.key, adm, op.cost, op.actual, f, g)
			}
			if op.key == "a" {
				adm := admittedAt("global", op.ago)
				if f, g := global.SettleAt(at, atomicbucket.Time(adm), op.cost, op.actual), refGlobal.Settle("a", now, adm, op.cost, op.actual); f != g {
					return fmt.Errorf("op %d at %d: global Settle(admitted %d, %d, %d) forgave %d, reference %d", i, now, adm, op.cost, op.actual, f, g)
				}
			}
			if n, m := tbl.Len(), ref.Held(); n != m {
				return fmt.Errorf("op %d at %d: %d keys after a settlement, the reference holds %d", i, now, n, m)
			}
			continue
		case 3:
			if n, m := tbl.SweepAt(at), ref.Forget(now); n != m {
				return fmt.Errorf("op %d at %d: the sweep removed %d keys, the reference forgot %d", i, now, n, m)
			}
			if n, m := tbl.Len(), ref.Held(); n != m {
				return fmt.Errorf("op %d at %d: %d keys after a sweep, the reference holds %d", i, now, n, m)
			}
			continue
		}
		if bound && !got.Allowed && !want.Allowed && got.RetryAfter > 0 && got.RetryAfter <= want.RetryAfter {
			got.RetryAfter = want.RetryAfter
		}
		if got != want {
			return fmt.Errorf("op %d at %d: %s %s cost %d = %+v, reference %+v", i, now, [...]string{"AllowN", "Peek", "AllowCost"}[op.kind], op.key, op.cost, got, want)
		}
		if op.kind != 1 && want.Allowed && op.cost > 0 && ref.Holds(op.key) { // not one admitted untracked at the cap
			adm = append(adm, reference.Admission{Key: op.key, At: now, Cost: op.cost})
			admitted[op.key] = append(admitted[op.key], now)
		}
	}
	if settled {
		return nil
	}
	if err := reference.CheckWindow(p.limit, int64(p.window), adm); err != nil {
		return fmt.Errorf("keyed: %w", err)
	}
	return reference.CheckWindow(p.limit, int64(p.window), admGlobal)
}

// concurrentWindow is a round's window for the concurrent tests, with a
// table and a global window of it: an odd round's counted (65 to 264 units
// in 1 to 4 times 16 × SliceMin), an even round's exact (lo to lo+n−1
// units in 1 to ms milliseconds).
func concurrentWindow(rng *rand.Rand, round int, lo, n, ms int64) (atomicwindow.Rule, *atomicwindow.Table[string], *atomicwindow.Window) {
	limit := lo + rng.Int64N(n)
	window := time.Duration(1+rng.Int64N(ms)) * time.Millisecond
	if round%2 == 1 {
		limit, window = 65+rng.Int64N(200), time.Duration(1+rng.Int64N(4))*atomicwindow.Slices*atomicwindow.SliceMin
	}
	rule := atomicwindow.MustRule(limit, window)
	return rule, atomicwindow.NewTable[string](rule, atomicbucket.TableOptions{}), atomicwindow.NewWindow(rule)
}

// checkRound holds what a round's workers admitted, keyed and global, to
// rule's limit in every interval of its window, and returns how many
// admissions each side had.
func checkRound(t *testing.T, round int, rule atomicwindow.Rule, adm, admGlobal [][]reference.Admission) (keyed, global int) {
	t.Helper()
	for _, side := range []struct {
		name string
		adm  [][]reference.Admission
		n    *int
	}{{"keyed", adm, &keyed}, {"global", admGlobal, &global}} {
		var all []reference.Admission
		for _, a := range side.adm {
			all = append(all, a...)
		}
		*side.n = len(all)
		if err := reference.CheckWindow(rule.Limit(), int64(rule.Window()), all); err != nil {
			t.Fatalf("round %d, %d in %v (exact %v), %s: %v", round, rule.Limit(), rule.Window(), rule.Exact(), side.name, err)
		}
	}
	return keyed, global
}

func decisionOf(d atomicbucket.Decision) reference.Decision {
	return reference.Decision{Allowed: d.Allowed, Remaining: d.Remaining, Reset: d.Reset, RetryAfter: d.RetryAfter}
}

// FuzzWindow runs fuzzed programs through runWindow.
func FuzzWindow(f *testing.F) {
	for _, s := range seedWindowPrograms(24, 60) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ok := decodeWindow(data)
		if !ok {
			return
		}
		if err := runWindow(p); err != nil {
			t.Fatalf("%v\n%v", p, err)
		}
	})
}

// seedWindowPrograms are n random programs of ops operations each.
func seedWindowPrograms(n, ops int) [][]byte {
	rng := rand.New(rand.NewPCG(30, 30))
	var seeds [][]byte
	for range n {
		b := make([]byte, 6+6*ops)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// TestWindowDifferentialRandom runs many random programs through runWindow
// in every `go test`, beyond the committed corpus.
func TestWindowDifferentialRandom(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 300
	}
	exact, counted := 0, 0
	for _, data := range seedWindowPrograms(n, 150) {
		p, _ := decodeWindow(data)
		if p.limit > atomicwindow.RingMax {
			counted++
		} else {
			exact++
		}
		if err := runWindow(p); err != nil {
			t.Fatalf("%v\n%v", p, err)
		}
	}
	if exact < n/4 || counted < n/8 {
		t.Fatalf("%d exact and %d counted windows of %d: the draw misses a form", exact, counted, n)
	}
}

// Goroutines with clocks of their own, skewed by up to half a window, hammer
// a few keys of a window table and a global window with explicit times, a
// sweeper removing what empties: whatever interleaving the scheduler picks,
// no interval of the window's length holds more than the limit at the times
// the admissions were decided (a stale clock is counted where the head
// already is, which is later: never fewer in a window).
func TestWindowConcurrent(t *testing.T) {
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	rng := rand.New(rand.NewPCG(30, 31))
	for round := range rounds {
		rule, tbl, global := concurrentWindow(rng, round, 1, 8, 40)
		limit, window := rule.Limit(), rule.Window()
		const workers, ops = 4, 3000
		base := int64(time.Hour)
		adm := make([][]reference.Admission, workers)
		admGlobal := make([][]reference.Admission, workers)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var clocks [workers]atomic.Int64
		for g := range clocks {
			clocks[g].Store(base)
		}
		go func() { // the sweeper, at the slowest worker's clock
			for {
				select {
				case <-stop:
					return
				default:
				}
				now := int64(math.MaxInt64)
				for g := range clocks {
					now = min(now, clocks[g].Load())
				}
				tbl.SweepAt(atomicbucket.Time(now))
				runtime.Gosched()
			}
		}()
		for g := range workers {
			wg.Add(1)
			go func(g int, seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(g)))
				now := base + rng.Int64N(int64(window)/2+1)
				for range ops {
					now += rng.Int64N(int64(window)/(limit+1) + 1)
					clocks[g].Store(now)
					cost := 1 + rng.Int64N(max(limit/3, 1))
					key := []string{"x", "y"}[rng.IntN(2)]
					if tbl.AllowNAt(key, atomicbucket.Time(now), cost).Allowed {
						adm[g] = append(adm[g], reference.Admission{Key: key, At: now, Cost: cost})
					}
					if global.AllowCost(atomicbucket.Time(now), cost) {
						admGlobal[g] = append(admGlobal[g], reference.Admission{Key: "g", At: now, Cost: cost})
					}
				}
			}(g, uint64(round))
		}
		wg.Wait()
		close(stop)
		if n, m := checkRound(t, round, rule, adm, admGlobal); n == 0 || m == 0 {
			t.Fatalf("round %d: nothing admitted", round)
		}
	}
}

// TestWindowCountedShortfall measures what a counted window (limit above
// atomicwindow.RingMax: counts per sixteenth of the window) admits beside the exact
// sliding log, over 60 windows of demand. A unit counts until its
// sub-window's end plus the window, so capacity comes back up to W/16 late:
// a client that asks for more than the limit gets about 16/17 of what the
// exact window gives it (N per W + W/16 instead of N per W), whether it takes
// the limit at once whenever it can or asks at twice the limit's pace; a
// client within N per W + W/16 gets everything it asks. Never more than N in
// any W: every admission stream passes CheckWindow.
func TestWindowCountedShortfall(t *testing.T) {
	const limit = 160
	window := 16 * time.Second
	rule := atomicwindow.MustRule(limit, window)
	if rule.Exact() {
		t.Fatal("160 a window should be counted")
	}
	for _, c := range []struct {
		name        string
		cost        int64
		step        time.Duration // between requests
		least, most float64       // counted/exact admitted
	}{
		{"bursts", limit, 10 * time.Millisecond, 16.0/17 - 0.005, 16.0/17 + 0.02},
		{"twice the pace", 1, window / limit / 2, 16.0/17 - 0.005, 16.0/17 + 0.02},
		{"within W + W/16", 1, (window + window/16) / limit, 1, 1},
	} {
		counted := atomicwindow.NewWindow(rule)
		exact := reference.NewWindow(reference.WindowParams{Limit: limit, Window: int64(window)})
		var got, want int64
		var adm []reference.Admission
		start := int64(time.Hour) // a sub-window's start
		for now := start; now < start+60*int64(window); now += int64(c.step) {
			if counted.AllowNAt(atomicbucket.Time(now), c.cost).Allowed {
				got += c.cost
				adm = append(adm, reference.Admission{Key: "g", At: now, Cost: c.cost})
			}
			if exact.AllowN("g", now, c.cost).Allowed {
				want += c.cost
			}
		}
		if err := reference.CheckWindow(limit, int64(window), adm); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ratio := float64(got) / float64(want)
		if ratio < c.least || ratio > c.most {
			t.Errorf("%s: the counted window admitted %d, the exact one %d: %.4f of it, want %.4f to %.4f", c.name, got, want, ratio, c.least, c.most)
		}
		t.Logf("%s: counted %d, exact %d: %.4f", c.name, got, want, ratio)
	}
}

// TestWindowNumbersChange: windows whose numbers change at run time, keyed
// and global, exact and counted both ways, at random times of random
// traffic, and once by hand. What a window held is carried into the new
// numbers, so in any interval of the shorter window at most the larger
// limit is admitted (over every change of a run: the least window, the
// largest limit); a change of the limit alone keeps what the window holds.
// Key a is given numbers of its own, and has them taken away, as it goes.
func TestWindowNumbersChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 32))
	numbers := func() atomicbucket.Numbers { return windowNumbers(rng, 200) }
	for run := range 300 {
		first := numbers()
		rule := atomicwindow.MustRule(first.Tokens, first.Period)
		tbl := atomicwindow.NewTable[string](rule, atomicbucket.TableOptions{})
		global := atomicwindow.NewWindow(rule)
		most, least := first.Tokens, first.Period
		var adm, admGlobal []reference.Admission
		now := int64(time.Hour)
		for step := range 400 {
			if rng.IntN(60) == 0 && rng.IntN(3) == 0 {
				// Key a's own numbers, given or taken away: a customer's quota.
				if rng.IntN(3) == 0 {
					tbl.ClearKeyNumbersAt(atomicbucket.Time(now), "a")
				} else {
					n := numbers()
					if err := tbl.SetKeyNumbersAt(atomicbucket.Time(now), "a", n, 1); err != nil {
						t.Fatal(err)
					}
					most, least = max(most, n.Tokens), min(least, n.Period)
					if got, o := tbl.KeyNumbersFor("a"); got != n || o != atomicbucket.FromKeyOverride {
						t.Fatalf("run %d step %d: KeyNumbersFor(a) %v %v, want %v, a key's own", run, step, got, o, n)
					}
				}
			} else if rng.IntN(60) == 0 {
				n := numbers()
				if rng.IntN(4) == 0 {
					n = first
					tbl.ClearNumbers()
					global.ClearNumbers()
				} else if err := tbl.SetNumbers(n, 1); err != nil {
					t.Fatal(err)
				} else if err := global.SetNumbers(n, 1); err != nil {
					t.Fatal(err)
				}
				most, least = max(most, n.Tokens), min(least, n.Period)
				if got, _ := tbl.NumbersFor(); got != n {
					t.Fatalf("run %d step %d: NumbersFor %v, want %v", run, step, got, n)
				}
			}
			limit := tbl.Rule().Limit()
			now += rng.Int64N(int64(tbl.Rule().Window())/limit*2 + 1)
			key := []string{"a", "b"}[rng.IntN(2)]
			cost := 1 + rng.Int64N(max(limit/3, 1))
			if tbl.AllowNAt(key, atomicbucket.Time(now), cost).Allowed {
				adm = append(adm, reference.Admission{Key: key, At: now, Cost: cost})
			}
			if global.AllowCost(atomicbucket.Time(now), cost) {
				admGlobal = append(admGlobal, reference.Admission{Key: "g", At: now, Cost: cost})
			}
		}
		if err := reference.CheckWindow(most, int64(least), adm); err != nil {
			t.Fatalf("run %d, keyed (limits up to %d, windows down to %v): %v", run, most, least, err)
		}
		if err := reference.CheckWindow(most, int64(least), admGlobal); err != nil {
			t.Fatalf("run %d, global (limits up to %d, windows down to %v): %v", run, most, least, err)
		}
	}

	// By hand: 10 in any minute, full, then 5 in any minute: the 10 stay
	// counted, so nothing passes until 6 of them have left.
	tbl := atomicwindow.NewTable[string](atomicwindow.MustRule(10, time.Minute), atomicbucket.TableOptions{})
	at := atomicbucket.Time(time.Hour)
	for i := range 10 {
		if !tbl.AllowAt("k", at+atomicbucket.Time(i)*atomicbucket.Time(time.Second)) {
			t.Fatalf("admission %d of 10 denied", i)
		}
	}
	if err := tbl.SetNumbers(atomicbucket.Numbers{Tokens: 5, Period: time.Minute, Burst: 5}, 1); err != nil {
		t.Fatal(err)
	}
	// The unit at 5 s (held at 5 s + 999 ns) is the sixth oldest: room for one when it leaves.
	if d := tbl.AllowNAt("k", at+atomicbucket.Time(20*time.Second), 1); d.Allowed || d.Remaining != 0 || d.RetryAfter != 45*time.Second+999 {
		t.Errorf("5 a minute, 10 in the window: %+v, want denied until the sixth oldest leaves, 45 s + 999 ns", d)
	}
	// Back to 10 a minute: the 10 still count, the five the ring of 5 could
	// not keep carried at their own times, so the first room comes when the
	// oldest leaves, at 60 s + 999 ns.
	tbl.ClearNumbers()
	if d := tbl.AllowNAt("k", at+atomicbucket.Time(20*time.Second), 1); d.Allowed || d.RetryAfter != 40*time.Second+999 {
		t.Errorf("back to 10 a minute, the 10 still counted: %+v, want denied until the oldest leaves, 40 s + 999 ns", d)
	}
	if err := tbl.SetNumbers(atomicbucket.Numbers{Tokens: 5, Period: time.Minute, Burst: 4}, 1); !errors.Is(err, atomicwindow.ErrNumbers) {
		t.Errorf("a burst other than the limit: %v, want atomicwindow.ErrNumbers", err)
	}
}

// TestWindowConcurrentNumbers is TestWindowConcurrent with the numbers
// changing all the while (among three, exact and counted, every 50 checks
// of one of the goroutines): every window carried at the changes, and in any interval of
// the shortest window at most the largest limit admitted.
func TestWindowConcurrentNumbers(t *testing.T) {
	sets := []atomicbucket.Numbers{
		{Tokens: 8, Period: 40 * time.Millisecond, Burst: 8},
		{Tokens: 100, Period: 80 * time.Millisecond, Burst: 100},
		{Tokens: 30, Period: 60 * time.Millisecond, Burst: 30},
	}
	rule := atomicwindow.MustRule(sets[0].Tokens, sets[0].Period)
	tbl := atomicwindow.NewTable[string](rule, atomicbucket.TableOptions{})
	global := atomicwindow.NewWindow(rule)
	const workers, ops = 4, 4000
	base := int64(time.Hour)
	adm := make([][]reference.Admission, workers)
	admGlobal := make([][]reference.Admission, workers)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(7, uint64(g)))
			now := base + rng.Int64N(int64(time.Millisecond))
			for i := range ops {
				if g == 0 && i%50 == 0 { // the numbers change while the others check
					s := sets[(i/50)%len(sets)]
					if err := tbl.SetNumbers(s, 1); err != nil {
						t.Error(err)
						return
					}
					if err := global.SetNumbers(s, 1); err != nil {
						t.Error(err)
						return
					}
				}
				now += rng.Int64N(int64(200 * time.Microsecond))
				cost := 1 + rng.Int64N(3)
				key := []string{"x", "y"}[rng.IntN(2)]
				if tbl.AllowNAt(key, atomicbucket.Time(now), cost).Allowed {
					adm[g] = append(adm[g], reference.Admission{Key: key, At: now, Cost: cost})
				}
				if global.AllowCost(atomicbucket.Time(now), cost) {
					admGlobal[g] = append(admGlobal[g], reference.Admission{Key: "g", At: now, Cost: cost})
				}
			}
		}()
	}
	wg.Wait()
	var all, allGlobal []reference.Admission
	for g := range workers {
		all, allGlobal = append(all, adm[g]...), append(allGlobal, admGlobal[g]...)
	}
	if err := reference.CheckWindow(100, int64(40*time.Millisecond), all); err != nil {
		t.Fatalf("keyed: %v", err)
	}
	if err := reference.CheckWindow(100, int64(40*time.Millisecond), allGlobal); err != nil {
		t.Fatalf("global: %v", err)
	}
}

// TestWindowAnswersAfterChanges: whatever numbers a window's rule went
// through, its answers tell the truth. Remaining is never negative (a cut
// counted window said −700); a cost of 0 is always admitted (it was denied
// in a window holding more than its new limit); a denial's RetryAfter is
// never short: at now + RetryAfter, with nothing admitted in between, the
// same request is admitted (after 1000 in any 1.6 s → 1000 in any 400 ms a
// denial said 40 ms, and the first admission came at 500 ms); and Peek's
// wait is exact: a nanosecond before it, the request is still denied.
// Exact and counted windows, keyed and global, 300 runs of 200 checks.
func TestWindowAnswersAfterChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	numbers := func() atomicbucket.Numbers { return windowNumbers(rng, 2000) }
	type checker struct {
		name  string
		allow func(now atomicbucket.Time, cost int64) atomicbucket.Decision
		peek  func(now atomicbucket.Time, cost int64) atomicbucket.Decision
		set   func(n atomicbucket.Numbers) error
		limit func() int64
	}
	for run := range 300 {
		first := numbers()
		rule := atomicwindow.MustRule(first.Tokens, first.Period)
		tbl := atomicwindow.NewTable[string](rule, atomicbucket.TableOptions{})
		global := atomicwindow.NewWindow(rule)
		for _, c := range []checker{
			{"keyed",
				func(now atomicbucket.Time, cost int64) atomicbucket.Decision { return tbl.AllowNAt("k", now, cost) },
				func(now atomicbucket.Time, cost int64) atomicbucket.Decision { return tbl.PeekAt("k", now, cost) },
				func(n atomicbucket.Numbers) error { return tbl.SetNumbers(n, 1) },
				func() int64 { return tbl.Rule().Limit() }},
			{"global", global.AllowNAt, global.PeekAt,
				func(n atomicbucket.Numbers) error { return global.SetNumbers(n, 1) },
				func() int64 { return global.Rule().Limit() }},
		} {
			now := atomicbucket.Time(time.Hour)
			for step := range 200 {
				if rng.IntN(20) == 0 {
					if err := c.set(numbers()); err != nil {
						t.Fatal(err)
					}
				}
				limit := c.limit()
				now += atomicbucket.Time(rng.Int64N(int64(50 * time.Millisecond)))
				cost := rng.Int64N(limit/2 + 2) // 0 at times
				var d atomicbucket.Decision
				if rng.IntN(4) == 0 {
					d = c.peek(now, cost)
				} else {
					d = c.allow(now, cost)
				}
				where := func() string {
					return fmt.Sprintf("run %d %s step %d, cost %d at %v (limit %d now)", run, c.name, step, cost, time.Duration(now), limit)
				}
				switch {
				case d.Remaining < 0:
					t.Errorf("%s: Remaining %d", where(), d.Remaining)
				case cost == 0 && !d.Allowed:
					t.Errorf("%s: a cost of 0 denied: %+v", where(), d)
				case !d.Allowed && d.RetryAfter != atomicbucket.Never && cost <= limit:
					if p := c.peek(now.Add(d.RetryAfter), cost); !p.Allowed {
						t.Errorf("%s: denied with RetryAfter %v, and still denied then: %+v", where(), d.RetryAfter, p)
					}
					if p := c.peek(now.Add(d.RetryAfter-1), cost); d.RetryAfter > 0 && p.Allowed {
						t.Errorf("%s: denied with RetryAfter %v, but admitted a nanosecond sooner", where(), d.RetryAfter)
					}
				}
				if t.Failed() {
					return
				}
			}
		}
	}
}

// TestWindowReset: a reset gives a customer's quota back. At explicit times,
// exact and counted, keyed and global: a full window is empty after
// ResetAt(t) (its whole limit admitted again at t), what a check admitted at
// a later explicit time stays counted, a key reset with nothing admitted
// since is forgotten (Len), and a reset of a key without a window reports
// false. Then four goroutines check while a fifth resets, under -race.
func TestWindowReset(t *testing.T) {
	for _, limit := range []int64{5, 100} {
		rule := atomicwindow.MustRule(limit, 16*time.Second)
		tbl := atomicwindow.NewTable[string](rule, atomicbucket.TableOptions{})
		global := atomicwindow.NewWindow(rule)
		at := atomicbucket.Time(time.Hour)
		fill := func(what string, allow func(atomicbucket.Time, int64) bool, when atomicbucket.Time, want int64) {
			t.Helper()
			got := int64(0)
			for range limit + 3 {
				if allow(when, 1) {
					got++
				}
			}
			if got != want {
				t.Errorf("limit %d, %s at %v: %d admitted, want %d", limit, what, time.Duration(when), got, want)
			}
		}
		keyed := func(when atomicbucket.Time, cost int64) bool { return tbl.AllowNAt("k", when, cost).Allowed }
		glob := func(when atomicbucket.Time, cost int64) bool { return global.AllowNAt(when, cost).Allowed }
		for _, c := range []struct {
			name  string
			allow func(atomicbucket.Time, int64) bool
			reset func(atomicbucket.Time)
		}{
			{"keyed", keyed, func(when atomicbucket.Time) { tbl.ResetAt("k", when) }},
			{"global", glob, global.ResetAt},
		} {
			fill(c.name+" full", c.allow, at, limit)
			c.reset(at)
			fill(c.name+" after a reset", c.allow, at, limit)
			// Two at a later explicit time, then a reset at the earlier one:
			// the two stay, the rest is given back.
			c.reset(at)
			if !c.allow(at+atomicbucket.Time(time.Second), 2) {
				t.Fatalf("limit %d, %s: 2 at t+1s denied after a reset", limit, c.name)
			}
			c.reset(at)
			fill(c.name+" after a reset before the 2", c.allow, at+atomicbucket.Time(2*time.Second), limit-2)
		}
		tbl.ResetAt("k", at+atomicbucket.Time(time.Hour))
		if n := tbl.Len(); n != 0 {
			t.Errorf("limit %d: %d keys after resetting the only one, want 0", limit, n)
		}
		if tbl.ResetAt("nobody", at) {
			t.Errorf("limit %d: a reset of a key without a window reported one", limit)
		}
	}

	// Concurrent checks and resets: nothing lost, nothing panics.
	tbl := atomicwindow.NewTable[int](atomicwindow.MustRule(3, time.Hour), atomicbucket.TableOptions{})
	global := atomicwindow.NewWindow(atomicwindow.MustRule(70, time.Hour))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tbl.Allow((g + i) % 8)
				global.Allow()
			}
		}()
	}
	for i := range 2000 {
		tbl.Reset(i % 8)
		if i%10 == 0 {
			global.Reset()
		}
	}
	close(stop)
	wg.Wait()
	if n := tbl.Len(); n < 0 || n > 8 {
		t.Errorf("%d keys after concurrent checks and resets of 8, want 0 to 8", n)
	}
}

// windowNumbers are random window numbers: half exact (a limit of 1 to 64,
// a window of 1 ms to 2 s), half counted (65 to 64+counted, a window of
// 40 ms to 2 s in steps of 40 ms: whole microseconds a sixteenth).
func windowNumbers(rng *rand.Rand, counted int64) atomicbucket.Numbers {
	if rng.IntN(2) == 0 {
		n := 1 + rng.Int64N(64)
		return atomicbucket.Numbers{Tokens: n, Period: time.Duration(1+rng.Int64N(2000)) * time.Millisecond, Burst: n}
	}
	n := 65 + rng.Int64N(counted)
	return atomicbucket.Numbers{Tokens: n, Period: time.Duration(1+rng.Int64N(50)) * 40 * time.Millisecond, Burst: n}
}

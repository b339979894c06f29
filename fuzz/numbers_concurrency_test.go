package fuzz

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
)

// Numbers changed while checks run: histories of concurrent checks on a
// table (with a sweeper) and on a bucket, with a goroutine changing the
// numbers — for everyone, for one key, back — at the same times, must be
// linearizable against the reference that converts at each change.

// numbersIn is one operation of such a history.
type numbersIn struct {
	kind  byte // numbersAllowN, numbersPeek, numbersRefund, numbersSetPlan, numbersSetKey, numbersClearKey
	key   string
	t     int64
	cost  int64
	n     atomicbucket.Numbers
	carry atomicbucket.Carry
}

// numbersModel checks one key's operations (and every change for everyone)
// against a changing reference.
func numbersModel(rule *atomicbucket.Rule, single bool) porcupine.Model {
	start := int64(time.Hour)
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			var everyone []porcupine.Operation
			for _, op := range h {
				in := op.Input.(numbersIn)
				if in.kind == numbersSetPlan {
					everyone = append(everyone, op)
					continue
				}
				if _, ok := byKey[in.key]; !ok {
					keys = append(keys, in.key)
				}
				byKey[in.key] = append(byKey[in.key], op)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, append(append([]porcupine.Operation(nil), everyone...), byKey[k]...))
			}
			return out
		},
		Init: func() any { return newChanging(rule, single, start) },
		Step: func(state, input, output any) (bool, any) {
			in, out := input.(numbersIn), output.(reference.Decision)
			c := state.(*changing).clone()
			switch in.kind {
			case numbersAllowN:
				return c.of(in.key).AllowN(in.key, in.t, in.cost) == out, c
			case numbersPeek:
				return c.of(in.key).Peek(in.key, in.t, in.cost) == out, c
			case numbersRefund:
				c.of(in.key).Refund(in.key, in.t, in.cost)
			case numbersSetPlan:
				c.setPlan(c.limitWith(in.n), in.t, in.carry)
			case numbersSetKey:
				c.setKey(in.key, c.limitWith(in.n), in.t, in.carry)
			case numbersClearKey:
				c.clearKey(in.key, in.t, in.carry)
			}
			return true, c
		},
		Equal: func(a, b any) bool { return a.(*changing).equal(b.(*changing)) },
		DescribeOperation: func(input, output any) string {
			in := input.(numbersIn)
			return fmt.Sprintf("%d key=%q t=%d cost=%d n=%v carry=%v -> %s", in.kind, in.key, in.t, in.cost, in.n, in.carry, describe(output.(reference.Decision)))
		},
	}
}

// equal reports whether two changing references hold the same numbers and buckets.
func (c *changing) equal(d *changing) bool {
	if c.limit[c.plan] != d.limit[d.plan] || !c.plan.Equal(d.plan) || len(c.keys) != len(d.keys) || !slices.Equal(c.envs, d.envs) {
		return false
	}
	for k, r := range c.keys {
		o, ok := d.keys[k]
		if !ok || c.limit[r] != d.limit[o] || !r.Equal(o) {
			return false
		}
	}
	return true
}

// clone is a deep copy of the changing reference.
func (c *changing) clone() *changing {
	d := &changing{rule: c.rule, keys: map[string]*reference.Reference{},
		limit: map[*reference.Reference]atomicbucket.Limit{}, single: c.single, envs: slices.Clone(c.envs)}
	d.plan = c.plan.Clone()
	d.limit[d.plan] = c.limit[c.plan]
	for k, r := range c.keys {
		d.keys[k] = r.Clone()
		d.limit[d.keys[k]] = c.limit[r]
	}
	return d
}

func TestLinearizableWithChanges(t *testing.T) {
	rounds := 80
	if testing.Short() {
		rounds = 25
	}
	// Exact numbers for the changes: a token per 10ms, 5ms, 20ms; bursts 2 to 5.
	choices := []atomicbucket.Numbers{
		{Tokens: 100, Period: time.Second, Burst: 3},
		{Tokens: 200, Period: time.Second, Burst: 5},
		{Tokens: 50, Period: time.Second, Burst: 2},
		{Tokens: 100, Period: time.Second, Burst: 4},
	}
	for _, c := range []struct {
		name   string
		limit  atomicbucket.Limit
		single bool
	}{
		{"table/greedy", atomicbucket.Limit{Tokens: 100, Period: time.Second, Burst: 3}, false},
		{"table/interval", atomicbucket.Limit{Tokens: 2, Period: 20 * time.Millisecond, Burst: 3, Refill: atomicbucket.Interval}, false},
		{"bucket/greedy", atomicbucket.Limit{Tokens: 100, Period: time.Second, Burst: 3}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rule := atomicbucket.MustRule(c.limit)
			keys := []string{"a", "b", "c"}
			var tb *atomicbucket.Table[string]
			var bk *atomicbucket.Bucket
			var target numbersTarget
			if c.single {
				keys = []string{""}
				bk = atomicbucket.NewBucketAt(rule, atomicbucket.Time(time.Hour))
				target = bucketTarget{bk}
			} else {
				tb = atomicbucket.NewTable[string](rule, atomicbucket.TableOptions{})
				target = tableTarget{tb}
			}
			pick := func(r *rand.Rand) atomicbucket.Numbers {
				n := choices[r.IntN(len(choices))]
				if c.limit.Refill == atomicbucket.Interval {
					n.Tokens, n.Period = 1+int64(r.IntN(3)), c.limit.Period
				}
				return n
			}
			h, changes := runChangeRounds(target, keys, c.single, rounds, pick, tb)
			if changes < rounds/3 {
				t.Fatalf("only %d changes in %d rounds", changes, rounds)
			}
			res := porcupine.CheckOperationsTimeout(numbersModel(&rule, c.single), h, 60*time.Second)
			if res != porcupine.Ok {
				m := numbersModel(&rule, c.single)
				for _, part := range m.Partition(h) {
					if porcupine.CheckOperations(m, part) {
						continue
					}
					sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
					// The shortest failing prefix of whole rounds (rounds are barriers).
					end := len(part)
					for n := range part {
						if n+1 < len(part) && part[n+1].Input.(numbersIn).t == part[n].Input.(numbersIn).t {
							continue
						}
						if !porcupine.CheckOperations(m, part[:n+1]) {
							end = n + 1
							break
						}
					}
					part = part[:end]
					for _, op := range part[max(0, end-40):] {
						t.Logf("[%d,%d] c%d %s", op.Call, op.Return, op.ClientId, m.DescribeOperation(op.Input, op.Output))
					}
					break
				}
				t.Fatalf("history of %d operations with %d changes is %v against the reference", len(h), changes, res)
			}
			t.Logf("%d operations, %d of them changes: linearizable", len(h), changes)
		})
	}
}

// runChangeRounds runs rounds of concurrent checks (three goroutines) and
// one goroutine changing numbers, all at the round's time; between rounds
// time advances. A table is swept as the rounds go.
func runChangeRounds(target numbersTarget, keys []string, single bool, rounds int, pick func(*rand.Rand) atomicbucket.Numbers, tb *atomicbucket.Table[string]) ([]porcupine.Operation, int) {
	var (
		clock   atomic.Int64
		mu      sync.Mutex
		history []porcupine.Operation
		changes int
	)
	now := int64(time.Hour)
	rng := rand.New(rand.NewPCG(3, uint64(rounds)))
	record := func(local []porcupine.Operation) {
		mu.Lock()
		history = append(history, local...)
		mu.Unlock()
	}
	for range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		t := now
		for w := range 3 {
			seed := rng.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r := rand.New(rand.NewPCG(seed, 5))
				var local []porcupine.Operation
				for range 5 {
					in := numbersIn{kind: []byte{numbersAllowN, numbersAllowN, numbersPeek, numbersRefund}[r.IntN(4)],
						key: keys[r.IntN(len(keys))], t: t, cost: int64(1 + r.IntN(2))}
					call := clock.Add(1)
					var out reference.Decision
					switch in.kind {
					case numbersAllowN:
						out = target.AllowNAt(in.key, atomicbucket.Time(t), in.cost)
					case numbersPeek:
						out = target.PeekAt(in.key, atomicbucket.Time(t), in.cost)
					case numbersRefund:
						target.RefundAt(in.key, atomicbucket.Time(t), in.cost)
					}
					local = append(local, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: clock.Add(1)})
				}
				record(local)
			}()
		}
		seed := rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := rand.New(rand.NewPCG(seed, 9))
			in := numbersIn{key: keys[r.IntN(len(keys))], t: t, carry: atomicbucket.Carry(r.IntN(3)), n: pick(r)}
			in.kind = []byte{numbersSetPlan, numbersSetKey, numbersClearKey}[r.IntN(3)]
			if single {
				in.kind = numbersSetPlan
			}
			call := clock.Add(1)
			switch in.kind {
			case numbersSetPlan:
				_ = target.SetNumbersAt(atomicbucket.Time(t), in.n, in.carry)
			case numbersSetKey:
				_ = target.SetKeyNumbersAt(atomicbucket.Time(t), in.key, in.n, in.carry)
			case numbersClearKey:
				target.ClearKeyNumbersAt(atomicbucket.Time(t), in.key, in.carry)
			}
			record([]porcupine.Operation{{ClientId: 3, Input: in, Call: call, Output: reference.Decision{}, Return: clock.Add(1)}})
			mu.Lock()
			changes++
			mu.Unlock()
		}()
		if tb != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tb.SweepAt(atomicbucket.Time(t))
			}()
		}
		close(start)
		wg.Wait()
		if rng.IntN(4) == 0 {
			now += int64(atomicbucket.SweepGrace) + int64(rng.IntN(int(30*time.Millisecond)))
		} else {
			now += int64(rng.IntN(int(15 * time.Millisecond)))
		}
	}
	return history, changes
}

// TestRealTimeChangesNeverMint changes numbers while checks run at real time,
// as a service does: every check reads the clock, and so does the changer,
// which then stalls before applying its change (as a goroutine descheduled
// inside ApplyNumbers does), so checks and changes land out of the order of
// their stamps both ways. The admissions, taken in the order of their stamps,
// must be admissions of a bucket with the largest numbers all along (the
// envelope): none over what any numbers allowed at its time.
func TestRealTimeChangesNeverMint(t *testing.T) {
	start := atomicbucket.Numbers{Tokens: 2000, Period: time.Second, Burst: 8}
	pool := []atomicbucket.Numbers{
		{Tokens: 200, Period: time.Second, Burst: 8},
		{Tokens: 5000, Period: time.Second, Burst: 6},
		{Tokens: 500, Period: time.Second, Burst: 3},
		start,
	}
	env := atomicbucket.Limit{Tokens: 5000, Period: time.Second, Burst: 8}
	runs := 6
	if testing.Short() {
		runs = 2
	}
	for _, single := range []bool{false, true} {
		for run := range runs {
			name := fmt.Sprintf("table/%d", run)
			if single {
				name = fmt.Sprintf("bucket/%d", run)
			}
			t.Run(name, func(t *testing.T) {
				realTimeTrace(t, single, uint64(run), start, pool, env)
			})
		}
	}
}

func realTimeTrace(t *testing.T, single bool, seed uint64, start atomicbucket.Numbers, pool []atomicbucket.Numbers, env atomicbucket.Limit) {
	rule := atomicbucket.MustRule(atomicbucket.Limit{Tokens: start.Tokens, Period: start.Period, Burst: start.Burst})
	keys := []string{"a", "b"}
	var target numbersTarget
	if single {
		keys = []string{""}
		target = bucketTarget{atomicbucket.NewBucketAt(rule, atomicbucket.Now())}
	} else {
		target = tableTarget{atomicbucket.NewTable[string](rule, atomicbucket.TableOptions{})}
	}
	type admission struct {
		at   atomicbucket.Time
		cost int64
	}
	var (
		mu    sync.Mutex
		taken = map[string][]admission{}
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			var local []struct {
				key string
				admission
			}
			for !stop.Load() {
				key, cost := keys[r.IntN(len(keys))], int64(1+r.IntN(3))
				now := atomicbucket.Now()
				if r.IntN(8) == 0 {
					time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond) // descheduled after reading the clock
				}
				if target.AllowNAt(key, now, cost).Allowed {
					local = append(local, struct {
						key string
						admission
					}{key, admission{now, cost}})
				}
			}
			mu.Lock()
			for _, a := range local {
				taken[a.key] = append(taken[a.key], a.admission)
			}
			mu.Unlock()
		}()
	}
	r := rand.New(rand.NewPCG(seed, 99))
	deadline := time.Now().Add(150 * time.Millisecond)
	for changes := 0; time.Now().Before(deadline); changes++ {
		at := atomicbucket.Now()
		time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond) // the changer stalls after reading the clock
		n, key := pool[r.IntN(len(pool))], keys[r.IntN(len(keys))]
		switch k := r.IntN(4); {
		case single || k < 2:
			_ = target.SetNumbersAt(at, n, atomicbucket.CarryAsIs)
		case k == 2:
			// A key's own numbers stay within the rule's: above them they
			// are a raise, which gives the new burst as to a new key.
			n.Tokens, n.Burst = min(n.Tokens, start.Tokens), min(n.Burst, start.Burst)
			_ = target.SetKeyNumbersAt(at, key, n, atomicbucket.CarryAsIs)
		default:
			target.ClearKeyNumbersAt(at, key, atomicbucket.CarryAsIs)
		}
	}
	stop.Store(true)
	wg.Wait()
	admitted := 0
	for key, as := range taken {
		slices.SortStableFunc(as, func(a, b admission) int { return cmp.Compare(a.at, b.at) })
		twin := atomicbucket.NewBucketAt(atomicbucket.MustRule(env), as[0].at)
		for _, a := range as {
			if !twin.AllowNAt(a.at, a.cost).Allowed {
				t.Fatalf("key %q: %d admitted at %v, over what a bucket with the largest numbers all along admits (admissions in stamp order, %d before it)", key, a.cost, time.Duration(a.at), admitted)
			}
			admitted++
		}
	}
	if admitted < 20 {
		t.Fatalf("only %d admissions: the trace tested little", admitted)
	}
}

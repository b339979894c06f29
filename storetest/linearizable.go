package storetest

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/limitgen/limitgen/atomicbucket"
)

// gcraModel is a token bucket as a porcupine model: state is each bucket's
// TAT (ns); an input is a check at an explicit time of some buckets (one, or
// a tier of two, all or nothing), an output the decision Redis gave.
type gcraModel struct{ emit, tau [2]int64 }

type linInput struct {
	t       int64 // ns
	buckets []int // 0, or 0 then 1
	cost    int64
}

type linOutput struct {
	allowed   bool
	index     int
	remaining int64
}

func (m gcraModel) step(state, in, out any) (bool, any) {
	tat := state.([2]int64)
	i, o := in.(linInput), out.(linOutput)
	var after [2]int64
	best, bestLeft := -1, int64(0)
	for k, b := range i.buckets {
		ahead := max(tat[b]-i.t, 0)
		if ahead+i.cost*m.emit[b] > m.tau[b] {
			want := linOutput{false, k, max((m.tau[b]-ahead)/m.emit[b], 0)}
			return o == want, tat
		}
		after[b] = i.t + ahead + i.cost*m.emit[b]
		if left := (m.tau[b] - ahead - i.cost*m.emit[b]) / m.emit[b]; best < 0 || left < bestLeft {
			best, bestLeft = k, left
		}
	}
	next := tat
	for _, b := range i.buckets {
		next[b] = after[b]
	}
	return o == linOutput{true, best, bestLeft}, next
}

// Histories: eight clients with their own connections (client(c) returns
// client c's store) check one key, and a tier of it and a second key, at
// explicit times drawn from a shared clock (so calls overlap and their times
// interleave), in 6 rounds of 200 operations: every history porcupine must
// accept as linearizable against the model (each store call atomic, its
// decision the GCRA's), and refuse the same history with one decision
// flipped.
func Histories(t *testing.T, client func(c int) Store) {
	base := int64(1_790_000_000) * 1e9
	const clients = 8
	for round := range 6 {
		st0 := client(clients)
		user, _, err := st0.Rule("lin"+strconv.Itoa(round), atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 8})
		if err != nil {
			t.Fatal(err)
		}
		global, _, err := st0.Rule("lin-global"+strconv.Itoa(round), atomicbucket.Limit{Tokens: 25, Period: time.Second, Burst: 12})
		if err != nil {
			t.Fatal(err)
		}
		model := gcraModel{emit: [2]int64{1e8, 4e7}, tau: [2]int64{8e8, 12 * 4e7}}
		var clock atomic.Int64 // µs past base
		var mu sync.Mutex
		var history []porcupine.Operation
		start := time.Now()
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := client(c)
				rng := rand.New(rand.NewPCG(uint64(round), uint64(c)))
				for range 25 {
					us := clock.Add(rng.Int64N(60_000)) // up to 60 ms a step
					tns := base + us*1000
					sec, usec := tns/1e9, tns%1e9/1000
					in := linInput{t: tns, buckets: []int{0}, cost: 1 + rng.Int64N(3)}
					steps := []Part{{user, "k", in.cost}}
					if rng.IntN(2) == 0 {
						in.buckets = []int{0, 1}
						steps = append(steps, Part{global, "g", in.cost})
					}
					call := int64(time.Since(start))
					d, index, err := st.Check(steps, true, sec, usec)
					ret := int64(time.Since(start))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call,
						Output: linOutput{d.Allowed, index, d.Remaining}, Return: ret})
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		m := porcupine.Model{Init: func() any { return [2]int64{} }, Step: model.step}
		if res := porcupine.CheckOperationsTimeout(m, history, 30*time.Second); res != porcupine.Ok {
			t.Fatalf("round %d: %d operations: %v, want linearizable", round, len(history), res)
		}
		allowed := 0
		for _, op := range history {
			if op.Output.(linOutput).allowed {
				allowed++
			}
		}
		if allowed == 0 || allowed == len(history) {
			t.Fatalf("round %d: %d of %d allowed: the history decides nothing", round, allowed, len(history))
		}
		flipped := append([]porcupine.Operation(nil), history...)
		o := flipped[len(flipped)/2].Output.(linOutput)
		o.allowed = !o.allowed
		flipped[len(flipped)/2].Output = o
		if res := porcupine.CheckOperationsTimeout(m, flipped, 30*time.Second); res == porcupine.Ok {
			t.Fatalf("round %d: a history with a decision flipped passes as linearizable", round)
		}
		t.Logf("round %d: %d operations (%d allowed) linearizable", round, len(history), allowed)
	}
}

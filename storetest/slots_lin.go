package storetest

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/shared"
)

// slotsModel is a store's in-flight slots of one key as a porcupine model:
// state is the slots the store keeps (token and expiry, µs, released or
// not yet removed), canonically written; an acquisition at an explicit time
// removes every slot whose expiry has come (counting them) and takes one if
// fewer than the limit are left; a release removes its token's slot, held
// (1) or past its expiry (2), or finds none (0).
type slotsModel struct{ limit, hold int64 }

type slotsInput struct {
	release bool
	t       int64 // µs
	token   uint64
}

type slotsOutput struct {
	allowed       bool
	held, expired int64
	release       shared.SlotRelease
}

type heldSlot struct {
	token  uint64
	expiry int64
}

func slotsState(s []heldSlot) string {
	var b strings.Builder
	for _, h := range s {
		fmt.Fprintf(&b, "%d:%d,", h.token, h.expiry)
	}
	return b.String()
}

func parseSlots(state string) []heldSlot {
	var s []heldSlot
	for _, f := range strings.Split(strings.TrimSuffix(state, ","), ",") {
		if f == "" {
			continue
		}
		var h heldSlot
		fmt.Sscanf(f, "%d:%d", &h.token, &h.expiry)
		s = append(s, h)
	}
	return s
}

func (m slotsModel) step(state, in, out any) (bool, any) {
	held := parseSlots(state.(string))
	i, o := in.(slotsInput), out.(slotsOutput)
	if i.release {
		for k, h := range held {
			if h.token == i.token {
				want := shared.SlotExpired
				if h.expiry > i.t {
					want = shared.SlotReleased
				}
				return o == slotsOutput{release: want}, slotsState(slices.Delete(held, k, k+1))
			}
		}
		return o == slotsOutput{release: shared.SlotGone}, state
	}
	live := held[:0:0]
	for _, h := range held {
		if h.expiry > i.t {
			live = append(live, h)
		}
	}
	want := slotsOutput{held: int64(len(live)), expired: int64(len(held) - len(live))}
	if want.held < m.limit {
		want.allowed = true
		live = append(live, heldSlot{i.token, i.t + m.hold})
		slices.SortFunc(live, func(a, b heldSlot) int { return cmp.Compare(a.token, b.token) })
	}
	return o == want, slotsState(live)
}

// SlotsLinearizable: six clients, each with a checker of its own (open is
// called once a client, with the client's time), acquire and release one
// key's slots (3, held 40 ms) at explicit times drawn from a shared clock,
// so that calls overlap and their times interleave (expiries included: a
// slot can expire between its acquisition and its release, and a later
// acquisition remove it), in 5 rounds: every history porcupine must accept
// as linearizable against the model (each store call atomic, as the model
// decides it), and refuse the same history with one answer changed.
func SlotsLinearizable(t *testing.T, open OpenSlots) {
	const clients, limit = 6, 3
	hold := 40 * time.Millisecond
	base := time.Unix(1_800_000_000, 0)
	ctx := context.Background()
	for round := range 5 {
		name := fmt.Sprintf("lin%d", round)
		var clock atomic.Int64 // µs past base
		var tokens atomic.Uint64
		var mu sync.Mutex
		var history []porcupine.Operation
		start := time.Now()
		var wg sync.WaitGroup
		for c := range clients {
			var now atomic.Int64 // this client's call's time, µs past base
			checker := open(t, name, atomicslot.MustRule(limit, hold), func() time.Time { return base.Add(time.Duration(now.Load()) * time.Microsecond) })
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(c)))
				var mine []uint64
				for range 30 {
					us := clock.Add(rng.Int64N(8_000)) // up to 8 ms a step
					now.Store(us)
					in := slotsInput{t: base.UnixMicro() + us}
					var out slotsOutput
					call := int64(time.Since(start))
					var err error
					if len(mine) > 0 && rng.IntN(5) < 2 {
						k := rng.IntN(len(mine))
						in.release, in.token = true, mine[k]
						mine = slices.Delete(mine, k, k+1)
						out.release, err = checker.Release(ctx, "k", in.token)
					} else {
						in.token = tokens.Add(1)
						var d atomicbucket.Decision
						d, out.expired, err = checker.Acquire(ctx, "k", in.token)
						out.allowed = d.Allowed
						out.held = limit - d.Remaining - 1
						if !d.Allowed {
							out.held = limit // a denial: every slot held
						} else {
							mine = append(mine, in.token)
						}
					}
					ret := int64(time.Since(start))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		m := porcupine.Model{Init: func() any { return "" }, Step: slotsModel{limit, hold.Microseconds()}.step}
		if res := porcupine.CheckOperationsTimeout(m, history, 30*time.Second); res != porcupine.Ok {
			t.Fatalf("round %d: %d operations: %v, want linearizable", round, len(history), res)
		}
		allowed, denied, expired := 0, 0, int64(0)
		for _, op := range history {
			o := op.Output.(slotsOutput)
			switch {
			case op.Input.(slotsInput).release:
			case o.allowed:
				allowed++
			default:
				denied++
			}
			expired += o.expired
		}
		if allowed == 0 || denied == 0 || expired == 0 {
			t.Fatalf("round %d: %d allowed, %d denied, %d expired: the history does not reach every case", round, allowed, denied, expired)
		}
		changed := append([]porcupine.Operation(nil), history...)
		for k := range changed {
			if in := changed[k].Input.(slotsInput); !in.release {
				o := changed[k].Output.(slotsOutput)
				o.allowed = !o.allowed
				changed[k].Output = o
				break
			}
		}
		if res := porcupine.CheckOperationsTimeout(m, changed, 30*time.Second); res == porcupine.Ok {
			t.Fatalf("round %d: a history with an acquisition's answer flipped passes as linearizable", round)
		}
		t.Logf("round %d: %d operations (%d acquired, %d denied, %d found expired) linearizable", round, len(history), allowed, denied, expired)
	}
}

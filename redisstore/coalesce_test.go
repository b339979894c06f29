package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/shared"
)

// Coalesced checks from 64 goroutines: one key's burst of 50 is admitted
// exactly (checks of one key in one call see each other's takes), other keys
// are decided on their own, and far fewer script calls are made than checks.
func TestCoalescedChecks(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(context.Background(), srv.Client(t), Options{Coalesce: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()
	r, _ := NewRule("coalesced", atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 50})
	iv, _ := NewRule("coalescedInterval", atomicbucket.Limit{Tokens: 10, Period: time.Hour, Burst: 30, Refill: atomicbucket.Interval})
	var admitted [2]atomic.Int64
	var intervalAdmitted atomic.Int64
	var wg sync.WaitGroup
	monitor := srv.Client(t)
	before := redistest.ScriptCalls(t, monitor)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				k := g % 2
				d, err := st.AllowN(ctx, r, []string{"a", "b"}[k], 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
				if g%4 == 0 { // an interval rule in the same batches
					d, err := st.AllowN(ctx, iv, "i", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						intervalAdmitted.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := intervalAdmitted.Load(); got != 30 {
		t.Errorf("the interval rule admitted %d of 320; its burst is 30", got)
	}
	if admitted[0].Load() != 50 || admitted[1].Load() != 50 {
		t.Errorf("admitted %d and %d of 640 each; the burst is 50", admitted[0].Load(), admitted[1].Load())
	}
	calls := redistest.ScriptCalls(t, monitor) - before
	t.Logf("1,600 coalesced checks in %d script calls", calls)
	if calls >= 800 {
		t.Errorf("1,600 checks took %d script calls: not coalesced", calls)
	}
	if d, err := st.AllowN(ctx, r, "c", 51); err != nil || d.Allowed || d.RetryAfter != atomicbucket.Never {
		t.Errorf("a cost above the burst: %+v %v", d, err)
	}
	st.Close()
	if _, err := st.AllowN(ctx, r, "d", 1); err == nil {
		t.Error("a check after Close did not fail")
	}
}

// A batch of more distinct keys than Lua can unpack at once (8,000) is
// decided, each key's first check admitted: the script's short path for
// greedy batches reads its buckets in one MGET only up to a bound.
func TestCoalescedBatchOfManyKeys(t *testing.T) {
	srv := redistest.Start(t)
	b := newStore(srv.Client(t), false, Options{}).b
	r, err := NewRule("manykeys", atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	calls := make([]shared.Call, 9000)
	for i := range calls {
		calls[i] = shared.Call{Rule: r, Key: strconv.Itoa(i), Cost: 1}
	}
	calls = append(calls, shared.Call{Rule: r, Key: "0", Cost: 1}) // the first key again: denied
	got, err := b.eachAt(context.Background(), calls)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range got {
		if want := i < 9000; d.Allowed != want {
			t.Fatalf("check %d (key %s): allowed %v, want %v", i, calls[i].Key, d.Allowed, want)
		}
	}
}

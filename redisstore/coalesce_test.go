package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
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

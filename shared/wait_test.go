package shared

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// script is a Bound that answers each check with the next of its decisions
// (the last one forever), counting the checks.
type script struct {
	decisions []atomicbucket.Decision
	calls     atomic.Int64
}

func (s *script) CheckStep(ctx context.Context, step Step) verdict.Result {
	n := int(s.calls.Add(1)) - 1
	return verdict.Result{Decision: s.decisions[min(n, len(s.decisions)-1)]}
}

func (s *script) Check(ctx context.Context, steps []Step) (verdict.Result, int) {
	return s.CheckStep(ctx, steps[0]), 0
}

// Refund is never called by Wait (it checks one step at a time).
func (s *script) Refund(context.Context, []Step) error               { panic("Wait refunded") }
func (s *script) Settle(context.Context, Step, int64) (int64, error) { panic("Wait settled") }

func TestWaitChecksAgainAfterRetryAfter(t *testing.T) {
	denied := atomicbucket.Decision{RetryAfter: 20 * time.Millisecond}
	b := &script{decisions: []atomicbucket.Decision{denied, denied, {Allowed: true}}}
	start := time.Now()
	if err := Wait(context.Background(), b, Step{Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if n := b.calls.Load(); n != 3 {
		t.Errorf("%d checks; want 3 (two denials, then allowed)", n)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("returned after %v; two denials of 20 ms each should be slept out", d)
	}
}

func TestWaitGivesUp(t *testing.T) {
	b := &script{decisions: []atomicbucket.Decision{{RetryAfter: atomicbucket.Never}}}
	if err := Wait(context.Background(), b, Step{Cost: 9}); !errors.Is(err, atomicbucket.ErrCostExceedsBurst) {
		t.Errorf("a cost beyond the burst: %v", err)
	}
	b = &script{decisions: []atomicbucket.Decision{{RetryAfter: time.Hour}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := Wait(ctx, b, Step{Cost: 1}); !errors.Is(err, context.DeadlineExceeded) || b.calls.Load() != 1 {
		t.Errorf("a wait beyond the deadline: %v after %d checks; want DeadlineExceeded after 1", err, b.calls.Load())
	}
	b = &script{decisions: []atomicbucket.Decision{{RetryAfter: time.Hour}}}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	if err := Wait(ctx, b, Step{Cost: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while sleeping: %v", err)
	}
	b = &script{decisions: []atomicbucket.Decision{{Allowed: true}}}
	if err := Wait(ctx, b, Step{Cost: 1}); !errors.Is(err, context.Canceled) || b.calls.Load() != 0 {
		t.Errorf("a done context: %v after %d checks; want its error before any check", err, b.calls.Load())
	}
}

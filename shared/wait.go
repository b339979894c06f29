package shared

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Wait blocks until step is allowed on b, or ctx is done. A store takes no
// reservations, so it checks, and after a denial sleeps for the denial's
// RetryAfter and checks again: waiters are served in no fixed order, and one
// may wait longer than a reservation would have made it. It returns at once,
// with an error, when the cost can never be allowed (RetryAfter Never: it
// exceeds the burst) and when the next check would fall after ctx's deadline
// (wrapping context.DeadlineExceeded); when ctx is done while it sleeps, with
// ctx's error. A denial by the rule's failure setting (the store is down, the
// rule fails closed) is waited out like any other: its RetryAfter is a second.
func Wait(ctx context.Context, b Bound, step Step) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("shared: wait for %d tokens: %w", step.Cost, err)
		}
		res := b.CheckStep(ctx, step)
		if res.Allowed {
			return nil
		}
		if errors.Is(res.Err, ErrInvalidStep) { // a key the rule cannot have: waiting cannot help
			return fmt.Errorf("shared: wait for %d tokens: %w", step.Cost, res.Err)
		}
		if res.RetryAfter == atomicbucket.Never {
			return fmt.Errorf("shared: wait for %d tokens: %w", step.Cost, atomicbucket.ErrCostExceedsBurst)
		}
		wait := max(res.RetryAfter, time.Millisecond) // a denial says when; never spin on the store
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return fmt.Errorf("shared: wait for %d tokens: %v needed, beyond the context's deadline: %w",
				step.Cost, wait, context.DeadlineExceeded)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("shared: wait for %d tokens: %w", step.Cost, ctx.Err())
		}
	}
}

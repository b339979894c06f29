package shared

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// roundTrip is a call enter let through: its context's cancel, when it
// started (for Stats.Latency), and the time it had for the server.
type roundTrip struct {
	cancel context.CancelFunc
	start  atomicbucket.Time
	budget time.Duration
}

// enter lets a call go to the server: the store is open and (Slotted) a
// connection is free. The call's context ends the store's timeout after
// enter began (or at ctx's deadline, if sooner: a coalesced batch's is its
// earliest check's), so that a check's wait for a connection and its round
// trip together never pass the timeout; a connection had only after half of
// it is given back, so that a call has the other half at least. A call that
// cannot have a connection in time fails with ErrOverload: it never left the
// process. With own (a Backend method's call, when the backend ends its
// calls by their deadlines: OwnDeadlines) the context carries the deadline
// without a timer.
func (e *Engine) enter(ctx context.Context, own bool) (context.Context, roundTrip, error) {
	if !e.gate.Enter() {
		return nil, roundTrip{}, ErrClosed
	}
	start := atomicbucket.Now()
	at := time.Now().Add(e.guard.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(at) {
		at = d
	}
	var cctx context.Context
	cancel := context.CancelFunc(noCancel)
	if own {
		cctx = &deadline{Context: ctx, at: at}
	} else {
		cctx, cancel = context.WithDeadline(ctx, at)
	}
	if e.slots != nil {
		select {
		case e.slots <- struct{}{}:
		default:
			if err := e.waitSlot(cctx, own, start, at); err != nil {
				cancel()
				e.gate.Leave()
				return nil, roundTrip{}, err
			}
		}
	}
	return cctx, roundTrip{cancel: cancel, start: atomicbucket.Now(), budget: time.Until(at)}, nil
}

// waitSlot waits for one of the client's connections until at: a slot had
// after half the timeout is given back (ErrOverload), and so is none by at.
func (e *Engine) waitSlot(ctx context.Context, own bool, start atomicbucket.Time, at time.Time) error {
	expired := ctx.Done() // a timer's context ends at at; own's, only if the caller's does
	var timer <-chan time.Time
	if own {
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		timer = t.C
	}
	select {
	case e.slots <- struct{}{}:
		if waited := atomicbucket.Now().Sub(start); waited > e.guard.Timeout/2 {
			<-e.slots
			return fmt.Errorf("%w: waited %v for a connection, more than half the %v timeout: %w",
				ErrOverload, waited.Round(time.Microsecond), e.guard.Timeout, context.DeadlineExceeded)
		}
		return nil
	case <-expired:
		return fmt.Errorf("%w: %w", ErrOverload, cmp.Or(ctx.Err(), error(context.DeadlineExceeded)))
	case <-timer:
		return fmt.Errorf("%w: %w", ErrOverload, context.DeadlineExceeded)
	}
}

func noCancel() {}

// deadline is a call's context for a backend that ends its calls by their
// deadlines itself (OwnDeadlines): ctx with the deadline at and no timer.
// Its Done and Err are ctx's: nothing watches the deadline but the backend.
type deadline struct {
	context.Context
	at time.Time
}

func (d *deadline) Deadline() (time.Time, bool) { return d.at, true }

// ended is err, a call's error, saying so when the call's context had ended
// (its deadline, the caller's cancellation): a client that reacts to the
// context by cancelling the statement on the server reports the server's
// "canceled" error, which is the context's doing. (A deadline context's Err
// is its caller's: its backend reports its own deadline as a timeout.)
func ended(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// leave ends a call enter let through, recording how long it took, and
// returns its error as the breaker should count it: a call that timed out
// having had less than half the store's timeout for the server (the rest
// went waiting in this process: in a coalescer's queue, for a connection)
// says nothing of the server, and is ErrOverload.
func (e *Engine) leave(c roundTrip, err error) error {
	e.latency.record(atomicbucket.Now().Sub(c.start))
	c.cancel()
	if e.slots != nil {
		<-e.slots
	}
	e.gate.Leave()
	if err != nil && c.budget < e.guard.Timeout/2 && IsTimeout(err) {
		return fmt.Errorf("%w: the call had %v of the %v timeout for the server: %w", ErrOverload, c.budget.Round(time.Microsecond), e.guard.Timeout, err)
	}
	return err
}

// RoundTrip runs fn, one round trip of the store's own to its server (a
// window's check or batch), as the engine's round trips go: not after Close
// (ErrClosed), holding one of the client's connections (Slotted), within the
// store's timeout (fn's context), recorded in Stats.Latency; a call that
// could not have a connection in time, or had less than half the timeout
// for the server, fails with ErrOverload (no failure of the server's).
func (e *Engine) RoundTrip(ctx context.Context, fn func(ctx context.Context) error) error {
	cctx, rt, err := e.enter(ctx, false) // fn's client may need the timer
	if err != nil {
		return err
	}
	return e.leave(rt, ended(cctx, fn(cctx)))
}

// Guarded runs fn, a check of the store's own that the engine does not make
// itself (a shared window's), as the engine's checks go: behind the breaker
// of node, the server it reaches ("" for a store of one server), which the
// store's buckets share (ErrCircuitOpen without a call while it is open);
// not after Close (ErrClosed); counted in Stats.Calls, and in
// Stats.Degraded when it fails (the caller's failure setting then decides);
// a failure of the server's counted against its breaker, as a bucket
// check's is, and seen by Health.
func (e *Engine) Guarded(ctx context.Context, node string, fn func(ctx context.Context) error) error {
	g := e.guard
	if g.Closed() {
		g.Count(0, true)
		return ErrClosed
	}
	var ps passage
	if !g.admit(&ps, int64(atomicbucket.Now()), node) {
		g.Count(0, true)
		return ErrCircuitOpen
	}
	err := fn(ctx)
	if err != nil && !errors.Is(err, ErrOverload) && errors.Is(err, ErrLeaseWait) {
		err = fmt.Errorf("%w: %w", ErrOverload, err) // waited out another check's refill: the store was not asked
	}
	ps.done(ctx, err)
	if err != nil {
		g.Count(0, true)
	}
	return err
}

// Within runs fn, a call of the store's own to its server outside the
// engine (a sweep), as the engine's calls go: not after Close (ErrClosed),
// which waits for it, and (Slotted) holding one of the client's connections,
// waiting for it within ctx.
func (e *Engine) Within(ctx context.Context, fn func() error) error {
	if !e.gate.Enter() {
		return ErrClosed
	}
	defer e.gate.Leave()
	if e.slots != nil {
		select {
		case e.slots <- struct{}{}:
			defer func() { <-e.slots }()
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrOverload, ctx.Err())
		}
	}
	return fn()
}

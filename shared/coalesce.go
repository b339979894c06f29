package shared

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// batcher sends a store's concurrent checks together: while a call is in
// flight, the checks that arrive wait, and go together in the next call, each
// decided on its own. Under load a call then carries many decisions, and the
// store spends its time deciding instead of answering round trips (and, on a
// database, committing once a batch instead of once a check); with one caller
// at a time it costs a channel hand-off.
type batcher[C any] struct {
	timeout   time.Duration // the most a check waits in all: in the queue, then for its call
	size      int           // the most checks a call carries
	queue     chan *waitingCheck[C]
	closing   chan struct{} // closed by Close: flushers drain the queue and stop
	stopped   chan struct{} // closed when every flusher has stopped
	closeOnce sync.Once
}

// waitingCheck is one coalesced check, waiting for its call.
type waitingCheck[C any] struct {
	Check    C
	deadline time.Time    // when its wait ends, queue and call together
	takeBy   time.Time    // a flusher that takes it later answers ErrOverload: the call would have less than half the timeout
	done     chan outcome // buffered: the flusher never blocks on a caller that gave up
	state    atomic.Int32 // queued, then taken by a flusher (its call is the store's) or given up by Do
}

// A waitingCheck's states.
const (
	queued int32 = iota
	taken
	givenUp
)

type outcome struct {
	d   atomicbucket.Decision
	err error
}

// Done answers the check.
func (p *waitingCheck[C]) Done(d atomicbucket.Decision, err error) { p.done <- outcome{d, err} }

// coalesceFlushers is how many calls a batcher keeps in flight at once:
// two, so that one batch is encoded and decoded while the store runs the
// other.
const coalesceFlushers = 2

// newBatcher starts the goroutines that send batches of at most maxBatch
// checks through call; call must answer every check of its batch
// (waitingCheck.Done). A check waits at most timeout in all, in the queue and then
// for its call (Do): a batch's call gets a context that ends at the earliest
// of its checks' deadlines.
func newBatcher[C any](maxBatch int, timeout time.Duration, call func(ctx context.Context, batch []*waitingCheck[C])) *batcher[C] {
	maxBatch = max(maxBatch, 1)
	c := &batcher[C]{timeout: timeout, size: maxBatch, queue: make(chan *waitingCheck[C], 4*maxBatch), closing: make(chan struct{}), stopped: make(chan struct{})}
	var wg sync.WaitGroup
	for range coalesceFlushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]*waitingCheck[C], 0, maxBatch)
			send := func() {
				end := batch[0].deadline
				for _, p := range batch[1:] {
					if p.deadline.Before(end) {
						end = p.deadline
					}
				}
				ctx, cancel := context.WithDeadline(context.Background(), end)
				call(ctx, batch)
				cancel()
			}
			for {
				select {
				case first := <-c.queue:
					batch = c.take(batch[:0], first, time.Now())
					batch = c.fill(batch, maxBatch)
					if len(batch) > 0 {
						send()
					}
				case <-c.closing:
					// Send what is queued, then stop. A check queued after
					// this drain finds the flushers stopped (Do).
					for {
						batch = c.fill(batch[:0], maxBatch)
						if len(batch) == 0 {
							return
						}
						send()
					}
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(c.stopped)
	}()
	return c
}

// fill appends to batch what is queued, up to maxBatch checks, without waiting.
func (c *batcher[C]) fill(batch []*waitingCheck[C], maxBatch int) []*waitingCheck[C] {
	now := time.Now()
	for len(batch) < maxBatch {
		select {
		case p := <-c.queue:
			batch = c.take(batch, p, now)
		default:
			return batch
		}
	}
	return batch
}

// take appends p to batch unless its caller gave up, or it waited past its
// takeBy (at now): then it is answered ErrOverload, never sent.
func (c *batcher[C]) take(batch []*waitingCheck[C], p *waitingCheck[C], now time.Time) []*waitingCheck[C] {
	if !p.state.CompareAndSwap(queued, taken) {
		return batch // its caller gave up
	}
	if now.After(p.takeBy) {
		p.Done(atomicbucket.Decision{}, fmt.Errorf("%w: %v in the queue, more than half of the %v timeout: %w",
			ErrOverload, now.Sub(p.takeBy.Add(-c.timeout/2)).Round(time.Microsecond), c.timeout, context.DeadlineExceeded))
		return batch
	}
	return append(batch, p)
}

// ErrClosed is the error of a check on a closed store (or batcher): the
// store makes no more calls, and the rules' failure settings decide.
var ErrClosed error = &classError{"the store is closed", "closed"}

// Do queues check and waits for its call, at most the batcher's timeout
// in all (or until ctx is done, if sooner): a check no flusher took within
// half the timeout fails with ErrOverload (it never reached the store), so
// that a taken check's call has the other half at least; its call ends by
// the check's deadline, the call's context's being the earliest of its
// batch's (the call may then still run on the server, and take the check's
// tokens). After Close it fails with ErrClosed.
func (c *batcher[C]) Do(ctx context.Context, check C) (atomicbucket.Decision, error) {
	select {
	case <-c.closing:
		return atomicbucket.Decision{}, ErrClosed
	default:
	}
	now := time.Now()
	deadline := now.Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	takeBy := now.Add(c.timeout / 2)
	if takeBy.After(deadline) {
		takeBy = deadline
	}
	p := &waitingCheck[C]{Check: check, deadline: deadline, takeBy: takeBy, done: make(chan outcome, 1)}
	// No timer of its own: a flusher answers a check it takes after takeBy
	// with ErrOverload, and every flusher is free again by the deadline of
	// the checks queued before this one (a call ends by its batch's
	// earliest), so the wait ends by this check's deadline in all.
	select {
	case c.queue <- p:
	case <-c.closing:
		return atomicbucket.Decision{}, ErrClosed
	case <-ctx.Done():
		return atomicbucket.Decision{}, ctx.Err()
	}
	select {
	case o := <-p.done:
		return o.d, o.err
	case <-ctx.Done():
		if p.state.CompareAndSwap(queued, givenUp) { // still queued: the store never sees it
			return atomicbucket.Decision{}, ctx.Err()
		}
	case <-c.stopped:
		return c.afterStop(p)
	}
	select { // taken: its call is in flight, and ends by the check's deadline
	case o := <-p.done:
		return o.d, o.err
	case <-ctx.Done():
		return atomicbucket.Decision{}, ctx.Err()
	case <-c.stopped:
		return c.afterStop(p)
	}
}

// afterStop is the answer of a check queued as Close drained the queue:
// every call has returned, so it was answered or never will be.
func (c *batcher[C]) afterStop(p *waitingCheck[C]) (atomicbucket.Decision, error) {
	select {
	case o := <-p.done:
		return o.d, o.err
	default:
		return atomicbucket.Decision{}, ErrClosed
	}
}

// Close sends the checks already queued, stops the goroutines and returns
// when they have stopped; checks after it fail with ErrClosed. It may be
// called more than once, and concurrently with Do.
func (c *batcher[C]) Close() {
	c.closeOnce.Do(func() { close(c.closing) })
	<-c.stopped
}

// Coalescer sends a store's concurrent checks of a kind of its own together,
// as the store's rule checks are (see the batcher above): a store's window
// rules use it (redisstore.Window).
type Coalescer[C any] struct{ b *batcher[C] }

// Waiting is one coalesced check: its Check, and Done to answer it.
type Waiting[C any] = waitingCheck[C]

// NewCoalescer starts the goroutines that send batches of at most maxBatch
// checks through call, which must answer every check of its batch (Done). A
// check waits at most timeout in all.
func NewCoalescer[C any](maxBatch int, timeout time.Duration, call func(ctx context.Context, batch []*Waiting[C])) *Coalescer[C] {
	return &Coalescer[C]{newBatcher(maxBatch, timeout, call)}
}

// Do queues check and waits for its call's answer (see batcher.Do).
func (c *Coalescer[C]) Do(ctx context.Context, check C) (atomicbucket.Decision, error) {
	return c.b.Do(ctx, check)
}

// Close sends the checks already queued and stops; checks after it fail
// with ErrClosed.
func (c *Coalescer[C]) Close() { c.b.Close() }

// flush sends a coalesced batch: split by node (each node's part in one
// round trip, the nodes in parallel) and, within a node, by group.
func (e *Engine) flush(ctx context.Context, batch []*waitingCheck[Call]) {
	if len(batch) == 1 {
		// A check alone (a quiet moment): its own call, as without
		// coalescing, without the batch's bookkeeping.
		p := batch[0]
		e.batches.Add(1)
		d, err := e.one(ctx, p.Check, p.Check.Clamped(), ModeTake)
		p.Done(d, err)
		return
	}
	type part struct {
		node    string
		groups  [][]Call
		pending [][]*waitingCheck[Call]
		index   map[uint32]int
	}
	var parts []*part
	for _, p := range batch {
		group, node := e.b.Place(p.Check)
		var pt *part
		for _, x := range parts {
			if x.node == node {
				pt = x
			}
		}
		if pt == nil {
			pt = &part{node: node, index: map[uint32]int{}}
			parts = append(parts, pt)
		}
		gi, ok := pt.index[group]
		if !ok {
			gi = len(pt.groups)
			pt.index[group] = gi
			pt.groups, pt.pending = append(pt.groups, nil), append(pt.pending, nil)
		}
		pt.groups[gi] = append(pt.groups[gi], p.Check)
		pt.pending[gi] = append(pt.pending[gi], p)
	}
	send := func(pt *part) {
		e.batches.Add(1)
		var replies [][]Reply
		cctx, rt, err := e.enter(ctx, e.own)
		if err == nil {
			replies, err = e.b.Each(cctx, pt.groups)
			err = e.leave(rt, ended(cctx, err))
		}
		if err == nil && len(replies) != len(pt.groups) {
			err = fmt.Errorf("%s: %d replies for %d groups", e.b.Name(), len(replies), len(pt.groups))
		}
		for gi, ps := range pt.pending {
			for ci, p := range ps {
				switch {
				case err != nil:
					p.Done(atomicbucket.Decision{}, &nodeError{pt.node, err})
				case len(replies[gi]) != len(ps):
					p.Done(atomicbucket.Decision{}, fmt.Errorf("%s: %d replies for %d checks", e.b.Name(), len(replies[gi]), len(ps)))
				default:
					p.Done(p.Check.Decision(replies[gi][ci]), nil)
				}
			}
		}
	}
	if len(parts) == 1 {
		send(parts[0])
		return
	}
	var wg sync.WaitGroup
	for _, pt := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(pt)
		}()
	}
	wg.Wait()
}

package shared

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Coalescer sends a store's concurrent checks together: while a call is in
// flight, the checks that arrive wait, and go together in the next call, each
// decided on its own. Under load a call then carries many decisions, and the
// store spends its time deciding instead of answering round trips (and, on a
// database, committing once a batch instead of once a check); with one caller
// at a time it costs a channel hand-off.
type Coalescer[C any] struct {
	timeout   time.Duration // the most a check waits in the queue, and a call takes
	queue     chan *Pending[C]
	closing   chan struct{} // closed by Close: flushers drain the queue and stop
	stopped   chan struct{} // closed when every flusher has stopped
	closeOnce sync.Once
}

// Pending is one coalesced check, waiting for its call.
type Pending[C any] struct {
	Check C
	done  chan outcome // buffered: the flusher never blocks on a caller that gave up
	taken atomic.Bool  // a flusher took it from the queue: its call is the store's
}

type outcome struct {
	d   atomicbucket.Decision
	err error
}

// Done answers the check.
func (p *Pending[C]) Done(d atomicbucket.Decision, err error) { p.done <- outcome{d, err} }

// CoalesceFlushers is how many calls a Coalescer keeps in flight at once:
// two, so that one batch is encoded and decoded while the store runs the
// other.
const CoalesceFlushers = 2

// NewCoalescer starts the goroutines that send batches of at most maxBatch
// checks through call, each batch within twice timeout (call may first wait
// for a connection, then for the store, each within timeout); call must
// answer every check of its batch (Pending.Done). A check waits in the queue
// at most timeout (Do).
func NewCoalescer[C any](maxBatch int, timeout time.Duration, call func(ctx context.Context, batch []*Pending[C])) *Coalescer[C] {
	maxBatch = max(maxBatch, 1)
	c := &Coalescer[C]{timeout: timeout, queue: make(chan *Pending[C], 4*maxBatch), closing: make(chan struct{}), stopped: make(chan struct{})}
	var wg sync.WaitGroup
	for range CoalesceFlushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]*Pending[C], 0, maxBatch)
			send := func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
				call(ctx, batch)
				cancel()
			}
			for {
				select {
				case first := <-c.queue:
					first.taken.Store(true)
					batch = append(batch[:0], first)
					batch = c.fill(batch, maxBatch)
					send()
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
func (c *Coalescer[C]) fill(batch []*Pending[C], maxBatch int) []*Pending[C] {
	for len(batch) < maxBatch {
		select {
		case p := <-c.queue:
			p.taken.Store(true)
			batch = append(batch, p)
		default:
			return batch
		}
	}
	return batch
}

// ErrClosed is the error of a check on a closed store (or Coalescer): the
// store makes no more calls, and the rules' failure settings decide.
var ErrClosed = errors.New("the store is closed")

// Do queues check and waits for its call. Its wait in the queue is bounded
// by the Coalescer's timeout (or ctx): a check no flusher took by then fails
// with ErrOverload (it never reached the store). Once taken, its call is
// bounded by the flush's own timeout, and Do waits for it, or for ctx (the
// call may then still run, and take the check's tokens). After Close it fails
// with ErrClosed.
func (c *Coalescer[C]) Do(ctx context.Context, check C) (atomicbucket.Decision, error) {
	select {
	case <-c.closing:
		return atomicbucket.Decision{}, ErrClosed
	default:
	}
	p := &Pending[C]{Check: check, done: make(chan outcome, 1)}
	qctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	select {
	case c.queue <- p:
	case <-c.closing:
		return atomicbucket.Decision{}, ErrClosed
	case <-qctx.Done():
		return atomicbucket.Decision{}, fmt.Errorf("%w: %w", ErrOverload, qctx.Err())
	}
	select {
	case o := <-p.done:
		return o.d, o.err
	case <-qctx.Done():
		if !p.taken.Load() { // still queued: the store never saw it
			return atomicbucket.Decision{}, fmt.Errorf("%w: %w", ErrOverload, qctx.Err())
		}
	case <-c.stopped:
		return c.afterStop(p)
	}
	select { // taken: its call is in flight, and answers within the flush's timeout
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
func (c *Coalescer[C]) afterStop(p *Pending[C]) (atomicbucket.Decision, error) {
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
func (c *Coalescer[C]) Close() {
	c.closeOnce.Do(func() { close(c.closing) })
	<-c.stopped
}

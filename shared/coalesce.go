package shared

import (
	"context"
	"errors"
	"sync"
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
	queue     chan *Pending[C]
	stopped   chan struct{}
	closeOnce sync.Once
}

// Pending is one coalesced check, waiting for its call.
type Pending[C any] struct {
	Check C
	done  chan outcome // buffered: the flusher never blocks on a caller that gave up
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
// checks through call, each batch within timeout; call must answer every
// check of its batch (Pending.Done).
func NewCoalescer[C any](maxBatch int, timeout time.Duration, call func(ctx context.Context, batch []*Pending[C])) *Coalescer[C] {
	maxBatch = max(maxBatch, 1)
	c := &Coalescer[C]{queue: make(chan *Pending[C], 4*maxBatch), stopped: make(chan struct{})}
	var wg sync.WaitGroup
	for range CoalesceFlushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]*Pending[C], 0, maxBatch)
			for first := range c.queue {
				batch = append(batch[:0], first)
			fill:
				for len(batch) < maxBatch {
					select {
					case p, ok := <-c.queue:
						if !ok {
							break fill
						}
						batch = append(batch, p)
					default:
						break fill
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				call(ctx, batch)
				cancel()
			}
		}()
	}
	go func() {
		wg.Wait()
		close(c.stopped)
	}()
	return c
}

// ErrClosed is the error of a check on a closed Coalescer.
var ErrClosed = errors.New("the store is closed")

// Do queues check and waits for its call, or for ctx (the call may then still
// run, and take the check's tokens).
func (c *Coalescer[C]) Do(ctx context.Context, check C) (d atomicbucket.Decision, err error) {
	p := &Pending[C]{Check: check, done: make(chan outcome, 1)}
	defer func() {
		if recover() != nil { // the queue was closed
			d, err = atomicbucket.Decision{}, ErrClosed
		}
	}()
	select {
	case c.queue <- p:
	case <-ctx.Done():
		return atomicbucket.Decision{}, ctx.Err()
	}
	select {
	case o := <-p.done:
		return o.d, o.err
	case <-ctx.Done():
		return atomicbucket.Decision{}, ctx.Err()
	}
}

// Close stops the goroutines once the queued checks are sent; checks after
// it fail with ErrClosed. It may be called more than once.
func (c *Coalescer[C]) Close() {
	c.closeOnce.Do(func() { close(c.queue) })
	<-c.stopped
}

package shared

import "sync"

// callGate lets a store's calls to its server through while the store is open,
// and lets Close wait for those in flight, so that once a store's Close has
// returned its server sees no more traffic. The zero callGate is open.
type callGate struct {
	mu     sync.RWMutex // read-held by each call in flight; Close takes it to shut
	closed bool
}

// Enter reports whether a call may go to the server; when it may, the caller
// calls Leave once the call has returned. A call must not Enter while it is
// inside another (Close would wait for the outer one forever).
func (g *callGate) Enter() bool {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return false
	}
	return true
}

// Leave ends a call that Enter let through.
func (g *callGate) Leave() { g.mu.RUnlock() }

// Close shuts the gate once the calls in flight have left (each is bounded
// by its context); later Enters report false. It may be called more than
// once.
func (g *callGate) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

package shared

import (
	"sync/atomic"
	"time"
)

// Stats counts what a store's checks did.
type Stats struct {
	Calls    int64 // checks that went to the store (a coalesced batch counts each of its checks)
	Degraded int64 // checks the failure settings decided (the store failed, a breaker was open, or the store was closed)
	Batches  int64 // round trips that carried coalesced checks (Coalesce)
	// Grants and GrantedTokens are the lease calls the store granted tokens
	// in, and the tokens (leased rules).
	Grants, GrantedTokens int64
	// Latency is how long round trips to the server took (every one that
	// was sent: checks, batches, lease calls, failed ones included), from a
	// connection in hand to the reply.
	Latency Latency
	// BreakerOpenings is how many times the store's circuit breakers have
	// opened (each server's counted: BreakerState.Openings), so that a run
	// can say whether a healthy server ever failed enough checks to open one.
	BreakerOpenings int64
}

// LatencyBounds are the upper bounds of Latency's buckets: a round trip to a
// store on the same network takes 50 µs to a few ms, and the default timeout
// is 200 ms.
var LatencyBounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second,
}

// Latency is a histogram of round-trip times: Counts[i] is how many took at
// most LatencyBounds[i] and more than the bound before it; the last count is
// those above every bound. Count and Sum are their number and total.
type Latency struct {
	Counts [len(LatencyBounds) + 1]int64
	Count  int64
	Sum    time.Duration
}

// latency records round trips into a Latency, without a lock.
type latency struct {
	counts [len(LatencyBounds) + 1]atomic.Int64
	sum    atomic.Int64
}

func (l *latency) record(d time.Duration) {
	i := 0
	for i < len(LatencyBounds) && d > LatencyBounds[i] {
		i++
	}
	l.counts[i].Add(1)
	l.sum.Add(int64(d))
}

// snapshot reads l. Its counts are read one by one while calls may be
// recorded: Count is their sum, so Count and Counts always agree.
func (l *latency) snapshot() Latency {
	var s Latency
	for i := range l.counts {
		s.Counts[i] = l.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Sum = time.Duration(l.sum.Load())
	return s
}

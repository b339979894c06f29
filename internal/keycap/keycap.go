// Package keycap holds what the bucket tables of atomicbucket and the window
// tables of atomicwindow share: the count of their keys under a cap, and when
// they sweep.
package keycap

import (
	"context"
	"sync/atomic"
	"time"
)

// Claim counts a new key in keys, unless that would take it past maxKeys
// (0 or less: no cap), and reports whether it did.
func Claim(keys *atomic.Int64, maxKeys int64) bool {
	if maxKeys <= 0 {
		keys.Add(1)
		return true
	}
	for {
		n := keys.Load()
		if n >= maxKeys {
			return false
		}
		if keys.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// AutoSweepMin is the number of keys below which a table never sweeps by
// itself. Above it, a table sweeps when a new key takes it past twice the keys
// it held after its last sweep, so that sweeping costs O(1) per new key,
// amortised, and the memory of keys that went idle comes back without the
// caller running a sweeper.
const AutoSweepMin = 4096

// DefaultSweepInterval is the interval RunSweeper and RunEvery use when given
// one that is not positive.
const DefaultSweepInterval = time.Minute

// CapSweepSpacing bounds the work a table does at its key cap. A sweep there
// visits every key, and keys whose buckets fill one after another could
// otherwise make each new key's request pay for one; so sweeps at the cap
// start at least MaxKeys × CapSweepSpacing apart (a million keys: 256 ms),
// which keeps them to at most about a fifth of one core whatever the traffic:
// a sweep that removes nothing costs 14 ns a key at a thousand keys and 54 ns
// at a million, 54 ms in all (BenchmarkSweep, 2-core Intel Xeon VM, medians
// of 6). A new key that meets the cap in between is denied
// (TableOptions.AllowAtCap false) until the next may run, and its RetryAfter says so.
const CapSweepSpacing = 256 * time.Nanosecond

// RunEvery calls f every interval (DefaultSweepInterval when interval is not
// positive) until ctx is done. Run it in its own goroutine.
func RunEvery(ctx context.Context, interval time.Duration, f func()) {
	if interval <= 0 {
		interval = DefaultSweepInterval
	}
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			f()
		}
	}
}

// Package keycap holds what the bucket tables of atomicbucket and the window
// tables of atomicwindow share: the count of their keys under a cap, and when
// they sweep.
package keycap

import (
	"context"
	"math"
	"runtime"
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

// Sweeps is when a table of atomicwindow or atomicslot sweeps: by itself when
// new keys have doubled it (beyond AutoSweepMin keys), at its key cap no
// sooner than MaxKeys × CapSweepSpacing after the last sweep there, and never
// two at once. It also keeps the earliest time a key can be reclaimed, as the
// table defines it, for the RetryAfter of a new key denied at the cap.
type Sweeps struct {
	next       atomic.Int64 // exact after a sweep; lowered as keys are made (LowerNext)
	sweeping   atomic.Bool
	sweepAt    atomic.Int64
	capSwept   atomic.Int64
	capSpacing int64
}

// Init readies s for a table of at most maxKeys keys (0 or less: no cap)
// whose times run to maxTime (ns).
func (s *Sweeps) Init(maxKeys, maxTime int64) {
	s.next.Store(math.MaxInt64)
	s.sweepAt.Store(AutoSweepMin)
	s.capSwept.Store(math.MinInt64 / 2)
	if maxKeys > 0 {
		s.capSpacing = min(maxKeys, maxTime/int64(CapSweepSpacing)) * int64(CapSweepSpacing)
	}
}

// LowerNext lowers the earliest time a key can be reclaimed to at.
func (s *Sweeps) LowerNext(at int64) {
	for {
		old := s.next.Load()
		if at >= old || s.next.CompareAndSwap(old, at) {
			return
		}
	}
}

// Sweep runs sweep, after a sweep under way ends, and returns what it
// removed. sweep returns the keys it removed and the keys left, and lowers
// the earliest reclaim (LowerNext) for every key it keeps.
func (s *Sweeps) Sweep(sweep func() (removed int, left int64)) int {
	for !s.sweeping.CompareAndSwap(false, true) {
		runtime.Gosched()
	}
	return s.held(sweep)
}

func (s *Sweeps) held(sweep func() (int, int64)) int {
	defer s.sweeping.Store(false)
	s.next.Store(math.MaxInt64)
	removed, left := sweep()
	s.sweepAt.Store(max(2*left, AutoSweepMin))
	return removed
}

// Grown runs sweep when keys have doubled since the last sweep, unless one
// is under way.
func (s *Sweeps) Grown(keys int64, sweep func() (int, int64)) {
	if keys > s.sweepAt.Load() && s.sweeping.CompareAndSwap(false, true) {
		s.held(sweep)
	}
}

// AtCap runs sweep for a new key at the cap at now, unless the last sweep
// there is too recent, and reports whether it freed a key.
func (s *Sweeps) AtCap(now int64, sweep func() (int, int64)) bool {
	for {
		if s.sweeping.Load() {
			runtime.Gosched()
			continue
		}
		if now < s.capSwept.Load()+s.capSpacing {
			return false
		}
		if s.sweeping.CompareAndSwap(false, true) {
			s.capSwept.Store(now)
			return s.held(sweep) > 0
		}
	}
}

// CapWait is the RetryAfter of a new key denied at the cap at now: until a
// key can be reclaimed and the next sweep at the cap may run.
func (s *Sweeps) CapWait(now int64) time.Duration {
	return time.Duration(max(max(s.next.Load(), s.capSwept.Load()+s.capSpacing)-now, 1))
}

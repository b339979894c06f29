package adaptive

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// window counts one interval's observations: latencies in a log-linear
// histogram and failures. Observe is lock-free (two atomic adds); drain takes
// the counts and zeroes them, so an observation made while an interval is
// drained falls into it or into the next, never into neither.
type window struct {
	// counts[i] is how many latencies fell in bucket i (see bucketOf).
	counts [numBuckets]atomic.Uint64
	// failed is how many observations were failures.
	failed atomic.Uint64
}

// A latency's bucket: below 16 ns one a nanosecond; above, 16 buckets for
// each power of two, so that a bucket's bounds differ by at most 1/16 (a
// quantile is reported as its bucket's upper bound: at most 6.25% above the
// true value, never below it). 16 + 60·16 buckets cover every int64.
const (
	subBuckets = 16
	numBuckets = subBuckets + 60*subBuckets
)

func bucketOf(ns int64) int {
	if ns < subBuckets {
		return int(max(ns, 0))
	}
	shift := bits.Len64(uint64(ns)) - 5 // ns>>shift is in [16, 32)
	return subBuckets + shift*subBuckets + int(ns>>shift) - subBuckets
}

// upperBound is the largest latency in bucket i (ns).
func upperBound(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	shift := (i - subBuckets) / subBuckets
	sub := int64((i - subBuckets) % subBuckets)
	lower := (subBuckets + sub) << shift
	if shift >= 58 && sub == subBuckets-1 {
		return math.MaxInt64
	}
	return lower + (1 << shift) - 1
}

func (w *window) observe(latency time.Duration, failed bool) {
	w.counts[bucketOf(int64(latency))].Add(1)
	if failed {
		w.failed.Add(1)
	}
}

// drain is the interval's health: how many observations, the latency at
// quantile q (its bucket's upper bound), and the ratio of failures; the
// counts start again from zero.
func (w *window) drain(q float64) Health {
	var counts [numBuckets]uint64
	var total uint64
	for i := range w.counts {
		counts[i] = w.counts[i].Swap(0)
		total += counts[i]
	}
	failed := w.failed.Swap(0)
	h := Health{Samples: int64(total)}
	if total == 0 {
		return h
	}
	h.Errors = min(float64(failed)/float64(total), 1) // a failure drained before its latency: at most all
	rank := uint64(math.Ceil(q * float64(total)))
	rank = min(max(rank, 1), total)
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			h.Latency = time.Duration(upperBound(i))
			break
		}
	}
	return h
}

package verdict

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Counters counts decisions by series and outcome: a series is a route, the
// tier it checks and a rule (of the tier), what a dashboard groups decisions
// by; NewCounters makes one series a rule, with no route. Each count is spread
// over stripes, four per processor (at least 8, at most 256), each goroutine
// picking one by its stack (stripe), so that cores counting at once seldom
// touch the same cache line; Snapshot adds the stripes up.
type Counters struct {
	series  []Series
	stride  int // cells per stripe: series × outcomes, rounded up to whole cache lines, plus a line of padding
	mask    uint32
	stripes []atomic.Uint64
}

// Series is a row of Counters: decisions on a route (its pattern) by a rule,
// of a tier when the route checks one. Route and Tier are "" for counters
// made by NewCounters.
type Series struct {
	Route string
	Tier  string
	Rule  string
}

// cellsPerLine is how many uint64 counters fill a 64-byte cache line.
const cellsPerLine = 8

// NewCounters returns counters for series (a Judge counts a decision in the
// row of its Result.Series or Event.Series), with four stripes per processor
// (rounded up to a power of two, at least 8, at most 256): with as many
// stripes as processors, two goroutines would share one half the time. The
// generated doors make one series for each rule each route checks; a
// hand-wired door with a series for each rule sets Series to the rule's
// index.
func NewCounters(series ...Series) *Counters {
	n := 8
	for n < 4*runtime.GOMAXPROCS(0) && n < 256 {
		n *= 2
	}
	cells := len(series) * int(numOutcomes)
	stride := (cells+cellsPerLine-1)/cellsPerLine*cellsPerLine + cellsPerLine
	return &Counters{
		series:  slices.Clone(series),
		stride:  stride,
		mask:    uint32(n - 1),
		stripes: make([]atomic.Uint64, n*stride),
	}
}

// add counts one outcome of the series at index series; an index out of range
// is ignored.
func (c *Counters) add(series int, o Outcome) {
	if uint(series) >= uint(len(c.series)) || o >= numOutcomes {
		return
	}
	c.stripes[c.stripe()*c.stride+series*int(numOutcomes)+int(o)].Add(1)
}

// stripe picks the calling goroutine's stripe from the address of a local
// variable: each goroutine has a stack of its own, so goroutines running on
// different cores at once almost always land on different stripes, and the
// choice costs no call (math/rand/v2's per-thread generator cost 8% of a
// request through the middleware). A goroutine's stack starts at 2 KiB, and
// new stacks are carved next to each other, so the shift drops the bits inside
// the smallest stack and the multiplication spreads the rest (shifting by 13,
// as for 8 KiB stacks, put four neighbours on one stripe, and two benchmark
// goroutines on one half the time).
func (c *Counters) stripe() int {
	var local byte
	h := uint64(uintptr(unsafe.Pointer(&local))>>11) * 0x9e3779b97f4a7c15
	return int(uint32(h>>32) & c.mask)
}

// Count is one series' counts.
type Count struct {
	Series
	Outcomes [numOutcomes]uint64 // indexed by Outcome
}

// Snapshot returns the counts of every series, in the order the Counters were
// given them. Counts added while it runs may or may not be in it.
func (c *Counters) Snapshot() []Count {
	out := make([]Count, len(c.series))
	for i, s := range c.series {
		out[i].Series = s
		for st := 0; st*c.stride < len(c.stripes); st++ {
			for o := range numOutcomes {
				out[i].Outcomes[o] += c.stripes[st*c.stride+i*int(numOutcomes)+int(o)].Load()
			}
		}
	}
	return out
}

// denialLog is NewDenialLog's Observer.
type denialLog struct {
	logger     *slog.Logger
	budget     *atomicbucket.Bucket
	suppressed atomic.Int64
}

// NewDenialLog returns an Observer that logs every request that was not
// allowed (the violation log of a multi-tier limiter) to logger
// (slog.Default() when nil), at most perSecond records a second (at least 1)
// with bursts of as many: under a flood it logs a sample, and each record says
// how many were left out since the last one.
//
// It logs at level Warn every denial, and every request a failed store left
// to a shared rule's on_failure setting (DegradedAllowed included), with the
// store error's class; at level Info, as "rate limit key missing", a request
// no key source had a key for (a client's mistake, or one not signed in: not
// a limit at work).
func NewDenialLog(logger *slog.Logger, perSecond int64) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	perSecond = max(perSecond, 1)
	rule := atomicbucket.MustRule(atomicbucket.Limit{Tokens: perSecond, Period: 1e9, Burst: perSecond})
	return &denialLog{logger: logger, budget: atomicbucket.NewBucketAt(rule, atomicbucket.Now())}
}

// Observe logs e when it is not Allowed (see NewDenialLog).
func (d *denialLog) Observe(e Event) {
	if e.Outcome == Allowed {
		return
	}
	if !d.budget.Allow() {
		d.suppressed.Add(1)
		return
	}
	level, msg := slog.LevelWarn, "rate limit"
	if e.Outcome == MissingKey {
		level, msg = slog.LevelInfo, "rate limit key missing"
	}
	d.logger.LogAttrs(context.Background(), level, msg,
		slog.String("outcome", e.Outcome.String()),
		slog.String("route", e.Route),
		slog.String("tier", e.Tier),
		slog.String("rule", e.Rule),
		slog.Int64("cost", e.Cost),
		retryAttr(e.RetryAfter),
		slog.String("store_error", e.StoreError),
		slog.Int64("suppressed", d.suppressed.Swap(0)),
	)
}

// retryAttr is a logged wait: a duration, or "never" for a request no wait
// can admit (its cost is above the burst).
func retryAttr(d time.Duration) slog.Attr {
	if d == atomicbucket.Never {
		return slog.String("retry_after", "never")
	}
	return slog.Duration("retry_after", d)
}

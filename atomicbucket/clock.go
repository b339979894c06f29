package atomicbucket

import (
	"time"
	_ "unsafe" // for go:linkname
)

// nanotime is the runtime's monotonic clock: one vDSO clock_gettime(CLOCK_MONOTONIC)
// call, no wall-clock read and no allocation. The runtime keeps this symbol
// linkable on purpose (see runtime/time_nofake.go).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Clock reads, measured on the 2-core development machine (Oxide virtual Turin,
// go1.26.8, linux/amd64, `go test -run '^$' -bench Clock -count 6 ./atomicbucket`,
// medians):
//
//	runtime.nanotime                       27.5 ns/op (one vDSO call, CLOCK_MONOTONIC)
//	time.Since(start)                      29.1 ns/op (the same call plus arithmetic)
//	time.Now                               54.0 ns/op (reads wall and monotonic clocks)
//	coarse clock (atomic load of a value
//	  refreshed by a ticking goroutine)     0.36 ns/op, but up to a tick stale
//
// A stale clock only makes a check stricter (GCRA never admits more for an
// earlier now), so the coarse clock would be safe; it is not used because it
// makes RetryAfter and Reset wrong by up to a tick, costs a goroutine per
// process, and its freshness depends on the scheduler. runtime.nanotime is the
// cheapest exact reading: every check reads it exactly once.

// epoch is the monotonic reading taken when the package was initialised; every
// time the package handles is nanoseconds since it, so a process has 2^63 ns
// (292 years) of range and Rule budgets its constants for MaxUptime of it.
var epoch = nanotime()

// wallAtEpoch is the wall-clock time, in Unix nanoseconds, that corresponded to
// epoch. Aligned interval rules place their grid with it. It is read once: later
// steps of the wall clock (NTP, an operator) do not move any grid.
var wallAtEpoch = time.Now().UnixNano()

// epochTime is a time.Time read just after epoch (it is declared after it, in
// the same file, so it is initialised after it), so epochTime.Add(now) is never
// earlier than the instant now stands for, and a context deadline measured from
// it is never overestimated (Wait).
var epochTime = time.Now()

// Time is an instant on the package's monotonic clock: nanoseconds since the
// package epoch (when the package was initialised). Every check's At form takes
// one, so a time cannot be passed where a cost is expected. Get one from Now,
// FromTime (a time.Time, by its monotonic reading when it has one) or FromWall
// (Unix nanoseconds, for replaying logs); times before the epoch are negative
// and checks treat them as the epoch.
type Time int64

// Now returns the current Time. It is the only clock the package reads; every
// clock-reading check calls it exactly once.
func Now() Time { return Time(nanotime() - epoch) }

// FromTime converts t to a Time. When t carries a monotonic reading (as
// time.Now's results do) the conversion uses it, so wall-clock steps do not
// move it; otherwise it goes through the wall clock, like FromWall.
func FromTime(t time.Time) Time { return Time(t.Sub(epochTime)) }

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns the duration t−u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Time returns t as a time.Time (with a monotonic reading).
func (t Time) Time() time.Time { return epochTime.Add(time.Duration(t)) }

// MaxUptime is how long a process may run before the fixed-point constants of a
// Rule could overflow: every Rule that NewRule accepts is checked against it.
const MaxUptime = 10 * 366 * 24 * time.Hour

// FromWall converts a wall-clock time (Unix nanoseconds) into this package's
// time (ns since the epoch), by the offset between the two clocks read at
// package initialisation. The result is negative for times before the epoch.
// Aligned interval grids fall on wall-clock multiples of their period in this
// time, so replaying a log of wall-clock times through FromWall (plus, to stay
// positive, any multiple of the periods) keeps the grids where they were.
func FromWall(unixNano int64) Time { return Time(unixNano - wallAtEpoch) }

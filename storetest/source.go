package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/sharedlimits"
)

// Row is one row of a numbers source (pgstore's table, redisstore's hash).
type Row struct {
	Rule, Plan string
	Key        *string
	Rate       string
	Burst      int64
	Active     bool
}

// Source is a numbers source under test: Instance makes one instance of a
// service generated from sharedpolicy.yaml on the source's store, watching
// the source with Refresh and giving its errors to report; Put writes a row
// by id and notifies the watchers, PutQuietly writes it without notifying
// (only the refresh finds it), Delete removes a row and notifies.
// Every instance is stopped by the test's cleanup.
type Source struct {
	Instance   func(t *testing.T, report func(error)) *sharedlimits.Limits
	Refresh    time.Duration
	Put        func(t *testing.T, id int, r Row)
	PutQuietly func(t *testing.T, id int, r Row)
	Delete     func(t *testing.T, id int)
	// RowName is how an error names row id ("limitgen_numbers id 3").
	RowName func(id int) string
}

// SourceFigures are the convergence times SourceConvergence measured: from
// a write's return until every instance had the numbers (the slowest).
type SourceFigures struct {
	Notified []time.Duration // each notified change
	Quiet    time.Duration   // the change found by the refresh
}

func (f SourceFigures) String() string {
	return fmt.Sprintf("%d instances: notified changes converged in %v; an unnotified one in %v (refresh)", NumbersInstances, f.Notified, f.Quiet)
}

// SourceConvergence: eight instances watch one source. A change written to
// it reaches all of them (their NumbersFor) within a second through its
// notification, and an unnotified one within the refresh; while they check
// one key on the store, a cut of its burst never lets them admit more than
// the larger burst, and once converged a fresh key gets exactly the new one;
// a key's row gives it its own numbers; a row that does not parse is
// refused whole by every instance (reported, naming the row) with the
// numbers in force kept; an inactive row counts as none.
func SourceConvergence(t *testing.T, src Source) SourceFigures {
	ctx := context.Background()
	var ls []*sharedlimits.Limits
	var reports []*atomic.Value
	for range NumbersInstances {
		last := new(atomic.Value)
		reports = append(reports, last)
		ls = append(ls, src.Instance(t, func(err error) { last.Store(err.Error()) }))
	}
	var figures SourceFigures
	converge := func(what string, limit time.Duration, ok func(l *sharedlimits.Limits) bool) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			all := true
			for _, l := range ls {
				if !ok(l) {
					all = false
					break
				}
			}
			if all {
				return time.Since(start)
			}
			if time.Since(start) > limit {
				t.Fatalf("%s: not on every instance within %v", what, limit)
			}
			time.Sleep(time.Millisecond)
		}
	}
	numbersAre := func(plan sharedlimits.Plan, key string, n atomicbucket.Numbers, o atomicbucket.Origin) func(l *sharedlimits.Limits) bool {
		return func(l *sharedlimits.Limits) bool {
			got, origin := l.PerUser.NumbersFor(plan, key)
			return got == n && origin == o
		}
	}
	perMin := func(burst int64) atomicbucket.Numbers {
		return atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: burst}
	}
	spread := func(key string, n int) int {
		admitted := 0
		for i := range n {
			res := ls[i%len(ls)].PerUser.AllowN(ctx, sharedlimits.PlanFree, key, 1)
			if res.Degraded {
				t.Fatalf("check degraded: %v", res.Err)
			}
			if res.Allowed {
				admitted++
			}
		}
		return admitted
	}

	// Every instance has read the source once (its watch started: a table
	// and its trigger created, a channel listened to) before the first
	// change, which is then a notified one for all of them.
	converge("every instance's first read", 10*time.Second, func(l *sharedlimits.Limits) bool {
		_, sets, _ := l.NumbersApplied()
		return sets >= 1
	})

	// A cut of PerUser's free plan from the policy's burst of 20 to 5, made
	// while every instance checks key "busy".
	var admitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if l.PerUser.AllowN(ctx, sharedlimits.PlanFree, "busy", 1).Allowed {
					admitted.Add(1)
				}
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	src.Put(t, 1, Row{Rule: "PerUser", Plan: "free", Rate: "1/min", Burst: 5, Active: true})
	figures.Notified = append(figures.Notified, converge("the free plan cut to 5", time.Second, numbersAre(sharedlimits.PlanFree, "x", perMin(5), atomicbucket.FromOverride)))
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	if a := admitted.Load(); a > 20 {
		t.Errorf("checks during the cut admitted %d for one key: more than the larger burst, 20", a)
	}
	if got := spread("fresh", 30); got != 5 {
		t.Errorf("after the cut a fresh key was admitted %d of 30 over %d instances, want 5", got, len(ls))
	}

	vip := "vip"
	src.Put(t, 2, Row{Rule: "PerUser", Key: &vip, Rate: "1/min", Burst: 40, Active: true})
	figures.Notified = append(figures.Notified, converge("vip's own numbers", time.Second, numbersAre(sharedlimits.PlanPro, "vip", perMin(40), atomicbucket.FromKeyOverride)))
	if got := spread("vip", 60); got != 40 {
		t.Errorf("vip with a burst of 40 of his own: admitted %d of 60", got)
	}

	// A row that does not parse: the whole source refused, by every
	// instance, each saying which row; the numbers in force stay.
	src.Put(t, 3, Row{Rule: "PerUser", Plan: "pro", Rate: "fast", Burst: 5, Active: true})
	converge("the bad row reported", time.Second, func(l *sharedlimits.Limits) bool {
		for _, r := range reports {
			if s, _ := r.Load().(string); !strings.Contains(s, src.RowName(3)+`: rule PerUser, plan pro: rate "fast" is not a rate`) {
				return false
			}
		}
		return true
	})
	for i, l := range ls {
		if n, o := l.PerUser.NumbersFor(sharedlimits.PlanFree, "x"); n != perMin(5) || o != atomicbucket.FromOverride {
			t.Errorf("instance %d after a refused source: %v %v", i, n, o)
		}
	}
	src.Delete(t, 3)

	// An inactive row counts as none: the free plan back to the policy's.
	src.Put(t, 1, Row{Rule: "PerUser", Plan: "free", Rate: "1/min", Burst: 5})
	figures.Notified = append(figures.Notified, converge("the cut made inactive", time.Second, numbersAre(sharedlimits.PlanFree, "x", perMin(20), atomicbucket.FromPolicy)))

	// Unnotified: found by the refresh.
	src.PutQuietly(t, 4, Row{Rule: "Global", Rate: "1/min", Burst: 7, Active: true})
	figures.Quiet = converge("an unnotified change", src.Refresh+2*time.Second, func(l *sharedlimits.Limits) bool {
		n, o := l.Global.NumbersFor()
		return n == perMin(7) && o == atomicbucket.FromOverride
	})
	if res := ls[0].Global.AllowN(ctx, 7); !res.Allowed || res.Remaining != 0 {
		t.Errorf("Global with a burst of 7: a cost of 7 gave %+v", res)
	}
	if res := ls[1].Global.AllowN(ctx, 1); res.Allowed {
		t.Errorf("Global with a burst of 7, all taken: %+v", res)
	}
	return figures
}

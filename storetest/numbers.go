package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// NumbersInstances is how many instances GeneratedNumbers runs on one store.
const NumbersInstances = 8

// GeneratedNumbers: shared rules' numbers changed at run time, on eight
// instances of a service generated from sharedpolicy.yaml (instance makes
// one, with its own store client) on one server, each given the same
// changes. The rules refill by 1 a minute or slower, so a test's checks see
// no refill: every count below is the burst in force less what was taken.
//
//   - a rule's changed numbers hold across the instances (a burst cut from 20
//     to 5 admits 5 of 40 checks spread over them), a key with numbers of its
//     own gets them and the others do not, and NumbersFor says where numbers
//     come from;
//   - a bucket keeps what it holds across a change (3 of 5 left, then the
//     burst raised to 10: 3 more, not a new bucket's 10), and a key's own
//     numbers taken away leave what it held, at most the rule's burst;
//   - Reset forgets a key's bucket on the store: the next checks, from any
//     instance, find it full;
//   - a leased rule's change reaches the leases: 10 of 40 after its burst of
//     30 is cut to 10, for a new key and for one that had spent 8 of 30;
//   - an interval rule's tokens per period change, its period cannot;
//   - bad numbers are refused whole, everywhere, with nothing changed;
//   - the middleware's RateLimit-Policy field describes the numbers in force.
func GeneratedNumbers(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	var ls []*sharedlimits.Limits
	for range NumbersInstances {
		ls = append(ls, instance())
	}
	every := func(what string, change func(l *sharedlimits.Limits) error) {
		t.Helper()
		for i, l := range ls {
			if err := change(l); err != nil {
				t.Fatalf("%s on instance %d: %v", what, i, err)
			}
		}
	}
	// spread checks the key n times, round robin over the instances, and
	// returns how many were admitted.
	spread := func(check func(l *sharedlimits.Limits) verdict.Result, n int) int {
		t.Helper()
		admitted := 0
		for i := range n {
			res := check(ls[i%len(ls)])
			if res.Degraded {
				t.Fatalf("check %d degraded: %v", i, res.Err)
			}
			if res.Allowed {
				admitted++
			}
		}
		return admitted
	}
	perUser := func(key string) func(l *sharedlimits.Limits) verdict.Result {
		return func(l *sharedlimits.Limits) verdict.Result {
			return l.PerUser.AllowN(ctx, sharedlimits.PlanFree, key, 1)
		}
	}
	perMin := func(burst int64) atomicbucket.Numbers {
		return atomicbucket.Numbers{Tokens: 1, Period: time.Minute, Burst: burst}
	}

	every("PerUser's free plan cut to a burst of 5", func(l *sharedlimits.Limits) error { return l.PerUser.SetNumbers(sharedlimits.PlanFree, perMin(5)) })
	if got := spread(perUser("alice"), 40); got != 5 {
		t.Errorf("a burst cut to 5: %d instances admitted %d of 40 for alice", len(ls), got)
	}
	if res := ls[3].PerUser.AllowN(ctx, sharedlimits.PlanPro, "alice", 1); !res.Allowed || res.Remaining != 199 {
		t.Errorf("alice on pro keeps the policy's burst of 200: %+v", res)
	}
	every("vip given a burst of 40", func(l *sharedlimits.Limits) error { return l.PerUser.SetKeyNumbers("vip", perMin(40)) })
	if got := spread(perUser("vip"), 60); got != 40 {
		t.Errorf("vip's own burst of 40: admitted %d of 60", got)
	}
	if got := spread(perUser("bob"), 10); got != 5 {
		t.Errorf("bob, without numbers of his own: admitted %d of 10, want the plan's 5", got)
	}
	for _, c := range []struct {
		plan   sharedlimits.Plan
		key    string
		n      atomicbucket.Numbers
		origin atomicbucket.Origin
	}{
		{sharedlimits.PlanFree, "vip", perMin(40), atomicbucket.FromKeyOverride},
		{sharedlimits.PlanPro, "vip", perMin(40), atomicbucket.FromKeyOverride},
		{sharedlimits.PlanFree, "bob", perMin(5), atomicbucket.FromOverride},
		{sharedlimits.PlanPro, "bob", atomicbucket.Numbers{Tokens: 10, Period: time.Minute, Burst: 200}, atomicbucket.FromPolicy},
	} {
		if n, o := ls[5].PerUser.NumbersFor(c.plan, c.key); n != c.n || o != c.origin {
			t.Errorf("NumbersFor(%v, %s) = %v %v, want %v %v", c.plan, c.key, n, o, c.n, c.origin)
		}
	}

	// Carried across a change: 2 of carol's 5 taken, then the burst raised
	// to 10: she has 3, not a full bucket's 10.
	if got := spread(perUser("carol"), 2); got != 2 {
		t.Fatalf("carol admitted %d of 2", got)
	}
	every("PerUser's free plan raised to a burst of 10", func(l *sharedlimits.Limits) error { return l.PerUser.SetNumbers(sharedlimits.PlanFree, perMin(10)) })
	if got := spread(perUser("carol"), 20); got != 3 {
		t.Errorf("carol with 3 left when the burst rose from 5 to 10: admitted %d of 20, want 3", got)
	}
	every("vip's own numbers taken away", func(l *sharedlimits.Limits) error { return l.PerUser.ClearKeyNumbers("vip") })
	if got := spread(perUser("vip"), 5); got != 0 {
		t.Errorf("vip, who spent all 40 of his own, back on the plan's numbers: admitted %d of 5, want 0", got)
	}
	if err := ls[6].PerUser.Reset(ctx, "vip"); err != nil {
		t.Fatal(err)
	}
	if got := spread(perUser("vip"), 20); got != 10 {
		t.Errorf("vip after Reset from one instance: admitted %d of 20, want the plan's burst of 10", got)
	}

	// A leased rule: the leases follow the change.
	downloads := func(key string) func(l *sharedlimits.Limits) verdict.Result {
		return func(l *sharedlimits.Limits) verdict.Result { return l.Downloads.AllowN(ctx, key, 1) }
	}
	if got := spread(downloads("dan"), 8); got != 8 {
		t.Fatalf("dan's downloads admitted %d of 8", got)
	}
	every("Downloads cut to a burst of 10", func(l *sharedlimits.Limits) error { return l.Downloads.SetNumbers(perMin(10)) })
	if got := spread(downloads("erin"), 40); got != 10 {
		t.Errorf("erin's downloads under the leased rule's burst cut to 10: admitted %d of 40", got)
	}
	if got := spread(downloads("dan"), 40); got != 10 {
		t.Errorf("dan, who took 8 of 30 before the burst was cut to 10 (22 held, carried as at most 10), admitted %d more of 40, want 10", got)
	}

	// An interval rule: 3 exports an hour become 6; the period stays.
	if err := ls[0].Exports.SetNumbers(atomicbucket.Numbers{Tokens: 6, Period: 2 * time.Hour, Burst: 6}); !errors.Is(err, atomicbucket.ErrInvalidLimit) {
		t.Errorf("an interval rule's period changed: %v", err)
	}
	every("Exports raised to 6 an hour", func(l *sharedlimits.Limits) error {
		return l.Exports.SetNumbers(atomicbucket.Numbers{Tokens: 6, Period: time.Hour, Burst: 6})
	})
	if got := spread(func(l *sharedlimits.Limits) verdict.Result { return l.Exports.AllowN(ctx, 77, 1) }, 10); got != 6 {
		t.Errorf("exports of account 77 under 6 an hour: admitted %d of 10", got)
	}

	// Refused whole: nothing changes on the store or in the process.
	for _, c := range []struct {
		name string
		err  error
		is   error
	}{
		{"no tokens", ls[1].PerUser.SetNumbers(sharedlimits.PlanFree, atomicbucket.Numbers{Period: time.Minute, Burst: 5}), atomicbucket.ErrInvalidLimit},
		{"too fine for a store's µs clock", ls[1].PerUser.SetKeyNumbers("x", atomicbucket.Numbers{Tokens: 1_000_000_000, Period: time.Second, Burst: 5_000_000_000_000_000}), shared.ErrInvalidNumbers},
		{"an unknown plan", ls[1].PerUser.SetNumbers(sharedlimits.Plan(9), perMin(5)), sharedlimits.ErrUnknownPlan},
	} {
		if !errors.Is(c.err, c.is) {
			t.Errorf("%s: %v, want an error wrapping %v", c.name, c.err, c.is)
		}
	}
	if n, o := ls[1].PerUser.NumbersFor(sharedlimits.PlanFree, "x"); n != perMin(10) || o != atomicbucket.FromOverride {
		t.Errorf("after refused changes x has %v %v", n, o)
	}
	if n, o := ls[1].PerUser.Local().NumbersFor(sharedlimits.PlanFree, "x"); n != perMin(10) || o != atomicbucket.FromOverride {
		t.Errorf("after refused changes Local has %v %v for x", n, o)
	}

	// The fields describe the numbers in force: a burst of 10 at 1 a minute
	// is a quota of 10 in 600 s.
	mw := middleware(t, ls[2])
	mux := mw.NewServeMux()
	mux.HandleFunc("GET /hello", func(http.ResponseWriter, *http.Request) {})
	r := httptest.NewRequest("GET", "/hello", nil)
	r.Header.Set("X-User", "frank")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	if got, want := w.Header().Get("RateLimit-Policy"), `"PerUser";q=10;w=600`; w.Code != 200 || got != want {
		t.Errorf("GET /hello: %d, RateLimit-Policy %q, want %q", w.Code, got, want)
	}
	if got, want := w.Header().Get("RateLimit"), `"PerUser";r=9;t=540`; got != want { // paced: 9 tokens at 1 a minute
		t.Errorf("GET /hello: RateLimit %q, want %q", got, want)
	}
}

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

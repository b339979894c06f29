package storetest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/verdict"
)

// GeneratedSlots: two instances of the generated service, each behind its
// middleware on a real HTTP server on loopback, share Running's slots on the
// store (at most 2 of a user's runs at once). One run on each instance holds
// both; a third, on either, is answered 429 with a Retry-After of the hold
// (60 s) and no RateLimit fields, while another user runs; when one run ends,
// the other instance admits the next. Once every run has ended no slot is
// held. Then, with the store stopped, a run is answered 503 with the
// store-unavailable problem type (on_failure: deny), counted degraded.
func GeneratedSlots(t *testing.T, instance func() *sharedlimits.Limits, stop func()) {
	type run struct {
		code  int
		retry string
		h     http.Header
		body  string
	}
	entered := make(chan string, 16)
	finish := make(chan struct{}, 16)
	serve := func(l *sharedlimits.Limits) (*httptest.Server, *sharedlimits.Middleware) {
		mw := middleware(t, l) // counting: NewMiddleware gives it Counters
		srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- r.PathValue("user") + r.URL.Path
			<-finish
		})))
		t.Cleanup(srv.Close)
		return srv, mw
	}
	la, lb := instance(), instance()
	a, mwA := serve(la)
	b, _ := serve(lb)
	post := func(srv *httptest.Server, user string) <-chan run {
		out := make(chan run, 1)
		go func() {
			resp, err := srv.Client().Post(srv.URL+"/run/"+user, "text/plain", nil)
			if err != nil {
				out <- run{code: -1, body: err.Error()}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out <- run{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header, string(body)}
		}()
		return out
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never reached the handler", what)
		}
	}
	r1 := post(a, "uma")
	wait("uma's first run, on a")
	r2 := post(b, "uma")
	wait("uma's second run, on b")
	for _, srv := range []*httptest.Server{a, b} {
		got := <-post(srv, "uma")
		if got.code != http.StatusTooManyRequests || got.h.Get("RateLimit") != "" || got.h.Get("RateLimit-Policy") != "" {
			t.Fatalf("a third run of uma's with two held (one on each instance): %+v", got)
		}
		if s, err := strconv.Atoi(got.retry); err != nil || s < 59 || s > 60 {
			t.Errorf("the denial's Retry-After %q, want the 60 s until the first held slot expires", got.retry)
		}
	}
	r3 := post(a, "vic")
	wait("vic's run, beside uma's")
	finish <- struct{}{} // one of the three running ends: uma's or vic's
	finish <- struct{}{}
	ended := 0
	var r4 <-chan run
	for _, r := range []<-chan run{r1, r2, r3} {
		select {
		case got := <-r:
			if got.code != http.StatusOK {
				t.Fatalf("a run that reached its handler: %+v", got)
			}
			ended++
		case <-time.After(200 * time.Millisecond):
		}
	}
	if ended != 2 {
		t.Fatalf("%d runs ended of the 2 let finish", ended)
	}
	// At least one of uma's slots is free now, whichever ended: b admits.
	r4 = post(b, "uma")
	wait("uma's run on b after one ended")
	finish <- struct{}{}
	finish <- struct{}{}
	for _, r := range []<-chan run{r1, r2, r3, r4} {
		select {
		case got := <-r:
			if got.code != http.StatusOK {
				t.Fatalf("a run that reached its handler: %+v", got)
			}
		default:
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for la.Running.Stats().Held+lb.Running.Stats().Held != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slots still held after every run ended: a %+v, b %+v", la.Running.Stats(), lb.Running.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx := context.Background()
	for range 2 { // both slots free on the store: acquired and given back directly
		s, res := la.Running.Acquire(ctx, "uma")
		if !res.Allowed || res.Degraded {
			t.Fatalf("uma's slots after every run ended: %+v", res)
		}
		if !s.Release() {
			t.Fatal("a slot acquired directly was not released")
		}
	}

	stop()
	got := <-post(a, "uma")
	if got.code != http.StatusServiceUnavailable || got.retry == "" || !strings.Contains(got.body, "#store-unavailable") {
		t.Fatalf("a run with the store stopped: %+v; want 503, a Retry-After and the store-unavailable problem type", got)
	}
	var running verdict.Count
	for _, rc := range mwA.Config.Counters.Snapshot() {
		if rc.Rule == "Running" {
			running = rc
		}
	}
	if o := running.Outcomes; o[verdict.Allowed] != 2 || o[verdict.Denied] != 1 || o[verdict.DegradedDenied] != 1 {
		t.Errorf("Running's counts on a: %v, want 2 allowed (uma's and vic's), 1 denied, 1 degraded_denied", o)
	}
}

// GeneratedSlotsTier: RunTier takes a Running slot on the store first, then
// a RunTokens token (3 an hour per user), both on the store: all or
// nothing across two instances. Two runs hold uma's slots; a third, refused
// by its slot, charges no token, so that after one run ends a third is
// admitted with the third token; once every run has ended a fourth is
// refused by RunTokens, and its slot comes back at once.
func GeneratedSlotsTier(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	s1, r1 := a.RunTier(ctx, "uma", "uma")
	s2, r2 := b.RunTier(ctx, "uma", "uma")
	if !r1.Allowed || !r2.Allowed || r1.Degraded || r2.Degraded || s1.Len() != 1 || s2.Len() != 1 {
		t.Fatalf("two runs of uma's: %+v, %+v", r1, r2)
	}
	if s, r := a.RunTier(ctx, "uma", "uma"); r.Allowed || r.DeniedBy != sharedlimits.RuleRunning || s.Len() != 0 {
		t.Fatalf("a third run with both slots held: %+v, want denied by Running", r)
	}
	s1.Release()
	s3, r3 := b.RunTier(ctx, "uma", "uma")
	if !r3.Allowed || r3.Degraded {
		t.Fatalf("a third run after one ended: %+v, want admitted with the third token (the refused run took none)", r3)
	}
	s2.Release()
	s3.Release()
	if s, r := a.RunTier(ctx, "uma", "uma"); r.Allowed || r.DeniedBy != sharedlimits.RuleRunTokens || s.Len() != 0 {
		t.Fatalf("a fourth run with uma's tokens spent: %+v, want denied by RunTokens", r)
	}
	for range 2 { // the refused run's slot is back: both are free
		s, r := a.Running.Acquire(ctx, "uma")
		if !r.Allowed {
			t.Fatalf("uma's slots after the rate refused a run: %+v, want both free", r)
		}
		s.Release()
	}
}

// GeneratedSlotsPlans: a shared in-flight rule with numbers per plan
// (sharedpolicy.yaml's RunningPlan: 1 at once on free, 3 on pro) holds each
// plan's slots on the store apart, across two instances: a key's 3 pro
// slots taken on both instances leave a fourth refused on either, while the
// same key on free has its 1 slot, and a second is refused; a release on
// one instance frees a slot for the other.
func GeneratedSlotsPlans(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	var held []interface{ Release() bool }
	take := func(l *sharedlimits.Limits, plan sharedlimits.Plan, want bool) {
		t.Helper()
		s, res := l.RunningPlan.Acquire(ctx, plan, "ann")
		if res.Err != nil || res.Degraded || res.Allowed != want {
			t.Fatalf("ann on %v: %+v, want allowed %v", plan, res, want)
		}
		if res.Allowed {
			held = append(held, &s)
		}
	}
	take(a, sharedlimits.PlanPro, true)
	take(b, sharedlimits.PlanPro, true)
	take(a, sharedlimits.PlanPro, true)
	take(b, sharedlimits.PlanPro, false) // pro's 3 held, on both instances
	take(b, sharedlimits.PlanFree, true) // free's own slot
	take(a, sharedlimits.PlanFree, false)
	if !held[0].Release() { // a pro slot, taken on instance a
		t.Fatal("releasing a pro slot")
	}
	take(b, sharedlimits.PlanPro, true)
	for _, s := range held[1:] {
		s.Release()
	}
}

// GeneratedSlotsNumbers: RunningPlan's pro numbers cut at run time, by a
// numbers Set applied to both instances (every instance is given the same
// numbers), while a key holds 3 pro slots across them: no instance admits the
// key until fewer than the new limit are held, whoever releases; the slot
// then taken is held by the new numbers' hold; free's numbers stay; an empty
// Set puts the policy's back on both.
func GeneratedSlotsNumbers(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	apply := func(set overlay.Set) {
		t.Helper()
		for _, l := range []*sharedlimits.Limits{a, b} {
			if err := l.ApplyNumbers(set); err != nil {
				t.Fatal(err)
			}
		}
	}
	var held []atomicslot.Slot
	for i, l := range []*sharedlimits.Limits{a, b, a} {
		s, res := l.RunningPlan.Acquire(ctx, sharedlimits.PlanPro, "cy")
		if !res.Allowed || res.Degraded {
			t.Fatalf("cy's pro slot %d: %+v", i, res)
		}
		held = append(held, s)
	}
	apply(overlay.Set{{Rule: "RunningPlan", Plan: "pro", Numbers: atomicbucket.Numbers{Tokens: 1, Period: 30 * time.Second, Burst: 1}, Pos: "test"}})
	if n, o := b.RunningPlan.NumbersFor(sharedlimits.PlanPro); n.Tokens != 1 || o != atomicbucket.FromOverride {
		t.Fatalf("pro's numbers on b: %v, %v", n, o)
	}
	for i, s := range held {
		for _, l := range []*sharedlimits.Limits{a, b} {
			if _, res := l.RunningPlan.Acquire(ctx, sharedlimits.PlanPro, "cy"); res.Allowed || res.Degraded || res.RetryAfter <= 0 {
				t.Fatalf("cy on pro with %d held under a limit of 1: %+v, want denied with a RetryAfter", 3-i, res)
			}
		}
		if !s.Release() {
			t.Fatalf("releasing cy's pro slot %d", i)
		}
	}
	s, res := b.RunningPlan.Acquire(ctx, sharedlimits.PlanPro, "cy")
	if !res.Allowed || res.Remaining != 0 || res.Reset > 30*time.Second || res.Reset < 29*time.Second {
		t.Fatalf("cy on pro with none held under 1 per 30s: %+v, want admitted, held 30 s", res)
	}
	if _, res := a.RunningPlan.Acquire(ctx, sharedlimits.PlanPro, "cy"); res.Allowed {
		t.Fatalf("a second pro slot of cy's under a limit of 1: %+v", res)
	}
	if f, res := a.RunningPlan.Acquire(ctx, sharedlimits.PlanFree, "cy"); !res.Allowed {
		t.Fatalf("cy's free slot, whose numbers did not change: %+v", res)
	} else {
		f.Release()
	}
	apply(nil)
	for i := range 2 {
		s2, res := a.RunningPlan.Acquire(ctx, sharedlimits.PlanPro, "cy")
		if !res.Allowed {
			t.Fatalf("cy's pro slot %d with the policy's 3 back: %+v", i+2, res)
		}
		defer s2.Release()
	}
	s.Release()
}

// GeneratedSlotsWait: Queued (1 slot a user, waiting up to 1 s for it, on
// the store) through two instances' middleware on real HTTP servers. A job
// on a holds the slot; a second, on b, waits and is admitted (200, not 429)
// once the first ends; a third, with the second running throughout, is
// answered 429 after its 1 s. Then the QueuedJob tier: a job waiting on b
// for the slot a job on a holds takes its QueuedTokens token only once it
// has the slot, and the user's tokens spent (2 an hour, both used by the
// HTTP jobs' tier) deny it, giving the slot back.
func GeneratedSlotsWait(t *testing.T, instance func() *sharedlimits.Limits) {
	entered := make(chan struct{}, 8)
	finish := make(chan struct{}, 8)
	serve := func(l *sharedlimits.Limits) *httptest.Server {
		srv := httptest.NewServer(middleware(t, l).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-finish
		})))
		t.Cleanup(srv.Close)
		return srv
	}
	la, lb := instance(), instance()
	a, b := serve(la), serve(lb)
	post := func(srv *httptest.Server) <-chan int {
		out := make(chan int, 1)
		go func() {
			resp, err := srv.Client().Post(srv.URL+"/queue/uma", "text/plain", nil)
			if err != nil {
				out <- -1
				return
			}
			resp.Body.Close()
			out <- resp.StatusCode
		}()
		return out
	}
	enter := func(what string) {
		t.Helper()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never reached its handler", what)
		}
	}
	first := post(a)
	enter("the first job")
	second := post(b)
	select {
	case <-entered:
		t.Fatal("a second job of uma's ran beside the first: the slot was not held")
	case code := <-second:
		t.Fatalf("the second job, waiting for the slot, answered %d before the first ended", code)
	case <-time.After(300 * time.Millisecond):
	}
	finish <- struct{}{}
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the first job: %d", code)
	}
	enter("the second job, after the first ended")
	start := time.Now()
	if code := <-post(a); code != http.StatusTooManyRequests {
		t.Fatalf("a third job with the second running throughout: %d, want 429", code)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("the third job refused after %v, before its 1 s wait", waited)
	}
	ctx := context.Background()
	got := make(chan sharedlimits.TierResult, 1)
	go func() {
		set, r := lb.QueuedJob(ctx, "uma", "uma")
		if set.Len() != 0 {
			t.Errorf("a refused job holds %d slots", set.Len())
		}
		got <- r
	}()
	time.Sleep(100 * time.Millisecond)
	finish <- struct{}{}
	select {
	case r := <-got:
		if r.Allowed || r.DeniedBy != sharedlimits.RuleQueuedTokens || r.Degraded {
			t.Fatalf("a job that waited for the slot with uma's tokens spent: %+v, want denied by QueuedTokens", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the tier's wait never ended")
	}
	s, r := la.Queued.Acquire(ctx, "uma")
	if !r.Allowed {
		t.Fatalf("the slot the tier gave back: %+v, want free", r)
	}
	s.Release()
}

// GeneratedSlotsLeased: Renders (4 slots a user, each instance leasing up to
// 2) across two instances of the generated package: a's first render
// leases 2 (one idle), b's first leases the other 2; a's second is handed
// out of its lease, and a's third (a's lease all held, the store full) is
// refused, as is b's third; each release goes back to its lease.
func GeneratedSlotsLeased(t *testing.T, instance func() *sharedlimits.Limits) {
	ctx := context.Background()
	a, b := instance(), instance()
	var held []atomicslot.Slot
	for i, c := range []struct {
		l    *sharedlimits.Limits
		want bool
	}{{a, true}, {b, true}, {a, true}, {b, true}, {a, false}, {b, false}} {
		s, r := c.l.Renders.Acquire(ctx, "ida")
		if r.Allowed != c.want || r.Degraded {
			t.Fatalf("render %d: %+v, want allowed %v", i, r, c.want)
		}
		if r.Allowed {
			held = append(held, s)
		}
	}
	if sa, sb := a.Renders.Stats(), b.Renders.Stats(); sa.Held != 2 || sb.Held != 2 {
		t.Fatalf("renders held: a %+v, b %+v, want 2 each", sa, sb)
	}
	for _, s := range held {
		if !s.Release() {
			t.Fatal("a render's release not in effect")
		}
	}
}

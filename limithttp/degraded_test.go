package limithttp

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// A decision a shared rule's failure setting made is counted and observed as
// degraded, with the store error's class; the response is what the decision
// says (a 429 on an verdict.Enforce route, let through on a verdict.Shadow one).
func TestRespondDegraded(t *testing.T) {
	p := verdict.MustPolicy("R", atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 5})
	var events []verdict.Event
	c := &Config{Judge: verdict.Judge{Counters: verdict.NewCounters(verdict.Series{Rule: "R"}), Observer: verdict.ObserverFunc(func(e verdict.Event) { events = append(events, e) })}}
	overload := fmt.Errorf("redis: %w", shared.ErrOverload)
	cases := []struct {
		mode    verdict.Mode
		d       atomicbucket.Decision
		err     error
		degrade bool
		goOn    bool
		want    verdict.Outcome
		class   string
	}{
		{verdict.Enforce, atomicbucket.Decision{Allowed: true, Remaining: 4}, overload, true, true, verdict.DegradedAllowed, "overload"},
		{verdict.Enforce, atomicbucket.Decision{RetryAfter: time.Second}, shared.ErrCircuitOpen, true, false, verdict.DegradedDenied, "circuit_open"},
		{verdict.Shadow, atomicbucket.Decision{RetryAfter: time.Second}, shared.ErrClosed, true, true, verdict.DegradedDenied, "closed"},
		{verdict.Enforce, atomicbucket.Decision{Allowed: true, Remaining: 4}, fmt.Errorf("x: %w", shared.ErrNoStore), false, true, verdict.Allowed, "no_store"},
		{verdict.Enforce, atomicbucket.Decision{RetryAfter: time.Second}, nil, false, false, verdict.Denied, ""},
	}
	for i, tc := range cases {
		res := verdict.Result{Decision: tc.d, Policy: &p, Cost: 1, Degraded: tc.degrade, Err: tc.err}
		w := httptest.NewRecorder()
		if goOn := c.Respond(w, httptest.NewRequest("GET", "/", nil), tc.mode, &res, "k"); goOn != tc.goOn {
			t.Errorf("case %d: went on %v, want %v (status %d)", i, goOn, tc.goOn, w.Code)
		}
		if e := events[len(events)-1]; e.Outcome != tc.want || e.StoreError != tc.class {
			t.Errorf("case %d: event %v with store error %q, want %v and %q", i, e.Outcome, e.StoreError, tc.want, tc.class)
		}
	}
	o := c.Counters.Snapshot()[0].Outcomes
	if o[verdict.DegradedAllowed] != 1 || o[verdict.DegradedDenied] != 2 || o[verdict.Allowed] != 1 || o[verdict.Denied] != 1 {
		t.Errorf("counts %v", o)
	}
}

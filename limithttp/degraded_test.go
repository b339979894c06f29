package limithttp

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// A decision a shared rule's failure setting made is counted and observed as
// degraded, with the store error's class; the response is what the decision
// says (a 429 on an Enforce route, let through on a Shadow one).
func TestRespondDegraded(t *testing.T) {
	p := MustPolicy("R", atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 5})
	var events []Event
	c := &Config{Counters: NewCounters("R"), Observer: ObserverFunc(func(e Event) { events = append(events, e) })}
	timeout := fmt.Errorf("redis: %w", context.DeadlineExceeded)
	cases := []struct {
		mode    Mode
		d       atomicbucket.Decision
		err     error
		degrade bool
		goOn    bool
		want    Outcome
		class   string
	}{
		{Enforce, atomicbucket.Decision{Allowed: true, Remaining: 4}, timeout, true, true, DegradedAllowed, "timeout"},
		{Enforce, atomicbucket.Decision{RetryAfter: time.Second}, shared.ErrCircuitOpen, true, false, DegradedDenied, "circuit_open"},
		{Shadow, atomicbucket.Decision{RetryAfter: time.Second}, shared.ErrClosed, true, true, DegradedDenied, "closed"},
		{Enforce, atomicbucket.Decision{Allowed: true, Remaining: 4}, fmt.Errorf("x: %w", shared.ErrNoStore), false, true, Allowed, "no_store"},
		{Enforce, atomicbucket.Decision{RetryAfter: time.Second}, nil, false, false, Denied, ""},
	}
	for i, tc := range cases {
		res := Result{Decision: tc.d, Policy: &p, Cost: 1, Degraded: tc.degrade, StoreErr: tc.err}
		w := httptest.NewRecorder()
		if goOn := c.Respond(w, httptest.NewRequest("GET", "/", nil), tc.mode, &res, "k"); goOn != tc.goOn {
			t.Errorf("case %d: went on %v, want %v (status %d)", i, goOn, tc.goOn, w.Code)
		}
		if e := events[len(events)-1]; e.Outcome != tc.want || e.StoreError != tc.class {
			t.Errorf("case %d: event %v with store error %q, want %v and %q", i, e.Outcome, e.StoreError, tc.want, tc.class)
		}
	}
	o := c.Counters.Snapshot()[0].Outcomes
	if o[DegradedAllowed] != 1 || o[DegradedDenied] != 2 || o[Allowed] != 1 || o[Denied] != 1 {
		t.Errorf("counts %v", o)
	}
}

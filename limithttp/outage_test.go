package limithttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// A denial made because a shared rule's store could not decide (on_failure:
// deny) is an outage, not a quota: 503, its own problem type, a Retry-After.
// A degraded denial by a local share is still a limit: 429.
func TestOutageAnswered(t *testing.T) {
	p := MustPolicy("Exports", atomicbucket.Limit{Tokens: 3, Period: time.Hour, Burst: 3})
	for _, c := range []struct {
		name     string
		outage   bool
		status   int
		problem  string
		outcome  Outcome
		counters string
	}{
		{"on_failure deny", true, http.StatusServiceUnavailable, ProblemStoreUnavailable, Denied, "degraded_denied"},
		{"local share empty", false, http.StatusTooManyRequests, ProblemQuotaExceeded, Denied, "degraded_denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var seen []Event
			cfg := Config{Observer: ObserverFunc(func(e Event) { seen = append(seen, e) })}
			res := Result{Decision: atomicbucket.Decision{RetryAfter: time.Second}, Policy: &p, Policies: p.Item, Cost: 1,
				Degraded: true, Outage: c.outage, StoreErr: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}
			w := httptest.NewRecorder()
			if cfg.Respond(w, httptest.NewRequest("POST", "/export/7", nil), Enforce, &res, "7") {
				t.Fatal("the request went on")
			}
			if w.Code != c.status {
				t.Errorf("status %d, want %d", w.Code, c.status)
			}
			if ra := w.Header().Get("Retry-After"); ra != "1" {
				t.Errorf("Retry-After %q, want 1", ra)
			}
			var body struct {
				Type   string `json:"type"`
				Status int    `json:"status"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Type != c.problem || body.Status != c.status {
				t.Errorf("body %s (%v): want type %s, status %d", w.Body, err, c.problem, c.status)
			}
			if len(seen) != 1 || seen[0].Outcome.String() != c.counters {
				t.Errorf("observed %+v, want one %s", seen, c.counters)
			}
		})
	}
}

// A generated constructor given nil hooks names every one, not the first.
func TestNilHooks(t *testing.T) {
	for _, c := range []struct {
		nils []bool
		want string
	}{
		{[]bool{false, false, false}, ""},
		{[]bool{false, true, false}, "limits: NewMiddleware: Hooks.UserID is nil"},
		{[]bool{true, false, true}, "limits: NewMiddleware: Hooks.PlanOf and Hooks.TenantOf are nil"},
		{[]bool{true, true, true}, "limits: NewMiddleware: Hooks.PlanOf, Hooks.UserID and Hooks.TenantOf are nil"},
	} {
		err := NilHooks("limits: NewMiddleware: Hooks.", []string{"PlanOf", "UserID", "TenantOf"}, c.nils...)
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && got != c.want {
			t.Errorf("NilHooks(%v) = %v, want %q", c.nils, err, c.want)
		}
	}
}

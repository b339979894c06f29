package limithttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// A denial made because a shared rule's store could not decide (on_failure:
// deny) is an outage, not a quota: 503, its own problem type, a Retry-After.
// A degraded denial by a local share is still a limit: 429.
func TestOutageAnswered(t *testing.T) {
	p := verdict.MustPolicy("Exports", atomicbucket.Limit{Tokens: 3, Period: time.Hour, Burst: 3})
	for _, c := range []struct {
		name     string
		outage   bool
		status   int
		problem  string
		outcome  verdict.Outcome
		counters string
	}{
		{"on_failure deny", true, http.StatusServiceUnavailable, ProblemStoreUnavailable, verdict.Denied, "degraded_denied"},
		{"local share empty", false, http.StatusTooManyRequests, ProblemQuotaExceeded, verdict.Denied, "degraded_denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var seen []verdict.Event
			cfg := Config{Judge: verdict.Judge{Observer: verdict.ObserverFunc(func(e verdict.Event) { seen = append(seen, e) })}}
			res := verdict.Result{Decision: atomicbucket.Decision{RetryAfter: time.Second}, Policy: &p, Policies: p.Item, Cost: 1,
				Degraded: true, Outage: c.outage, Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}
			w := httptest.NewRecorder()
			if cfg.Respond(w, httptest.NewRequest("POST", "/export/7", nil), verdict.Enforce, &res, "7") {
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

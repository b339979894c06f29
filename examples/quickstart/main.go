// Command quickstart is a service's use of limitgen, as small as it gets: a
// policy, a tool line in go.mod, and a go:generate directive.
package main

//go:generate go tool gen -policy policy.yaml -out limits

import (
	"fmt"
	"net/http"

	"example.com/quickstart/limits"
)

// accounts is the service's own record of each user's plan, as stored names.
// The plan must come from records like these (or a verified token), never
// from anything the client sends.
var accounts = map[string]string{"alice": "free", "bob": "pro"}

// planOf returns user's plan; unknown users and unknown names get the free plan.
func planOf(user string) limits.Plan {
	if p, ok := limits.ParsePlan(accounts[user]); ok {
		return p
	}
	return limits.PlanFree
}

// server answers requests under one set of limiters: limits.Default in main,
// a fresh set in each test.
type server struct{ lims *limits.Limits }

// handle admits a request of user, or answers 429 with Retry-After.
func (s server) handle(w http.ResponseWriter, user string) {
	d := s.lims.Request(planOf(user), user)
	if !d.Allowed {
		if v, ok := d.RetryAfterHeader(); ok {
			w.Header().Set("Retry-After", v)
			http.Error(w, "rate limited by "+d.DeniedBy.String(), http.StatusTooManyRequests)
		} else { // the cost exceeds the burst: waiting cannot help
			http.Error(w, "request too large for its rate limit", http.StatusRequestEntityTooLarge)
		}
		return
	}
	fmt.Fprintf(w, "ok, %d left\n", d.Remaining)
}

func main() {
	s := server{lims: limits.Default}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// In a real service the user comes from authentication.
		s.handle(w, r.Header.Get("X-User"))
	})
	http.ListenAndServe("127.0.0.1:8080", nil)
}

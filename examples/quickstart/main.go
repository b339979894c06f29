// Command quickstart is a service's use of limitgen, as small as it gets: a
// policy, a tool line in go.mod, and a go:generate directive.
package main

//go:generate go tool gen -policy policy.yaml -out limits

import (
	"fmt"
	"net/http"

	"example.com/quickstart/limits"
)

// handle admits a request of user on plan, or answers 429 with Retry-After.
func handle(w http.ResponseWriter, plan limits.Plan, user string) {
	d := limits.Request(plan, user)
	if !d.Allowed {
		w.Header().Set("Retry-After", fmt.Sprint(int(d.RetryAfter.Seconds()+0.999)))
		http.Error(w, "rate limited by "+d.DeniedBy, http.StatusTooManyRequests)
		return
	}
	fmt.Fprintf(w, "ok, %d left\n", d.Remaining)
}

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		plan := limits.PlanFree
		if r.Header.Get("X-Plan") == "pro" {
			plan = limits.PlanPro
		}
		handle(w, plan, r.Header.Get("X-User"))
	})
	http.ListenAndServe("127.0.0.1:8080", nil)
}

package limithttp

import (
	"net/http"
	"slices"
	"testing"
)

// Uncovered: the patterns a service registers that a policy's routes leave
// (in part) unlimited, each judged by requests of its shape.
func TestUncovered(t *testing.T) {
	rt := MustRouter("POST /v1/login", "GET /v1/export/{account}", "/v1/", "GET api.example.com/admin/{$}")
	match := func(r *http.Request) int { i, _ := rt.Match(r); return i }
	got := Uncovered([]string{
		"GET /v1/things",                // under /v1/: covered
		"/v1/{rest...}",                 // covered
		"POST /v1/login",                // covered
		"/login",                        // no route
		"GET /admin/",                   // no route (the policy's admin route names a host)
		"GET api.example.com/admin/",    // only its root is covered, not below
		"GET api.example.com/admin/{$}", // covered
		"/",                             // the whole site: only /v1/ is covered
		"GET /export/{account}",         // no route
		"GET /bad pattern{",             // does not parse
		"/login",                        // once
	}, match)
	want := []string{"/", "/login", "GET /admin/", "GET /bad pattern{", "GET /export/{account}", "GET api.example.com/admin/"}
	if !slices.Equal(got, want) {
		t.Errorf("Uncovered = %q\nwant        %q", got, want)
	}
}

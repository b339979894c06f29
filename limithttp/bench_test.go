package limithttp

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// nopWriter is a ResponseWriter that allocates nothing: its header map is
// reused, so the benchmarks count what Respond allocates, not the writer.
type nopWriter struct {
	h    http.Header
	code int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(code int)        { w.code = code }

// BenchmarkRespond is the fields of an allowed request (and of a denied one)
// as Respond sets them: the allocations are the RateLimit string and the
// array the header values share.
func BenchmarkRespond(b *testing.B) {
	l := atomicbucket.Limit{Tokens: 1e6, Period: time.Second, Burst: 1e6}
	p := verdict.MustPolicy("PerUser", l)
	r := httptest.NewRequest("GET", "/", nil)
	for _, c := range []struct {
		name    string
		headers HeaderStyle
		d       atomicbucket.Decision
	}{
		{"allowed/ietf", HeadersIETF, atomicbucket.Decision{Allowed: true, Remaining: 999_998, Reset: 2 * time.Microsecond}},
		{"allowed/legacy", HeadersLegacy, atomicbucket.Decision{Allowed: true, Remaining: 999_998, Reset: 2 * time.Microsecond}},
		{"denied/ietf", HeadersIETF, atomicbucket.Decision{RetryAfter: 1500 * time.Millisecond, Reset: 2 * time.Second}},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := Config{Headers: c.headers, Judge: verdict.Judge{Jitter: 0.5, Counters: verdict.NewCounters(verdict.Series{Rule: "PerUser"})}}
			w := &nopWriter{h: http.Header{}}
			res := verdict.Result{Decision: c.d, Policy: &p, Policies: p.Item, Cost: 1}
			b.ReportAllocs()
			for b.Loop() {
				cfg.Respond(w, r, verdict.Enforce, &res, "192.0.2.1")
			}
		})
	}
}

// BenchmarkCountersParallel backs verdict.Counters' claim: cores counting at once do
// not contend. impl=striped is verdict.Counters.Add from every core; impl=shared is
// one atomic counter for all of them, what a naive counter does.
func BenchmarkCountersParallel(b *testing.B) {
	b.Run("impl=striped", func(b *testing.B) {
		c := verdict.NewCounters(verdict.Series{Rule: "PerUser"})
		j := &verdict.Judge{Counters: c}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				j.Record(verdict.Event{Outcome: verdict.Allowed})
			}
		})
		if got := c.Snapshot()[0].Outcomes[verdict.Allowed]; got != uint64(b.N) {
			b.Fatalf("counted %d of %d", got, b.N)
		}
	})
	b.Run("impl=shared", func(b *testing.B) {
		var n atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n.Add(1)
			}
		})
	})
}

// BenchmarkRouter is the middleware's route lookup beside http.ServeMux's
// (Handler: the same answer, with a read lock and, off the simplest paths,
// allocations).
func BenchmarkRouter(b *testing.B) {
	rt := MustRouter(routePatterns...)
	mux := http.NewServeMux()
	for _, p := range routePatterns {
		mux.Handle(p, http.NotFoundHandler())
	}
	for _, target := range []string{"/hello", "/v1/users/7", "/v1/things/deep", "/nothing/here"} {
		r := httptest.NewRequest("GET", target, nil)
		b.Run("path="+target+"/impl=router", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rt.Match(r)
			}
		})
		b.Run("path="+target+"/impl=servemux", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				mux.Handler(r)
			}
		})
	}
}

// tenRoutes is a policy's ten routes, as an API's are: literal paths by
// method, and a few with a wildcard.
var tenRoutes = []string{
	"GET /v1/users", "POST /v1/users", "GET /v1/users/{id}", "DELETE /v1/users/{id}",
	"POST /v1/login", "POST /v1/upload", "GET /v1/export/{account}", "GET /v1/health",
	"GET /v1/items", "/v1/",
}

// tenLiteral is the switch the generator writes over tenRoutes' literal
// paths (LiteralRoutes), for MustRouterFunc.
func tenLiteral(method, path string) int {
	switch path {
	case "/v1/health":
		if method == "GET" || method == "HEAD" {
			return 8
		}
	case "/v1/items":
		if method == "GET" || method == "HEAD" {
			return 9
		}
	case "/v1/login":
		if method == "POST" {
			return 5
		}
	case "/v1/upload":
		if method == "POST" {
			return 6
		}
	case "/v1/users":
		switch method {
		case "GET", "HEAD":
			return 1
		case "POST":
			return 2
		}
	}
	return 0
}

// BenchmarkRouterTenRoutes is Wrap's route matching for a ten-route policy,
// as generated middleware builds its router (MustRouterFunc): a literal
// path, a path with a wildcard, and one only the catch-all covers.
func BenchmarkRouterTenRoutes(b *testing.B) {
	rt := MustRouterFunc(tenLiteral, tenRoutes...)
	for _, c := range []struct{ method, target string }{{"POST", "/v1/upload"}, {"GET", "/v1/users/42"}, {"GET", "/v1/other"}} {
		r := httptest.NewRequest(c.method, c.target, nil)
		want, _ := rt.Match(r)
		b.Run("path="+c.target, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got, _ := rt.Match(r); got != want {
					b.Fatal(got)
				}
			}
		})
	}
}

package routertest

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limithttp/routertest/routes"
	"github.com/limitgen/limitgen/verdict"
)

// policyRoutes are policy.yaml's routes: each pattern and the rule that
// limits it.
var policyRoutes = []struct{ pattern, rule string }{
	{"POST /v1/login", "Login"},
	{"POST /v1/accounts/{id}/checkout", "Checkout"},
	{"GET /v1/files/{path...}", "Files"},
	{"GET /v1/users/{id}", "User"},
	{"DELETE /v1/users/{id}", "DeleteUser"},
	{"GET /v1/users/{id}/posts/{post}", "Post"},
	{"/v1/admin/", "Admin"},
	{"GET /v1/{$}", "Root"},
	{"POST /v1/jobs/{id}", "Jobs"},
}

// splitPattern is a ServeMux pattern's method ("" for any) and path.
func splitPattern(p string) (method, path string) {
	if m, rest, ok := strings.Cut(p, " "); ok {
		return m, rest
	}
	return "", p
}

// chiPath is a ServeMux path pattern as chi spells it: a catch-all or a
// subtree is "*", the end anchor is the path up to it.
func chiPath(p string) string {
	if anchored, ok := strings.CutSuffix(p, "{$}"); ok {
		return anchored
	}
	if i := strings.Index(p, "{path...}"); i >= 0 {
		return p[:i] + "*"
	}
	if strings.HasSuffix(p, "/") {
		return p + "*"
	}
	return p
}

// gorillaRoute registers h for a ServeMux path pattern on r as gorilla/mux
// spells it: a catch-all or a subtree is a path prefix.
func gorillaRoute(r *mux.Router, method, p string, h http.Handler) {
	var route *mux.Route
	switch {
	case strings.HasSuffix(p, "{path...}"):
		route = r.PathPrefix(strings.TrimSuffix(p, "{path...}")).Handler(h)
	case strings.HasSuffix(p, "{$}"):
		route = r.Path(strings.TrimSuffix(p, "{$}")).Handler(h)
	case strings.HasSuffix(p, "/"):
		route = r.PathPrefix(p).Handler(h)
	default:
		route = r.Path(p).Handler(h)
	}
	if method != "" {
		route.Methods(method)
	}
}

// mounting is one way a service puts the middleware in front of its router,
// as the docs name them; handler(i) is the service's handler of policy route
// i.
type mounting struct {
	name  string
	build func(mw *routes.Middleware, handler func(i int) http.Handler) http.Handler
}

var mountings = []mounting{
	{"ServeMux/Wrap", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		m := http.NewServeMux()
		for i, r := range policyRoutes {
			m.Handle(r.pattern, handler(i))
		}
		return mw.Wrap(m)
	}},
	{"ServeMux/Wrap each handler", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		m := http.NewServeMux()
		for i, r := range policyRoutes {
			m.Handle(r.pattern, mw.Wrap(handler(i)))
		}
		return m
	}},
	{"ServeMux/NewServeMux", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		m := mw.NewServeMux()
		for i, r := range policyRoutes {
			m.Handle(r.pattern, handler(i))
		}
		return m
	}},
	{"chi/Use", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		r := chi.NewRouter()
		r.Use(mw.Wrap)
		for i, pr := range policyRoutes {
			chiHandle(r, pr.pattern, handler(i))
		}
		return r
	}},
	{"chi/With", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		r := chi.NewRouter()
		for i, pr := range policyRoutes {
			chiHandle(r.With(mw.Wrap), pr.pattern, handler(i))
		}
		return r
	}},
	{"chi/Use, Route(/v1)", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		r := chi.NewRouter()
		r.Use(mw.Wrap)
		r.Route("/v1", func(sub chi.Router) {
			for i, pr := range policyRoutes {
				m, p := splitPattern(pr.pattern)
				chiHandle(sub, strings.TrimSpace(m+" "+strings.TrimPrefix(p, "/v1")), handler(i))
			}
		})
		return r
	}},
	{"gorilla/Use", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		return gorillaRouter(mw, handler, func(*mux.Router) {})
	}},
	{"gorilla/Use, SkipClean", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		return gorillaRouter(mw, handler, func(r *mux.Router) { r.SkipClean(true) })
	}},
	{"gorilla/Use, UseEncodedPath", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		return gorillaRouter(mw, handler, func(r *mux.Router) { r.UseEncodedPath() })
	}},
	{"gorilla/Use, SkipClean and UseEncodedPath", func(mw *routes.Middleware, handler func(int) http.Handler) http.Handler {
		return gorillaRouter(mw, handler, func(r *mux.Router) { r.SkipClean(true).UseEncodedPath() })
	}},
}

func chiHandle(r chi.Router, pattern string, h http.Handler) {
	m, p := splitPattern(pattern)
	p = chiPath(p)
	if p == "" {
		p = "/"
	}
	if m == "" {
		r.Handle(p, h)
		return
	}
	r.Method(m, p, h)
}

func gorillaRouter(mw *routes.Middleware, handler func(int) http.Handler, configure func(*mux.Router)) http.Handler {
	r := mux.NewRouter()
	configure(r)
	r.Use(mw.Wrap)
	for i, pr := range policyRoutes {
		m, p := splitPattern(pr.pattern)
		gorillaRoute(r, m, p, handler(i))
	}
	return r
}

// harness is a mounting, built once, with what each request did: the
// policy routes whose handlers ran and the decisions the middleware made.
type harness struct {
	mounting
	h       http.Handler
	now     atomicbucket.Time
	ran     []int           // the routes whose handlers ran
	decided []verdict.Event // the decisions
}

// newHarness builds m over fresh limits. Each request is a second after the
// one before, when step is set (the buckets refill: each request is decided
// on its own), or at one instant.
func newHarness(t testing.TB, m mounting) *harness {
	h := &harness{mounting: m, now: atomicbucket.Time(time.Hour)}
	mw, err := routes.NewMiddleware(routes.New())
	if err != nil {
		t.Fatal(err)
	}
	mw.Clock = func() atomicbucket.Time { return h.now }
	mw.Config.Observer = verdict.ObserverFunc(func(e verdict.Event) { h.decided = append(h.decided, e) })
	h.h = m.build(mw, func(i int) http.Handler {
		return http.HandlerFunc(func(http.ResponseWriter, *http.Request) { h.ran = append(h.ran, i) })
	})
	return h
}

// serve serves req and fails t when a handler of a policy route ran for it
// without a decision of that route by its rule; it returns the response's
// status.
func (h *harness) serve(t testing.TB, req *http.Request) int {
	h.ran, h.decided = h.ran[:0], h.decided[:0]
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, req)
	for _, i := range h.ran {
		pr := policyRoutes[i]
		if !slices.ContainsFunc(h.decided, func(e verdict.Event) bool { return e.Route == pr.pattern && e.Rule == pr.rule }) {
			t.Errorf("%s: %s %s (URL.Path %q, RawPath %q): the handler of %q ran, but the middleware decided %v",
				h.name, req.Method, req.RequestURI, req.URL.Path, req.URL.RawPath, pr.pattern, routesOf(h.decided))
		}
	}
	return w.Code
}

func routesOf(events []verdict.Event) []string {
	out := []string{}
	for _, e := range events {
		out = append(out, e.Route+" by "+e.Rule+" ("+e.Outcome.String()+")")
	}
	return out
}

// request parses a request line as a server does (http.ReadRequest), so
// the URL is exactly what a router behind a server gets; nil when a server
// would refuse it.
func request(method, target string) *http.Request {
	if strings.ContainsAny(method+target, " \r\n\t") || method == "" || target == "" {
		return nil
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: example.com\r\n\r\n")))
	if err != nil {
		return nil
	}
	r.RemoteAddr = "192.0.2.1:1234"
	return r
}

// paths are the spellings that routers read differently, each beside the
// routes above.
var paths = []string{
	"/v1/login", "/v1/login/", "//v1/login", "/v1//login", "/v1/./login", "/v1/x/../login", "/V1/login", "/v1/LOGIN",
	"/v1/accounts/acme/checkout", "/v1/accounts/../checkout", "/v1/accounts/./checkout", "/v1/accounts/%2e%2e/checkout",
	"/v1/accounts/%2E/checkout", "/v1/accounts//checkout", "/v1/accounts/a%2Fb/checkout", "/v1/accounts/a%2F..%2Fb/checkout",
	"/v1/accounts/acme/checkout/", "/v1/accounts/acme//checkout", "/v1/accounts/%ff%fe/checkout", "/v1/accounts/\xff/checkout",
	"/v1/files/../../etc/passwd", "/v1/files/a/../../etc/passwd", "/v1/files/%2e%2e/%2e%2e/etc/passwd", "/v1/files/a%2F..%2F..%2Fetc",
	"/v1/files", "/v1/files/", "/v1/files//x", "/v1/files/./x",
	"/v1/users/7", "/v1/users/7/", "/v1/users/..", "/v1/users/.", "/v1/users/%2e", "/v1/users//", "/v1/users/a%2Fb",
	"/v1/users/7/posts/9", "/v1/users/7/posts/9/..", "/v1/users/7/posts/../posts/9", "/v1/users/7%2Fposts%2F9",
	"/v1/users/7/posts/%2e%2e", "/v1/users/../users/7", "/v1/admin", "/v1/admin/", "/v1/admin/x/../../users/7",
	"/v1/admin/../users/7", "/v1/admin%2F..%2Fusers/7", "/v1/", "/v1", "/v1/.", "/v1//", "/v1/%2e", "/v1/x/..",
	"/v1/admin/%2e%2e/login", "/v1/users/7/posts/9%2F..%2F..%2F..%2Fadmin",
	"/v1/jobs/j1", "/v1/jobs/../jobs/j1", "/v1/jobs/./j1", "/v1/jobs/%2e%2e", "/v1/jobs/j1/", "/v1/jobs//j1", "/v1/x/../jobs/j1",
}

var methods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get"}

// Every mounting the docs name, every spelling: whatever the router hands to
// a handler of a policy route was decided by that route's rule.
func TestEveryDispatchIsDecided(t *testing.T) {
	for _, m := range mountings {
		t.Run(m.name, func(t *testing.T) {
			h := newHarness(t, m)
			ran := 0
			for _, p := range paths {
				for _, method := range methods {
					req := request(method, p)
					if req == nil {
						continue
					}
					h.now += atomicbucket.Time(time.Minute)
					h.serve(t, req)
					ran += len(h.ran)
				}
			}
			if ran < 10 {
				t.Errorf("the handlers ran %d times: the routes are not registered as the policy's", ran)
			}
		})
	}
}

// The outside check's reproduction: behind chi, POST /v1/accounts/../checkout
// reached the {id} route's handler five times on a burst of 2 with no
// decision; GET /v1/files/../../etc/passwd likewise on the catch-all. Now
// the third is denied, under every mounting that dispatches it.
func TestDotSegmentsAreLimited(t *testing.T) {
	for _, m := range mountings {
		for _, c := range []struct{ method, target, route string }{
			{"POST", "/v1/accounts/../checkout", "POST /v1/accounts/{id}/checkout"},
			{"GET", "/v1/files/../../etc/passwd", "GET /v1/files/{path...}"},
		} {
			h := newHarness(t, m)
			ran := 0
			for i := range 5 {
				code := h.serve(t, request(c.method, c.target))
				ran += len(h.ran)
				if i >= 2 && len(h.ran) > 0 {
					t.Errorf("%s: %s %s #%d reached a handler (status %d) beyond the burst of 2", m.name, c.method, c.target, i+1, code)
				}
			}
			if strings.HasPrefix(m.name, "chi/Use") && ran != 2 {
				t.Errorf("%s: %s %s ran the handler %d times, want 2 (the burst)", m.name, c.method, c.target, ran)
			}
		}
	}
}

// FuzzDispatch drives every mounting with the fuzzer's method and path: a
// handler of a policy route that runs without that route's decision fails.
func FuzzDispatch(f *testing.F) {
	for i, p := range paths {
		f.Add(uint8(i), p)
	}
	hs := make([]*harness, len(mountings))
	for i, m := range mountings {
		hs[i] = newHarness(f, m)
	}
	f.Fuzz(func(t *testing.T, method uint8, target string) {
		req := request(methods[int(method)%len(methods)], target)
		if req == nil {
			return
		}
		for _, h := range hs {
			h.now += atomicbucket.Time(time.Minute)
			r := req.Clone(req.Context())
			h.serve(t, r)
		}
	})
}

// Every mounting, every spelling of a jobs route (an in-flight rule, one slot
// an id): while the handler runs, the slot is held; once the request is
// served, it is back, however the router read the path, and a handler never
// runs while another request of its id holds the slot.
func TestSlotsUnderEveryMounting(t *testing.T) {
	for _, m := range mountings {
		t.Run(m.name, func(t *testing.T) {
			lims := routes.New()
			mw, err := routes.NewMiddleware(lims)
			if err != nil {
				t.Fatal(err)
			}
			now := atomicbucket.Time(time.Hour)
			mw.Clock = func() atomicbucket.Time { return now }
			jobs := slices.IndexFunc(policyRoutes, func(r struct{ pattern, rule string }) bool { return r.rule == "Jobs" })
			held, ran := int64(-1), 0
			h := m.build(mw, func(i int) http.Handler {
				return http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
					if i == jobs {
						held, ran = lims.Jobs.Stats().Held, ran+1
					}
				})
			})
			for _, p := range paths {
				if !strings.Contains(p, "jobs") {
					continue
				}
				for _, method := range []string{"POST", "GET"} {
					req := request(method, p)
					if req == nil {
						continue
					}
					held = -1
					h.ServeHTTP(httptest.NewRecorder(), req)
					if held == 0 {
						t.Errorf("%s %s: the jobs handler ran holding no slot", method, p)
					}
					if s := lims.Jobs.Stats(); s.Held != 0 {
						t.Fatalf("%s %s: %d slots held after the request was served", method, p, s.Held)
					}
				}
			}
			if ran < 1 {
				t.Errorf("the jobs handler ran %d times: the route is not registered as the policy's", ran)
			}
		})
	}
}

package limits_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
	"github.com/limitgen/limitgen/verdict"
)

// service is policy.yaml's http: section in front of handlers that answer
// "ok", over limiters of its own, at a time the test sets.
type service struct {
	lim *limits.Limits
	mw  *limits.Middleware
	mux *limits.ServeMux
	now atomicbucket.Time
}

// The users the hooks know: their plans. Any other user has none (401).
var users = map[string]limits.Plan{"alice": limits.PlanFree, "bob": limits.PlanFree, "carol": limits.PlanPro}

// counts is the middleware's counts of a route's series for rule (the
// route's tier's, when it checks one).
func (s *service) counts(t *testing.T, route, rule string) [7]uint64 {
	t.Helper()
	for _, c := range s.mw.Config.Counters.Snapshot() {
		if c.Route == route && c.Rule == rule {
			return c.Outcomes
		}
	}
	t.Fatalf("no series for %s, rule %s", route, rule)
	return [7]uint64{}
}

func newService(t *testing.T) *service {
	t.Helper()
	s := &service{now: atomicbucket.Now(), lim: limits.New()}
	mw, err := limits.NewMiddleware(s.lim, limits.Hooks{
		UserID: func(r *http.Request) (string, bool) {
			u := r.Header.Get("X-Test-User") // stands for a verified token's subject
			_, ok := users[u]
			return u, ok
		},
		PlanOf: func(r *http.Request) (limits.Plan, bool) {
			p, ok := users[r.Header.Get("X-Test-User")]
			return p, ok
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mw.Clock = func() atomicbucket.Time { return s.now }
	mw.Config.Observer = nil // the denial log is tested in limithttp
	s.mw, s.mux = mw, mw.NewServeMux()
	ok := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	for _, p := range []string{"POST /v1/login", "POST /v1/upload", "GET /v1/export/{account}", "POST /v1/exports", "POST /v1/reports", "GET /v1/tenants/{tenant}/users/{user}", "/v1/"} {
		s.mux.HandleFunc(p, ok)
	}
	s.mux.HandleFunc("POST /v1/chat", chat)     // settle_test.go
	s.mux.HandleFunc("POST /v1/complete", chat) // settle_test.go (TestCompleteSettlesFromContext wraps its own)
	s.mux.HandleFunc("GET /health", ok)         // not in the policy: never limited
	return s
}

type call struct {
	method, path, remote string
	hdr                  map[string]string
	advance              time.Duration // moves the clock before the request

	code    int
	fields  [2]string // RateLimit-Policy and RateLimit; "" for absent
	retry   string    // Retry-After; "" for absent
	problem string    // the violated policy of a 429, "400" or "401" for the other problems
}

func (s *service) run(t *testing.T, calls []call) {
	t.Helper()
	for i, c := range calls {
		s.now = s.now.Add(c.advance)
		r := httptest.NewRequest(c.method, c.path, nil)
		if c.remote != "" {
			r.RemoteAddr = c.remote
		}
		for k, v := range c.hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		s.mux.ServeHTTP(w, r)
		got := [2]string{w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit")}
		if w.Code != c.code || got != c.fields || w.Header().Get("Retry-After") != c.retry {
			t.Errorf("call %d %s %s: %d %q Retry-After %q; want %d %q %q", i, c.method, c.path,
				w.Code, got, w.Header().Get("Retry-After"), c.code, c.fields, c.retry)
		}
		for _, v := range got {
			if v == "" {
				continue
			}
			if _, err := httpsfv.UnmarshalList([]string{v}); err != nil {
				t.Errorf("call %d: %q is not a Structured Fields list: %v", i, v, err)
			}
		}
		if c.code == 200 {
			if w.Body.String() != "ok" {
				t.Errorf("call %d: body %q, want the handler's", i, w.Body.String())
			}
			continue
		}
		var p struct {
			Status   int      `json:"status"`
			Violated []string `json:"violated-policies"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("call %d: problem body %q (%v), Content-Type %q", i, w.Body.String(), err, w.Header().Get("Content-Type"))
			continue
		}
		if c.code == 401 {
			// RFC 9110: a 401 carries a challenge (the policy's default, Bearer);
			// the body names no function of the service.
			if got := w.Header().Get("WWW-Authenticate"); got != "Bearer" {
				t.Errorf("call %d: a 401 with WWW-Authenticate %q, want Bearer", i, got)
			}
			if strings.Contains(w.Body.String(), "UserID") {
				t.Errorf("call %d: the 401's body names the service's hook: %s", i, w.Body.String())
			}
		} else if got := w.Header().Get("WWW-Authenticate"); got != "" {
			t.Errorf("call %d: a %d with WWW-Authenticate %q", i, c.code, got)
		}
		want := c.problem
		if c.code == 429 {
			want = "429 " + c.problem
		}
		if gotP := strings.TrimSpace(strconv.Itoa(p.Status) + " " + strings.Join(p.Violated, ",")); gotP != want {
			t.Errorf("call %d: problem %q, want %q", i, gotP, want)
		}
	}
}

func TestMiddlewareUpload(t *testing.T) {
	s := newService(t)
	const pol = `"Upload";q=1000;w=10`
	alice := map[string]string{"X-Test-User": "alice", "X-Upload-Units": "600"}
	with := func(units string) map[string]string {
		return map[string]string{"X-Test-User": "alice", "X-Upload-Units": units}
	}
	s.run(t, []call{
		{"POST", "/v1/upload", "", alice, 0, 200, [2]string{pol, `"Upload";r=400;t=6`}, "", ""},
		// 200 short: 2 s away, but r/t may not outrun 100/s: t = 4, and Retry-After (2 s, at most
		// 50% jitter: 3) is never earlier than t.
		{"POST", "/v1/upload", "", alice, 0, 429, [2]string{pol, `"Upload";r=400;t=4`}, "4", "Upload"},
		{"POST", "/v1/upload", "", with("5000"), 0, 400, [2]string{}, "", "400"},                                                                               // above max: refused, nothing taken
		{"POST", "/v1/upload", "", with(strings.Repeat("9", 1000)), 0, 400, [2]string{}, "", "400"},                                                            // 1,000 digits
		{"POST", "/v1/upload", "", with("abc"), 0, 200, [2]string{pol, `"Upload";r=390;t=7`}, "", ""},                                                          // unreadable: the default, 10
		{"POST", "/v1/upload", "", with("-5"), 0, 200, [2]string{pol, `"Upload";r=380;t=7`}, "", ""},                                                           // likewise
		{"POST", "/v1/upload", "", with("0x10"), 0, 200, [2]string{pol, `"Upload";r=370;t=7`}, "", ""},                                                         // likewise
		{"POST", "/v1/upload", "", with("1e9"), 0, 200, [2]string{pol, `"Upload";r=360;t=7`}, "", ""},                                                          // likewise
		{"POST", "/v1/upload", "", with("0"), 0, 200, [2]string{pol, `"Upload";r=350;t=7`}, "", ""},                                                            // a free request would turn the limit off
		{"POST", "/v1/upload", "", map[string]string{"X-Upload-Units": "1"}, 0, 401, [2]string{}, "", "401"},                                                   // no user: refused, not pooled
		{"POST", "/v1/upload", "", map[string]string{"X-Test-User": "mallory"}, 0, 401, [2]string{}, "", "401"},                                                // unknown user
		{"POST", "/v1/upload", "", with("1000"), 7 * time.Second, 200, [2]string{pol, `"Upload";r=0;t=10`}, "", ""},                                            // full again after 6.5 s
		{"GET", "/v1/upload", "", alice, 0, 200, [2]string{`"PerUser";q=50;w=5, "PerEndpoint";q=200;w=12, "Global";q=4000;w=2`, `"PerUser";r=49;t=5`}, "", ""}, // GET is the /v1/ tier
		{"GET", "/health", "", nil, 0, 200, [2]string{}, "", ""},
	})
	c := s.counts(t, "POST /v1/upload", "Upload")
	if c[verdict.Allowed] != 7 || c[verdict.Denied] != 1 || c[verdict.TooCostly] != 2 || c[verdict.MissingKey] != 2 {
		t.Errorf("Upload's counts: %v", c)
	}
}

func TestMiddlewareTier(t *testing.T) {
	s := newService(t)
	const free = `"PerUser";q=50;w=5, "PerEndpoint";q=200;w=12, "Global";q=4000;w=2`
	const pro = `"PerUser";q=500;w=5, "PerEndpoint";q=200;w=12, "Global";q=4000;w=2`
	bob := map[string]string{"X-Test-User": "bob"}
	calls := []call{
		{"GET", "/v1/items", "", bob, 0, 200, [2]string{free, `"PerUser";r=49;t=5`}, "", ""},
		// carol is on pro: PerUser has 499 left, the route's PerEndpoint 198 of 200, so PerEndpoint
		// is the rule that constrains, and t paces its 198 at 1000/min.
		{"DELETE", "/v1/items/7", "", map[string]string{"X-Test-User": "carol"}, 0, 200, [2]string{pro, `"PerEndpoint";r=198;t=12`}, "", ""},
	}
	// Bob's next 48 requests at the same instant: r counts down from 48, and t is the later of
	// the refill (0.1 s per token taken) and r paced at 10/s, rounded up: worked out by hand.
	const ts = "55555555" + "4444444444" + "33333333333" + "4444444444" + "555555555" // r = 48 … 1
	for i, r := 0, 48; r >= 1; i, r = i+1, r-1 {
		calls = append(calls, call{"GET", "/v1/x", "", bob, 0, 200, [2]string{free, `"PerUser";r=` + strconv.Itoa(r) + `;t=` + ts[i:i+1]}, "", ""})
	}
	calls = append(calls,
		call{"GET", "/v1/x", "", bob, 0, 200, [2]string{free, `"PerUser";r=0;t=1`}, "", ""},
		call{"GET", "/v1/x", "", bob, 0, 429, [2]string{free, `"PerUser";r=0;t=1`}, "1", "PerUser"},
		call{"GET", "/v1/x", "", bob, 100 * time.Millisecond, 200, [2]string{free, `"PerUser";r=0;t=1`}, "", ""},
		call{"GET", "/v1/x", "", nil, 0, 401, [2]string{}, "", "401"},
	)
	s.run(t, calls)
	if got := s.counts(t, "/v1/", "PerUser")[verdict.Denied]; got != 1 {
		t.Errorf("PerUser denied %d, want 1", got)
	}
}

// Keys: behind the trusted load balancer (10.0.0.0/8) the client is the address
// it appended, whatever the client wrote to the left; from anywhere else the
// header is ignored. Login starts a new key at 3 tokens.
func TestMiddlewareClientIP(t *testing.T) {
	s := newService(t)
	const pol = `"Login";q=5;w=10`
	for i, c := range []struct {
		remote, xff string
		code        int
		rl          string // the start of RateLimit: its t depends on where the key places its grid
	}{
		{"10.0.0.1:5000", "6.6.6.6, 198.51.100.7", 200, `"Login";r=2;`},
		{"10.0.0.1:5000", "7.7.7.7, 198.51.100.7", 200, `"Login";r=1;`}, // the same client, another claim
		{"10.0.0.2:6000", "198.51.100.7", 200, `"Login";r=0;`},
		{"10.0.0.1:5000", "1.1.1.1, 2.2.2.2, 198.51.100.7", 429, `"Login";r=0;`},
		{"203.0.113.5:7000", "198.51.100.7", 200, `"Login";r=2;`}, // not a trusted peer: the header is ignored
		{"203.0.113.5:7000", "198.51.100.8", 200, `"Login";r=1;`},
		{"203.0.113.5:7000", "10.0.0.9", 200, `"Login";r=0;`},
		{"[2001:db8:1:2::7]:1", "", 200, `"Login";r=2;`},
		{"[2001:db8:1:2:ffff::1]:1", "", 200, `"Login";r=1;`}, // the same /64
		{"[2001:db8:1:3::7]:1", "", 200, `"Login";r=2;`},      // another /64
	} {
		r := httptest.NewRequest("POST", "/v1/login", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		w := httptest.NewRecorder()
		s.mux.ServeHTTP(w, r)
		if w.Code != c.code || w.Header().Get("RateLimit-Policy") != pol || !strings.HasPrefix(w.Header().Get("RateLimit"), c.rl) {
			t.Errorf("request %d (%s, %q): %d %q; want %d %s…", i, c.remote, c.xff, w.Code, w.Header().Get("RateLimit"), c.code, c.rl)
		}
	}
	if n := s.counts(t, "POST /v1/login", "Login"); n[verdict.Allowed] != 9 || n[verdict.Denied] != 1 {
		t.Errorf("Login's counts: %v", n)
	}
	r := httptest.NewRequest("POST", "/v1/login", nil)
	r.RemoteAddr = "@" // a Unix socket: no address to key
	w := httptest.NewRecorder()
	s.mux.ServeHTTP(w, r)
	if w.Code != 401 {
		t.Errorf("a request without a client address: %d, want the policy's 401", w.Code)
	}
}

// A shadow route decides and reports but lets everything through.
func TestMiddlewareShadow(t *testing.T) {
	s := newService(t)
	for i := range 102 {
		r := httptest.NewRequest("GET", "/v1/export/42", nil)
		w := httptest.NewRecorder()
		s.mux.ServeHTTP(w, r)
		if w.Code != 200 || w.Header().Get("Retry-After") != "" || !strings.HasPrefix(w.Header().Get("RateLimit"), `"DailyExport";r=`+strconv.Itoa(max(99-i, 0))+";") {
			t.Fatalf("request %d: %d %v", i, w.Code, w.Header())
		}
	}
	w := httptest.NewRecorder()
	s.mux.ServeHTTP(w, httptest.NewRequest("GET", "/v1/export/not-a-number", nil))
	if w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Errorf("a shadow route refused a request without a key: %d %v", w.Code, w.Header())
	}
	c := s.counts(t, "GET /v1/export/{account}", "DailyExport")
	if c[verdict.Allowed] != 100 || c[verdict.ShadowDenied] != 2 || c[verdict.MissingKey] != 1 {
		t.Errorf("DailyExport's counts: %v", c)
	}
}

func TestNewMiddlewareRefusesNilHooks(t *testing.T) {
	if _, err := limits.NewMiddleware(nil, limits.Hooks{UserID: func(*http.Request) (string, bool) { return "", false }}); err == nil ||
		!strings.Contains(err.Error(), "PlanOf") {
		t.Errorf("NewMiddleware without PlanOf: %v", err)
	}
}

// Unregistered names the policy's routes that have no handler on the mux: a
// route registered under another spelling would not be limited.
func TestServeMuxUnregistered(t *testing.T) {
	s := newService(t)
	if got := s.mux.Unregistered(); len(got) != 0 {
		t.Errorf("all routes registered, Unregistered = %q", got)
	}
	mw, err := limits.NewMiddleware(nil, limits.Hooks{
		UserID: func(*http.Request) (string, bool) { return "", false },
		PlanOf: func(*http.Request) (limits.Plan, bool) { return 0, false },
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := mw.NewServeMux()
	mux.HandleFunc("POST /v1/login", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1", func(http.ResponseWriter, *http.Request) {}) // not the policy's "/v1/"
	if got := strings.Join(mux.Unregistered(), "; "); got != "POST /v1/upload; GET /v1/export/{account}; POST /v1/exports; POST /v1/reports; POST /v1/chat; POST /v1/complete; GET /v1/tenants/{tenant}/users/{user}; /v1/" {
		t.Errorf("Unregistered = %q", got)
	}
}

// Huge and strange headers cost a bounded walk and never reach the key or
// the cost: a megabyte of X-Forwarded-For from the trusted proxy, a
// megabyte-long upload cost, a non-ASCII user.
func TestMiddlewareHugeHeaders(t *testing.T) {
	s := newService(t)
	r := httptest.NewRequest("POST", "/v1/login", nil)
	r.RemoteAddr = "10.0.0.1:1"
	r.Header.Set("X-Forwarded-For", strings.Repeat("6.6.6.6, ", 1<<17)+"198.51.100.7")
	w := httptest.NewRecorder()
	s.mux.ServeHTTP(w, r)
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("RateLimit"), `"Login";r=2;`) {
		t.Errorf("a megabyte of X-Forwarded-For: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	r = httptest.NewRequest("POST", "/v1/upload", nil)
	r.Header.Set("X-Test-User", "alice")
	r.Header.Set("X-Upload-Units", strings.Repeat("7", 1<<20))
	w = httptest.NewRecorder()
	s.mux.ServeHTTP(w, r)
	if w.Code != 400 {
		t.Errorf("a megabyte-long cost: %d, want 400", w.Code)
	}
	users["ünïcødé 💥"] = limits.PlanFree
	defer delete(users, "ünïcødé 💥")
	r = httptest.NewRequest("GET", "/v1/x", nil)
	r.Header.Set("X-Test-User", "ünïcødé 💥")
	w = httptest.NewRecorder()
	s.mux.ServeHTTP(w, r)
	if w.Code != 200 || w.Header().Get("RateLimit") != `"PerUser";r=49;t=5` {
		t.Errorf("a non-ASCII user: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
}

// A path wildcard's key is read from the path the middleware matched, with no
// ServeMux in front (r.PathValue is empty there): each account has its own
// DailyExport bucket. Before, r.PathValue was the source, so behind chi or
// around a whole mux every request had no key.
func TestMiddlewarePathKeyWithoutMux(t *testing.T) {
	s := newService(t)
	h := s.mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, c := range []struct{ path, want string }{
		{"/v1/export/42", `"DailyExport";r=99;`},
		{"/v1/export/42", `"DailyExport";r=98;`},
		{"/v1/export/7", `"DailyExport";r=99;`},
		{"/v1//export/42", `"DailyExport";r=97;`}, // unclean: GET /v1/export/{account} all the same
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", c.path, nil))
		if !strings.HasPrefix(w.Header().Get("RateLimit"), c.want) {
			t.Errorf("GET %s: RateLimit %q, want %s…", c.path, w.Header().Get("RateLimit"), c.want)
		}
	}
}

// A composite key, (tenant, user) from the path: each pair its own bucket
// of 5, whatever the tenant holds; a user that is not a number is no key.
func TestMiddlewareCompositeKey(t *testing.T) {
	s := newService(t)
	h := s.mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func(path string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code
	}
	for _, c := range []struct {
		path string
		want int // admitted of 7
	}{
		{"/v1/tenants/acme/users/7", 5},
		{"/v1/tenants/acme/users/8", 5},
		{"/v1/tenants/globex/users/7", 5},
		{"/v1/tenants/acme,7/users/7", 5},
		{"/v1/tenants/acme%252C7/users/7", 5}, // the tenant "acme%2C7" (a path is read decoded)
		{"/v1/tenants/acme/users/x", 0},
	} {
		admitted := 0
		for range 7 {
			if get(c.path) == http.StatusOK {
				admitted++
			}
		}
		if admitted != c.want {
			t.Errorf("GET %s: %d of 7 admitted, want %d", c.path, admitted, c.want)
		}
	}
	if got := s.counts(t, "GET /v1/tenants/{tenant}/users/{user}", "TenantUser"); got[verdict.Allowed] != 25 || got[verdict.Denied] != 10 || got[verdict.MissingKey] != 7 {
		t.Errorf("TenantUser's counts: %v", got)
	}
}

// Numbers changed at run time are the numbers the fields describe: the
// constants until then; a key's own numbers for that key only; the rule's
// new numbers for everyone; the constants again once cleared. Every change
// is made at the middleware's clock. The expected r and t are worked out by
// hand: t is the later of the time to full and r paced at the rate, rounded up.
func TestMiddlewareNumbersInForce(t *testing.T) {
	s := newService(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const free = `"PerUser";q=50;w=5, "PerEndpoint";q=200;w=12, "Global";q=4000;w=2`
	bob := map[string]string{"X-Test-User": "bob"}
	alice := map[string]string{"X-Test-User": "alice"}
	s.run(t, []call{{"GET", "/v1/x", "", bob, 0, 200, [2]string{free, `"PerUser";r=49;t=5`}, "", ""}})
	// bob, an enterprise customer on the free plan, gets 1000/s, burst 3000:
	// his bucket carries its 49 tokens; after this request 48, 2952 short of
	// full at 1000/s: t=3.
	must(s.lim.PerUser.SetKeyNumbersAt("bob", s.now, atomicbucket.Numbers{Tokens: 1000, Period: time.Second, Burst: 3000}, atomicbucket.CarryAsIs))
	const bobs = `"PerUser";q=3000;w=3, "PerEndpoint";q=200;w=12, "Global";q=4000;w=2`
	s.run(t, []call{
		{"GET", "/v1/x", "", bob, 0, 200, [2]string{bobs, `"PerUser";r=48;t=3`}, "", ""},
		{"GET", "/v1/x", "", alice, 0, 200, [2]string{free, `"PerUser";r=49;t=5`}, "", ""},
	})
	// A burst below what the route admits (POST /v1/upload declares up to
	// 1000 units) is refused, naming the route: requests within the route's
	// most would be answered 400 for good.
	if err := s.lim.Upload.SetNumbersAt(s.now, atomicbucket.Numbers{Tokens: 50, Period: time.Second, Burst: 100}, atomicbucket.CarryProportional); err == nil ||
		!strings.Contains(err.Error(), `the most a request of route "POST /v1/upload" may cost`) {
		t.Fatalf("Upload cut to a burst of 100: %v, want refused", err)
	}
	// Upload for everyone: 500 per second, burst 2000 (w=4). bob has no upload
	// bucket yet: a full 2000, less this request's 10: 1990, paced at 500/s:
	// t=4. A declared 500 from alice: 1500 left (t=3).
	must(s.lim.Upload.SetNumbersAt(s.now, atomicbucket.Numbers{Tokens: 500, Period: time.Second, Burst: 2000}, atomicbucket.CarryProportional))
	s.run(t, []call{
		{"POST", "/v1/upload", "", bob, 0, 200, [2]string{`"Upload";q=2000;w=4`, `"Upload";r=1990;t=4`}, "", ""},
		{"POST", "/v1/upload", "", map[string]string{"X-Test-User": "alice", "X-Upload-Units": "500"}, 0, 200,
			[2]string{`"Upload";q=2000;w=4`, `"Upload";r=1500;t=3`}, "", ""},
	})
	// Back to the policy's numbers (100/s, burst 1000), proportionally: bob's
	// 1990 of 2000 become 995 of 1000, 985 after this request (paced 9.85 s:
	// t=10); alice's 1500 become 750, 740 after it (paced 7.4 s, 2.6 s to
	// full: t=8).
	s.lim.Upload.ClearNumbersAt(s.now, atomicbucket.CarryProportional)
	// bob's own numbers go: his 48 tokens carry as is into 10/s, burst 50: 47 after this request.
	s.lim.PerUser.ClearKeyNumbersAt("bob", s.now, atomicbucket.CarryAsIs)
	s.run(t, []call{
		{"POST", "/v1/upload", "", bob, 0, 200, [2]string{`"Upload";q=1000;w=10`, `"Upload";r=985;t=10`}, "", ""},
		{"POST", "/v1/upload", "", alice, 0, 200, [2]string{`"Upload";q=1000;w=10`, `"Upload";r=740;t=8`}, "", ""},
		{"GET", "/v1/x", "", bob, 0, 200, [2]string{free, `"PerUser";r=47;t=5`}, "", ""},
	})
	if n, o := s.lim.PerUser.NumbersFor(limits.PlanFree, "bob"); o != atomicbucket.FromPolicy || n.Burst != 50 {
		t.Errorf("bob's numbers after ClearKeyNumbers: %v (%v)", n, o)
	}
}

// TestMiddlewareEventKeys: observers are told whose request it was (for a
// violation log): a string key as it is, an integer key in KeyInt.
func TestMiddlewareEventKeys(t *testing.T) {
	s := newService(t)
	var events []verdict.Event
	s.mw.Config.Observer = verdict.ObserverFunc(func(e verdict.Event) { events = append(events, e) })
	for _, c := range []struct{ method, path, user string }{
		{"GET", "/v1/items", "bob"},
		{"GET", "/v1/export/7", "bob"},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.Header.Set("X-Test-User", c.user)
		s.mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	want := []struct {
		rule   string
		key    string
		keyInt uint64
	}{{"PerUser", "bob", 0}, {"DailyExport", "", 7}}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for i, w := range want {
		if e := events[i]; e.Rule != w.rule || e.Key != w.key || e.KeyInt != w.keyInt {
			t.Errorf("event %d: rule %s, key %q, KeyInt %d; want %s, %q, %d", i, e.Rule, e.Key, e.KeyInt, w.rule, w.key, w.keyInt)
		}
	}
}

// A hook's key longer than MaxKeyLen is no key, as a header's is: the request
// gets the policy's missing_key answer (401 here), never a bucket of its own
// nor a 400 about its cost.
func TestMiddlewareHookKeyTooLong(t *testing.T) {
	long := strings.Repeat("u", verdict.MaxKeyLen+1)
	lim := limits.New()
	mw, err := limits.NewMiddleware(lim, limits.Hooks{
		UserID: func(*http.Request) (string, bool) { return long, true },
		PlanOf: func(*http.Request) (limits.Plan, bool) { return limits.PlanFree, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	mw.Config.Observer = nil
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	for _, path := range []string{"/v1/things", "/v1/upload"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", path, nil))
		if w.Code != http.StatusUnauthorized {
			t.Errorf("POST %s with a %d-byte key from the hook: %d %s, want 401 (missing_key)", path, len(long), w.Code, w.Body)
		}
	}
	if n := lim.PerUser.Len(); n != 0 {
		t.Errorf("%d PerUser buckets made for an over-long key", n)
	}
}

// TestServeMuxHasNoWayAround: the generated ServeMux gives no way to the
// mux it wraps: no exported field (an embedded *http.ServeMux served as
// mux.ServeMux was unlimited) and no method that returns a handler or a mux
// (the promoted Handler(r) returned the registered handler, unchecked).
func TestServeMuxHasNoWayAround(t *testing.T) {
	typ := reflect.TypeFor[limits.ServeMux]()
	for f := range typ.Fields() {
		if f.IsExported() {
			t.Errorf("ServeMux has the exported field %s %v", f.Name, f.Type)
		}
	}
	handler := reflect.TypeFor[http.Handler]()
	ptr := reflect.PointerTo(typ)
	for m := range ptr.Methods() {
		for out := range m.Type.Outs() {
			if out.Implements(handler) || out == reflect.TypeFor[*http.ServeMux]() {
				t.Errorf("(*ServeMux).%s returns a %v: a way to serve requests unchecked", m.Name, out)
			}
		}
	}
	want := []string{"Handle", "HandleFunc", "ServeHTTP", "Uncovered", "Unregistered"}
	var got []string
	for m := range ptr.Methods() {
		got = append(got, m.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("(*ServeMux)'s methods are %v; want %v (a new one must be checked for a way around the middleware)", got, want)
	}
}

// The ServeMux checks every request it serves, its own answers too: a
// method its handlers do not take (405), a path none serves (404) and an
// unclean path (a redirect) under a policy route are limited as the route
// says, never an unlimited way around it; Uncovered names the registered
// patterns no policy route covers, served unlimited.
func TestServeMuxOwnAnswersAndCoverage(t *testing.T) {
	lim := limits.New()
	mw, err := limits.NewMiddleware(lim, limits.Hooks{
		UserID: func(r *http.Request) (string, bool) { u := r.Header.Get("X-Test-User"); return u, u != "" },
		PlanOf: func(*http.Request) (limits.Plan, bool) { return limits.PlanFree, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	mw.Config.Observer = nil
	now := atomicbucket.Now()
	mw.Clock = func() atomicbucket.Time { return now }
	mux := mw.NewServeMux()
	ok := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	mux.HandleFunc("GET /v1/things", ok)
	mux.HandleFunc("GET /metrics", ok)
	mux.HandleFunc("/admin/", ok)
	if got, want := mux.Uncovered(), []string{"/admin/", "GET /metrics"}; !slices.Equal(got, want) {
		t.Errorf("Uncovered = %q, want %q", got, want)
	}
	// PerUser's free plan: a burst of the policy's; each of the mux's own
	// answers takes from it, and once it is spent they are 429.
	burst := lim.PerUser.Rule(limits.PlanFree).Limit().Burst
	for _, c := range []struct{ method, path string }{{"POST", "/v1/things"}, {"GET", "/v1/nothing"}, {"GET", "/v1//things"}} {
		lim.PerUser.Reset("eve")
		codes := map[int]int{}
		for range burst + 1 {
			r := httptest.NewRequest(c.method, c.path, nil)
			r.Header.Set("X-Test-User", "eve")
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			codes[w.Code]++
		}
		if codes[http.StatusTooManyRequests] == 0 {
			t.Errorf("%s %s, %d times on a burst of %d: %v, want the last limited (429)", c.method, c.path, burst+1, burst, codes)
		}
	}
}

// A composite key's check allocates nothing once its bucket exists: the
// struct is the table's key as it is (no text form on the local path), and
// the middleware reads both fields from the path without a string of its
// own while it admits (the clock moved on 2 s a request: 30/min refills one
// token each time). A denial builds the key's text form, once, for its
// jitter and the violation log, and its events carry it whole.
func TestCompositeKeyAllocatesNothing(t *testing.T) {
	lim := limits.New()
	k := limits.TenantUserKey{Tenant: "acme", User: 7}
	lim.TenantUser.Allow(k)
	if n := testing.AllocsPerRun(1000, func() { lim.TenantUser.Allow(k) }); n != 0 {
		t.Errorf("TenantUser.Allow: %v allocations a check, want 0", n)
	}
	s := newService(t)
	h := s.mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/v1/tenants/ac,me/users/7", nil)
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, r)
	if n := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		s.now += atomicbucket.Time(2 * time.Second)
		h.ServeHTTP(w, r)
	}); n != 0 || w.code != 0 {
		t.Errorf("the middleware admitting on a composite key: %v allocations a request (status %d), want 0", n, w.code)
	}
	if n := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}); n != 1 || w.code != http.StatusTooManyRequests {
		t.Errorf("the middleware denying on a composite key: %v allocations a request (status %d), want 1 (the key's text form)", n, w.code)
	}
	var mu sync.Mutex
	keys := map[string]verdict.Outcome{}
	s.mw.Config.Observer = verdict.ObserverFunc(func(e verdict.Event) {
		mu.Lock()
		keys[e.Key] = e.Outcome
		mu.Unlock()
	})
	h.ServeHTTP(w, r) // denied
	s.now += atomicbucket.Time(2 * time.Second)
	h.ServeHTTP(w, r) // admitted
	mu.Lock()
	defer mu.Unlock()
	if keys[`ac%2Cme,7`] != verdict.Denied || keys[""] != verdict.Allowed || len(keys) != 2 {
		t.Errorf("the events' keys: %v; want the key's whole text form on a denial, none on an admission", keys)
	}
}

// discard is a ResponseWriter that keeps only its header map and the
// status it was given (0 for none: 200), and has WriteString as net/http's
// has.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header               { return d.h }
func (d *discard) Write(b []byte) (int, error)       { return len(b), nil }
func (d *discard) WriteString(s string) (int, error) { return len(s), nil }
func (d *discard) WriteHeader(code int)              { d.code = code }

package limithttp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/tier"
	"github.com/limitgen/limitgen/verdict"
)

// stepHandler is a hand-wired middleware over check, at the times and costs
// the test sets before each request; the handler behind it answers "ok".
type stepHandler struct {
	now  atomicbucket.Time
	cost int64
	mode verdict.Mode
	cfg  Config
	// check decides a request; it returns the deciding policy.
	check    func(now atomicbucket.Time, cost int64) (atomicbucket.Decision, *verdict.Policy)
	policies string
	reached  int // requests the inner handler served
}

func (s *stepHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.mode != verdict.Off {
		d, p := s.check(s.now, s.cost)
		res := verdict.Result{Decision: d, Policy: p, Policies: s.policies, Cost: s.cost}
		if !s.cfg.Respond(w, r, s.mode, &res, "192.0.2.1") {
			return
		}
	}
	s.reached++
	w.Header()["Content-Type"] = []string{"text/plain"}
	io.WriteString(w, "ok")
}

// rateLimitHeaders are the headers a step table pins: each must have exactly
// the value the step gives, or be absent when the step gives none.
var rateLimitHeaders = []string{
	"RateLimit-Policy", "RateLimit", "Retry-After",
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Content-Type",
}

type step struct {
	at     time.Duration
	cost   int64
	code   int
	hdr    map[string]string // the rateLimitHeaders present, and their values
	reason string            // the problem body's violated policy ("" for none), or "cost" for the too-costly body
}

func bucketCheck(b *atomicbucket.Bucket, p *verdict.Policy) func(atomicbucket.Time, int64) (atomicbucket.Decision, *verdict.Policy) {
	return func(now atomicbucket.Time, cost int64) (atomicbucket.Decision, *verdict.Policy) {
		return b.AllowNAt(now, cost), p
	}
}

func newPolicyBucket(t *testing.T, name string, l atomicbucket.Limit) (*verdict.Policy, *atomicbucket.Bucket) {
	t.Helper()
	p, err := verdict.NewPolicy(name, l)
	if err != nil {
		t.Fatal(err)
	}
	return &p, atomicbucket.NewBucketAt(atomicbucket.MustRule(l), 0)
}

func runSteps(t *testing.T, s *stepHandler, steps []step) {
	t.Helper()
	for i, st := range steps {
		s.now, s.cost = atomicbucket.Time(st.at), st.cost
		w := httptest.NewRecorder()
		before := s.reached
		s.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != st.code {
			t.Errorf("step %d (at %v, cost %d): status %d, want %d", i, st.at, st.cost, w.Code, st.code)
		}
		for _, name := range rateLimitHeaders {
			got, present := w.Header()[textproto.CanonicalMIMEHeaderKey(name)]
			want, wantPresent := st.hdr[name]
			if name == "Content-Type" && st.code == 200 {
				want, wantPresent = "text/plain", true // the handler's own
			}
			switch {
			case present != wantPresent:
				t.Errorf("step %d: %s present=%v (%q), want present=%v (%q)", i, name, present, got, wantPresent, want)
			case present && (len(got) != 1 || got[0] != want):
				t.Errorf("step %d: %s = %q, want %q", i, name, got, want)
			}
		}
		served := s.reached > before
		if served != (st.code == 200) {
			t.Errorf("step %d: handler reached=%v with status %d", i, served, st.code)
		}
		if st.code == 200 {
			if w.Body.String() != "ok" {
				t.Errorf("step %d: body %q, want the handler's", i, w.Body.String())
			}
			continue
		}
		checkProblem(t, i, w, st)
	}
}

// checkProblem decodes a denial's body and checks it against the step.
func checkProblem(t *testing.T, i int, w *httptest.ResponseRecorder, st step) {
	t.Helper()
	var p struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("step %d: body %q: %v", i, w.Body.String(), err)
	}
	if p.Status != st.code || p.Title == "" || p.Detail == "" {
		t.Errorf("step %d: problem %+v: status, title and detail must be set", i, p)
	}
	if w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("step %d: no X-Content-Type-Options: nosniff on the problem body", i)
	}
	switch st.reason {
	case "cost":
		if p.Type != "about:blank" || len(p.Violated) != 0 || !strings.Contains(p.Detail, "burst") {
			t.Errorf("step %d: too-costly problem %+v", i, p)
		}
	default:
		if p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" ||
			len(p.Violated) != 1 || p.Violated[0] != st.reason {
			t.Errorf("step %d: problem %+v, want quota-exceeded violating %q", i, p, st.reason)
		}
	}
}

const problemJSON = "application/problem+json"

func TestRespondSteps(t *testing.T) {
	const s = time.Second
	const ms = time.Millisecond
	h := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	t.Run("greedy 2/s burst 3", func(t *testing.T) {
		p, b := newPolicyBucket(t, "A", atomicbucket.Limit{Tokens: 2, Period: s, Burst: 3})
		pol := `"A";q=3;w=2`
		runSteps(t, &stepHandler{check: bucketCheck(b, p), policies: p.Item}, []step{
			{0, 1, 200, h("RateLimit-Policy", pol, "RateLimit", `"A";r=2;t=1`), ""},
			{0, 2, 200, h("RateLimit-Policy", pol, "RateLimit", `"A";r=0;t=1`), ""},
			{100 * ms, 1, 429, h("RateLimit-Policy", pol, "RateLimit", `"A";r=0;t=1`, "Retry-After", "1", "Content-Type", problemJSON), "A"},
			{100 * ms, 4, 400, h("RateLimit-Policy", pol, "RateLimit", `"A";r=0;t=2`, "Content-Type", problemJSON), "cost"},
			{1600 * ms, 3, 200, h("RateLimit-Policy", pol, "RateLimit", `"A";r=0;t=2`), ""},
			{1600 * ms, 1, 429, h("RateLimit-Policy", pol, "RateLimit", `"A";r=0;t=1`, "Retry-After", "1", "Content-Type", problemJSON), "A"},
			{4600 * ms, 1, 200, h("RateLimit-Policy", pol, "RateLimit", `"A";r=2;t=1`), ""},
		})
	})

	t.Run("interval 5 per 10s burst 5 initial 3", func(t *testing.T) {
		p, b := newPolicyBucket(t, "Login", atomicbucket.Limit{Tokens: 5, Period: 10 * s, Burst: 5,
			Refill: atomicbucket.Interval, Initial: 3, InitialSet: true})
		pol := `"Login";q=5;w=10`
		runSteps(t, &stepHandler{check: bucketCheck(b, p), policies: p.Item}, []step{
			{1 * s, 1, 200, h("RateLimit-Policy", pol, "RateLimit", `"Login";r=2;t=9`), ""},
			{2 * s, 2, 200, h("RateLimit-Policy", pol, "RateLimit", `"Login";r=0;t=8`), ""},
			{3 * s, 1, 429, h("RateLimit-Policy", pol, "RateLimit", `"Login";r=0;t=7`, "Retry-After", "7", "Content-Type", problemJSON), "Login"},
			{10 * s, 5, 200, h("RateLimit-Policy", pol, "RateLimit", `"Login";r=0;t=10`), ""},
			{10 * s, 6, 400, h("RateLimit-Policy", pol, "RateLimit", `"Login";r=0;t=10`, "Content-Type", problemJSON), "cost"},
		})
	})

	t.Run("legacy headers", func(t *testing.T) {
		p, b := newPolicyBucket(t, "C", atomicbucket.Limit{Tokens: 10, Period: s, Burst: 10})
		pol := `"C";q=10;w=1`
		runSteps(t, &stepHandler{check: bucketCheck(b, p), policies: p.Item, cfg: Config{Headers: HeadersLegacy}}, []step{
			{0, 1, 200, h("RateLimit-Policy", pol, "RateLimit", `"C";r=9;t=1`,
				"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "9", "X-RateLimit-Reset", "1"), ""},
			{0, 9, 200, h("RateLimit-Policy", pol, "RateLimit", `"C";r=0;t=1`,
				"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"), ""},
			{50 * ms, 3, 429, h("RateLimit-Policy", pol, "RateLimit", `"C";r=0;t=1`, "Retry-After", "1",
				"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1", "Content-Type", problemJSON), "C"},
		})
	})

	t.Run("no fields", func(t *testing.T) {
		p, b := newPolicyBucket(t, "D", atomicbucket.Limit{Tokens: 1, Period: s, Burst: 1})
		runSteps(t, &stepHandler{check: bucketCheck(b, p), policies: p.Item, cfg: Config{Headers: HeadersNone}}, []step{
			{0, 1, 200, h(), ""},
			{0, 1, 429, h("Retry-After", "1", "Content-Type", problemJSON), "D"},
			{0, 2, 400, h("Content-Type", problemJSON), "cost"},
		})
	})

	t.Run("shadow", func(t *testing.T) {
		p, b := newPolicyBucket(t, "E", atomicbucket.Limit{Tokens: 1, Period: s, Burst: 1})
		pol := `"E";q=1;w=1`
		runSteps(t, &stepHandler{check: bucketCheck(b, p), policies: p.Item, mode: verdict.Shadow}, []step{
			{0, 1, 200, h("RateLimit-Policy", pol, "RateLimit", `"E";r=0;t=1`), ""},
			{0, 1, 200, h("RateLimit-Policy", pol, "RateLimit", `"E";r=0;t=1`), ""},
			{0, 5, 200, h("RateLimit-Policy", pol, "RateLimit", `"E";r=0;t=1`), ""},
		})
	})

	t.Run("off", func(t *testing.T) {
		p, b := newPolicyBucket(t, "F", atomicbucket.Limit{Tokens: 1, Period: s, Burst: 1})
		runSteps(t, &stepHandler{check: bucketCheck(b, p), policies: p.Item, mode: verdict.Off}, []step{
			{0, 1, 200, h(), ""},
			{0, 1, 200, h(), ""},
		})
	})

	t.Run("tier", func(t *testing.T) {
		p1, b1 := newPolicyBucket(t, "G1", atomicbucket.Limit{Tokens: 10, Period: s, Burst: 10})
		p2, b2 := newPolicyBucket(t, "G2", atomicbucket.Limit{Tokens: 1, Period: s, Burst: 2})
		ps := []*verdict.Policy{p1, p2}
		check := func(now atomicbucket.Time, cost int64) (atomicbucket.Decision, *verdict.Policy) {
			d, i, _ := tier.At(now, tier.Bucket(b1, cost), tier.Bucket(b2, cost))
			return d, ps[i]
		}
		pol := `"G1";q=10;w=1, "G2";q=2;w=2`
		s := &stepHandler{check: check, policies: p1.Item + ", " + p2.Item}
		runSteps(t, s, []step{
			{0, 1, 200, h("RateLimit-Policy", pol, "RateLimit", `"G2";r=1;t=1`), ""},
			{0, 1, 200, h("RateLimit-Policy", pol, "RateLimit", `"G2";r=0;t=1`), ""},
			{0, 1, 429, h("RateLimit-Policy", pol, "RateLimit", `"G2";r=0;t=1`, "Retry-After", "1", "Content-Type", problemJSON), "G2"},
		})
		if d := b1.PeekAt(0, 1); d.Remaining != 7 { // 8 held: a peek of 1 reports what would be left
			t.Errorf("G1 would hold %d after one more, want 7 (the denied request's token given back)", d.Remaining)
		}
	})

	t.Run("service's denial handler", func(t *testing.T) {
		p, b := newPolicyBucket(t, "H", atomicbucket.Limit{Tokens: 1, Period: s, Burst: 1})
		var seen *verdict.Result
		s := &stepHandler{check: bucketCheck(b, p), policies: p.Item, cost: 1, cfg: Config{Denied: func(w http.ResponseWriter, r *http.Request, res *verdict.Result) {
			seen = res
			w.WriteHeader(http.StatusServiceUnavailable)
		}}}
		s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 503 || seen == nil || seen.Policy != p || w.Header().Get("Retry-After") != "1" ||
			w.Header().Get("RateLimit") != `"H";r=0;t=1` || w.Body.Len() != 0 {
			t.Errorf("custom denial: %d %v %q, result %+v", w.Code, w.Header(), w.Body.String(), seen)
		}
	})
}

// The header-name constants are the canonical forms net/http's Header uses:
// Respond stores them in the map directly.
func TestHeaderNamesCanonical(t *testing.T) {
	for _, name := range []string{HeaderPolicy, HeaderRateLimit, HeaderRetryAfter, HeaderLegacyLimit,
		HeaderLegacyRemain, HeaderLegacyReset, headerContentType, headerContentOptions} {
		if c := textproto.CanonicalMIMEHeaderKey(name); c != name {
			t.Errorf("%q is not canonical (%q)", name, c)
		}
	}
}

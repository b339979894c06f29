package limithttp

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/verdict"
)

func TestKeySources(t *testing.T) {
	long := strings.Repeat("k", verdict.MaxKeyLen+1)
	r := httptest.NewRequest("GET", "/v1/users/42?tenant=acme&x=1&tenant=evil&sp=a+b&pct=%2Fx&bad=%zz&empty=&"+url.QueryEscape("we ird")+"=v&long="+long, nil)
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("X-Long", long)
	r.Header["X-Empty"] = []string{""}
	r.SetPathValue("id", "42")
	r.SetPathValue("huge", long)
	r.Pattern = "GET /v1/users/{id}"

	for _, c := range []struct {
		name string
		got  func() (string, bool)
		want string
		ok   bool
	}{
		{"header", func() (string, bool) { return HeaderKey(r, "X-Tenant") }, "acme", true},
		{"header absent", func() (string, bool) { return HeaderKey(r, "X-Missing") }, "", false},
		{"header empty", func() (string, bool) { return HeaderKey(r, "X-Empty") }, "", false},
		{"header too long", func() (string, bool) { return HeaderKey(r, "X-Long") }, "", false},
		{"query first of two", func() (string, bool) { return QueryKey(r, "tenant") }, "acme", true},
		{"query plus", func() (string, bool) { return QueryKey(r, "sp") }, "a b", true},
		{"query escape", func() (string, bool) { return QueryKey(r, "pct") }, "/x", true},
		{"query bad escape", func() (string, bool) { return QueryKey(r, "bad") }, "", false},
		{"query empty", func() (string, bool) { return QueryKey(r, "empty") }, "", false},
		{"query escaped name", func() (string, bool) { return QueryKey(r, "we ird") }, "v", true},
		{"query absent", func() (string, bool) { return QueryKey(r, "nope") }, "", false},
		{"query too long", func() (string, bool) { return QueryKey(r, "long") }, "", false},
		{"path", func() (string, bool) { return PathKey(r, "id") }, "42", true},
		{"path absent", func() (string, bool) { return PathKey(r, "other") }, "", false},
		{"path too long", func() (string, bool) { return PathKey(r, "huge") }, "", false},
		{"pattern", func() (string, bool) { return PatternKey(r) }, "GET /v1/users/{id}", true},
		{"pattern none", func() (string, bool) { return PatternKey(httptest.NewRequest("GET", "/", nil)) }, "", false},
	} {
		got, ok := c.got()
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// queryValue agrees with url.ParseQuery's first value wherever ParseQuery
// reads the pair (it drops a badly escaped pair, as queryValue reports none).
func FuzzQueryValue(f *testing.F) {
	for _, s := range []string{"a=1&b=2", "a=1&a=2", "a%3D=x", "a+b=c+d", "=x", "a", "a=%zz&a=2", "a=1;b=2", "%61=1"} {
		f.Add(s, "a")
	}
	f.Fuzz(func(t *testing.T, raw, name string) {
		got, ok := queryValue(raw, name)
		vals, err := url.ParseQuery(raw)
		if err != nil {
			return // a bad pair somewhere: ParseQuery's answer is partial
		}
		want, wantOK := vals[name]
		if ok != wantOK || (ok && got != want[0]) {
			t.Fatalf("queryValue(%q, %q) = %q, %v; ParseQuery: %q", raw, name, got, ok, want)
		}
	})
}

// Reject answers with the route's status and body, takes nothing, and only
// counts on a verdict.Shadow route.
func TestReject(t *testing.T) {
	c := verdict.NewCounters(verdict.Series{Rule: "R"})
	cfg := Config{Judge: verdict.Judge{Counters: c}}
	body := ProblemBody("about:blank", "Unauthorized", 401, "no user", "")
	w := httptest.NewRecorder()
	if cfg.Reject(w, verdict.Enforce, 401, body, verdict.Event{RuleIndex: 0, Outcome: verdict.MissingKey}) || w.Code != 401 ||
		w.Body.String() != body || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("enforce: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	w = httptest.NewRecorder()
	if !cfg.Reject(w, verdict.Shadow, 401, body, verdict.Event{RuleIndex: 0, Outcome: verdict.MissingKey}) || w.Code != 200 || w.Body.Len() != 0 {
		t.Errorf("shadow: %d %q", w.Code, w.Body.String())
	}
	if got := c.Snapshot()[0].Outcomes[verdict.MissingKey]; got != 2 {
		t.Errorf("counted %d missing keys, want 2", got)
	}
	if !cfg.Reject(httptest.NewRecorder(), verdict.Off, 401, body, verdict.Event{}) {
		t.Error("off rejected")
	}
	// A 401 carries the Challenge (RFC 9110); another status does not.
	cfg.Challenge = `Bearer realm="api"`
	w = httptest.NewRecorder()
	cfg.Reject(w, verdict.Enforce, 401, body, verdict.Event{Outcome: verdict.MissingKey})
	if got := w.Header().Values("WWW-Authenticate"); len(got) != 1 || got[0] != `Bearer realm="api"` {
		t.Errorf("401: WWW-Authenticate %q", got)
	}
	w = httptest.NewRecorder()
	cfg.Reject(w, verdict.Enforce, 400, ProblemBody("about:blank", "Bad Request", 400, "no key", ""), verdict.Event{Outcome: verdict.MissingKey})
	if got := w.Header().Get("WWW-Authenticate"); got != "" {
		t.Errorf("400: WWW-Authenticate %q", got)
	}
	_ = http.StatusOK
}

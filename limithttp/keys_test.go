package limithttp

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

func TestParseCost(t *testing.T) {
	const max = 100
	for _, c := range []struct {
		in   string
		want int64
		st   CostStatus
	}{
		{"1", 1, CostOK},
		{"100", 100, CostOK},
		{"007", 7, CostOK},
		{"0000000000000000000000000000042", 42, CostOK}, // leading zeros do not count as digits
		{"101", 101, CostTooHigh},
		{"1000000000", 1000000000, CostTooHigh},
		{strings.Repeat("9", 1000), 0, CostTooHigh}, // 1,000 digits: refused, not wrapped
		{"9223372036854775808", 0, CostTooHigh},     // 2^63
		{"", 0, CostMissing},
		{"0", 0, CostMissing}, // a free request would turn the limit off
		{"000", 0, CostMissing},
		{"-1", 0, CostMissing},
		{"+5", 0, CostMissing},
		{"1e9", 0, CostMissing},
		{"0x10", 0, CostMissing},
		{" 5", 0, CostMissing},
		{"5 ", 0, CostMissing},
		{"5.0", 0, CostMissing},
		{"٥", 0, CostMissing}, // an Arabic-Indic digit
		{"1,000", 0, CostMissing},
		{"NaN", 0, CostMissing},
	} {
		got, st := ParseCost(c.in, max)
		if st != c.st || (st == CostOK && got != c.want) || (st == CostTooHigh && c.want != 0 && got != c.want) {
			t.Errorf("ParseCost(%.30q) = %d, %d; want %d, %d", c.in, got, st, c.want, c.st)
		}
	}
}

func TestKeySources(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
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

	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"42", 42, true}, {"-7", -7, true}, {"+7", 0, false}, {"", 0, false}, {"9223372036854775808", 0, false},
		{"0x1", 0, false}, {"1 ", 0, false}, {strings.Repeat("1", 500), 0, false},
	} {
		if got, ok := IntKey(c.in, true, 64); got != c.want || ok != c.ok {
			t.Errorf("IntKey(%.30q) = %d, %v", c.in, got, ok)
		}
	}
	if _, ok := IntKey("42", false, 64); ok {
		t.Error("IntKey made a key from a source that found none")
	}
	if _, ok := IntKey("128", true, 8); ok {
		t.Error("IntKey put 128 in an int8")
	}
	if _, ok := UintKey("256", true, 8); ok {
		t.Error("UintKey put 256 in a uint8")
	}
	if _, ok := UintKey("", true, 0); ok {
		t.Error("IntKey made a key from a source that found none")
	}
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{{"18446744073709551615", 1<<64 - 1, true}, {"-1", 0, false}, {"+1", 0, false}, {"", 0, false}} {
		if got, ok := UintKey(c.in, true, 64); got != c.want || ok != c.ok {
			t.Errorf("UintKey(%q) = %d, %v", c.in, got, ok)
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

func TestCounters(t *testing.T) {
	c := NewCounters("A", "B")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 * int(numOutcomes) { // 100 of each outcome
				c.Add(g%2, Outcome(i%int(numOutcomes)))
			}
		}()
	}
	wg.Wait()
	c.Add(2, Allowed)  // out of range: ignored
	c.Add(-1, Allowed) // likewise
	for _, n := range c.Snapshot() {
		for o, v := range n.Outcomes {
			if v != 4*100 { // four goroutines a rule
				t.Errorf("%s %v: %d, want %d", n.Rule, Outcome(o), v, 4*100)
			}
		}
	}
}

func TestDenialLog(t *testing.T) {
	var buf bytes.Buffer
	log := NewDenialLog(slog.New(slog.NewTextHandler(&buf, nil)), 2)
	for range 10 {
		log.Observe(Event{Route: "GET /x", Rule: "PerUser", Outcome: Denied, Cost: 1})
	}
	log.Observe(Event{Outcome: Allowed})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 { // a burst of 2, then silence for the rest of the second
		t.Fatalf("logged %d lines, want 2:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"level=WARN", `msg="rate limit"`, "outcome=denied", "route=\"GET /x\"", "rule=PerUser", "cost=1", "suppressed=0"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line %q lacks %s", lines[0], want)
		}
	}
	// A request no wait can admit says "never", not 2562047h47m16.85s, and a
	// decision made by its cost alone names no store error.
	buf.Reset()
	log = NewDenialLog(slog.New(slog.NewTextHandler(&buf, nil)), 2)
	cfg := Config{Observer: log}
	p := MustPolicy("PerUser", atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 5})
	res := Result{Decision: atomicbucket.Decision{RetryAfter: atomicbucket.Never}, Policy: &p, Cost: 9, StoreErr: shared.ErrNoStore}
	cfg.Judge(Enforce, &res, "k")
	for _, want := range []string{"outcome=too_costly", "retry_after=never", `store_error=""`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("line %q lacks %s", buf.String(), want)
		}
	}
	// A request without a key is not a limit at work: logged at Info, as such.
	buf.Reset()
	log = NewDenialLog(slog.New(slog.NewTextHandler(&buf, nil)), 2)
	log.Observe(Event{Route: "GET /x", Rule: "PerUser", Outcome: MissingKey})
	for _, want := range []string{"level=INFO", `msg="rate limit key missing"`, "outcome=missing_key"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("line %q lacks %s", buf.String(), want)
		}
	}
}

// Reject answers with the route's status and body, takes nothing, and only
// counts on a Shadow route.
func TestReject(t *testing.T) {
	c := NewCounters("R")
	cfg := Config{Counters: c}
	body := ProblemBody("about:blank", "Unauthorized", 401, "no user", "")
	w := httptest.NewRecorder()
	if cfg.Reject(w, Enforce, 401, body, Event{RuleIndex: 0, Outcome: MissingKey}) || w.Code != 401 ||
		w.Body.String() != body || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("enforce: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	w = httptest.NewRecorder()
	if !cfg.Reject(w, Shadow, 401, body, Event{RuleIndex: 0, Outcome: MissingKey}) || w.Code != 200 || w.Body.Len() != 0 {
		t.Errorf("shadow: %d %q", w.Code, w.Body.String())
	}
	if got := c.Snapshot()[0].Outcomes[MissingKey]; got != 2 {
		t.Errorf("counted %d missing keys, want 2", got)
	}
	if !cfg.Reject(httptest.NewRecorder(), Off, 401, body, Event{}) {
		t.Error("off rejected")
	}
	// A 401 carries the Challenge (RFC 9110); another status does not.
	cfg.Challenge = `Bearer realm="api"`
	w = httptest.NewRecorder()
	cfg.Reject(w, Enforce, 401, body, Event{Outcome: MissingKey})
	if got := w.Header().Values("WWW-Authenticate"); len(got) != 1 || got[0] != `Bearer realm="api"` {
		t.Errorf("401: WWW-Authenticate %q", got)
	}
	w = httptest.NewRecorder()
	cfg.Reject(w, Enforce, 400, ProblemBody("about:blank", "Bad Request", 400, "no key", ""), Event{Outcome: MissingKey})
	if got := w.Header().Get("WWW-Authenticate"); got != "" {
		t.Errorf("400: WWW-Authenticate %q", got)
	}
	_ = http.StatusOK
}

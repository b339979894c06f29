package limithttp

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/memo"
	"github.com/limitgen/limitgen/verdict"
)

// valueCase is one response whose fields Respond sets: a decision of a
// policy on a route, under a header style.
type valueCase struct {
	p        *verdict.Policy
	policies string
	style    HeaderStyle
	d        atomicbucket.Decision
}

// wantFields is what the fields of c must hold, written out from the
// package doc's rules with strconv (not appendDecimal, not the tables).
func wantFields(c valueCase) map[string]string {
	v := (&verdict.Judge{}).Verdict(verdict.Enforce, &verdict.Result{Decision: c.d, Policy: c.p, Cost: 1}, "")
	r, t := v.R, v.T
	out := map[string]string{}
	if c.style != HeadersNone {
		out[HeaderPolicy] = c.policies
		out[HeaderRateLimit] = c.p.Prefix + strconv.FormatInt(r, 10) + ";t=" + strconv.FormatInt(t, 10)
	}
	if !c.d.Allowed {
		out[HeaderRetryAfter] = strconv.FormatInt(max(t, ceilSeconds(v.Wait)), 10)
		out[headerContentType] = problemType
		out[headerContentOptions] = "nosniff"
	}
	if c.style == HeadersLegacy {
		out[HeaderLegacyLimit] = strconv.FormatInt(c.p.Quota, 10)
		out[HeaderLegacyRemain] = strconv.FormatInt(r, 10)
		out[HeaderLegacyReset] = strconv.FormatInt(t, 10)
	}
	return out
}

func randomCase(rng *rand.Rand, ps []*verdict.Policy, routes []string) valueCase {
	c := valueCase{p: ps[rng.IntN(len(ps))], policies: routes[rng.IntN(len(routes))], style: HeaderStyle(rng.IntN(3))}
	burst := c.p.Limit.Burst
	if rng.IntN(3) == 0 {
		c.d = atomicbucket.Decision{RetryAfter: time.Duration(1 + rng.Int64N(int64(time.Hour))), Reset: time.Duration(rng.Int64N(int64(time.Hour)))}
	} else {
		c.d = atomicbucket.Decision{Allowed: true, Remaining: rng.Int64N(burst), Reset: time.Duration(rng.Int64N(int64(time.Hour)))}
	}
	return c
}

// checkResponse sends c through Respond on a fresh header map and compares
// every field with wantFields.
func checkResponse(t testing.TB, cfgs *[3]Config, c valueCase) {
	w := &mapWriter{h: http.Header{}}
	res := verdict.Result{Decision: c.d, Policy: c.p, Policies: c.policies, Cost: 1}
	cfgs[c.style].Respond(w, nil, verdict.Enforce, &res, "k")
	want := wantFields(c)
	if len(w.h) != len(want) {
		t.Fatalf("%+v: fields %v, want %v", c, w.h, want)
	}
	for name, v := range want {
		if got := w.h[name]; len(got) != 1 || got[0] != v {
			t.Fatalf("%+v: %s = %q, want %q", c, name, got, v)
		}
	}
}

type mapWriter struct {
	h    http.Header
	code int
}

func (w *mapWriter) Header() http.Header         { return w.h }
func (w *mapWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *mapWriter) WriteHeader(code int)        { w.code = code }

func valuePolicies(t testing.TB) ([]*verdict.Policy, []string) {
	var ps []*verdict.Policy
	for i, l := range []atomicbucket.Limit{
		{Tokens: 10, Period: time.Second, Burst: 20},
		{Tokens: 1000, Period: time.Second, Burst: 1_000_000_000},
		{Tokens: 7, Period: 3 * time.Second, Burst: 7, Refill: atomicbucket.Interval},
	} {
		name := fmt.Sprintf("rule%d", i)
		if i == 1 { // a prefix longer than an entry's buffer
			name = "a-rule-with-a-name-that-does-not-fit-in-the-buffer"
		}
		p, err := verdict.NewPolicy(name, l)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, &p)
	}
	return ps, []string{ps[0].Item, ps[0].Item + ", " + ps[1].Item, ps[2].Item + ", " + ps[1].Item + ", " + ps[0].Item}
}

// The values Respond reuses are those it would make: for thousands of
// fields on a few policies and routes, in every style, asked in an order
// that replaces slots (more fields than slots) and then asked again.
func TestValueTablesAnswerAsMade(t *testing.T) {
	ps, routes := valuePolicies(t)
	cfgs := [3]Config{{Headers: HeadersIETF}, {Headers: HeadersLegacy}, {Headers: HeadersNone}}
	rng := rand.New(rand.NewPCG(1, 2))
	var cases []valueCase
	for range 4 << memo.Bits {
		cases = append(cases, randomCase(rng, ps, routes))
	}
	for round := range 3 {
		for _, c := range cases {
			checkResponse(t, &cfgs, c)
		}
		if round == 0 {
			for i := range cases { // the same cases again, in another order
				j := rng.IntN(i + 1)
				cases[i], cases[j] = cases[j], cases[i]
			}
		}
	}
	// A response whose fields are in the table allocates nothing.
	c := valueCase{p: ps[0], policies: routes[0], style: HeadersIETF, d: atomicbucket.Decision{Allowed: true, Remaining: 3, Reset: time.Second}}
	checkResponse(t, &cfgs, c)
	w := &mapWriter{h: http.Header{}}
	res := verdict.Result{Decision: c.d, Policy: c.p, Policies: c.policies, Cost: 1}
	if n := testing.AllocsPerRun(100, func() {
		clear(w.h)
		cfgs[0].Respond(w, nil, verdict.Enforce, &res, "k")
	}); n != 0 {
		t.Errorf("an allowed response whose fields are in the table: %v allocations, want 0", n)
	}
}

// Goroutines asking for fields at once, most of them colliding in the
// tables' slots, each get their own response's values (go test -race reads
// the tables' publication).
func TestValueTablesConcurrent(t *testing.T) {
	ps, routes := valuePolicies(t)
	cfgs := [3]Config{{Headers: HeadersIETF}, {Headers: HeadersLegacy}, {Headers: HeadersNone}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 3000 {
				checkResponse(t, &cfgs, randomCase(rng, ps, routes))
			}
		})
	}
	wg.Wait()
}

// ceilSeconds is d in whole seconds, rounded up: what Retry-After says.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

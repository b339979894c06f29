package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/limitgen/limitgen/bench/httplimits"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululestdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
)

// nopWriter is a ResponseWriter that allocates nothing: its header map is kept
// between requests (BenchmarkHTTP clears it), so what a benchmark allocates is
// the middleware's (the values it puts in the map, its key, its bookkeeping).
type nopWriter struct {
	h    http.Header
	code int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }

// WriteString is there because net/http's own ResponseWriter has it (so
// io.WriteString copies nothing into a []byte).
func (w *nopWriter) WriteString(s string) (int, error) { return len(s), nil }
func (w *nopWriter) WriteHeader(code int)              { w.code = code }

// bare is the handler behind every middleware: it does nothing, so a
// middleware's cost is its ns/op minus bare's.
var bare = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// httpCase is what every implementation enforces, per client address: a
// limit so high that every request is admitted; one of a request an hour
// whose first request (the warm-up) takes the only token, so that every
// request the benchmark sends is denied; or a burst so large that every
// request is admitted but a refill so slow that each request leaves a token
// fewer than the last (bench/httppolicy.yaml: PerIP on GET /bench, Tight on
// GET /denied, Drain on GET /drain). limitgen keeps the field values it
// made and reuses them for a response with the same fields (limithttp's
// values.go): allowed and denied responses find theirs there after the
// first, a draining one never does, so its figure is the cost of making
// them.
type httpCase struct {
	name   string
	path   string
	tokens int64 // per period, and the burst
	period time.Duration
	code   int // what every measured request gets
	rule   func(*httplimits.Limits) func(string) bool
}

var httpCases = []httpCase{
	{"allowed", "/bench", 1_000_000_000, time.Second, http.StatusOK, func(l *httplimits.Limits) func(string) bool { return l.PerIP.Allow }},
	{"denied", "/denied", 1, time.Hour, http.StatusTooManyRequests, func(l *httplimits.Limits) func(string) bool { return l.Tight.Allow }},
	{"draining", "/drain", 1_000_000_000, 24 * time.Hour, http.StatusOK, func(l *httplimits.Limits) func(string) bool { return l.Drain.Allow }},
}

// httpImpls builds each middleware over bare, set up as its own README
// shows, for a case.
var httpImpls = []struct {
	name string
	make func(b testing.TB, c httpCase, next http.Handler) http.Handler
}{
	{"bare", func(_ testing.TB, _ httpCase, next http.Handler) http.Handler { return next }},
	{"limitgen", func(b testing.TB, c httpCase, next http.Handler) http.Handler {
		mw, err := httplimits.NewMiddleware(httplimits.New())
		if err != nil {
			b.Fatal(err)
		}
		return mw.Wrap(next)
	}},
	{"httprate", func(b testing.TB, c httpCase, next http.Handler) http.Handler {
		return httprate.Limit(int(c.tokens), c.period, httprate.WithKeyFuncs(httprate.KeyByIP))(next)
	}},
	{"httplimit", func(b testing.TB, c httpCase, next http.Handler) http.Handler {
		cfg := &memorystore.Config{Tokens: uint64(c.tokens), Interval: c.period}
		if c.code == http.StatusOK {
			// Configured as 1e9 a second it answered the benchmark's second
			// request 429; this is an allow-everything limit in the form it
			// admits, as the keyed benchmarks configure it (newSethvargo).
			cfg = &memorystore.Config{Tokens: 1 << 40, Interval: 24 * time.Hour}
		}
		store, err := memorystore.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		mw, err := httplimit.NewMiddleware(store, httplimit.IPKeyFunc())
		if err != nil {
			b.Fatal(err)
		}
		return mw.Handle(next)
	}},
	{"throttled", func(b testing.TB, c httpCase, next http.Handler) http.Handler {
		store, err := memstore.NewCtx(65536) // as throttled's README writes it
		if err != nil {
			b.Fatal(err)
		}
		quota := throttled.RateQuota{MaxRate: throttled.PerDuration(int(c.tokens), c.period), MaxBurst: int(c.tokens) - 1}
		rl, err := throttled.NewGCRARateLimiterCtx(store, quota)
		if err != nil {
			b.Fatal(err)
		}
		return (&throttled.HTTPRateLimiterCtx{RateLimiter: rl, VaryBy: &throttled.VaryBy{RemoteAddr: true}}).RateLimit(next)
	}},
	{"ulule", func(b testing.TB, c httpCase, next http.Handler) http.Handler {
		lim := ulule.New(ululememory.NewStore(), ulule.Rate{Period: c.period, Limit: c.tokens})
		return ululestdlib.NewMiddleware(lim).Handler(next)
	}},
}

// benchRequest is a request from one client to path. limitgen finds its
// route among the policy's patterns (as it must, whatever router runs before
// it); the peers limit every request alike.
func benchRequest(path string) *http.Request {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = "203.0.113.7:51234"
	return r
}

// rotated is impls in the order this run measures them: rotated by the run's
// number (LIMITGEN_BENCH_RUN, set by bench/run.sh), so that no implementation
// always runs first or after the same neighbour.
func rotated[T any](impls []T) []T {
	n, _ := strconv.Atoi(os.Getenv("LIMITGEN_BENCH_RUN"))
	k := n % len(impls)
	return append(slices.Clone(impls[k:]), impls[:k]...)
}

// BenchmarkHTTP is one request through each middleware on the same limit,
// from a warmed key: allowed, or denied. The response's header map is
// cleared before every request (as a server gives each response a new one),
// with a writer that allocates nothing else, so what an implementation
// allocates is its own; bare is the handler alone, and an implementation's
// overhead is its ns/op less bare's. core is limitgen's check alone (the
// table the middleware's rule uses), the denominator of the overhead target.
func BenchmarkHTTP(b *testing.B) {
	for _, c := range httpCases {
		b.Run("case="+c.name, func(b *testing.B) {
			for _, impl := range rotated(httpImpls) {
				b.Run("impl="+impl.name, func(b *testing.B) {
					h := impl.make(b, c, bare)
					r := benchRequest(c.path)
					w := &nopWriter{h: http.Header{}}
					h.ServeHTTP(w, r) // warm the key (and take the only token of a denied case)
					w.code = 0
					h.ServeHTTP(w, r)
					if impl.name != "bare" && w.code != c.code && !(w.code == 0 && c.code == http.StatusOK) {
						b.Fatalf("%s: status %d, want %d", impl.name, w.code, c.code)
					}
					b.ReportAllocs()
					for b.Loop() {
						clear(w.h)
						h.ServeHTTP(w, r)
					}
				})
			}
			b.Run("impl=core", func(b *testing.B) {
				l := httplimits.New()
				const key = "203.0.113.7"
				check := c.rule(l)
				check(key)
				want := c.code == http.StatusOK
				b.ReportAllocs()
				for b.Loop() {
					if check(key) != want {
						b.Fatal("the core check decided otherwise")
					}
				}
			})
		})
	}
}

// TestHTTPImplsSendFields checks what each middleware answers in each case:
// an allowed request, then (a limit of one an hour) a second request denied;
// limitgen sends the IETF fields, the peers their own.
func TestHTTPImplsSendFields(t *testing.T) {
	for _, c := range httpCases {
		for _, impl := range httpImpls[1:] {
			h := impl.make(t, c, bare)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, benchRequest(c.path))
			if c.code != http.StatusOK {
				w = httptest.NewRecorder()
				h.ServeHTTP(w, benchRequest(c.path))
			}
			if w.Code != c.code {
				t.Errorf("%s %s: status %d, want %d", c.name, impl.name, w.Code, c.code)
			}
			t.Logf("%s %s: %d, headers %v", c.name, impl.name, w.Code, w.Header())
			if impl.name == "limitgen" && w.Header().Get("RateLimit") == "" {
				t.Errorf("limitgen sent no RateLimit field: %v", w.Header())
			}
		}
	}
}

// handlerLike is the handler behind every middleware in BenchmarkHTTPPaired:
// what a minimal real handler does (a Content-Type, a short body), so that
// the response's header map has its first entry whether or not a middleware
// set one (net/http's map is made empty for each response; whoever sets its
// first entry pays for its storage, and the baseline pays it too).
var handlerLike = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header()["Content-Type"] = textPlain
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, "ok\n") //nolint:errcheck // a nopWriter
})

var textPlain = []string{"text/plain; charset=utf-8"}

// BenchmarkHTTPPaired measures every middleware in one process, in turn, in
// slices of about a millisecond (paired), each over its own README's default
// in-memory store and handlerLike, with a fresh header map per request as
// net/http gives each response, and a ResponseWriter that has WriteString as
// net/http's does. Cases: allowed while the bucket drains (1e9 a day: the
// remaining count changes at every request), allowed with a full bucket,
// denied; from one client address, or from 1e3 in turn. Each
// implementation's figures are its overhead over the handler alone (bare);
// <peer>/limitgen is a peer's overhead over limitgen's.
func BenchmarkHTTPPaired(b *testing.B) {
	cases := []struct {
		name string
		c    httpCase
	}{{"draining", httpCases[2]}, {"full", httpCases[0]}, {"denied", httpCases[1]}}
	for _, cs := range cases {
		for _, keys := range []int{1, 1000} {
			b.Run("case="+cs.name+"/keys="+strconv.Itoa(keys), func(b *testing.B) {
				reqs := make([]*http.Request, keys)
				for i := range reqs {
					reqs[i] = benchRequest(cs.c.path)
					reqs[i].RemoteAddr = "203.0." + strconv.Itoa(113+i/250) + "." + strconv.Itoa(i%250) + ":51234"
				}
				var impls []pairedImpl
				for _, im := range httpImpls {
					h := im.make(b, cs.c, handlerLike)
					w := &nopWriter{}
					n := 0
					serve := func() {
						w.h = make(http.Header)
						w.code = 0
						h.ServeHTTP(w, reqs[n%keys])
						n++
					}
					// Warm every key (a denied case's first request takes the
					// only token); then check the case's answer.
					for range keys {
						serve()
					}
					serve()
					if im.name != "bare" && w.code != cs.c.code {
						b.Fatalf("%s: status %d, want %d", im.name, w.code, cs.c.code)
					}
					impls = append(impls, pairedImpl{im.name, serve})
				}
				paired(b, impls, "limitgen")
			})
		}
	}
}

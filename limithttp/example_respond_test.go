package limithttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/clientip"
	"github.com/limitgen/limitgen/limithttp"
	"github.com/limitgen/limitgen/verdict"
)

// A middleware written by hand: 2 requests a second per client address, in
// bursts of 3, with the IETF fields on every response and a 429 problem body
// when the client is over. Generated middleware does the same with its
// policy's numbers folded in. The example drives it at fixed times.
func Example() {
	limit := atomicbucket.Limit{Tokens: 2, Period: time.Second, Burst: 3}
	perIP := atomicbucket.NewTable[string](atomicbucket.MustRule(limit), atomicbucket.TableOptions{MaxKeys: 100_000})
	policy := verdict.MustPolicy("PerIP", limit)
	var ip clientip.Config // the peer's address: no proxy is trusted
	cfg := &limithttp.Config{}

	var now atomicbucket.Time // a real middleware checks at atomicbucket.Now()
	limited := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ok := ip.Key(r.RemoteAddr, r.Header)
			if !ok {
				http.Error(w, "no client address", http.StatusBadRequest)
				return
			}
			res := verdict.Result{
				Decision: perIP.AllowNAt(key, now, 1),
				Policy:   &policy, Policies: policy.Item, Cost: 1,
			}
			if cfg.Respond(w, r, verdict.Enforce, &res, key) {
				next.ServeHTTP(w, r)
			}
		})
	}
	h := limited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for i, at := range []time.Duration{0, 0, 0, 0, 1200 * time.Millisecond} {
		now = atomicbucket.Time(at)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil)) // from 192.0.2.1
		fmt.Printf("%d %d RateLimit: %s Retry-After: %q\n", i, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	fmt.Println(policy.Item)
	// Output:
	// 0 200 RateLimit: "PerIP";r=2;t=1 Retry-After: ""
	// 1 200 RateLimit: "PerIP";r=1;t=1 Retry-After: ""
	// 2 200 RateLimit: "PerIP";r=0;t=1 Retry-After: ""
	// 3 429 RateLimit: "PerIP";r=0;t=1 Retry-After: "1"
	// 4 200 RateLimit: "PerIP";r=1;t=1 Retry-After: ""
	// "PerIP";q=3;w=2
}

package limithttp

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

func TestActualCost(t *testing.T) {
	for _, c := range []struct {
		name string
		h    http.Header
		want int64
		ok   bool
	}{
		{"header", http.Header{"X-Used": {"120"}}, 120, true},
		{"first value", http.Header{"X-Used": {"7", "9"}}, 7, true},
		{"zero", http.Header{"X-Used": {"0"}}, 0, true},
		{"leading zeros", http.Header{"X-Used": {"000042"}}, 42, true},
		{"trailer prefix", http.Header{http.TrailerPrefix + "X-Used": {"33"}}, 33, true},
		{"trailer prefix, not canonical", http.Header{http.TrailerPrefix + "x-used": {"34"}}, 34, true},
		{"header before trailer", http.Header{"X-Used": {"1"}, http.TrailerPrefix + "X-Used": {"2"}}, 1, true},
		{"18 digits", http.Header{"X-Used": {"999999999999999999"}}, 999999999999999999, true},
		{"19 digits: the most", http.Header{"X-Used": {"9999999999999999999"}}, math.MaxInt64, true},
		{"absent", http.Header{"X-Other": {"5"}}, 0, false},
		{"empty", http.Header{"X-Used": {""}}, 0, false},
		{"no values", http.Header{"X-Used": {}}, 0, false},
		{"negative", http.Header{"X-Used": {"-5"}}, 0, false},
		{"plus", http.Header{"X-Used": {"+5"}}, 0, false},
		{"space", http.Header{"X-Used": {" 5"}}, 0, false},
		{"exponent", http.Header{"X-Used": {"1e3"}}, 0, false},
		{"a trailer prefix alone", http.Header{http.TrailerPrefix: {"5"}}, 0, false},
	} {
		got, ok := ActualCost(c.h, "X-Used")
		if got != c.want || ok != c.ok {
			t.Errorf("%s: ActualCost = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// TestDoorSettles: a door of settled routes and no in-flight rules, over
// the real router, through Wrap and its ServeMux: a settlement runs after
// the handler returns normally, with what the handler set; not when the
// check denies, nor when the handler panics; and a route that settles from
// its context gets a cell for verdict.ReportCost, the others none.
func TestDoorSettles(t *testing.T) {
	var d Door
	deny := false
	InitDoor(&d, MustRouter("POST /h", "POST /c", "POST /n"), []string{"POST /h", "POST /c", "POST /n"},
		func(w http.ResponseWriter, _ *http.Request, _ int, _ string) bool {
			if deny {
				w.WriteHeader(http.StatusTooManyRequests)
			}
			return !deny
		})
	var seen []string
	admit := func(w http.ResponseWriter, _ *http.Request, route int, _ string) (bool, verdict.Mark) {
		if deny {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		return !deny, verdict.Mark{At: atomicbucket.Time(100 + route)}
	}
	InitSettle(&d, admit, func(w http.ResponseWriter, r *http.Request, route int, _ string, mk verdict.Mark) int64 {
		if mk.At != atomicbucket.Time(100+route) {
			t.Errorf("route %d settled with mark %+v, not its check's", route, mk)
		}
		switch route {
		case 0:
			v, ok := ActualCost(w.Header(), "X-Used")
			seen = append(seen, fmt.Sprintf("h %d %v", v, ok))
			if !ok {
				return verdict.KeptEstimate
			}
			return 0
		case 1:
			v, ok := verdict.ReportedCost(r.Context())
			seen = append(seen, fmt.Sprintf("c %d %v", v, ok))
			return 2
		}
		return verdict.NoSettle
	}, func(route int) bool { return route == 1 })
	reported := map[string]bool{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Panic") != "" {
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("X-Used", "5")
		reported[r.URL.Path] = verdict.ReportCost(r.Context(), 9)
	})
	mux := d.NewServeMux()
	mux.Handle("/", handler)
	for _, h := range []http.Handler{d.Wrap(handler), mux} {
		seen, deny = nil, false
		for _, path := range []string{"/h", "/c", "/n"} {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", path, nil))
		}
		deny = true
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/h", nil))
		deny = false
		func() {
			defer func() { recover() }()
			r := httptest.NewRequest("POST", "/h", nil)
			r.Header.Set("X-Panic", "1")
			h.ServeHTTP(httptest.NewRecorder(), r)
		}()
		if got := strings.Join(seen, "; "); got != "h 5 true; c 9 true" {
			t.Errorf("settlements %q, want the header route's and the context route's, once each", got)
		}
		if !reported["/c"] || reported["/h"] || reported["/n"] {
			t.Errorf("ReportCost found a cell on %v, want on /c only", reported)
		}
	}
	if st := d.SettleStats(); st != (verdict.SettleStats{Settled: 4, Forgiven: 4}) {
		t.Errorf("settle stats %+v, want 4 settled (2 a handler) and 4 forgiven", st)
	}
}

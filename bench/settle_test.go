package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/bench/settlelimits"
	"github.com/limitgen/limitgen/verdict"
)

// BenchmarkSettle is what a settled cost costs locally, at 1 and 1e3 keys:
// impl=check is a plain check (AllowNAt at cost 5), impl=settle a
// settlement alone (SettleAt, charging 1 above the estimate and giving 1
// back in turn: the bucket's word changes on every call, as a real one's
// does), and impl=check+settle a request admitted at its estimate and then
// settled at less (the whole of a settled request's work in the runtime).
// The goal is settle ≤ 1.2× check, with 0 allocations.
func BenchmarkSettle(b *testing.B) {
	rule, err := atomicbucket.NewRule(atomicbucket.Limit{Tokens: allowAll.tokens, Period: allowAll.period, Burst: allowAll.burst})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 1000} {
		keys, order := keySet(n)
		keys = queryKeys(keys)
		t := atomicbucket.NewTable[string](rule, atomicbucket.TableOptions{})
		for _, k := range keys {
			t.AllowNAt(k, atomicbucket.Now(), 5)
		}
		impls := []struct {
			name string
			op   func(i int, key string) bool
		}{
			{"check", func(_ int, key string) bool { return t.AllowNAt(key, atomicbucket.Now(), 5).Allowed }},
			{"settle", func(i int, key string) bool {
				return t.SettleAt(key, atomicbucket.Now(), 5, int64(4+2*(i&1))) == 0
			}},
			{"check+settle", func(_ int, key string) bool {
				now := atomicbucket.Now()
				return t.AllowNAt(key, now, 5).Allowed && t.SettleAt(key, now, 5, 3) == 0
			}},
		}
		for _, im := range impls {
			b.Run(fmt.Sprintf("keys=%.0e/impl=%s", float64(n), im.name), func(b *testing.B) {
				i, j := 0, 0
				for b.Loop() {
					sinkBool = im.op(j, keys[order[i]])
					j++
					if i++; i == n {
						i = 0
					}
				}
			})
		}
	}
}

// BenchmarkHTTPSettle is what settling costs at the HTTP door: one request
// through the generated middleware (bench/settlepolicy.yaml's Tokens, every
// request admitted, its cost declared in X-Max) to a route that does not
// settle (impl=plain), to one settled from the handler's X-Used header
// (impl=settled: the same check, then the header read and SettleAt), and
// to one settled from what the handler reports through its context
// (impl=context: a context and a request copy a request). Every handler
// sets the header, so the three differ only in the door's work.
func BenchmarkHTTPSettle(b *testing.B) {
	used := []string{"7"}
	for _, c := range []struct{ name, path string }{{"plain", "/plain"}, {"settled", "/settled"}, {"context", "/reported"}} {
		b.Run("impl="+c.name, func(b *testing.B) {
			mw, err := settlelimits.NewMiddleware(settlelimits.New())
			if err != nil {
				b.Fatal(err)
			}
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header()["X-Used"] = used
				verdict.ReportCost(r.Context(), 7) // false but on the context route
			}))
			r := httptest.NewRequest("POST", c.path, nil)
			r.RemoteAddr = "203.0.113.7:51234"
			r.Header.Set("X-Max", "12")
			w := &nopWriter{h: http.Header{}}
			h.ServeHTTP(w, r)
			if w.code != 0 && w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
			if st := mw.SettleStats(); c.name != "plain" && st.Settled == 0 {
				b.Fatalf("%s settled nothing: %+v", c.name, st)
			}
		})
	}
}

// BenchmarkWindowSettle is what settling costs a window rule, at 1 and 1e3
// keys: impl=check is a check alone (AllowNAt), impl=check+settle the same
// check then its settlement at a lower actual, given back from what the
// check counted (SettleAt with the check's time). form=counted is a window
// of a large limit (in place: one compare-and-swap on the sub-window's
// word); form=exact one of 64 (its ring of 64 rewritten in place while
// the key's checks wait). Neither window ever fills.
func BenchmarkWindowSettle(b *testing.B) {
	forms := []struct {
		name         string
		rule         atomicwindow.Rule
		cost, actual int64
	}{
		{"counted", atomicwindow.MustRule(atomicwindow.LimitMax, atomicwindow.Slices*atomicwindow.SliceMin), 5, 3},
		{"exact", atomicwindow.MustRule(atomicwindow.RingMax, time.Microsecond), 2, 1},
	}
	for _, f := range forms {
		for _, n := range []int{1, 1000} {
			keys, order := keySet(n)
			keys = queryKeys(keys)
			t := atomicwindow.NewTable[string](f.rule, atomicbucket.TableOptions{})
			impls := []struct {
				name string
				op   func(key string) bool
			}{
				{"check", func(key string) bool { return t.AllowNAt(key, atomicbucket.Now(), f.cost).Allowed }},
				{"check+settle", func(key string) bool {
					now := atomicbucket.Now()
					return t.AllowNAt(key, now, f.cost).Allowed && t.SettleAt(key, now, now, f.cost, f.actual) == 0
				}},
			}
			for _, im := range impls {
				b.Run(fmt.Sprintf("form=%s/keys=%.0e/impl=%s", f.name, float64(n), im.name), func(b *testing.B) {
					i, denied := 0, 0
					for b.Loop() {
						if !im.op(keys[order[i]]) {
							denied++
						}
						if i++; i == n {
							i = 0
						}
					}
					if denied > 0 {
						b.Fatalf("%d of %d denied: the window filled", denied, b.N)
					}
				})
			}
		}
	}
}

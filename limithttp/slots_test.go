package limithttp

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicslot"
)

// TestSlotsAllOrNothing: a request two routes may be handed (the raw path
// "/a/./b" reads as "/a/{x}/{y}", its cleaned form as "/a/b") takes a slot of
// each route's rule; when the second is full, the first's slot is given back
// and the handler never runs; when a route's check denies after both slots
// were taken, both are given back. Real gates and the real router, no
// handler in between.
func TestSlotsAllOrNothing(t *testing.T) {
	r, err := atomicslot.NewRule(1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	gates := []*atomicslot.Gate{atomicslot.NewGate(r), atomicslot.NewGate(r)}
	var d Door
	refuse := false // the second route's check denies
	InitDoor(&d, MustRouter("POST /a/b", "POST /a/{x}/{y}"), []string{"POST /a/b", "POST /a/{x}/{y}"},
		func(w http.ResponseWriter, _ *http.Request, route int, _ string) bool {
			if refuse && route == 1 {
				w.WriteHeader(http.StatusTooManyRequests)
				return false
			}
			return true
		})
	InitSlots(&d, func(w http.ResponseWriter, _ *http.Request, route int, _ string) (bool, atomicslot.Set) {
		var set atomicslot.Set
		s, dec := gates[route].Acquire()
		if !dec.Allowed {
			w.WriteHeader(http.StatusTooManyRequests)
			return false, set
		}
		set.Add(s)
		return true, set
	})
	ran := 0
	h := d.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ }))
	held, _ := gates[1].Acquire() // the second route's one slot is taken
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/a/./b", nil))
	if w.Code != http.StatusTooManyRequests || ran != 0 {
		t.Fatalf("with the second route's slot held: %d, handler ran %d times; want 429 and none", w.Code, ran)
	}
	if d := gates[0].PeekAt(0); !d.Allowed {
		t.Fatalf("the first route's slot was kept for a request that was denied: %+v", d)
	}
	held.Release()
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/a/./b", nil))
	if w.Code != http.StatusOK || ran != 1 {
		t.Fatalf("with both free: %d, handler ran %d times; want 200 once", w.Code, ran)
	}
	for i, g := range gates {
		if d := g.PeekAt(0); !d.Allowed {
			t.Fatalf("route %d's slot kept after the handler returned: %+v", i, d)
		}
	}
	refuse = true
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/a/./b", nil))
	if w.Code != http.StatusTooManyRequests || ran != 1 {
		t.Fatalf("with the second route's check denying: %d, handler ran %d times; want 429 and not again", w.Code, ran)
	}
	for i, g := range gates {
		if d := g.PeekAt(0); !d.Allowed {
			t.Fatalf("route %d's slot kept for a request a check denied: %+v", i, d)
		}
	}
}

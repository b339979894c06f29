package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"example.com/quickstart/limits"
	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"
)

// hello is the service's GET /hello, whatever router serves it.
func hello(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }

// The middleware protects whatever it wraps: a whole ServeMux, a ServeMux
// whose routes are spelled otherwise than the policy's, chi and gorilla/mux.
// On each, alice (free plan: burst 10 on PerUser) sends 15 GET /hello over a
// real connection: 10 pass and 5 are answered 429. Before the middleware
// matched the policy's own patterns it looked at r.Pattern, which is empty
// outside a ServeMux's handler, and every one of these let all 15 through.
func TestMiddlewareProtectsAnyRouter(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(mw *limits.Middleware) http.Handler
	}{
		{"whole ServeMux", func(mw *limits.Middleware) http.Handler {
			m := http.NewServeMux()
			m.HandleFunc("GET /hello", hello)
			return mw.Wrap(m) // http.ListenAndServe(addr, mw.Wrap(mux))
		}},
		{"ServeMux, another spelling", func(mw *limits.Middleware) http.Handler {
			m := http.NewServeMux()
			m.Handle("/hello", mw.Wrap(http.HandlerFunc(hello))) // r.Pattern is "/hello", the policy's "GET /hello"
			return m
		}},
		{"chi", func(mw *limits.Middleware) http.Handler {
			r := chi.NewRouter()
			r.Use(mw.Wrap)
			r.Get("/hello", hello)
			return r
		}},
		{"gorilla/mux", func(mw *limits.Middleware) http.Handler {
			r := mux.NewRouter()
			r.Use(mw.Wrap)
			r.HandleFunc("/hello", hello).Methods("GET")
			return r
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mw, err := newMiddleware(limits.New())
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(c.build(mw))
			defer srv.Close()
			codes := map[int]int{}
			for range 15 {
				req, err := http.NewRequest("GET", srv.URL+"/hello", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer token-alice")
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				codes[resp.StatusCode]++
			}
			if codes[200] != 10 || codes[429] != 5 {
				t.Errorf("15 requests on a burst of 10: %v, want 10 × 200 and 5 × 429", codes)
			}
		})
	}
}

// A request the policy covers is limited under the route net/http would give
// it, even when the service's router serves it under another path: an
// unclean path ("//hello", "/x/../hello") is the policy's GET /hello, and HEAD
// is GET's. A route the policy does not cover goes on unchecked.
func TestMiddlewareMatchesThePolicysPatterns(t *testing.T) {
	mw, err := newMiddleware(limits.New())
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
	send := func(method, target string) int {
		r := httptest.NewRequest(method, target, nil)
		r.Header.Set("Authorization", "Bearer token-alice")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i, target := range []string{"/hello", "//hello", "/x/../hello", "/hello", "/hello", "/hello", "/hello", "/hello", "/hello", "/hello"} {
		method := "GET"
		if i == 3 {
			method = "HEAD"
		}
		if code := send(method, target); code != 200 {
			t.Fatalf("request %d (%s %s): %d, want 200 within the burst", i+1, method, target, code)
		}
	}
	if code := send("GET", "//hello"); code != 429 {
		t.Errorf("the 11th request, GET //hello: %d, want 429", code)
	}
	for _, target := range []string{"/hello/", "/other", "/"} { // no route of the policy
		if code := send("GET", target); code != 200 {
			t.Errorf("GET %s, outside the policy: %d, want 200 (unchecked)", target, code)
		}
	}
	if code := send("POST", "/hello"); code != 200 { // GET /hello does not cover POST
		t.Errorf("POST /hello: %d, want 200 (unchecked)", code)
	}
	if served != 10+3+1 {
		t.Errorf("the handler ran %d times, want 14", served)
	}
}

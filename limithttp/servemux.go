package limithttp

import (
	"net/http"
	"sync"
)

// ServeMux is an http.ServeMux behind a generated middleware (its
// NewServeMux): every request it serves is checked first, those its handlers
// answer and those it answers itself (404, 405, a redirect to the clean path)
// alike. The routes are limited by the policy's patterns whatever patterns
// are registered here; Uncovered lists the registered patterns whose
// requests no policy route covers (served unlimited), and Unregistered the
// policy's patterns with no handler of the same spelling. The mux it wraps is
// out of reach (no field, no Handler method), so nothing serves it
// unchecked.
type ServeMux struct {
	mux        *http.ServeMux
	h          http.Handler // the mux behind the middleware
	router     *Router      // the policy's routes
	patterns   []string     // their patterns, in policy order
	mu         sync.Mutex
	registered map[string]bool
}

// NewServeMux returns an empty ServeMux behind wrap (a generated middleware's
// Wrap), whose policy's routes are router's, of patterns.
func newServeMux(wrap func(http.Handler) http.Handler, router *Router, patterns []string) *ServeMux {
	mux := http.NewServeMux()
	return &ServeMux{mux: mux, h: wrap(mux), router: router, patterns: patterns, registered: map[string]bool{}}
}

// ServeHTTP checks r against the policy's route that covers it, then serves
// it with the mux.
func (s *ServeMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.h.ServeHTTP(w, r)
}

// Handle registers h for pattern (the middleware checks every request before
// the mux).
func (s *ServeMux) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
	s.mu.Lock()
	s.registered[pattern] = true
	s.mu.Unlock()
}

// HandleFunc registers f for pattern, behind the middleware.
func (s *ServeMux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	s.Handle(pattern, http.HandlerFunc(f))
}

// Uncovered returns the patterns registered on s whose requests no policy
// route covers, all or in part (Uncovered: each tried with requests of its
// shape): they are served unlimited. A service checks it at start, and
// fails or logs when it is not empty.
func (s *ServeMux) Uncovered() []string {
	s.mu.Lock()
	patterns := make([]string, 0, len(s.registered))
	for p := range s.registered {
		patterns = append(patterns, p)
	}
	s.mu.Unlock()
	return Uncovered(patterns, func(r *http.Request) int {
		route, _ := s.router.Match(r)
		return route
	})
}

// Unregistered returns the policy's patterns that no handler has been
// registered for on s under the same spelling. Such a route is still limited
// (the middleware matches the policy's own patterns), but a policy route the
// service serves under no pattern of its own may be stale.
func (s *ServeMux) Unregistered() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, p := range s.patterns {
		if !s.registered[p] {
			out = append(out, p)
		}
	}
	return out
}

package httpapi

import (
	"net/http"
	"strings"
	"time"
)

// Router is a handler that names the route a request takes, from a bounded set, for the
// metrics of the answers it gives.
type Router interface {
	http.Handler
	Route(r *http.Request) string
}

// WithConsole returns a handler that serves the API's routes (and every path under /api/,
// so unknown API paths keep the API's error bodies) and hands all other paths to console;
// the console's answers are counted and timed as the API's are, under its routes, and its
// panics recovered.
func (s *Server) WithConsole(console Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.isAPIPath(r) {
			s.ServeHTTP(w, r)
			return
		}
		s.serveCounted(console.Route(r), console, w, r, time.Now(), func(w http.ResponseWriter) {
			http.Error(w, "500 internal server error: it has been logged with request id "+w.Header().Get("X-Request-Id"), http.StatusInternalServerError)
		})
	})
}

// isAPIPath reports whether the request is for the API: under /api, or any route it has.
func (s *Server) isAPIPath(r *http.Request) bool {
	p := r.URL.Path
	if p == "/api" || strings.HasPrefix(p, "/api/") {
		return true
	}
	if len(p) > 1 && strings.HasSuffix(p, "/") {
		r = r.Clone(r.Context())
		r.URL.Path = strings.TrimRight(p, "/")
	}
	// A GET route of the path answers a HEAD as well; any method probes the path's routes.
	for _, m := range []string{r.Method, http.MethodGet, http.MethodPost} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" {
			return true
		}
	}
	return false
}

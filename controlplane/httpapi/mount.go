package httpapi

import (
	"net/http"
	"strings"
)

// WithConsole returns a handler that serves the API's routes (and every path under /api/,
// so unknown API paths keep the API's error bodies) and hands all other paths to console.
func (s *Server) WithConsole(console http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.isAPIPath(r) {
			s.ServeHTTP(w, r)
			return
		}
		console.ServeHTTP(w, r)
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

package httpapi

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

type principalKey struct{}

// SessionPrincipal is the credential the console presents for a logged-in user: the
// user's own rights (scope "*", every project of their organisation), never more. Role
// access, admin-only writes and project reach are then checked exactly as for a key.
func SessionPrincipal(u *controlplane.User) *controlplane.APIKey {
	return &controlplane.APIKey{Label: "console session", User: *u, Scopes: []string{string(controlplane.ScopeAll)}}
}

// WithPrincipal returns ctx carrying a principal that the API accepts in place of a bearer
// key. Only code in this process can set it: it is how the console calls the API in process,
// so that the console has no path to the data but the API's handlers and their checks.
func WithPrincipal(ctx context.Context, key *controlplane.APIKey) context.Context {
	return context.WithValue(ctx, principalKey{}, key)
}

func principalFrom(ctx context.Context) *controlplane.APIKey {
	key, _ := ctx.Value(principalKey{}).(*controlplane.APIKey)
	return key
}

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

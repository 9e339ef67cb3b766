// Package httpapi serves the control plane's management REST API on net/http: routing,
// authentication with personal API keys and their scopes, pagination, request decoding and
// the API's error bodies, plus the health, readiness and metrics endpoints.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/flageval"
)

// Config holds the services and settings the API needs.
type Config struct {
	Auth        controlplane.AuthService
	Projects    controlplane.ProjectService
	Flags       controlplane.FlagService
	Activity    controlplane.ActivityService
	Events      controlplane.EventReader
	Annotations controlplane.AnnotationService
	Roles       controlplane.RoleService
	Cohorts     controlplane.CohortService
	Dashboards  controlplane.DashboardService
	Users       controlplane.UserService
	Keys        controlplane.KeyService
	Evaluator   *flageval.Evaluator
	// Ready reports whether the server can answer (its database is reachable).
	Ready func(ctx context.Context) error
	// PublicURL is the scheme and host used in absolute URLs (pagination); empty means the
	// request's own Host.
	PublicURL string
	Logger    *slog.Logger
	Registry  *prometheus.Registry
}

// Server is the management API's HTTP handler.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	metrics *metrics
}

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New builds the API's handler.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flagedge_controlplane_http_requests_total", Help: "Management API requests by route and status.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "flagedge_controlplane_http_request_duration_seconds", Help: "Management API latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"route"}),
	}
	cfg.Registry.MustRegister(m.requests, m.duration)
	s := &Server{cfg: cfg, mux: http.NewServeMux(), metrics: m}
	s.routes()
	return s
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /_health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /_ready", s.handleReady)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))

	s.mux.HandleFunc("GET /api/projects", s.withKey(controlplane.ScopeProjectRead, s.handleListProjects))
	s.mux.HandleFunc("POST /api/projects", s.withKey(controlplane.ScopeProjectWrite, s.handleCreateProject))
	s.mux.HandleFunc("GET /api/projects/{project_id}", s.withProject(controlplane.ScopeProjectRead, s.handleGetProject))
	s.mux.HandleFunc("PATCH /api/projects/{project_id}", s.withProject(controlplane.ScopeProjectWrite, s.handlePatchProject))

	const flags = "/api/projects/{project_id}/feature_flags"
	s.mux.HandleFunc("GET "+flags, s.withProject(controlplane.ScopeFlagRead, s.handleListFlags))
	s.mux.HandleFunc("POST "+flags, s.withProject(controlplane.ScopeFlagWrite, s.handleCreateFlag))
	s.mux.HandleFunc("GET "+flags+"/{id}", s.withProject(controlplane.ScopeFlagRead, s.handleGetFlag))
	s.mux.HandleFunc("PATCH "+flags+"/{id}", s.withProject(controlplane.ScopeFlagWrite, s.handlePatchFlag))
	s.mux.HandleFunc("DELETE "+flags+"/{id}", handleHardDelete)
	s.mux.HandleFunc("GET "+flags+"/{id}/activity", s.withProject(controlplane.ScopeActivityLogRead, s.handleFlagActivity))
	s.mux.HandleFunc("GET "+flags+"/activity", s.withProject(controlplane.ScopeActivityLogRead, s.handleAllFlagActivity))

	s.mux.HandleFunc("GET "+flags+"/evaluation_reasons", s.withProject(controlplane.ScopeFlagRead, s.handleEvaluationReasons))
	s.mux.HandleFunc("GET "+flags+"/local_evaluation", s.withProject(controlplane.ScopeFlagRead, s.handleLocalEvaluation))
	s.mux.HandleFunc("GET "+flags+"/my_flags", s.withProject(controlplane.ScopeFlagRead, s.handleMyFlags))
	s.mux.HandleFunc("POST "+flags+"/user_blast_radius", s.withProject(controlplane.ScopeFlagWrite, s.handleBlastRadius))
	s.mux.HandleFunc("POST "+flags+"/{id}/create_static_cohort_for_flag", s.withProject(controlplane.ScopeFlagWrite, s.handleStaticCohortForFlag))
	s.mux.HandleFunc("POST "+flags+"/{id}/dashboard", s.withProject(controlplane.ScopeFlagWrite, s.handleDashboard))
	s.mux.HandleFunc("POST "+flags+"/{id}/enrich_usage_dashboard", s.withProject(controlplane.ScopeFlagWrite, s.handleEnrichUsageDashboard))

	s.mux.HandleFunc("GET /flags/definitions", s.handleSDKDefinitions)
	s.mux.HandleFunc("GET /api/feature_flag/local_evaluation", s.handleSDKDefinitions)

	const cohorts = "/api/projects/{project_id}/cohorts"
	s.mux.HandleFunc("GET "+cohorts, s.withProject(controlplane.ScopeCohortRead, s.handleListCohorts))
	s.mux.HandleFunc("POST "+cohorts, s.withProject(controlplane.ScopeCohortWrite, s.handleCreateCohort))
	s.mux.HandleFunc("GET "+cohorts+"/{id}", s.withProject(controlplane.ScopeCohortRead, s.handleGetCohort))
	s.mux.HandleFunc("PATCH "+cohorts+"/{id}", s.withProject(controlplane.ScopeCohortWrite, s.handlePatchCohort))

	s.mux.HandleFunc("GET "+flags+"/{id}/role_access", s.withProject(controlplane.ScopeFlagRead, s.handleListRoleAccess))
	s.mux.HandleFunc("POST "+flags+"/{id}/role_access", s.withProject(controlplane.ScopeFlagWrite, s.handleCreateRoleAccess))
	s.mux.HandleFunc("GET "+flags+"/{id}/role_access/{access_id}", s.withProject(controlplane.ScopeFlagRead, s.handleGetRoleAccess))
	s.mux.HandleFunc("DELETE "+flags+"/{id}/role_access/{access_id}", s.withProject(controlplane.ScopeFlagWrite, s.handleDeleteRoleAccess))

	const annotations = "/api/projects/{project_id}/annotations"
	s.mux.HandleFunc("GET "+annotations, s.withProject(controlplane.ScopeAnnotationRead, s.handleListAnnotations))
	s.mux.HandleFunc("POST "+annotations, s.withProject(controlplane.ScopeAnnotationWrite, s.handleCreateAnnotation))
	s.mux.HandleFunc("GET "+annotations+"/{id}", s.withProject(controlplane.ScopeAnnotationRead, s.handleGetAnnotation))
	s.mux.HandleFunc("PATCH "+annotations+"/{id}", s.withProject(controlplane.ScopeAnnotationWrite, s.handlePatchAnnotation))
	s.mux.HandleFunc("DELETE "+annotations+"/{id}", handleHardDelete)

	const roles = "/api/organizations/{org}/roles"
	s.mux.HandleFunc("GET "+roles, s.withOrg(controlplane.ScopeRoleRead, s.handleListRoles))
	s.mux.HandleFunc("POST "+roles, s.withOrg(controlplane.ScopeRoleWrite, s.handleCreateRole))
	s.mux.HandleFunc("GET "+roles+"/{role}", s.withOrg(controlplane.ScopeRoleRead, s.handleGetRole))
	s.mux.HandleFunc("PATCH "+roles+"/{role}", s.withOrg(controlplane.ScopeRoleWrite, s.handlePatchRole))
	s.mux.HandleFunc("DELETE "+roles+"/{role}", s.withOrg(controlplane.ScopeRoleWrite, s.handleDeleteRole))
	s.mux.HandleFunc("GET "+roles+"/{role}/role_memberships", s.withOrg(controlplane.ScopeRoleRead, s.handleListMemberships))
	s.mux.HandleFunc("POST "+roles+"/{role}/role_memberships", s.withOrg(controlplane.ScopeRoleWrite, s.handleAddMembership))
	s.mux.HandleFunc("DELETE "+roles+"/{role}/role_memberships/{id}", s.withOrg(controlplane.ScopeRoleWrite, s.handleRemoveMembership))

	const project = "/api/projects/{project_id}"
	s.mux.HandleFunc("GET "+project+"/events", s.withProject(controlplane.ScopeEventRead, s.handleListEvents))
	s.mux.HandleFunc("GET "+project+"/events/{id}", s.withProject(controlplane.ScopeEventRead, s.handleGetEvent))
	s.mux.HandleFunc("GET "+project+"/persons", s.withProject(controlplane.ScopePersonRead, s.handleListPersons))
	s.mux.HandleFunc("GET "+project+"/persons/{id}", s.withProject(controlplane.ScopePersonRead, s.handleGetPerson))
	s.mux.HandleFunc("GET "+project+"/groups", s.withProject(controlplane.ScopePersonRead, s.handleListGroups))

	s.mux.HandleFunc("GET /api/users/{user}", s.withKey(controlplane.ScopeUserRead, s.handleMe))
	const keys = "/api/personal_api_keys"
	s.mux.HandleFunc("GET "+keys, s.withKey(controlplane.ScopeKeyRead, s.handleListKeys))
	s.mux.HandleFunc("POST "+keys, s.withKey(controlplane.ScopeKeyWrite, s.handleCreateKey))
	s.mux.HandleFunc("GET "+keys+"/{id}", s.withKey(controlplane.ScopeKeyRead, s.handleGetKey))
	s.mux.HandleFunc("PATCH "+keys+"/{id}", s.withKey(controlplane.ScopeKeyWrite, s.handlePatchKey))
	s.mux.HandleFunc("DELETE "+keys+"/{id}", s.withKey(controlplane.ScopeKeyWrite, s.handleDeleteKey))
	const org = "/api/organizations/{org}"
	s.mux.HandleFunc("GET "+org+"/members", s.withOrg(controlplane.ScopeMemberRead, s.handleListMembers))
	s.mux.HandleFunc("DELETE "+org+"/members/{user}", s.withOrg(controlplane.ScopeMemberWrite, s.handleRemoveMember))
	s.mux.HandleFunc("POST "+org+"/invites", s.withOrg(controlplane.ScopeMemberWrite, s.handleInvite))
	s.mux.HandleFunc("GET /api/schema", handleSchema)
}

// ServeHTTP routes a request: a trailing slash is ignored, unknown routes and methods get the
// API's error body, and every request is counted and timed.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
		r2 := r.Clone(r.Context())
		r2.URL.Path = strings.TrimRight(p, "/")
		r2.URL.RawPath = ""
		r = r2.WithContext(context.WithValue(r2.Context(), requestPathKey{}, p))
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	// Handler only finds the route; ServeHTTP then sets the path values as it dispatches.
	var h http.Handler = s.mux
	_, route := s.mux.Handler(r)
	if route == "" {
		route = "unmatched"
		h = routingErrorHandler{s.mux}
	}
	defer func() {
		if v := recover(); v != nil {
			s.cfg.Logger.Error("panic in handler", "route", route, "panic", v)
			if !sw.wrote {
				writeError(w, s.cfg.Logger, r, &controlplane.Error{Kind: controlplane.Internal})
			}
			sw.status = http.StatusInternalServerError
		}
		s.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
		s.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}()
	h.ServeHTTP(sw, r)
}

type requestPathKey struct{}

// requestPath returns the path as the client sent it (before the trailing slash was dropped).
func requestPath(r *http.Request) string {
	if p, ok := r.Context().Value(requestPathKey{}).(string); ok {
		return p
	}
	return r.URL.Path
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// routingErrorHandler turns the mux's plain-text 404 and 405 into the API's error body.
type routingErrorHandler struct{ mux http.Handler }

func (h routingErrorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{header: http.Header{}}
	h.mux.ServeHTTP(rec, r)
	if allow := rec.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	if rec.status == http.StatusMethodNotAllowed {
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Type: "invalid_request", Code: "method_not_allowed",
			Detail: "Method \"" + r.Method + "\" not allowed."})
		return
	}
	writeJSON(w, http.StatusNotFound, errorBody{Type: "invalid_request", Code: "not_found", Detail: "Not found."})
}

type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(code int)        { r.status = code }

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(r.Context()); err != nil {
			s.cfg.Logger.Warn("not ready", "err", err)
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleHardDelete answers DELETE on flags and annotations: hard deletion is not allowed, and
// the answer is a bare 405.
func handleHardDelete(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusMethodNotAllowed)
}

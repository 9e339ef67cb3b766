// Package httpapi serves the control plane's management REST API on net/http: routing,
// authentication with personal API keys and their scopes, pagination, request decoding and
// the API's error bodies, plus the health, readiness and metrics endpoints.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/controlplane/rollout"
)

// Config holds the services and settings the API needs.
type Config struct {
	// Services are the services, which check who may do what themselves: the API
	// authenticates the personal key, checks its scopes and the projects it is limited to,
	// and calls them as the key's user.
	controlplane.Services
	Evaluator *flageval.Evaluator
	// EdgeSessions are the connected edges and the versions they serve; Rollout waits on them.
	EdgeSessions controlplane.EdgeSessionStore
	Rollout      *rollout.Watcher
	// Usage is how much edges evaluate each flag.
	Usage controlplane.EvaluationStore
	// Ready reports whether the server can answer (its database is reachable).
	Ready func(ctx context.Context) error
	// PublicURL is the scheme and host used in absolute URLs (pagination); empty means the
	// request's own Host.
	PublicURL string
	Logger    *slog.Logger
	Registry  *prometheus.Registry
	// NoMetrics leaves /metrics out: it is served on a listener of its own.
	NoMetrics bool
}

// Server is the management API's HTTP handler.
type Server struct {
	cfg       Config
	mux       *http.ServeMux
	routeList []Route // every route registered, for Routes
	metrics   *metrics
}

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	panics   prometheus.Counter
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
			Name: "flagedge_controlplane_http_requests_total", Help: "HTTP answers (management API, console, static files, health) by route pattern and status.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "flagedge_controlplane_http_request_duration_seconds", Help: "HTTP latency (management API, console) by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"route"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_controlplane_http_panics_total",
			Help: "HTTP handlers that panicked: recovered, logged with a request id and answered 500."}),
	}
	cfg.Registry.MustRegister(m.requests, m.duration, m.panics)
	s := &Server{cfg: cfg, mux: http.NewServeMux(), metrics: m}
	s.routes()
	return s
}

func (s *Server) routes() {
	s.publicRoute("GET", "/_health", handleHealth)
	s.publicRoute("GET", "/_ready", s.handleReady)
	if !s.cfg.NoMetrics {
		// Prometheus' text format, written by its own handler.
		s.register(Route{Method: "GET", Pattern: "/metrics", Access: AccessPublic}, promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	}

	s.keyRoute("GET", "/api/projects", controlplane.ScopeProjectRead, s.handleListProjects)
	s.keyRoute("POST", "/api/projects", controlplane.ScopeProjectWrite, s.handleCreateProject)
	s.projectRoute("GET", "/api/projects/{project_id}", controlplane.ScopeProjectRead, s.handleGetProject)
	s.projectRoute("PATCH", "/api/projects/{project_id}", controlplane.ScopeProjectWrite, s.handlePatchProject)

	const flags = "/api/projects/{project_id}/feature_flags"
	s.projectRoute("GET", flags, controlplane.ScopeFlagRead, s.handleListFlags)
	s.projectRoute("POST", flags, controlplane.ScopeFlagWrite, s.handleCreateFlag)
	s.projectRoute("GET", flags+"/{id}", controlplane.ScopeFlagRead, s.handleGetFlag)
	s.projectRoute("PATCH", flags+"/{id}", controlplane.ScopeFlagWrite, s.handlePatchFlag)
	s.publicRoute("DELETE", flags+"/{id}", handleHardDelete)
	s.projectRoute("GET", flags+"/{id}/activity", controlplane.ScopeActivityLogRead, s.handleFlagActivity)
	s.projectRoute("GET", flags+"/{id}/evaluations", controlplane.ScopeFlagRead, s.handleFlagEvaluations)
	s.projectRoute("GET", flags+"/activity", controlplane.ScopeActivityLogRead, s.handleAllFlagActivity)

	s.projectRoute("GET", flags+"/{id}/release_plan", controlplane.ScopeFlagRead, s.handleGetReleasePlan)
	s.projectRoute("POST", flags+"/{id}/release_plan", controlplane.ScopeFlagWrite, s.handleCreateReleasePlan)
	s.projectRoute("POST", flags+"/{id}/release_plan/pause", controlplane.ScopeFlagWrite, s.handleSetReleasePlanState(controlplane.PlanPaused))
	s.projectRoute("POST", flags+"/{id}/release_plan/resume", controlplane.ScopeFlagWrite, s.handleSetReleasePlanState(controlplane.PlanRunning))
	s.projectRoute("POST", flags+"/{id}/release_plan/cancel", controlplane.ScopeFlagWrite, s.handleSetReleasePlanState(controlplane.PlanCancelled))

	s.projectRoute("GET", flags+"/evaluation_reasons", controlplane.ScopeFlagRead, s.handleEvaluationReasons)
	s.projectRoute("GET", flags+"/local_evaluation", controlplane.ScopeFlagRead, s.handleLocalEvaluation)
	s.projectRoute("GET", flags+"/my_flags", controlplane.ScopeFlagRead, s.handleMyFlags)
	s.projectRoute("POST", flags+"/user_blast_radius", controlplane.ScopeFlagWrite, s.handleBlastRadius)
	s.projectRoute("POST", flags+"/{id}/create_static_cohort_for_flag", controlplane.ScopeFlagWrite, s.handleStaticCohortForFlag)
	s.projectRoute("POST", flags+"/{id}/dashboard", controlplane.ScopeFlagWrite, s.handleDashboard)
	s.projectRoute("POST", flags+"/{id}/enrich_usage_dashboard", controlplane.ScopeFlagWrite, s.handleEnrichUsageDashboard)

	s.tokenRoute("GET", "/flags/definitions", controlplane.ScopeFlagRead, s.handleSDKDefinitions)
	s.tokenRoute("GET", "/api/feature_flag/local_evaluation", controlplane.ScopeFlagRead, s.handleSDKDefinitions)

	const cohorts = "/api/projects/{project_id}/cohorts"
	s.projectRoute("GET", cohorts, controlplane.ScopeCohortRead, s.handleListCohorts)
	s.projectRoute("POST", cohorts, controlplane.ScopeCohortWrite, s.handleCreateCohort)
	s.projectRoute("GET", cohorts+"/{id}", controlplane.ScopeCohortRead, s.handleGetCohort)
	s.projectRoute("PATCH", cohorts+"/{id}", controlplane.ScopeCohortWrite, s.handlePatchCohort)
	// A cohort's members are persons, properties and all: reading them takes person:read
	// (PostHog asks for cohort:read as well; one scope per route here, the stricter one).
	s.projectRoute("GET", cohorts+"/{id}/persons", controlplane.ScopePersonRead, s.handleListCohortPersons)
	s.projectRoute("PATCH", cohorts+"/{id}/add_persons_to_static_cohort", controlplane.ScopeCohortWrite, s.handleAddPersonsToStaticCohort)
	s.projectRoute("PATCH", cohorts+"/{id}/remove_person_from_static_cohort", controlplane.ScopeCohortWrite, s.handleRemovePersonFromStaticCohort)

	s.projectRoute("GET", flags+"/{id}/role_access", controlplane.ScopeFlagRead, s.handleListRoleAccess)
	s.projectRoute("POST", flags+"/{id}/role_access", controlplane.ScopeFlagWrite, s.handleCreateRoleAccess)
	s.projectRoute("GET", flags+"/{id}/role_access/{access_id}", controlplane.ScopeFlagRead, s.handleGetRoleAccess)
	s.projectRoute("DELETE", flags+"/{id}/role_access/{access_id}", controlplane.ScopeFlagWrite, s.handleDeleteRoleAccess)

	const features = "/api/projects/{project_id}/early_access_feature"
	s.projectRoute("GET", features, controlplane.ScopeFeatureRead, s.handleListFeatures)
	s.projectRoute("POST", features, controlplane.ScopeFeatureWrite, s.handleCreateFeature)
	s.projectRoute("GET", features+"/{id}", controlplane.ScopeFeatureRead, s.handleGetFeature)
	s.projectRoute("PATCH", features+"/{id}", controlplane.ScopeFeatureWrite, s.handlePatchFeature)
	s.projectRoute("DELETE", features+"/{id}", controlplane.ScopeFeatureWrite, s.handleDeleteFeature)

	const scheduled = "/api/projects/{project_id}/scheduled_changes"
	s.projectRoute("GET", scheduled, controlplane.ScopeFlagRead, s.handleListScheduledChanges)
	s.projectRoute("POST", scheduled, controlplane.ScopeFlagWrite, s.handleCreateScheduledChange)
	s.projectRoute("GET", scheduled+"/{id}", controlplane.ScopeFlagRead, s.handleGetScheduledChange)
	s.projectRoute("PATCH", scheduled+"/{id}", controlplane.ScopeFlagWrite, s.handlePatchScheduledChange)
	s.projectRoute("DELETE", scheduled+"/{id}", controlplane.ScopeFlagWrite, s.handleDeleteScheduledChange)

	const policies = "/api/projects/{project_id}/approval_policies"
	s.projectRoute("GET", policies, controlplane.ScopeApprovalsRead, s.handleListPolicies)
	s.projectRoute("POST", policies, controlplane.ScopeApprovalsWrite, s.handleCreatePolicy)
	s.projectRoute("GET", policies+"/{id}", controlplane.ScopeApprovalsRead, s.handleGetPolicy)
	s.projectRoute("PATCH", policies+"/{id}", controlplane.ScopeApprovalsWrite, s.handlePatchPolicy)
	s.projectRoute("DELETE", policies+"/{id}", controlplane.ScopeApprovalsWrite, s.handleDeletePolicy)
	const requests = "/api/projects/{project_id}/change_requests"
	s.projectRoute("GET", requests, controlplane.ScopeApprovalsRead, s.handleListChangeRequests)
	s.projectRoute("GET", requests+"/{id}", controlplane.ScopeApprovalsRead, s.handleGetChangeRequest)
	s.projectRoute("POST", requests+"/{id}/approve", controlplane.ScopeApprovalsWrite, s.handleApproveChangeRequest)
	s.projectRoute("POST", requests+"/{id}/reject", controlplane.ScopeApprovalsWrite, s.handleRejectChangeRequest)
	s.projectRoute("POST", requests+"/{id}/cancel", controlplane.ScopeApprovalsWrite, s.handleCancelChangeRequest)

	const annotations = "/api/projects/{project_id}/annotations"
	s.projectRoute("GET", annotations, controlplane.ScopeAnnotationRead, s.handleListAnnotations)
	s.projectRoute("POST", annotations, controlplane.ScopeAnnotationWrite, s.handleCreateAnnotation)
	s.projectRoute("GET", annotations+"/{id}", controlplane.ScopeAnnotationRead, s.handleGetAnnotation)
	s.projectRoute("PATCH", annotations+"/{id}", controlplane.ScopeAnnotationWrite, s.handlePatchAnnotation)
	s.publicRoute("DELETE", annotations+"/{id}", handleHardDelete)

	const hooks = "/api/projects/{project_id}/webhooks"
	s.projectRoute("GET", hooks, controlplane.ScopeWebhookRead, s.handleListWebhooks)
	s.projectRoute("POST", hooks, controlplane.ScopeWebhookWrite, s.handleCreateWebhook)
	s.projectRoute("GET", hooks+"/{id}", controlplane.ScopeWebhookRead, s.handleGetWebhook)
	s.projectRoute("PATCH", hooks+"/{id}", controlplane.ScopeWebhookWrite, s.handlePatchWebhook)
	s.projectRoute("DELETE", hooks+"/{id}", controlplane.ScopeWebhookWrite, s.handleDeleteWebhook)
	s.projectRoute("GET", hooks+"/{id}/deliveries", controlplane.ScopeWebhookRead, s.handleListDeliveries)

	const destinations = "/api/projects/{project_id}/event_destinations"
	s.projectRoute("GET", destinations, controlplane.ScopeDestinationRead, s.handleListDestinations)
	s.projectRoute("POST", destinations, controlplane.ScopeDestinationWrite, s.handleCreateDestination)
	s.projectRoute("GET", destinations+"/{id}", controlplane.ScopeDestinationRead, s.handleGetDestination)
	s.projectRoute("PATCH", destinations+"/{id}", controlplane.ScopeDestinationWrite, s.handlePatchDestination)
	s.projectRoute("DELETE", destinations+"/{id}", controlplane.ScopeDestinationWrite, s.handleDeleteDestination)
	s.projectRoute("GET", destinations+"/{id}/dead_letters", controlplane.ScopeDestinationRead, s.handleListForwardDeadLetters)

	const roles = "/api/organizations/{org}/roles"
	s.orgRoute("GET", roles, controlplane.ScopeRoleRead, s.handleListRoles)
	s.orgRoute("POST", roles, controlplane.ScopeRoleWrite, s.handleCreateRole)
	s.orgRoute("GET", roles+"/{role}", controlplane.ScopeRoleRead, s.handleGetRole)
	s.orgRoute("PATCH", roles+"/{role}", controlplane.ScopeRoleWrite, s.handlePatchRole)
	s.orgRoute("DELETE", roles+"/{role}", controlplane.ScopeRoleWrite, s.handleDeleteRole)
	s.orgRoute("GET", roles+"/{role}/role_memberships", controlplane.ScopeRoleRead, s.handleListMemberships)
	s.orgRoute("POST", roles+"/{role}/role_memberships", controlplane.ScopeRoleWrite, s.handleAddMembership)
	s.orgRoute("DELETE", roles+"/{role}/role_memberships/{id}", controlplane.ScopeRoleWrite, s.handleRemoveMembership)

	const orgFlags = "/api/organizations/{org}/feature_flags"
	s.orgRoute("POST", orgFlags+"/copy_flags", controlplane.ScopeFlagWrite, s.handleCopyFlags)
	s.orgRoute("POST", orgFlags+"/copy_flags/dependency_requirements", controlplane.ScopeFlagWrite, s.handleCopyRequirements)

	const project = "/api/projects/{project_id}"
	s.projectRoute("GET", project+"/events", controlplane.ScopeEventRead, s.handleListEvents)
	s.projectRoute("GET", project+"/events/{id}", controlplane.ScopeEventRead, s.handleGetEvent)
	s.projectRoute("GET", project+"/persons", controlplane.ScopePersonRead, s.handleListPersons)
	s.projectRoute("GET", project+"/persons/{id}", controlplane.ScopePersonRead, s.handleGetPerson)
	s.projectRoute("GET", project+"/groups", controlplane.ScopePersonRead, s.handleListGroups)
	s.projectRoute("GET", project+"/edges", controlplane.ScopeProjectRead, s.handleListEdges)
	s.projectRoute("GET", project+"/rollout_status", controlplane.ScopeProjectRead, s.handleRolloutStatus)

	s.keyRoute("GET", "/api/users/{user}", controlplane.ScopeUserRead, s.handleMe)
	const keys = "/api/personal_api_keys"
	s.keyRoute("GET", keys, controlplane.ScopeKeyRead, s.handleListKeys)
	s.keyRoute("POST", keys, controlplane.ScopeKeyWrite, s.handleCreateKey)
	s.keyRoute("GET", keys+"/{id}", controlplane.ScopeKeyRead, s.handleGetKey)
	s.keyRoute("PATCH", keys+"/{id}", controlplane.ScopeKeyWrite, s.handlePatchKey)
	s.keyRoute("DELETE", keys+"/{id}", controlplane.ScopeKeyWrite, s.handleDeleteKey)
	const org = "/api/organizations/{org}"
	s.orgRoute("GET", org+"/members", controlplane.ScopeMemberRead, s.handleListMembers)
	s.orgRoute("DELETE", org+"/members/{user}", controlplane.ScopeMemberWrite, s.handleRemoveMember)
	s.orgRoute("POST", org+"/invites", controlplane.ScopeMemberWrite, s.handleInvite)
	s.publicRoute("GET", "/api/schema", handleSchema)
}

// Access says how a route authenticates its caller.
type Access string

// The kinds of access of the routes.
const (
	// AccessPublic routes need no credentials.
	AccessPublic Access = "public"
	// AccessKey routes need a personal key with the route's scope.
	AccessKey Access = "key"
	// AccessProject routes need a personal key with the scope that reaches the path's project.
	AccessProject Access = "project"
	// AccessOrganization routes need a personal key with the scope of the path's organisation
	// (and an organisation admin to write).
	AccessOrganization Access = "organization"
	// AccessToken routes name their project by ?token= and take a personal key with the scope
	// that reaches it, or the project's secret key.
	AccessToken Access = "token"
)

// Route is one registered route, as Routes lists them.
type Route struct {
	Method string
	// Pattern is the path with its wildcards, as registered ("/api/projects/{project_id}").
	Pattern string
	Access  Access
	// Scope is the scope a personal key needs; empty for public routes.
	Scope controlplane.Scope
}

// Routes lists every route the server serves, in registration order. Tests walk it so that
// a route added without its authorisation being tested fails them.
func (s *Server) Routes() []Route { return slices.Clone(s.routeList) }

func (s *Server) register(rt Route, h http.Handler) {
	s.routeList = append(s.routeList, rt)
	s.mux.Handle(rt.Method+" "+rt.Pattern, h)
}

func (s *Server) publicRoute(method, pattern string, h handler) {
	s.register(Route{Method: method, Pattern: pattern, Access: AccessPublic}, s.respond(h))
}

func (s *Server) tokenRoute(method, pattern string, scope controlplane.Scope, h handler) {
	s.register(Route{Method: method, Pattern: pattern, Access: AccessToken, Scope: scope}, s.respond(h))
}

func (s *Server) keyRoute(method, pattern string, scope controlplane.Scope, h keyHandler) {
	s.register(Route{Method: method, Pattern: pattern, Access: AccessKey, Scope: scope}, s.respond(s.withKey(scope, h)))
}

func (s *Server) projectRoute(method, pattern string, scope controlplane.Scope, h projectHandler) {
	s.register(Route{Method: method, Pattern: pattern, Access: AccessProject, Scope: scope}, s.respond(s.withProject(scope, h)))
}

func (s *Server) orgRoute(method, pattern string, scope controlplane.Scope, h keyHandler) {
	s.register(Route{Method: method, Pattern: pattern, Access: AccessOrganization, Scope: scope}, s.respond(s.withOrg(scope, h)))
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
	// Handler only finds the route; ServeHTTP then sets the path values as it dispatches.
	var h http.Handler = s.mux
	_, route := s.mux.Handler(r)
	if route == "" {
		route = "unmatched"
		h = s.respond(s.routingError)
	}
	if route != "unmatched" {
		// Refuse what no handler can use before authenticating: a body announced over the
		// limit (without reading it) and query or path values that are not storable text.
		if r.ContentLength > maxBodyBytes {
			h = errorHandler{s, errTooLarge}
		} else if err := checkRequest(r, route); err != nil {
			h = errorHandler{s, err}
		}
	}
	s.serveCounted(route, h, w, r, start, func(w http.ResponseWriter) {
		writeError(w, s.cfg.Logger, r, &controlplane.Error{Kind: controlplane.Internal})
	})
}

// serveCounted serves r with h and counts and times the answer under route (a bounded set:
// registered patterns and a few fixed names). A panic is recovered: logged with a request id
// that the answer carries (X-Request-Id), answered 500 by internalError unless h had
// written already, and counted.
func (s *Server) serveCounted(route string, h http.Handler, w http.ResponseWriter, r *http.Request, start time.Time, internalError func(http.ResponseWriter)) {
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler { // net/http's own way to drop a connection
				s.metrics.requests.WithLabelValues(route, "aborted").Inc()
				panic(v)
			}
			id := newRequestID()
			s.cfg.Logger.Error("panic in handler", "route", route, "method", r.Method, "request_id", id, "panic", v, "stack", string(debug.Stack()))
			s.metrics.panics.Inc()
			if !sw.wrote {
				w.Header().Set("X-Request-Id", id)
				internalError(w)
			}
			sw.status = http.StatusInternalServerError
		}
		s.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
		s.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}()
	h.ServeHTTP(sw, r)
}

// newRequestID names one request in the logs and in its answer: 16 hex digits.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// errorHandler answers every request with one error.
type errorHandler struct {
	s   *Server
	err error
}

func (h errorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	writeError(w, h.s.cfg.Logger, r, h.err)
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

// routingError answers what the mux refuses, in the API's error shape instead of the mux's
// plain text: a 405 with the route's Allow header, else a 404.
func (s *Server) routingError(r *http.Request) (answer, error) {
	rec := &statusRecorder{header: http.Header{}}
	s.mux.ServeHTTP(rec, r)
	if rec.status != http.StatusMethodNotAllowed {
		return answer{}, controlplane.ErrNotFound
	}
	// No error of the services is a 405, so the body is written here in their shape.
	return answer{status: http.StatusMethodNotAllowed, value: errorBody{Type: "invalid_request", Code: "method_not_allowed",
		Detail: "Method \"" + r.Method + "\" not allowed."}}.with("Allow", rec.header.Get("Allow")), nil
}

type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(code int)        { r.status = code }

// handleHealth answers that the process serves.
func handleHealth(*http.Request) (answer, error) {
	return ok(map[string]string{"status": "ok"}), nil
}

// handleReady answers whether the server can answer: 503 while its database is unreachable.
func (s *Server) handleReady(r *http.Request) (answer, error) {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(r.Context()); err != nil {
			s.cfg.Logger.Warn("not ready", "err", err)
			return answer{status: http.StatusServiceUnavailable, value: map[string]string{"status": "unavailable"}}, nil
		}
	}
	return ok(map[string]string{"status": "ok"}), nil
}

// handleHardDelete answers DELETE on flags and annotations: hard deletion is not allowed, and
// the answer is a bare 405.
func handleHardDelete(*http.Request) (answer, error) {
	return noBody(http.StatusMethodNotAllowed), nil
}

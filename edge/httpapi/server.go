// Package httpapi is the edge's HTTP surface on fasthttp: routing, CORS, health, readiness
// and metrics, the SDK flag definitions and remote configuration, and the mounting of the
// /decide, /flags and capture handlers.
package httpapi

import (
	"bytes"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fasthttp/router"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/flagedge/flagedge/edge/admit"
	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/edge/ofrep"
	"github.com/flagedge/flagedge/edge/reqbody"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/clientip"
)

// Config holds what the edge's HTTP surface serves from.
type Config struct {
	State   *state.Holder
	Decide  *decide.Handler
	Capture *capture.Handler
	// OFREP serves the OpenFeature routes; nil leaves them out.
	OFREP    *ofrep.Handler
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// NoMetrics leaves /metrics out: it is served on a listener of its own.
	NoMetrics bool
	// Limiter applies the rate limits per client address (nil: none), the address being
	// the one IPs finds; Refusals counts refusals (nil: uncounted).
	Limiter  *admit.Limiter
	IPs      *clientip.Resolver
	Refusals *admit.Refusals
}

// Server routes the edge's requests.
type Server struct {
	cfg      Config
	router   *router.Router
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	draining atomic.Bool
	// The routes answered outside the router's named routes, counted as such.
	preflight, unreadable *routeStats
}

// New builds the edge's HTTP handler.
func New(cfg Config) *Server {
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, router: router.New(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_edge_http_requests_total",
			Help: "Requests by route and status."}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flagedge_edge_http_request_duration_seconds",
			Help:    "Request latency by route.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}, []string{"route"}),
	}
	cfg.Registry.MustRegister(s.requests, s.latency)
	s.preflight, s.unreadable = s.stats("preflight"), s.stats("unreadable")
	s.router.RedirectTrailingSlash = false
	s.router.HandleOPTIONS = true
	s.router.GlobalOPTIONS = preflight
	notFound, notAllowed := s.stats("not_found"), s.stats("method_not_allowed")
	s.router.NotFound = func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		s.writeError(ctx, apierror.NotFound)
		notFound.observe(ctx, start)
	}
	s.router.MethodNotAllowed = func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		s.writeError(ctx, apierror.MethodNotAllowed)
		notAllowed.observe(ctx, start)
	}

	// Paths are registered without a trailing slash; Handler drops it from requests.
	s.handle([]string{"GET", "POST"}, "decide", []string{"/decide"}, func(ctx *fasthttp.RequestCtx) error { return cfg.Decide.Serve(ctx, decide.Decide) })
	s.handle([]string{"GET", "POST"}, "flags", []string{"/flags"}, func(ctx *fasthttp.RequestCtx) error { return cfg.Decide.Serve(ctx, decide.Flags) })
	s.handle([]string{"GET"}, "definitions", []string{"/flags/definitions", "/api/feature_flag/local_evaluation"}, s.handleDefinitions)
	s.handle([]string{"GET"}, "remote_config", []string{"/api/projects/{project}/feature_flags/{key}/remote_config"}, s.handleRemoteConfig)
	s.handle([]string{"GET", "POST"}, "capture", []string{"/capture", "/batch", "/e", "/i/v0/e", "/track"},
		func(ctx *fasthttp.RequestCtx) error { return cfg.Capture.Serve(ctx, false) })
	s.handle([]string{"GET", "POST"}, "engage", []string{"/engage"}, func(ctx *fasthttp.RequestCtx) error { return cfg.Capture.Serve(ctx, true) })
	s.handle([]string{"GET"}, "array_config", []string{"/array/{token}/config"}, s.handleArrayConfig)
	s.handle([]string{"GET"}, "array_config_js", []string{"/array/{token}/config.js"}, s.handleArrayConfigJS)
	s.handle([]string{"GET", "HEAD"}, "static", []string{"/static/{file}", "/static/{version}/{file}"}, s.handleStatic)
	s.handle([]string{"GET"}, "early_access_features", []string{"/api/early_access_features"}, s.handleEarlyAccessFeatures)
	s.handle([]string{"GET"}, "surveys", []string{"/api/surveys"}, s.handleSurveys)

	if cfg.OFREP != nil {
		// OFREP's answers, errors and refusals included, are in OFREP's shapes; its refusals
		// are counted with the others.
		ofrepError := func(ctx *fasthttp.RequestCtx, err error) {
			ofrep.WriteError(ctx, cfg.Logger, err)
			s.countRefusal(ctx.Response.StatusCode(), err)
		}
		s.handleWith(ofrepError, []string{"POST"}, "ofrep_evaluate", []string{"/ofrep/v1/evaluate/flags/{key}"}, cfg.OFREP.ServeFlag)
		s.handleWith(ofrepError, []string{"POST"}, "ofrep_bulk", []string{"/ofrep/v1/evaluate/flags"}, cfg.OFREP.ServeBulk)
		s.handleWith(ofrepError, []string{"GET"}, "ofrep_configuration", []string{"/ofrep/v1/configuration"}, cfg.OFREP.ServeConfiguration)
		if hub := cfg.OFREP.Streams(); hub != nil {
			s.handleWith(ofrepError, []string{"GET"}, "ofrep_stream", []string{ofrep.StreamPath}, hub.Serve)
		}
	}

	// Operations' routes are not rate limited: probes and scrapes come from the operator.
	s.register(s.writeError, nil, []string{"GET"}, "health", []string{"/_health"}, func(ctx *fasthttp.RequestCtx) error {
		writeJSON(ctx, fasthttp.StatusOK, []byte(`{"status":"ok"}`))
		return nil
	})
	s.register(s.writeError, nil, []string{"GET"}, "ready", []string{"/_ready"}, s.handleReady)
	if !cfg.NoMetrics {
		metrics := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
		s.register(s.writeError, nil, []string{"GET"}, "metrics", []string{"/metrics"}, func(ctx *fasthttp.RequestCtx) error {
			metrics(ctx)
			return nil
		})
	}
	return s
}

// Handler returns the request handler to serve. Every path works with and without a
// trailing slash, and every answer carries CORS headers (errors, 404 and 405 included), so a
// browser page on another origin can read whatever the edge says.
func (s *Server) Handler() fasthttp.RequestHandler {
	route := s.router.Handler
	return func(ctx *fasthttp.RequestCtx) {
		setCORS(ctx)
		if ctx.IsOptions() {
			start := time.Now()
			preflight(ctx) // on any path, known or not
			s.preflight.observe(ctx, start)
			reqbody.Finish(ctx)
			return
		}
		if p := ctx.Path(); len(p) > 1 && p[len(p)-1] == '/' {
			ctx.URI().SetPathBytes(bytes.TrimRight(p, "/"))
		}
		route(ctx)
		reqbody.Finish(ctx)
	}
}

// Routes returns the registered paths by method, for tests that must cover every route.
func (s *Server) Routes() map[string][]string { return s.router.List() }

// Drain makes /_ready answer 503, so load balancers stop sending traffic before shutdown.
func (s *Server) Drain() { s.draining.Store(true) }

// handle registers h for methods on paths of an SDK-facing route: rate limited, with CORS
// headers, a request count and a latency histogram under the route's name; the error h
// returns is written here, in the API's shape.
func (s *Server) handle(methods []string, route string, paths []string, h func(*fasthttp.RequestCtx) error) {
	s.handleWith(s.writeError, methods, route, paths, h)
}

// handleWith is handle with the errors and refusals (*apierror.Error values) written by
// writeError: a route of another API (OFREP) answers in its own shape but is limited and
// counted the same way.
func (s *Server) handleWith(writeError func(*fasthttp.RequestCtx, error), methods []string, route string, paths []string, h func(*fasthttp.RequestCtx) error) {
	s.register(writeError, s.cfg.Limiter, methods, route, paths, h)
}

// register registers h for methods on paths under the route's name, counted and timed,
// limited per client address by limiter (nil: not limited), its errors written by
// writeError.
func (s *Server) register(writeError func(*fasthttp.RequestCtx, error), limiter *admit.Limiter, methods []string, route string, paths []string,
	h func(*fasthttp.RequestCtx) error) {
	stats := s.stats(route)
	wrapped := func(ctx *fasthttp.RequestCtx) {
		start := ctx.Time() // when fasthttp began handling the request: one clock read fewer
		if start.IsZero() { // a context not made by a fasthttp server
			start = time.Now()
		}
		var err error
		if limiter != nil {
			addr := s.cfg.IPs.ClientIP(ctx.Request.Header.PeekAll("X-Forwarded-For"), ctx.RemoteIP())
			if r, ok := limiter.Addr(addr, start); !ok {
				err = apierror.RateLimited(r.RetryAfter)
			}
		}
		if err == nil {
			err = h(ctx)
		}
		if err != nil {
			writeError(ctx, err)
		}
		stats.observe(ctx, start)
	}
	for _, m := range methods {
		for _, p := range paths {
			s.router.Handle(m, p, wrapped)
		}
	}
}

// routeStats is one route's request counts by status and its latency histogram.
type routeStats struct {
	s        *Server
	route    string
	latency  prometheus.Observer
	counters [600]atomic.Pointer[prometheus.Counter] // by status code, made on first use
}

func (s *Server) stats(route string) *routeStats {
	return &routeStats{s: s, route: route, latency: s.latency.WithLabelValues(route)}
}

// observe counts the answer ctx holds, given when the request started.
func (r *routeStats) observe(ctx *fasthttp.RequestCtx, start time.Time) {
	r.latency.Observe(time.Since(start).Seconds())
	code := ctx.Response.StatusCode()
	if code < 0 || code >= len(r.counters) {
		code = 0
	}
	c := r.counters[code].Load()
	if c == nil {
		counter := r.s.requests.WithLabelValues(r.route, strconv.Itoa(code))
		c = &counter
		r.counters[code].Store(c)
	}
	(*c).Inc()
}

func (s *Server) handleReady(ctx *fasthttp.RequestCtx) error {
	if s.draining.Load() || !s.cfg.State.Ready() {
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, []byte(`{"status":"unavailable"}`))
		return nil
	}
	writeJSON(ctx, fasthttp.StatusOK, []byte(`{"status":"ok"}`))
	return nil
}

// setCORS lets browsers call from any origin, with credentials, as PostHog does: the
// request's origin is allowed as its scheme and host (an origin without a host, such as
// "null", as "*"), or "*" when the request names none. Browsers' scripts may read the
// snapshot version an answer was computed from.
func setCORS(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	origin := ctx.Request.Header.Peek("Origin")
	if len(origin) == 0 {
		h.SetCanonical(allowOrigin, anyOrigin)
		return
	}
	h.SetCanonical(allowOrigin, originOf(origin))
	h.Set("Access-Control-Allow-Credentials", "true")
	h.Set("Access-Control-Expose-Headers", exposeHeaders)
	h.Set("Vary", "Origin")
}

// The header every answer carries, in canonical form (SetCanonical skips normalising it).
var allowOrigin, anyOrigin = []byte("Access-Control-Allow-Origin"), []byte("*")

// exposeHeaders are the response headers a browser's script may read besides the simple ones.
const exposeHeaders = "X-Flagedge-Snapshot-Version"

// originOf returns scheme://host[:port] of an Origin header, or "*" when it has no host.
func originOf(origin []byte) []byte {
	i := bytes.Index(origin, []byte("://"))
	if i <= 0 || i+3 == len(origin) {
		return []byte("*")
	}
	if j := bytes.IndexAny(origin[i+3:], "/?#"); j >= 0 {
		origin = origin[:i+3+j]
	}
	if len(origin) == i+3 {
		return []byte("*")
	}
	return origin
}

// preflight answers CORS preflight requests for every path: the methods the edge serves, the
// headers the browser asks for, cached for a day.
func preflight(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	if req := ctx.Request.Header.Peek("Access-Control-Request-Headers"); len(req) > 0 {
		h.SetBytesV("Access-Control-Allow-Headers", req)
	} else {
		h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization, X-Requested-With")
	}
	h.Set("Access-Control-Max-Age", "86400")
	ctx.SetStatusCode(fasthttp.StatusOK)
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// bearer returns the credential of an "Authorization: Bearer …" header.
func bearer(ctx *fasthttp.RequestCtx) string {
	h := bytes.TrimSpace(ctx.Request.Header.Peek("Authorization"))
	if len(h) > 7 && bytes.EqualFold(h[:7], []byte("bearer ")) {
		return string(bytes.TrimSpace(h[7:]))
	}
	return ""
}

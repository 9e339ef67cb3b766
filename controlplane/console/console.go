// Package console serves the control plane's web console: server-rendered pages for logging
// in, feature flags, annotations, keys, members, events and persons. It calls the same
// services as the management API, as the logged-in user, so it
// is subject to exactly the same checks (organisation membership, admin-only writes, flag
// role access) and shows the services' validation errors.
package console

import (
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/controlplane/loginlimit"
	"github.com/flagedge/flagedge/shared/clientip"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Config holds what the console needs.
type Config struct {
	// Services are the services, which check who may do what themselves, called as the
	// logged-in user; Users also checks passwords, Sessions keeps the sessions.
	controlplane.Services
	// Evaluator answers the flag page's test and blast radius panels.
	Evaluator *flageval.Evaluator
	// PublicURL is the scheme and host of the set-password links of invitations; empty means
	// the request's own.
	PublicURL string
	// EdgeSessions lists the connected edges of a project (the Edges page); Rollout says,
	// after a save, how many of them serve it (nil: not said).
	EdgeSessions controlplane.EdgeSessionStore
	Rollout      Rollout
	// Usage reads the flags' evaluations at the edges (nil: not shown).
	Usage controlplane.EvaluationStore
	// SecureCookies marks cookies Secure even on plain HTTP, for a console behind a proxy
	// that terminates TLS; requests that arrive over TLS get Secure cookies regardless.
	SecureCookies bool
	Logger        *slog.Logger
	// Logins gates password checks (failures per address and per email, concurrent
	// hashes); nil means a limiter with loginlimit.Defaults(), counting failures in this
	// process alone (serve gives it the store every replica shares).
	Logins *loginlimit.Limiter
	// ClientIP is the address a login comes from, for Logins; nil means the connection's
	// peer (right unless a proxy is in front: then clientip with --trusted-proxies).
	ClientIP func(*http.Request) netip.Addr
}

// Console is the web console's HTTP handler.
type Console struct {
	cfg   Config
	mux   *http.ServeMux
	pages map[string]*template.Template
}

// Cookie names.
const (
	sessionCookie    = "flagedge_session"
	loginCSRFCookie  = "flagedge_login_csrf"
	flashCookie      = "flagedge_flash"
	csrfField        = "csrf_token"
	maxFormBodyBytes = 1 << 20 // forms carry a flag definition at most
)

// New parses the console's templates and builds its routes.
func New(cfg Config) (*Console, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Logins == nil {
		cfg.Logins = loginlimit.New(loginlimit.Defaults(), nil)
	}
	if cfg.ClientIP == nil {
		cfg.ClientIP = clientip.Peer
	}
	c := &Console{cfg: cfg, mux: http.NewServeMux(), pages: map[string]*template.Template{}}
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", name, err)
		}
		c.pages[base] = t
	}
	c.routes()
	return c, nil
}

func (c *Console) routes() {
	static, _ := fs.Sub(staticFiles, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	c.mux.HandleFunc("GET /login", c.handleLoginPage)
	c.mux.HandleFunc("POST /login", c.handleLogin)
	c.mux.HandleFunc("GET /set-password", c.handleSetPasswordPage)
	c.mux.HandleFunc("POST /set-password", c.handleSetPassword)
	c.mux.HandleFunc("POST /logout", c.withSession(c.handleLogout))
	c.mux.HandleFunc("GET /{$}", c.withSession(c.handleHome))
	c.mux.HandleFunc("GET /projects", c.withSession(c.handleProjects))
	c.mux.HandleFunc("GET /switch", c.withSession(c.handleSwitch))

	const p = "/project/{pid}"
	c.mux.HandleFunc("GET "+p+"/feature_flags", c.withSession(c.handleFlags))
	c.mux.HandleFunc("GET "+p+"/feature_flags/new", c.withSession(c.handleNewFlag))
	c.mux.HandleFunc("POST "+p+"/feature_flags/new", c.withSession(c.handleCreateFlag))
	c.mux.HandleFunc("GET "+p+"/feature_flags/{id}", c.withSession(c.handleFlag))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}", c.withSession(c.handleSaveFlag))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/active", c.withSession(c.handleToggleFlag))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/delete", c.withSession(c.handleDeleteFlag(true)))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/restore", c.withSession(c.handleDeleteFlag(false)))
	c.mux.HandleFunc("GET "+p+"/feature_flags/{id}/activity", c.withSession(c.handleFlagActivity))
	c.mux.HandleFunc("GET "+p+"/feature_flags/{id}/blast", c.withSession(c.handleFlagBlast))
	c.mux.HandleFunc("GET "+p+"/feature_flags/{id}/promote", c.withSession(c.handlePromote))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/promote", c.withSession(c.handleCreatePromotion))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/schedule", c.withSession(c.handleScheduleChange))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/schedule/{sid}/delete", c.withSession(c.handleCancelScheduledChange))
	c.mux.HandleFunc("GET "+p+"/feature_flags/{id}/release_plan", c.withSession(c.handleReleasePlan))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/release_plan", c.withSession(c.handleStartReleasePlan))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/release_plan/{action}", c.withSession(c.handleSetReleasePlanState))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/role_access", c.withSession(c.handleAddRoleAccess))
	c.mux.HandleFunc("POST "+p+"/feature_flags/{id}/role_access/{aid}/delete", c.withSession(c.handleRemoveRoleAccess))

	c.mux.HandleFunc("GET "+p+"/annotations", c.withSession(c.handleAnnotations))
	c.mux.HandleFunc("GET "+p+"/annotations/new", c.withSession(c.handleNewAnnotation))
	c.mux.HandleFunc("POST "+p+"/annotations/new", c.withSession(c.handleCreateAnnotation))
	c.mux.HandleFunc("GET "+p+"/annotations/{id}", c.withSession(c.handleAnnotation))
	c.mux.HandleFunc("POST "+p+"/annotations/{id}", c.withSession(c.handleSaveAnnotation))
	c.mux.HandleFunc("POST "+p+"/annotations/{id}/delete", c.withSession(c.handleDeleteAnnotation))

	c.mux.HandleFunc("GET "+p+"/events", c.withSession(c.handleEvents))
	c.mux.HandleFunc("GET "+p+"/persons", c.withSession(c.handlePersons))
	c.mux.HandleFunc("GET "+p+"/persons/{id}", c.withSession(c.handlePerson))
	c.mux.HandleFunc("GET "+p+"/edges", c.withSession(c.handleEdges))
	c.mux.HandleFunc("GET "+p+"/rollout", c.withSession(c.handleRollout))
	c.mux.HandleFunc("GET "+p+"/webhooks", c.withSession(c.handleWebhooks))
	c.mux.HandleFunc("POST "+p+"/webhooks", c.withSession(c.handleCreateWebhook))
	c.mux.HandleFunc("GET "+p+"/webhooks/{id}", c.withSession(c.handleWebhook))
	c.mux.HandleFunc("POST "+p+"/webhooks/{id}/delete", c.withSession(c.handleDeleteWebhook))
	c.mux.HandleFunc("GET "+p+"/destinations", c.withSession(c.handleDestinations))
	c.mux.HandleFunc("POST "+p+"/destinations", c.withSession(c.handleCreateDestination))
	c.mux.HandleFunc("POST "+p+"/destinations/{id}/enabled", c.withSession(c.handleEnableDestination))
	c.mux.HandleFunc("POST "+p+"/destinations/{id}/delete", c.withSession(c.handleDeleteDestination))
	c.mux.HandleFunc("GET "+p+"/approval_policies", c.withSession(c.handlePolicies))
	c.mux.HandleFunc("POST "+p+"/approval_policies", c.withSession(c.handleCreatePolicy))
	c.mux.HandleFunc("POST "+p+"/approval_policies/{aid}/enabled", c.withSession(c.handleSetPolicyEnabled))
	c.mux.HandleFunc("POST "+p+"/approval_policies/{aid}/delete", c.withSession(c.handleDeletePolicy))
	c.mux.HandleFunc("GET "+p+"/change_requests", c.withSession(c.handleChangeRequests))
	c.mux.HandleFunc("GET "+p+"/change_requests/{cid}", c.withSession(c.handleChangeRequest))
	c.mux.HandleFunc("POST "+p+"/change_requests/{cid}/approve", c.withSession(c.handleVote(true)))
	c.mux.HandleFunc("POST "+p+"/change_requests/{cid}/reject", c.withSession(c.handleVote(false)))
	c.mux.HandleFunc("POST "+p+"/change_requests/{cid}/cancel", c.withSession(c.handleCancelChangeRequest))

	c.mux.HandleFunc("GET /settings/keys", c.withSession(c.handleKeys))
	c.mux.HandleFunc("POST /settings/keys", c.withSession(c.handleCreateKey))
	c.mux.HandleFunc("POST /settings/keys/{id}/delete", c.withSession(c.handleDeleteKey))
	c.mux.HandleFunc("GET /settings/members", c.withSession(c.handleMembers))
	c.mux.HandleFunc("POST /settings/members", c.withSession(c.handleInvite))
	c.mux.HandleFunc("POST /settings/members/{uuid}/delete", c.withSession(c.handleRemoveMember))
}

// ServeHTTP serves the console with headers that keep its pages out of frames and its
// scripts to its own files.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'")
	if len(r.URL.Path) > 1 && strings.HasSuffix(r.URL.Path, "/") && !strings.HasPrefix(r.URL.Path, "/static/") {
		r2 := r.Clone(r.Context())
		r2.URL.Path = strings.TrimRight(r.URL.Path, "/")
		r = r2
	}
	// Nothing the console stores or looks up may hold text PostgreSQL refuses: an address or
	// query holding it is refused here, a form in readForm.
	if textProblem(r.URL.Path) != "" || valuesProblem(r.URL.Query()) != "" {
		c.renderStatus(w, r, nil, http.StatusBadRequest, "Bad request", "The address holds a NUL character or text that is not UTF-8.")
		return
	}
	if _, pattern := c.mux.Handler(r); pattern == "" {
		c.renderStatus(w, r, nil, http.StatusNotFound, "Page not found", "There is nothing at this address.")
		return
	}
	c.mux.ServeHTTP(w, r)
}

// textProblem says why s cannot be stored, or "".
func textProblem(s string) string { return controlplane.TextProblem(s) }

// valuesProblem says why a field of a query or form cannot be stored, or "".
func valuesProblem(v url.Values) string {
	for name, values := range v {
		if p := textProblem(name); p != "" {
			return p
		}
		for _, value := range values {
			if p := textProblem(value); p != "" {
				return p
			}
		}
	}
	return ""
}

// readForm reads a posted form of at most maxFormBodyBytes, or answers 400 and reports
// false: a body that cannot be read, or a field holding text that cannot be stored.
func (c *Console) readForm(w http.ResponseWriter, r *http.Request, sess *controlplane.Session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBodyBytes)
	if err := r.ParseForm(); err != nil {
		c.renderStatus(w, r, sess, http.StatusBadRequest, "Bad request", "The form could not be read.")
		return false
	}
	if p := valuesProblem(r.PostForm); p != "" {
		c.renderStatus(w, r, sess, http.StatusBadRequest, "Bad request", "A field of the form holds text that cannot be stored: "+p)
		return false
	}
	return true
}

// Route names the route r takes, for the control plane's request metrics: the pattern it
// was registered with, or "console_unmatched".
func (c *Console) Route(r *http.Request) string {
	if len(r.URL.Path) > 1 && strings.HasSuffix(r.URL.Path, "/") && !strings.HasPrefix(r.URL.Path, "/static/") {
		r = r.Clone(r.Context())
		r.URL.Path = strings.TrimRight(r.URL.Path, "/")
	}
	if _, pattern := c.mux.Handler(r); pattern != "" {
		return pattern
	}
	return "console_unmatched"
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Assets change only with a release; an hour is short enough to pick up an upgrade.
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// request is one logged-in request: the session, and the context that acts as its user.
type request struct {
	w       http.ResponseWriter
	r       *http.Request
	ctx     context.Context // acts as the session's user (controlplane.NewContextWithUser)
	session *controlplane.Session
	c       *Console
}

// user is the logged-in user.
func (q *request) user() *controlplane.User { return &q.session.User }

type sessionHandler func(q *request) error

// withSession requires a live session (else redirects to the login page) and, for every
// POST, the session's CSRF token.
func (c *Console) withSession(h sessionHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var token string
		if ck, err := r.Cookie(sessionCookie); err == nil {
			token = ck.Value
		}
		sess, err := c.cfg.Sessions.FindSession(r.Context(), token)
		if err != nil {
			if controlplane.ErrorKind(err) != controlplane.NotAuthenticated {
				c.serverError(w, r, err)
				return
			}
			if r.Method != http.MethodGet {
				c.renderStatus(w, r, nil, http.StatusUnauthorized, "Session expired", "Log in again to continue.")
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			if !c.readForm(w, r, sess) {
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue(csrfField)), []byte(sess.CSRFToken)) != 1 {
				c.renderStatus(w, r, sess, http.StatusForbidden, "Forbidden", "The form's security token is missing or wrong. Reload the page and try again.")
				return
			}
		}
		q := &request{w: w, r: r, ctx: controlplane.NewContextWithUser(r.Context(), &sess.User), session: sess, c: c}
		if err := h(q); err != nil {
			c.handleError(q, err)
		}
	}
}

// handleError shows a service's error as a page; internal errors are logged, never shown.
func (c *Console) handleError(q *request, err error) {
	if e := userError(err); e != nil {
		status := statusOf(e.Kind)
		title := map[int]string{400: "Invalid request", 401: "Not logged in", 403: "Permission denied", 404: "Not found"}[status]
		if title == "" {
			title = http.StatusText(status)
		}
		c.renderStatus(q.w, q.r, q.session, status, title, e.Detail)
		return
	}
	c.serverError(q.w, q.r, err)
}

// userError is err when it is one to show the user (a controlplane.Error that is not
// internal), else nil.
func userError(err error) *controlplane.Error {
	var e *controlplane.Error
	if errors.As(err, &e) && e.Kind != controlplane.Internal {
		return e
	}
	return nil
}

// invalid is err when the user's input caused it (a validation error to show beside the
// form), else nil.
func invalid(err error) *controlplane.Error {
	if e := userError(err); e != nil && statusOf(e.Kind) == http.StatusBadRequest {
		return e
	}
	return nil
}

// statusOf is the status of a page that shows an error of the kind.
func statusOf(k controlplane.Kind) int {
	switch k {
	case controlplane.Invalid, controlplane.Malformed:
		return http.StatusBadRequest
	case controlplane.NotAuthenticated, controlplane.BadCredentials:
		return http.StatusUnauthorized
	case controlplane.Forbidden:
		return http.StatusForbidden
	case controlplane.NotFound:
		return http.StatusNotFound
	case controlplane.TooLarge:
		return http.StatusRequestEntityTooLarge
	case controlplane.Conflict: // a gated save: the change request was filed
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// detail is err as a panel shows it: a user's error as it is, any other logged and named
// only as a server error.
func (c *Console) detail(r *http.Request, err error) string {
	if e := userError(err); e != nil {
		return e.Detail
	}
	c.cfg.Logger.Error("console error", "method", r.Method, "path", r.URL.Path, "err", err)
	return "A server error occurred."
}

func (c *Console) serverError(w http.ResponseWriter, r *http.Request, err error) {
	c.cfg.Logger.Error("console error", "method", r.Method, "path", r.URL.Path, "err", err)
	c.renderStatus(w, r, nil, http.StatusInternalServerError, "Something went wrong", "A server error occurred. It has been logged.")
}

// page is what every template receives.
type page struct {
	Title     string
	User      *controlplane.User
	CSRF      string
	Project   *controlplane.Project
	Projects  []*controlplane.Project
	Nav       string // the active navigation entry
	Flash     string
	FlashKind string
	// Rollout is, after a save, the version whose rollout line the page loads once shown
	// (the page's ?live=<version>).
	Rollout *rolloutView
	Data    any
}

// render writes a page with the layout; q may be nil for pages without a session.
func (c *Console) render(w http.ResponseWriter, status int, name string, p *page) {
	t, ok := c.pages[name]
	if !ok {
		panic("console: no template " + name) // a programming error
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, p); err != nil {
		c.cfg.Logger.Error("console render", "template", name, "err", err)
		http.Error(w, "A server error occurred.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the client went away; nothing to do
}

// renderStatus shows a message page with a status code.
func (c *Console) renderStatus(w http.ResponseWriter, r *http.Request, sess *controlplane.Session, status int, title, detail string) {
	p := &page{Title: title, Data: map[string]string{"Title": title, "Detail": detail}}
	if sess != nil {
		p.User, p.CSRF = &sess.User, sess.CSRFToken
	}
	c.render(w, status, "status", p)
}

// maxProjects bounds the project picker: an organisation has a handful of projects.
const maxProjects = 1000

// page builds the common page data for a logged-in request, in the project of the path
// when it has one (which the user must reach).
func (q *request) page(title, nav string) (*page, error) {
	p := &page{Title: title, User: q.user(), CSRF: q.session.CSRFToken, Nav: nav}
	projects, _, err := q.c.cfg.Projects.FindProjects(q.ctx, controlplane.ProjectFilter{OrganizationID: q.user().OrganizationID, Limit: maxProjects})
	if err != nil {
		return nil, err
	}
	p.Projects = projects
	if pid := q.r.PathValue("pid"); pid != "" {
		for _, proj := range p.Projects { // the picker's projects are those the user reaches
			if strconv.FormatInt(proj.ID, 10) == pid {
				p.Project = proj
			}
		}
		if p.Project == nil {
			if p.Project, err = q.project(); err != nil { // tells out of reach from missing
				return nil, err
			}
		}
	} else if len(p.Projects) > 0 {
		p.Project = p.Projects[0]
		if ck, err := q.r.Cookie("flagedge_project"); err == nil {
			for _, proj := range p.Projects {
				if strconv.FormatInt(proj.ID, 10) == ck.Value {
					p.Project = proj
				}
			}
		}
	}
	if p.Project != nil {
		p.Rollout = q.pendingRollout(p.Project.ID)
	}
	if ck, err := q.r.Cookie(flashCookie); err == nil {
		if msg, err := url.QueryUnescape(ck.Value); err == nil {
			p.FlashKind, p.Flash, _ = strings.Cut(msg, "|") // written by redirect as kind|message
		}
		http.SetCookie(q.w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	}
	if p.Project != nil {
		http.SetCookie(q.w, &http.Cookie{Name: "flagedge_project", Value: fmt.Sprint(p.Project.ID), Path: "/", HttpOnly: true,
			SameSite: http.SameSiteLaxMode, Secure: q.c.secure(q.r), MaxAge: 365 * 24 * 3600})
	}
	return p, nil
}

// redirect answers a POST with 303 to path and a message shown once on the next page.
func (q *request) redirect(path, kind, msg string) error {
	if msg != "" {
		http.SetCookie(q.w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(kind + "|" + msg), Path: "/", HttpOnly: true,
			SameSite: http.SameSiteLaxMode, Secure: q.c.secure(q.r), MaxAge: 60})
	}
	http.Redirect(q.w, q.r, path, http.StatusSeeOther)
	return nil
}

// secure reports whether cookies must be Secure.
func (c *Console) secure(r *http.Request) bool { return c.cfg.SecureCookies || r.TLS != nil }

// projectPath is a console path within the request's project.
func (q *request) projectPath(format string, args ...any) string {
	return "/project/" + url.PathEscape(q.r.PathValue("pid")) + fmt.Sprintf(format, args...)
}

// project is the path's project, when the user reaches it.
func (q *request) project() (*controlplane.Project, error) {
	id, err := pathID(q.r, "pid")
	if err != nil {
		return nil, err
	}
	return q.c.cfg.Projects.FindProjectByID(q.ctx, id)
}

// projectID is the path's project id (the services check the user reaches it).
func (q *request) projectID() int64 {
	id, _ := strconv.ParseInt(q.r.PathValue("pid"), 10, 64)
	return id
}

// pathID is the path value name as a positive id; anything else addresses nothing.
func pathID(r *http.Request, name string) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, controlplane.ErrNotFound
	}
	return id, nil
}

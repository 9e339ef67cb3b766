// Package console serves the control plane's web console: server-rendered pages for logging
// in, feature flags, annotations, keys, members, events and persons. It holds no data path of
// its own: every read and write is a call to the management API's handler, in process, as the
// logged-in user, so the console is subject to exactly the API's checks (organisation
// membership, admin-only writes, flag role access) and shows the API's validation errors.
package console

import (
	"bytes"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/loginlimit"
	"github.com/flagedge/flagedge/shared/clientip"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Config holds what the console needs.
type Config struct {
	// API is the management API's handler; the console calls it in process for all data.
	API http.Handler
	// Users checks passwords and spends set-password tokens.
	Users controlplane.UserService
	// Sessions keeps the logged-in sessions.
	Sessions controlplane.SessionService
	// SecureCookies marks cookies Secure even on plain HTTP, for a console behind a proxy
	// that terminates TLS; requests that arrive over TLS get Secure cookies regardless.
	SecureCookies bool
	Logger        *slog.Logger
	// Logins gates password checks (failures per address and per email, concurrent
	// hashes); nil means a limiter with loginlimit.Defaults.
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
		cfg.Logins = loginlimit.New(loginlimit.Defaults, nil)
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
	if _, pattern := c.mux.Handler(r); pattern == "" {
		c.renderStatus(w, r, nil, http.StatusNotFound, "Page not found", "There is nothing at this address.")
		return
	}
	c.mux.ServeHTTP(w, r)
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

// request is one logged-in request: the session, and the page's common data.
type request struct {
	w       http.ResponseWriter
	r       *http.Request
	session *controlplane.Session
	c       *Console
}

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
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBodyBytes)
			if err := r.ParseForm(); err != nil {
				c.renderStatus(w, r, sess, http.StatusBadRequest, "Bad request", "The form could not be read.")
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue(csrfField)), []byte(sess.CSRFToken)) != 1 {
				c.renderStatus(w, r, sess, http.StatusForbidden, "Forbidden", "The form's security token is missing or wrong. Reload the page and try again.")
				return
			}
		}
		q := &request{w: w, r: r, session: sess, c: c}
		if err := h(q); err != nil {
			c.handleError(q, err)
		}
	}
}

// apiError is an error answer of the management API.
type apiError struct {
	Status int
	Type   string  `json:"type"`
	Code   string  `json:"code"`
	Detail string  `json:"detail"`
	Attr   *string `json:"attr"`
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Detail) }

// field returns the attribute the error concerns, or "".
func (e *apiError) field() string {
	if e.Attr == nil {
		return ""
	}
	return *e.Attr
}

func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

// bufferWriter collects an in-process API answer.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferWriter) Header() http.Header { return b.header }
func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
func (b *bufferWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

// api calls the management API as the session's user and decodes a JSON answer into out
// (when not nil). An error answer is returned as *apiError.
func (q *request) api(method, path string, body, out any) error {
	_, err := q.apiCall(method, path, body, out, http.StatusOK)
	return err
}

// apiCall is api that also answers the response's headers, and decodes into out the answers
// with status ok as well as the successful ones (rollout_status answers 408 with a body).
func (q *request) apiCall(method, path string, body, out any, ok int) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	ctx := httpapi.WithPrincipal(q.r.Context(), httpapi.SessionPrincipal(&q.session.User))
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return nil, err
	}
	req.Host = q.r.Host
	req.RemoteAddr = q.r.RemoteAddr
	req.TLS = q.r.TLS
	req.Header.Set("Content-Type", "application/json")
	bw := &bufferWriter{header: http.Header{}}
	q.c.cfg.API.ServeHTTP(bw, req)
	if bw.status >= 300 && bw.status != ok {
		ae := &apiError{Status: bw.status}
		if json.Unmarshal(bw.body.Bytes(), ae) != nil || ae.Detail == "" {
			ae.Detail = http.StatusText(bw.status)
		}
		return bw.header, ae
	}
	if out == nil || bw.status == http.StatusNoContent {
		return bw.header, nil
	}
	if err := json.Unmarshal(bw.body.Bytes(), out); err != nil {
		return bw.header, fmt.Errorf("console: decode %s %s: %w", method, path, err)
	}
	return bw.header, nil
}

// handleError shows an API error as a page; internal errors are logged, never shown.
func (c *Console) handleError(q *request, err error) {
	if ae := asAPIError(err); ae != nil && ae.Status < 500 {
		title := map[int]string{400: "Invalid request", 401: "Not logged in", 403: "Permission denied", 404: "Not found"}[ae.Status]
		if title == "" {
			title = http.StatusText(ae.Status)
		}
		c.renderStatus(q.w, q.r, q.session, ae.Status, title, ae.Detail)
		return
	}
	c.serverError(q.w, q.r, err)
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
	Project   *projectView
	Projects  []projectView
	Nav       string // the active navigation entry
	Flash     string
	FlashKind string
	// Rollout is, after a save, how many edges serve it (the page's ?live=<version>).
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

// page builds the common page data for a logged-in request, in the project of the path
// when it has one (which the API must let the user reach).
func (q *request) page(title, nav string) (*page, error) {
	p := &page{Title: title, User: &q.session.User, CSRF: q.session.CSRFToken, Nav: nav}
	var projects listOf[projectView]
	if err := q.api("GET", "/api/projects/?limit=1000", nil, &projects); err != nil {
		return nil, err
	}
	p.Projects = projects.Results
	if pid := q.r.PathValue("pid"); pid != "" {
		var proj projectView
		if err := q.api("GET", "/api/projects/"+url.PathEscape(pid)+"/", nil, &proj); err != nil {
			return nil, err
		}
		p.Project = &proj
	} else if len(p.Projects) > 0 {
		p.Project = &p.Projects[0]
		if ck, err := q.r.Cookie("flagedge_project"); err == nil {
			for i := range p.Projects {
				if fmt.Sprint(p.Projects[i].ID) == ck.Value {
					p.Project = &p.Projects[i]
				}
			}
		}
	}
	if p.Project != nil {
		p.Rollout = q.rollout(p.Project.ID)
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

// apiProject is the API path of the request's project.
func (q *request) apiProject(format string, args ...any) string {
	return "/api/projects/" + url.PathEscape(q.r.PathValue("pid")) + fmt.Sprintf(format, args...)
}

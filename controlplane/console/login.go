package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// Login rate limiting: after maxLoginFailures failures for one email from one address within
// loginWindow, further attempts are refused until the window has passed. Five tries in
// fifteen minutes stops guessing while forgiving typos; the table is bounded so that a flood
// of made-up emails cannot grow it without end.
const (
	maxLoginFailures  = 5
	loginWindow       = 15 * time.Minute
	maxLimiterEntries = 10000
)

// loginLimiter counts failed logins per email and client address, in memory: each replica
// counts its own, which bounds guessing per replica.
type loginLimiter struct {
	max    int
	window time.Duration
	limit  int
	now    func() time.Time

	mu      sync.Mutex // guards entries
	entries map[string]*loginFailures
}

type loginFailures struct {
	count int
	first time.Time
}

func newLoginLimiter(max int, window time.Duration, limit int, now func() time.Time) *loginLimiter {
	return &loginLimiter{max: max, window: window, limit: limit, now: now, entries: map[string]*loginFailures{}}
}

// blocked reports whether the key has used up its attempts, and for how long it stays blocked.
func (l *loginLimiter) blocked(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	if !ok {
		return false, 0
	}
	left := e.first.Add(l.window).Sub(l.now())
	if left <= 0 {
		delete(l.entries, key)
		return false, 0
	}
	return e.count >= l.max, left
}

// fail records a failed attempt. When the table is full, expired entries go first, then the
// oldest ones: forgetting a stale failure is better than refusing to count a new one.
func (l *loginLimiter) fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if e, ok := l.entries[key]; ok && now.Sub(e.first) < l.window {
		e.count++
		return
	}
	if len(l.entries) >= l.limit {
		var oldestKey string
		var oldest time.Time
		for k, e := range l.entries {
			if now.Sub(e.first) >= l.window {
				delete(l.entries, k)
				continue
			}
			if oldestKey == "" || e.first.Before(oldest) {
				oldestKey, oldest = k, e.first
			}
		}
		if len(l.entries) >= l.limit {
			delete(l.entries, oldestKey)
		}
	}
	l.entries[key] = &loginFailures{count: 1, first: now}
}

// succeed forgets the key's failures.
func (l *loginLimiter) succeed(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, key)
}

// limiterKey is the email and the client's address (without its port).
func limiterKey(email string, r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return strings.ToLower(strings.TrimSpace(email)) + "\x00" + host
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// loginPage is the login and set-password forms' data.
type loginPage struct {
	Email, Next, Error, Token string
}

// loginCSRF returns the login form's anti-forgery token, set as a cookie the form must echo:
// there is no session yet to hold one.
func (c *Console) loginCSRF(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(loginCSRFCookie); err == nil && len(ck.Value) >= 32 {
		return ck.Value
	}
	token := randomToken()
	http.SetCookie(w, &http.Cookie{Name: loginCSRFCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: c.secure(r), MaxAge: 3600})
	return token
}

func (c *Console) checkLoginCSRF(r *http.Request) bool {
	ck, err := r.Cookie(loginCSRFCookie)
	return err == nil && ck.Value != "" && subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue(csrfField))) == 1
}

// safeNext keeps redirects after login on this site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}

func (c *Console) handleLoginPage(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if _, err := c.cfg.Sessions.FindSession(r.Context(), ck.Value); err == nil {
			http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
			return
		}
	}
	c.render(w, http.StatusOK, "login", &page{Title: "Log in", CSRF: c.loginCSRF(w, r), Data: &loginPage{Next: r.URL.Query().Get("next")}})
}

func (c *Console) handleLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBodyBytes)
	if err := r.ParseForm(); err != nil {
		c.renderStatus(w, r, nil, http.StatusBadRequest, "Bad request", "The form could not be read.")
		return
	}
	data := &loginPage{Email: strings.TrimSpace(r.PostFormValue("email")), Next: r.PostFormValue("next")}
	show := func(status int, msg string) {
		data.Error = msg
		c.render(w, status, "login", &page{Title: "Log in", CSRF: c.loginCSRF(w, r), Data: data})
	}
	if !c.checkLoginCSRF(r) {
		show(http.StatusForbidden, "The form's security token is missing or wrong. Reload the page and try again.")
		return
	}
	key := limiterKey(data.Email, r)
	if blocked, left := c.limiter.blocked(key); blocked {
		show(http.StatusTooManyRequests, fmt.Sprintf("Too many failed attempts. Try again in %d minutes.", int(left.Minutes())+1))
		return
	}
	user, err := c.cfg.Users.CheckPassword(r.Context(), data.Email, r.PostFormValue("password"))
	if err != nil {
		if controlplane.ErrorKind(err) != controlplane.BadCredentials {
			c.serverError(w, r, err)
			return
		}
		c.limiter.fail(key)
		c.cfg.Logger.Info("console login failed", "email", data.Email, "remote", r.RemoteAddr)
		show(http.StatusUnauthorized, "Invalid email or password.")
		return
	}
	c.limiter.succeed(key)
	c.startSession(w, r, user.ID, safeNext(data.Next))
}

// startSession logs the user in and redirects.
func (c *Console) startSession(w http.ResponseWriter, r *http.Request, userID int64, next string) {
	sess, token, err := c.cfg.Sessions.CreateSession(r.Context(), userID)
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: c.secure(r), Expires: sess.ExpiresAt})
	http.SetCookie(w, &http.Cookie{Name: loginCSRFCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) handleLogout(q *request) error {
	if ck, err := q.r.Cookie(sessionCookie); err == nil {
		if err := c.cfg.Sessions.DeleteSession(q.r.Context(), ck.Value); err != nil {
			return err
		}
	}
	http.SetCookie(q.w, &http.Cookie{Name: sessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: c.secure(q.r)})
	http.Redirect(q.w, q.r, "/login", http.StatusSeeOther)
	return nil
}

func (c *Console) handleSetPasswordPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, http.StatusOK, "setpassword", &page{Title: "Choose a password", CSRF: c.loginCSRF(w, r),
		Data: &loginPage{Token: r.URL.Query().Get("token")}})
}

// handleSetPassword spends an invitation's one-time token and logs the user in.
func (c *Console) handleSetPassword(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBodyBytes)
	if err := r.ParseForm(); err != nil {
		c.renderStatus(w, r, nil, http.StatusBadRequest, "Bad request", "The form could not be read.")
		return
	}
	data := &loginPage{Token: r.PostFormValue("token")}
	show := func(status int, msg string) {
		data.Error = msg
		c.render(w, status, "setpassword", &page{Title: "Choose a password", CSRF: c.loginCSRF(w, r), Data: data})
	}
	if !c.checkLoginCSRF(r) {
		show(http.StatusForbidden, "The form's security token is missing or wrong. Reload the page and try again.")
		return
	}
	if r.PostFormValue("password") != r.PostFormValue("password_again") {
		show(http.StatusBadRequest, "The two passwords differ.")
		return
	}
	user, err := c.cfg.Users.SetPasswordWithToken(r.Context(), data.Token, r.PostFormValue("password"))
	if err != nil {
		var ce *controlplane.Error
		if errors.As(err, &ce) && ce.Kind == controlplane.Invalid {
			show(http.StatusBadRequest, ce.Detail)
			return
		}
		c.serverError(w, r, err)
		return
	}
	c.startSession(w, r, user.ID, "/")
}

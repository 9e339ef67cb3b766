package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/loginlimit"
)

// maxEmailBytes bounds a login's email: RFC 5321 allows 254 characters in a path.
const maxEmailBytes = 254

// loginEmailProblem says what is wrong with an email typed at login, or "": one longer than
// any address is nobody's, and is refused before a password hash is spent on it (text that
// cannot be stored never gets here: readForm refuses it).
func loginEmailProblem(email string) string {
	switch {
	case email == "":
		return "Enter your email address."
	case len(email) > maxEmailBytes:
		return "That is not an email address."
	}
	return ""
}

// refuseLogin answers a login the limiter refused: 429 with Retry-After, and a message that
// does not say whether the email exists.
func refuseLogin(w http.ResponseWriter, r *loginlimit.Refusal, show func(int, string)) {
	secs := int(r.RetryAfter.Round(time.Second) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	msg := "Too many logins are being checked right now. Try again in a moment."
	if r.Reason != loginlimit.ReasonBusy {
		msg = fmt.Sprintf("Too many failed attempts. Try again in %d minutes.", (secs+59)/60)
	}
	show(http.StatusTooManyRequests, msg)
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
	if !c.readForm(w, r, nil) {
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
	if problem := loginEmailProblem(data.Email); problem != "" {
		data.Email = ""
		show(http.StatusBadRequest, problem)
		return
	}
	addr := c.cfg.ClientIP(r)
	attempt, refusal := c.cfg.Logins.Begin(r.Context(), addr, data.Email)
	if refusal != nil {
		c.cfg.Logger.Info("console login refused", "reason", refusal.Reason, "client", addr)
		refuseLogin(w, refusal, show)
		return
	}
	user, err := c.cfg.Users.CheckPassword(r.Context(), data.Email, r.PostFormValue("password"))
	if err != nil {
		if controlplane.ErrorKind(err) != controlplane.BadCredentials {
			attempt.Done()
			c.serverError(w, r, err)
			return
		}
		attempt.Failed()
		c.cfg.Logger.Info("console login failed", "email", data.Email, "client", addr)
		show(http.StatusUnauthorized, "Invalid email or password.")
		return
	}
	attempt.Succeeded()
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
	if !c.readForm(w, r, nil) {
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
	// Setting a password hashes it before the token is known to be good: a guessed token
	// costs a hash like a guessed password, and passes the same gates (by address only).
	addr := c.cfg.ClientIP(r)
	attempt, refusal := c.cfg.Logins.Begin(r.Context(), addr, "")
	if refusal != nil {
		refuseLogin(w, refusal, show)
		return
	}
	user, err := c.cfg.Users.SetPasswordWithToken(r.Context(), data.Token, r.PostFormValue("password"))
	if err != nil {
		var ce *controlplane.Error
		if errors.As(err, &ce) && ce.Kind == controlplane.Invalid {
			attempt.Failed()
			show(http.StatusBadRequest, ce.Detail)
			return
		}
		attempt.Done()
		c.serverError(w, r, err)
		return
	}
	attempt.Succeeded()
	c.startSession(w, r, user.ID, "/")
}

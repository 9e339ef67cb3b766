package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flagedge/flagedge/internal/pgtest"
)

// served is `controlplane serve` running in this process on a fresh database.
type served struct {
	t     *testing.T
	url   string // the HTTP listener's base URL
	dbURL string
}

// startServe runs serve on a fresh database with extra flags until the test ends, and waits
// until it is ready.
func startServe(t *testing.T, extra ...string) *served {
	t.Helper()
	return startServeOn(t, pgtest.NewDatabase(t), extra...)
}

// startServeOn runs serve on the database at dbURL: a second call on the same one is another
// replica.
func startServeOn(t *testing.T, dbURL string, extra ...string) *served {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		args := append([]string{"serve", "--database-url", dbURL, "--http-addr", addr, "--grpc-addr", freeAddr(t),
			"--log-level", "warn", "--drain-delay", "0s", "--bcrypt-cost", "4"}, extra...)
		done <- run(ctx, args, io.Discard, os.Stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	})
	s := &served{t: t, url: "http://" + addr, dbURL: dbURL}
	// Start-up applies every migration to a fresh database: on a loaded machine under -race
	// that has taken seconds, so readiness is given a minute.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(s.url + "/_ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// login posts the console's login form as a client behind forwardedFor ("" for none), with
// a login anti-forgery token of its own, and returns the answer's status and Retry-After.
func (s *served) login(forwardedFor, email, password string) (int, string) {
	s.t.Helper()
	const token = "0123456789abcdef0123456789abcdef0123"
	form := url.Values{"email": {email}, "password": {password}, "csrf_token": {token}}
	req, err := http.NewRequest("POST", s.url+"/login", strings.NewReader(form.Encode()))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "flagedge_login_csrf", Value: token})
	if forwardedFor != "" {
		req.Header.Set("X-Forwarded-For", forwardedFor)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// metric returns the value of the series of /metrics whose line starts with prefix (name and
// labels as exposed), or -1.
func (s *served) metric(prefix string) float64 {
	s.t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				s.t.Fatalf("metric %s: %v", prefix, err)
			}
			return v
		}
	}
	return -1
}

// TestLoginLimitsAcrossProcesses: two serve processes on one database count an email's
// failures together: one failure on each reaches a limit of two on both.
func TestLoginLimitsAcrossProcesses(t *testing.T) {
	a := startServe(t, "--login-failures-per-email", "2")
	b := startServeOn(t, a.dbURL, "--login-failures-per-email", "2")
	for i, s := range []*served{a, b} {
		if code, _ := s.login("", "nobody@example.com", "guess"); code != http.StatusUnauthorized {
			t.Fatalf("failure on replica %d: %d, want 401", i, code)
		}
	}
	for i, s := range []*served{a, b} {
		if code, retry := s.login("", "nobody@example.com", "guess"); code != http.StatusTooManyRequests || retry == "" {
			t.Errorf("replica %d past the limit: %d, Retry-After %q; want 429 with a Retry-After", i, code, retry)
		}
	}
}

// TestLoginLimitsBehindProxy: behind a trusted proxy each client address has its own count of
// failures across every email it tries, refusals are 429 with Retry-After and counted, and an
// email that is not text (NUL) is a 400 without a password check.
func TestLoginLimitsBehindProxy(t *testing.T) {
	s := startServe(t, "--trusted-proxies", "127.0.0.1", "--login-failures-per-address", "3")
	for i := range 3 {
		if code, _ := s.login("198.51.100.1", "nobody"+strconv.Itoa(i)+"@example.com", "guess"); code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d, want 401", i, code)
		}
	}
	code, retry := s.login("198.51.100.1", "another@example.com", "guess")
	if n, _ := strconv.Atoi(retry); code != http.StatusTooManyRequests || n < 1 {
		t.Errorf("fourth attempt from the address: %d, Retry-After %q; want 429 with a Retry-After", code, retry)
	}
	// A forged first entry does not make a new client: the proxy's own entry is the client.
	if code, _ := s.login("203.0.113.7, 198.51.100.1", "another@example.com", "guess"); code != http.StatusTooManyRequests {
		t.Errorf("the address behind a forged entry: %d, want 429", code)
	}
	if code, _ := s.login("198.51.100.2", "another@example.com", "guess"); code != http.StatusUnauthorized {
		t.Errorf("another client behind the proxy: %d, want 401", code)
	}
	if got := s.metric(`flagedge_controlplane_login_refusals_total{reason="address"}`); got != 2 {
		t.Errorf("address refusals counted %v, want 2", got)
	}
	if code, _ := s.login("198.51.100.3", "nul\x00@example.com", "guess"); code != http.StatusBadRequest {
		t.Errorf("an email with a NUL: %d, want 400", code)
	}
	if code, _ := s.login("198.51.100.3", "\xff@example.com", "guess"); code != http.StatusBadRequest {
		t.Errorf("an email that is not UTF-8: %d, want 400", code)
	}
}

// TestSlowClients: connections that never finish their headers are closed within
// --read-header-timeout while the server keeps answering others, an idle keep-alive
// connection is closed after --idle-timeout, and a header block over --max-header-bytes is
// a 431.
//
// The bounds are set by what a fault would look like, not by this machine's speed: a server
// that made others wait behind the dawdlers would answer them only once the header timeout
// closed those (2 s), and one without the timeouts would hold the connections until the
// test's own 10 s read deadline.
func TestSlowClients(t *testing.T) {
	const headerTimeout = 2 * time.Second
	s := startServe(t, "--read-header-timeout", headerTimeout.String(), "--idle-timeout", "1s", "--max-header-bytes", "8192")
	addr := strings.TrimPrefix(s.url, "http://")
	const slow = 300
	conns := make([]net.Conn, 0, slow)
	for range slow {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET /_health HTTP/1.1\r\nHost: x\r\nX-Slow: ")); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	opened := time.Now()
	// Meanwhile others are served at once.
	for range 10 {
		start := time.Now()
		resp, err := http.Get(s.url + "/_health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if d := time.Since(start); resp.StatusCode != 200 || d > headerTimeout/2 {
			t.Errorf("health while %d connections dawdle: %d in %v", slow, resp.StatusCode, d)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var latest time.Duration
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.Copy(io.Discard, c) // returns when the server closes the connection
			mu.Lock()
			latest = max(latest, time.Since(opened))
			mu.Unlock()
		}()
	}
	wg.Wait()
	if latest > headerTimeout+3*time.Second {
		t.Errorf("the last half-sent request was closed after %v, want within the %v header timeout (and slack)", latest, headerTimeout)
	}

	// An idle keep-alive connection goes after the idle timeout.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /_health HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	answered := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("idle keep-alive connection: %v, want closed (EOF)", err)
	}
	if d := time.Since(answered); d > 5*time.Second {
		t.Errorf("idle keep-alive connection closed after %v, want about 1s", d)
	}

	req, _ := http.NewRequest("GET", s.url+"/_health", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB header with --max-header-bytes 8192: %d, want 431", resp.StatusCode)
	}
}

// TestEveryAnswerCounted: console pages, static files, health and paths nothing serves are
// all in flagedge_controlplane_http_requests_total, each under a route of a bounded set.
func TestEveryAnswerCounted(t *testing.T) {
	s := startServe(t)
	for _, path := range []string{"/login", "/static/console.css", "/static/nothing-here.css", "/_health", "/no/such/page", "/no/such/page/either", "/"} {
		resp, err := http.DefaultTransport.RoundTrip(mustRequest(t, s.url+path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// A request is counted once its handler has returned, which may be just after the client
	// has read the answer: the counts are read until they settle (or 5 s pass).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var wrong []string
		for series, want := range map[string]float64{
			`{code="200",route="GET /login"}`:        1,
			`{code="200",route="GET /static/"}`:      1,
			`{code="404",route="GET /static/"}`:      1,
			`{code="404",route="console_unmatched"}`: 2,
			`{code="303",route="GET /{$}"}`:          1,
		} {
			if got := s.metric("flagedge_controlplane_http_requests_total" + series); got != want {
				wrong = append(wrong, fmt.Sprintf("flagedge_controlplane_http_requests_total%s = %v, want %v", series, got, want))
			}
		}
		if len(wrong) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(strings.Join(wrong, "; "))
		}
	}
	if got := s.metric(`flagedge_controlplane_http_requests_total{code="200",route="GET /_health"}`); got < 1 {
		t.Errorf("health answers counted %v, want at least 1", got)
	}
}

func mustRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

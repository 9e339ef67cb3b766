package console_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/console"
	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/controlplane/forward"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/loginlimit"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/rollout"
	"github.com/flagedge/flagedge/controlplane/webhook"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run()) // a fuzz worker runs only fuzz targets, which need no database
	}
	os.Exit(pgtest.Main(m, postgres.Migrate))
}

// site is the control plane's HTTP handler (API and console) on a real database, with a
// bootstrapped admin whose password is known.
type site struct {
	t        *testing.T
	db       *postgres.DB
	srv      *httptest.Server
	project  int64
	adminKey string
	password string
}

func newSite(t *testing.T) *site {
	t.Helper()
	db, err := postgres.Open(context.Background(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	return newSiteOn(t, db)
}

// newSiteOn is newSite on the database db.
func newSiteOn(t *testing.T, db *postgres.DB) *site {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(db.Close)
	res, err := postgres.Bootstrap(ctx, db, bcrypt.MinCost, "admin@example.com", "")
	if err != nil {
		t.Fatal(err)
	}
	s := &site{t: t, db: db, project: res.ProjectID, adminKey: res.PersonalAPIKey, password: res.Password}
	s.srv = s.serve()
	return s
}

// replica is another control-plane replica on the site's database: its own API, console and
// login limiter, as a second serve process would have.
func (s *site) replica() *site {
	r := *s
	r.srv = s.serve()
	return &r
}

// serve starts the API and the console on the site's database, wired as serve wires them.
func (s *site) serve() *httptest.Server {
	s.t.Helper()
	db := s.db
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	stores := postgres.NewServices(db, bcrypt.MinCost)
	stores.Webhooks = webhook.Checked(stores.Webhooks, &webhook.Policy{}) // as serve wires it
	stores.EventDestinations = forward.Checked(stores.EventDestinations, &webhook.Policy{})
	services, persons := stores, postgres.NewPersonStore(db)
	sessions := postgres.NewEdgeSessionStore(db)
	evaluator := &flageval.Evaluator{Snapshots: postgres.NewSnapshotStore(db), Persons: persons, Scanner: persons}
	waiter, usage := rollout.New(sessions), postgres.NewEvaluationStore(db)
	api := httpapi.New(httpapi.Config{Services: services, Evaluator: evaluator, Ready: db.Ping, Logger: log,
		EdgeSessions: sessions, Rollout: waiter, Usage: usage})
	logins := loginlimit.Defaults()
	logins.Store, logins.Logger = postgres.NewLoginFailureStore(db), log
	web, err := console.New(console.Config{Services: services, Evaluator: evaluator, Logger: log, EdgeSessions: sessions, Rollout: waiter,
		Usage: usage, Logins: loginlimit.New(logins, nil)})
	if err != nil {
		s.t.Fatal(err)
	}
	srv := httptest.NewServer(api.WithConsole(web))
	s.t.Cleanup(srv.Close)
	return srv
}

// browser is a cookie-keeping client that does not follow redirects.
type browser struct {
	t      *testing.T
	s      *site
	client *http.Client
}

func (s *site) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: s.t, s: s, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

type page struct {
	status   int
	body     string
	location string
}

func (b *browser) get(path string) page {
	b.t.Helper()
	resp, err := b.client.Get(b.s.srv.URL + path)
	if err != nil {
		b.t.Fatal(err)
	}
	return readPage(b.t, resp)
}

func (b *browser) post(path string, form url.Values) page {
	b.t.Helper()
	resp, err := b.client.PostForm(b.s.srv.URL+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	return readPage(b.t, resp)
}

func readPage(t *testing.T, resp *http.Response) page {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{status: resp.StatusCode, body: string(body), location: resp.Header.Get("Location")}
}

var csrfPattern = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// csrf reads the anti-forgery token of the page's forms.
func csrf(t *testing.T, p page) string {
	t.Helper()
	m := csrfPattern.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no csrf token on the page:\n%.400s", p.body)
	}
	return m[1]
}

// login logs in and returns the session's CSRF token.
func (b *browser) login(email, password string) string {
	b.t.Helper()
	form := b.get("/login")
	p := b.post("/login", url.Values{"email": {email}, "password": {password}, "csrf_token": {csrf(b.t, form)}})
	if p.status != http.StatusSeeOther {
		b.t.Fatalf("login: %d %.300s", p.status, p.body)
	}
	home := b.get(fmt.Sprintf("/project/%d/feature_flags", b.s.project))
	if home.status != 200 {
		b.t.Fatalf("flags page: %d", home.status)
	}
	return csrf(b.t, home)
}

func TestLogin(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	if s.password == "" {
		t.Fatal("bootstrap printed no password for the user it created")
	}

	b := s.browser()
	if p := b.get("/"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/login") {
		t.Fatalf("logged out: %d %q, want a redirect to /login", p.status, p.location)
	}
	form := b.get("/login")
	for _, label := range []string{`<label for="email">Email</label>`, `<label for="password">Password</label>`, `>Log in</button>`} {
		if !strings.Contains(form.body, label) {
			t.Errorf("login page lacks %s", label)
		}
	}
	token := csrf(t, form)
	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
	}{
		{"wrong password", url.Values{"email": {"admin@example.com"}, "password": {"wrong"}, "csrf_token": {token}}, http.StatusUnauthorized},
		{"unknown email", url.Values{"email": {"nobody@example.com"}, "password": {"wrong"}, "csrf_token": {token}}, http.StatusUnauthorized},
		{"forged csrf token", url.Values{"email": {"admin@example.com"}, "password": {s.password}, "csrf_token": {"forged"}}, http.StatusForbidden},
		{"no csrf token", url.Values{"email": {"admin@example.com"}, "password": {s.password}}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if p := b.post("/login", tc.form); p.status != tc.status {
				t.Errorf("%d, want %d", p.status, tc.status)
			}
		})
	}

	// The session cookie is HttpOnly and SameSite=Lax.
	resp, err := b.client.PostForm(s.srv.URL+"/login", url.Values{"email": {"admin@example.com"}, "password": {s.password}, "csrf_token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "flagedge_session" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode || cookie.Secure {
		t.Fatalf("session cookie = %+v, want HttpOnly, SameSite=Lax, not Secure on plain HTTP", cookie)
	}
	home := b.get(fmt.Sprintf("/project/%d/feature_flags", s.project))
	sessionCSRF := csrf(t, home)

	// A POST without the session's token is refused.
	if p := b.post("/logout", url.Values{"csrf_token": {"forged"}}); p.status != http.StatusForbidden {
		t.Errorf("logout with a forged token: %d", p.status)
	}
	if p := b.post("/logout", url.Values{"csrf_token": {sessionCSRF}}); p.status != http.StatusSeeOther {
		t.Errorf("logout: %d", p.status)
	}
	if p := b.get("/"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/login") {
		t.Errorf("after logout: %d %q", p.status, p.location)
	}
}

// TestLoginRateLimit: an email that failed loginlimit.Defaults().PerEmail times is refused even
// with the right password, with Retry-After; other emails from the address go on until the
// address has failed PerAddress times in all.
func TestLoginRateLimit(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := s.browser()
	token := csrf(t, b.get("/login"))
	try := func(email, password string) *http.Response {
		resp, err := b.client.PostForm(s.srv.URL+"/login", url.Values{"email": {email}, "password": {password}, "csrf_token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	perEmail, perAddress := loginlimit.Defaults().PerEmail, loginlimit.Defaults().PerAddress
	for i := range perEmail {
		if got := try("admin@example.com", "wrong").StatusCode; got != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i+1, got)
		}
	}
	// Blocked now, even with the right password.
	if resp := try("admin@example.com", s.password); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("attempt past the email's limit: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Other emails from the same address, until the address's own limit.
	for i := perEmail; i < perAddress; i++ {
		if got := try(fmt.Sprintf("other%d@example.com", i), "x").StatusCode; got != http.StatusUnauthorized {
			t.Fatalf("another email, failure %d of the address: %d", i+1, got)
		}
	}
	if got := try("fresh@example.com", "x").StatusCode; got != http.StatusTooManyRequests {
		t.Errorf("a new email past the address's limit: %d, want 429", got)
	}
}

// TestLoginLimitsAcrossReplicas: two replicas on one database count failures together, so a
// load balancer spreading a guesser's tries over them gives it no more than one replica
// would: PerEmail failures of one email, half on each, block it on both (even with the right
// password), and PerAddress failures of one address, half on each, block the address.
func TestLoginLimitsAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := newSite(t)
	// The admin's password hashed at bcrypt's lowest cost, as every other one here: the test
	// counts failures, and twenty hashes of cost 12 take a minute under the race detector.
	if _, err := postgres.NewUserService(a.db, bcrypt.MinCost).SetPassword(context.Background(), "admin@example.com", a.password); err != nil {
		t.Fatal(err)
	}
	replicas := []*browser{a.browser(), a.replica().browser()}
	token := make([]string, len(replicas))
	for i, b := range replicas {
		token[i] = csrf(t, b.get("/login"))
	}
	try := func(i int, email, password string) *http.Response {
		t.Helper()
		b := replicas[i%2]
		resp, err := b.client.PostForm(b.s.srv.URL+"/login", url.Values{"email": {email}, "password": {password}, "csrf_token": {token[i%2]}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	perEmail, perAddress := loginlimit.Defaults().PerEmail, loginlimit.Defaults().PerAddress
	for i := range perEmail {
		if got := try(i, "admin@example.com", "wrong").StatusCode; got != http.StatusUnauthorized {
			t.Fatalf("failure %d of the email (replica %d): %d, want 401", i+1, i%2, got)
		}
	}
	for i := range 2 {
		if resp := try(i, "admin@example.com", a.password); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Errorf("replica %d, past the email's limit spread over both: %d, Retry-After %q; want 429 with Retry-After",
				i, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	for i := perEmail; i < perAddress; i++ {
		if got := try(i, fmt.Sprintf("other%d@example.com", i), "x").StatusCode; got != http.StatusUnauthorized {
			t.Fatalf("failure %d of the address (replica %d): %d, want 401", i+1, i%2, got)
		}
	}
	for i := range 2 {
		if got := try(i, "fresh@example.com", "x").StatusCode; got != http.StatusTooManyRequests {
			t.Errorf("replica %d, a new email past the address's limit spread over both: %d, want 429", i, got)
		}
	}
}

func TestConsoleFlags(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := s.browser()
	tok := b.login("admin@example.com", s.password)
	base := fmt.Sprintf("/project/%d/feature_flags", s.project)

	form := b.get(base + "/new")
	for _, label := range []string{`>Key</label>`, `>Description</label>`, `>Rollout percentage</label>`, `>Save</button>`} {
		if !strings.Contains(form.body, label) {
			t.Errorf("flag form lacks %s", label)
		}
	}
	// Adding a property row re-renders the form without saving.
	p := b.post(base+"/new", url.Values{"csrf_token": {tok}, "key": {"checkout"}, "cond_count": {"1"}, "c0_props": {"0"}, "action": {"add_property_0"}})
	if p.status != 200 || !strings.Contains(p.body, `name="c0_p0_key"`) {
		t.Fatalf("add property: %d", p.status)
	}
	// An invalid key shows the API's validation error.
	p = b.post(base+"/new", url.Values{"csrf_token": {tok}, "key": {"bad key"}, "cond_count": {"1"}, "action": {"save"}})
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "Only letters, numbers") {
		t.Errorf("invalid key: %d", p.status)
	}
	p = b.post(base+"/new", url.Values{"csrf_token": {tok}, "key": {"checkout"}, "name": {"New checkout"}, "active": {"on"},
		"tags": {"web, checkout"}, "cond_count": {"1"}, "c0_props": {"1"}, "c0_p0_type": {"person"}, "c0_p0_key": {"email"},
		"c0_p0_op": {"icontains"}, "c0_p0_value": {"@example.com"}, "c0_rollout": {"50"}, "var_count": {"0"}, "payload_true": {`{"discount": 10}`}, "action": {"save"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("create: %d %.500s", p.status, p.body)
	}
	// The save leads to the flag's page, which loads the line saying how many edges serve it
	// once shown: none is connected.
	flagPath, live, _ := strings.Cut(p.location, "?live=")
	id := flagPath[strings.LastIndex(flagPath, "/")+1:]
	rolloutLine := fmt.Sprintf("/project/%d/rollout?version=%s", s.project, live)
	if page := b.get(p.location); live == "" || !strings.Contains(page.body, `data-rollout="`+rolloutLine+`"`) {
		t.Errorf("after the save (%s): no rollout placeholder: %.3000s", p.location, page.body)
	}
	if line := b.get(rolloutLine); line.status != 200 || !strings.Contains(line.body, "Live on 0 of 0 edges (version "+live+")") {
		t.Errorf("rollout line: %d %.3000s", line.status, line.body)
	}
	// An edge connected (recorded as the sync service does) that has not acknowledged the
	// version is named as the laggard, and listed on the edges page.
	if _, _, err := postgres.NewEdgeService(s.db).CreateEdge(context.Background(), "edge-berlin", nil); err != nil {
		t.Fatal(err)
	}
	sessions := postgres.NewEdgeSessionStore(s.db)
	sid := uuid.NewString()
	if err := sessions.OpenSessions(context.Background(), []controlplane.SessionOpening{{ID: sid,
		ReplicaID: "00000000-0000-0000-0000-000000000001", Replica: "replica-1", EdgeName: "edge-berlin", EdgeID: "berlin-1"}}); err != nil {
		t.Fatal(err)
	}
	if res, err := sessions.Acknowledge(context.Background(), []controlplane.Acknowledgement{{SessionID: sid, EdgeName: "edge-berlin",
		Versions: map[int64]int64{s.project: 1}}}); err != nil || res[0] != nil {
		t.Fatal(res, err)
	}
	// The page does not wait for the lagging edge (the line waits up to 3 s for it, the
	// console's rolloutWait, in a request of its own): it holds the placeholder, not the line,
	// and comes sooner than a page that waited could.
	const rolloutWait = 3 * time.Second
	start := time.Now()
	if page := b.get(p.location); page.status != 200 || !strings.Contains(page.body, `data-rollout="`+rolloutLine+`"`) ||
		strings.Contains(page.body, "not yet on edge-berlin") || time.Since(start) >= rolloutWait {
		t.Errorf("the page after the save with a lagging edge: %d after %v: %.3000s", page.status, time.Since(start), page.body)
	}
	if line := b.get(rolloutLine); !strings.Contains(line.body, "Live on 0 of 1 edges (version "+live+"): not yet on edge-berlin") {
		t.Errorf("rollout line with a lagging edge: %.3000s", line.body)
	}
	if line := b.get(fmt.Sprintf("/project/%d/rollout?version=x", s.project)); line.status != 404 {
		t.Errorf("rollout line of no version: %d", line.status)
	}
	if page := b.get(fmt.Sprintf("/project/%d/edges", s.project)); !strings.Contains(page.body, "edge-berlin") || !strings.Contains(page.body, "replica-1") ||
		!strings.Contains(page.body, "behind") {
		t.Errorf("edges page: %.3000s", page.body)
	}

	// The API sees what the form saved.
	req, _ := http.NewRequest("GET", s.srv.URL+fmt.Sprintf("/api/projects/%d/feature_flags/%s/", s.project, id), nil)
	req.Header.Set("Authorization", "Bearer "+s.adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`"key":"checkout"`, `"rollout_percentage":50`, `"operator":"icontains"`, `"value":"@example.com"`, `"tags":["web","checkout"]`, `"true":"{\"discount\": 10}"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("API flag lacks %s: %s", want, raw)
		}
	}

	// Evaluations the edges reported show on the flag's page as a sparkline.
	if err := postgres.NewEvaluationStore(s.db).AddEvaluations(context.Background(), []controlplane.EvaluationCount{
		{ProjectID: s.project, FlagKey: "checkout", Value: "true", Count: 7}}); err != nil {
		t.Fatal(err)
	}
	if page := b.get(flagPath); !strings.Contains(page.body, "Usage at the edges") || !strings.Contains(page.body, "7 in the last day") ||
		!strings.Contains(page.body, "<title>"+time.Now().UTC().Format(time.DateOnly)+": 7</title>") {
		t.Errorf("flag page usage: %.4000s", page.body)
	}
	list := b.get(base + "?search=check")
	if !strings.Contains(list.body, `aria-label="Active"`) || !strings.Contains(list.body, "checkout") || !strings.Contains(list.body, "50% of users where email contains @example.com") {
		t.Errorf("flags list: %.2000s", list.body)
	}
	if none := b.get(base + "?search=zzz"); strings.Contains(none.body, `/feature_flags/`+id+`"`) {
		t.Error("search did not filter")
	}
	// Toggle off, soft delete, restore, activity.
	for _, step := range []struct {
		path string
		form url.Values
	}{
		{flagPath + "/active", url.Values{"csrf_token": {tok}, "active": {"false"}}},
		{flagPath + "/delete", url.Values{"csrf_token": {tok}}},
		{flagPath + "/restore", url.Values{"csrf_token": {tok}}},
	} {
		if p := b.post(step.path, step.form); p.status != http.StatusSeeOther {
			t.Fatalf("%s: %d %.300s", step.path, p.status, p.body)
		}
	}
	activity := b.get(flagPath + "/activity")
	for _, want := range []string{"created the flag", "deleted the flag", ">active<"} {
		if !strings.Contains(activity.body, want) {
			t.Errorf("activity lacks %q", want)
		}
	}
	edit := b.get(flagPath + "?distinct_id=ada&properties=email%3Dada%40example.com")
	if !strings.Contains(edit.body, "Who would get it") || !strings.Contains(edit.body, "Reason: disabled") {
		t.Errorf("flag page panels: %.3000s", edit.body)
	}
	// The "who would get it" counts load after the page has rendered, over the stored persons.
	for _, p := range []struct{ id, email string }{{"ada", "ada@example.com"}, {"bob", "bob@elsewhere.org"}} {
		if _, err := s.db.Pool.Exec(context.Background(), `WITH p AS (INSERT INTO persons (project_id, properties)
			VALUES ($1, jsonb_build_object('email', $2::text)) RETURNING id)
			INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) SELECT $1, $3, id FROM p`, s.project, p.email, p.id); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(edit.body, `data-fragment="`+flagPath+`/blast"`) {
		t.Errorf("flag page without the blast radius placeholder: %.3000s", edit.body)
	}
	if blast := b.get(flagPath + "/blast"); blast.status != http.StatusOK || !strings.Contains(blast.body, "Condition set 1") ||
		!strings.Contains(blast.body, "of 2 stored persons") || strings.Contains(blast.body, "<html") {
		t.Errorf("blast radius fragment: %d %.3000s", blast.status, blast.body)
	}
	if missing := b.get(fmt.Sprintf("/project/%d/feature_flags/999999/blast", s.project)); missing.status != http.StatusNotFound {
		t.Errorf("blast radius of no flag: %d", missing.status)
	}
	if anon := s.browser().get(flagPath + "/blast"); anon.status != http.StatusSeeOther || strings.Contains(anon.body, "stored persons") {
		t.Errorf("blast radius without a session: %d %.300s", anon.status, anon.body)
	}
	// A POST with a forged token changes nothing.
	if p := b.post(flagPath+"/active", url.Values{"csrf_token": {"forged"}, "active": {"true"}}); p.status != http.StatusForbidden {
		t.Errorf("forged csrf: %d", p.status)
	}
}

func TestConsoleAnnotationsKeysMembers(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := s.browser()
	tok := b.login("admin@example.com", s.password)
	base := fmt.Sprintf("/project/%d/annotations", s.project)

	// Annotations: create, edit, soft delete; a bad scope shows the API's error.
	list := b.get(base)
	if !strings.Contains(list.body, `>New annotation</button>`) {
		t.Error("annotations page lacks the New annotation button")
	}
	form := b.get(base + "/new")
	for _, want := range []string{`<label for="content">Content</label>`, `>Save</button>`} {
		if !strings.Contains(form.body, want) {
			t.Errorf("annotation form lacks %s", want)
		}
	}
	if p := b.post(base+"/new", url.Values{"csrf_token": {tok}, "content": {"x"}, "scope": {"galaxy"}}); p.status != http.StatusBadRequest || !strings.Contains(p.body, "not a valid choice") {
		t.Errorf("bad scope: %d", p.status)
	}
	if p := b.post(base+"/new", url.Values{"csrf_token": {tok}, "content": {"Release 1.2"}, "date_marker": {"2026-11-20T10:30"}, "scope": {"project"}}); p.status != http.StatusSeeOther {
		t.Fatalf("create annotation: %d %.300s", p.status, p.body)
	}
	list = b.get(base + "?search=release")
	m := regexp.MustCompile(`/annotations/(\d+)"`).FindStringSubmatch(list.body)
	if m == nil || !strings.Contains(list.body, "20 Nov 2026 10:30 UTC") {
		t.Fatalf("annotation not listed: %.2000s", list.body)
	}
	if p := b.post(base+"/"+m[1], url.Values{"csrf_token": {tok}, "content": {"Release 1.2.1"}, "date_marker": {"2026-11-20T10:30"}, "scope": {"organization"}}); p.status != http.StatusSeeOther {
		t.Errorf("edit annotation: %d", p.status)
	}
	if p := b.post(base+"/"+m[1]+"/delete", url.Values{"csrf_token": {tok}}); p.status != http.StatusSeeOther {
		t.Errorf("delete annotation: %d", p.status)
	}
	if list = b.get(base); strings.Contains(list.body, "Release 1.2.1") {
		t.Error("a deleted annotation is listed")
	}

	// Keys: the value is shown once, and revoking it ends it.
	p := b.post("/settings/keys", url.Values{"csrf_token": {tok}, "label": {"ci"}, "scope_feature_flag": {"read"}})
	value := regexp.MustCompile(`value="(phx_[A-Za-z0-9]+)"`).FindStringSubmatch(p.body)
	if p.status != http.StatusCreated || value == nil {
		t.Fatalf("create key: %d", p.status)
	}
	if again := b.get("/settings/keys"); strings.Contains(again.body, value[1]) {
		t.Error("the key's value is shown again")
	}
	if p := b.post("/settings/keys", url.Values{"csrf_token": {tok}, "label": {"none"}}); p.status != http.StatusBadRequest {
		t.Errorf("a key without scopes: %d", p.status)
	}

	// Members: an invitation's link sets a password and logs the new member in.
	p = b.post("/settings/members", url.Values{"csrf_token": {tok}, "email": {"new@example.com"}, "first_name": {"Nia"}})
	link := regexp.MustCompile(`value="(http://[^"]+/set-password\?token=[^"]+)"`).FindStringSubmatch(p.body)
	if p.status != http.StatusCreated || link == nil {
		t.Fatalf("invite: %d %.500s", p.status, p.body)
	}
	u, _ := url.Parse(strings.ReplaceAll(link[1], "&amp;", "&"))
	nb := s.browser()
	setPage := nb.get(u.RequestURI())
	token := csrf(t, setPage)
	if p := nb.post("/set-password", url.Values{"csrf_token": {token}, "token": {u.Query().Get("token")}, "password": {"nia password 1"}, "password_again": {"nia password 2"}}); p.status != http.StatusBadRequest {
		t.Errorf("different passwords: %d", p.status)
	}
	if p := nb.post("/set-password", url.Values{"csrf_token": {token}, "token": {u.Query().Get("token")}, "password": {"nia password 1"}, "password_again": {"nia password 1"}}); p.status != http.StatusSeeOther {
		t.Fatalf("set password: %d %.300s", p.status, p.body)
	}
	if p := nb.get(fmt.Sprintf("/project/%d/feature_flags", s.project)); p.status != 200 {
		t.Errorf("the new member is not logged in: %d", p.status)
	}
	// A member may not invite (admins only, the API's check).
	if p := nb.post("/settings/members", url.Values{"csrf_token": {csrf(t, nb.get("/settings/members"))}, "email": {"x@example.com"}}); p.status != http.StatusForbidden {
		t.Errorf("a member inviting: %d", p.status)
	}
}

// TestConsoleRoleAccess checks that the console applies flag role access as the API does:
// a member outside the flag's roles sees the flag but cannot change it.
func TestConsoleRoleAccess(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	users := postgres.NewUserService(s.db, bcrypt.MinCost)
	if _, err := postgres.CreateUser(ctx, s.db, "admin@example.com", "viewer@example.com", "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := users.SetPassword(ctx, "viewer@example.com", "viewer password"); err != nil {
		t.Fatal(err)
	}
	admin := s.browser()
	tok := admin.login("admin@example.com", s.password)
	base := fmt.Sprintf("/project/%d/feature_flags", s.project)
	p := admin.post(base+"/new", url.Values{"csrf_token": {tok}, "key": {"guarded"}, "active": {"on"}, "cond_count": {"1"}, "action": {"save"}})
	flagPath, _, _ := strings.Cut(p.location, "?") // ?live=<version>: how many edges serve the save
	roles := postgres.NewRoleService(s.db)
	adminUser, err := users.CheckPassword(ctx, "admin@example.com", s.password)
	if err != nil {
		t.Fatal(err)
	}
	role, err := roles.CreateRole(controlplane.NewContextWithUser(ctx, adminUser), controlplaneRole("Checkout team"))
	if err != nil {
		t.Fatal(err)
	}
	if p := admin.post(flagPath+"/role_access", url.Values{"csrf_token": {tok}, "role_id": {role.ID}}); p.status != http.StatusSeeOther {
		t.Fatalf("grant: %d", p.status)
	}

	viewer := s.browser()
	vtok := viewer.login("viewer@example.com", "viewer password")
	page := viewer.get(flagPath)
	if strings.Contains(page.body, `id="schedule-form"`) {
		t.Error("the viewer is offered to schedule changes")
	}
	if !strings.Contains(page.body, "can view this flag but not change it") {
		t.Errorf("the viewer is not told: %.1000s", page.body)
	}
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{flagPath, url.Values{"csrf_token": {vtok}, "key": {"guarded"}, "name": {"hijacked"}, "cond_count": {"1"}, "action": {"save"}}},
		{flagPath + "/active", url.Values{"csrf_token": {vtok}, "active": {"false"}}},
		{flagPath + "/delete", url.Values{"csrf_token": {vtok}}},
		{flagPath + "/schedule", url.Values{"csrf_token": {vtok}, "operation": {"enable"}, "scheduled_at": {"2030-01-01T00:00"}}},
	} {
		if p := viewer.post(tc.path, tc.form); p.status != http.StatusForbidden {
			t.Errorf("viewer POST %s: %d, want 403", tc.path, p.status)
		}
	}
	if p := admin.get(flagPath); !strings.Contains(p.body, `badge-green">Enabled`) || strings.Contains(p.body, "hijacked") {
		t.Error("the viewer changed the flag")
	}
}

func controlplaneRole(name string) controlplane.RoleUpdate {
	return controlplane.RoleUpdate{Name: &name}
}

// TestRouting checks that the console takes only the paths the API does not serve.
func TestRouting(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	for _, tc := range []struct {
		path        string
		status      int
		contentType string
	}{
		{"/_health", 200, "application/json"},
		{"/api/nope/", 404, "application/json"},
		{"/api/projects/", 401, "application/json"},
		{"/flags/definitions", 401, "application/json"},
		{"/api/schema/", 200, "application/vnd.oai.openapi; charset=utf-8"},
		{"/nope", 404, "text/html; charset=utf-8"},
		{"/login", 200, "text/html; charset=utf-8"},
		{"/static/console.css", 200, "text/css; charset=utf-8"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(s.srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.contentType {
				t.Errorf("%d %q, want %d %q", resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, tc.contentType)
			}
		})
	}
}

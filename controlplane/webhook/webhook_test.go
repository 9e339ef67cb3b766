package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/scheduler/schedulertest"
	"github.com/flagedge/flagedge/controlplane/webhook"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// boot is the organisation, admin and project bootstrapped once into the template database
// every test's database is cloned from: the admin's password hash (bcrypt at its production
// cost) is paid once, not per test.
var boot *postgres.BootstrapResult

func TestMain(m *testing.M) {
	os.Exit(pgtest.Main(m, func(ctx context.Context, url string) error {
		if err := postgres.Migrate(ctx, url); err != nil {
			return err
		}
		db, err := postgres.Open(ctx, url)
		if err != nil {
			return err
		}
		defer db.Close()
		boot, err = postgres.Bootstrap(ctx, db, bcrypt.MinCost, "admin@example.com", "")
		return err
	}))
}

func TestPolicyRefusesWhatIsNotPublic(t *testing.T) {
	p := &webhook.Policy{}
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0", "100.64.0.1",
		"224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "::ffff:127.0.0.1",
		"::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::1", "198.18.0.1", "240.0.0.1"} {
		if p.Allowed(netip.MustParseAddr(a)) {
			t.Errorf("%s allowed", a)
		}
	}
	for _, a := range []string{"93.184.215.14", "1.1.1.1", "2606:4700:4700::1111", "8.8.8.8"} {
		if !p.Allowed(netip.MustParseAddr(a)) {
			t.Errorf("%s refused", a)
		}
	}
	if !(&webhook.Policy{AllowPrivate: true}).Allowed(netip.MustParseAddr("127.0.0.1")) {
		t.Error("--webhook-allow-private does not admit loopback")
	}
}

func TestCheckURL(t *testing.T) {
	ctx := context.Background()
	p := &webhook.Policy{}
	for raw, code := range map[string]string{
		"http://127.0.0.1:9/hook":        "forbidden_address",
		"http://[::1]/hook":              "forbidden_address",
		"https://localhost/hook":         "forbidden_address",
		"https://api.localhost./x":       "forbidden_address",
		"http://169.254.169.254/latest/": "forbidden_address",
		"http://10.0.0.8/":               "forbidden_address",
		"ftp://93.184.215.14/":           "invalid_url",
		"https://user:pw@93.184.215.14/": "invalid_url",
		"/relative":                      "invalid_url",
		"https://93.184.215.14/#frag":    "invalid_url",
		"https://93.184.215.14:0/":       "invalid_url",
		"https://93.184.215.14:99999/":   "invalid_url",
	} {
		err := p.CheckURL(ctx, raw)
		var e *controlplane.Error
		if !asError(err, &e) || e.Code != code || e.Attr != "url" || e.Kind != controlplane.Invalid {
			t.Errorf("%s: %v, want %s on url", raw, err, code)
		}
	}
	if err := p.CheckURL(ctx, "https://93.184.215.14/hook?x=1"); err != nil {
		t.Errorf("public address refused: %v", err)
	}
	if err := (&webhook.Policy{AllowPrivate: true}).CheckURL(ctx, "http://127.0.0.1:9/hook"); err != nil {
		t.Errorf("allowed private address refused: %v", err)
	}
}

func asError(err error, e **controlplane.Error) bool {
	if err == nil {
		return false
	}
	x, ok := err.(*controlplane.Error)
	*e = x
	return ok
}

func TestSignAndVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"event":"feature_flag.created"}`)
	sig := webhook.Sign("a-secret-of-16-chars", now, body)
	if !strings.HasPrefix(sig, "t=1800000000,v1=") {
		t.Fatalf("signature %q", sig)
	}
	if !webhook.Verify("a-secret-of-16-chars", sig, body, now.Add(time.Minute)) {
		t.Error("a fresh signature does not verify")
	}
	if webhook.Verify("another-secret-of-16", sig, body, now) {
		t.Error("verifies under another secret")
	}
	if webhook.Verify("a-secret-of-16-chars", sig, append(body, ' '), now) {
		t.Error("verifies another body")
	}
	if webhook.Verify("a-secret-of-16-chars", sig, body, now.Add(webhook.ReplayWindow+time.Second)) {
		t.Error("verifies outside the replay window")
	}
}

// fixture is a database with a project, its admin and the stores.
type fixture struct {
	t       *testing.T
	db      *postgres.DB
	s       controlplane.Services
	hooks   *postgres.WebhookService
	outbox  *postgres.SystemWebhookOutbox
	admin   *controlplane.User
	project *controlplane.Project
}

func newFixture(t *testing.T) *fixture {
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	s := postgres.NewServices(db, 4)
	key, err := s.Auth.AuthenticatePersonalKey(ctx, boot.PersonalAPIKey)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Projects.FindProjectByID(controlplane.NewContextWithUser(ctx, &key.User), boot.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, db: db, s: s, hooks: postgres.NewWebhookService(db), outbox: postgres.NewSystemWebhookOutbox(db), admin: &key.User, project: p}
}

func (f *fixture) hook(url string, events ...string) *controlplane.Webhook {
	secret := "s3cret-s3cret-s3cret"
	h, err := f.hooks.CreateWebhook(controlplane.NewContextWithUser(context.Background(), f.admin), f.project.ID, controlplane.WebhookUpdate{URL: &url, Events: events, Secret: &secret})
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

func (f *fixture) flag(key string) *controlplane.Flag {
	fl, err := f.s.Flags.CreateFlag(controlplane.NewContextWithUser(context.Background(), f.admin), f.project.ID, controlplane.FlagUpdate{Key: &key})
	if err != nil {
		f.t.Fatal(err)
	}
	return fl
}

// run starts a dispatcher until the test ends; its metrics go to reg.
func (f *fixture) run(policy *webhook.Policy, cfg webhook.Config, reg prometheus.Registerer) *webhook.Dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.RetryBase == 0 {
		cfg.RetryBase, cfg.RetryMax = 50*time.Millisecond, 200*time.Millisecond
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	cfg.Poll = 100 * time.Millisecond // no LISTEN in these tests: the timer finds new deliveries
	d := webhook.New(f.outbox, httpapi.WebhookObjects{}, policy, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	f.t.Cleanup(func() { cancel(); <-done })
	return d
}

func (f *fixture) deliveries(h *controlplane.Webhook) []*controlplane.WebhookDelivery {
	list, _, err := f.hooks.FindDeliveries(controlplane.NewContextWithUser(context.Background(), f.admin), f.project.ID, h.ID, 100, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return list
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a wait, not a measure: generous for loaded machines
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// receiver is a real HTTP server on 127.0.0.1 that records what it gets.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []received
	with func(w http.ResponseWriter, r *http.Request) // how it answers; nil: 204
}

type received struct {
	header http.Header
	body   []byte
	at     time.Time
}

func newReceiver(t *testing.T, with func(w http.ResponseWriter, r *http.Request)) *receiver {
	rc := &receiver{with: with}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{r.Header.Clone(), b, time.Now()})
		rc.mu.Unlock()
		if rc.with != nil {
			rc.with(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) received() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func TestDeliveryIsSignedAndCarriesTheFlagAsTheAPIShowsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rc := newReceiver(t, nil)
	other := newReceiver(t, nil)
	h := f.hook(rc.URL+"/hook", controlplane.EventFlagCreated, controlplane.EventFlagUpdated, controlplane.EventFlagDeleted)
	f.hook(other.URL+"/annotations-only", controlplane.EventAnnotationCreated)
	reg := prometheus.NewRegistry()
	f.run(&webhook.Policy{AllowPrivate: true}, webhook.Config{}, reg)

	fl := f.flag("checkout")
	waitFor(t, "the delivery", func() bool { return len(rc.received()) == 1 })
	got := rc.received()[0]
	sig := got.header.Get(webhook.HeaderSignature)
	if !webhook.Verify("s3cret-s3cret-s3cret", sig, got.body, time.Now()) {
		t.Fatalf("signature %q does not verify over %s", sig, got.body)
	}
	if ts := got.header.Get(webhook.HeaderTimestamp); !strings.HasPrefix(sig, "t="+ts+",") {
		t.Errorf("timestamp header %q, signature %q", ts, sig)
	}
	var body struct {
		DeliveryID      string         `json:"delivery_id"`
		EventID         string         `json:"event_id"`
		Event           string         `json:"event"`
		Timestamp       string         `json:"timestamp"`
		ProjectID       int64          `json:"project_id"`
		SnapshotVersion int64          `json:"snapshot_version"`
		Actor           map[string]any `json:"actor"`
		Data            map[string]any `json:"data"`
	}
	if err := json.Unmarshal(got.body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Event != controlplane.EventFlagCreated || got.header.Get(webhook.HeaderEvent) != body.Event ||
		got.header.Get(webhook.HeaderEventID) != body.EventID || got.header.Get(webhook.HeaderDelivery) != body.DeliveryID ||
		body.ProjectID != f.project.ID || body.SnapshotVersion != fl.SnapshotVersion || body.Actor["email"] != "admin@example.com" {
		t.Errorf("body %s\nheaders %v\nwant version %d", got.body, got.header, fl.SnapshotVersion)
	}
	if body.Data["key"] != "checkout" || body.Data["id"] != float64(fl.ID) || body.Data["filters"] == nil || body.Data["created_by"] == nil {
		t.Errorf("data %v", body.Data)
	}
	if _, err := time.Parse(time.RFC3339Nano, body.Timestamp); err != nil {
		t.Errorf("timestamp %q: %v", body.Timestamp, err)
	}
	if got.header.Get("Content-Type") != "application/json" {
		t.Errorf("content type %q", got.header.Get("Content-Type"))
	}

	// An update, a deletion: one delivery each, in the log with the first.
	name, deleted := "Checkout", true
	if _, err := f.s.Flags.UpdateFlag(controlplane.NewContextWithUser(context.Background(), f.admin), f.project.ID, fl.ID, controlplane.FlagUpdate{Name: &name}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Flags.UpdateFlag(controlplane.NewContextWithUser(context.Background(), f.admin), f.project.ID, fl.ID, controlplane.FlagUpdate{Deleted: &deleted}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three deliveries", func() bool { return len(rc.received()) == 3 })
	var kinds []string
	for _, r := range rc.received() {
		kinds = append(kinds, r.header.Get(webhook.HeaderEvent))
	}
	slices.Sort(kinds)
	if strings.Join(kinds, " ") != "feature_flag.created feature_flag.deleted feature_flag.updated" {
		t.Errorf("kinds %v", kinds)
	}
	// The receiver has the three before the log records the last answer: wait for every entry.
	waitFor(t, "the log", func() bool {
		log := f.deliveries(h)
		return len(log) == 3 && !slices.ContainsFunc(log, func(d *controlplane.WebhookDelivery) bool { return d.Status != controlplane.DeliveryDelivered })
	})
	for _, d := range f.deliveries(h) {
		if d.Attempts != 1 || d.LastStatusCode == nil || *d.LastStatusCode != 204 || d.DeliveredAt == nil || d.NextAttemptAt != nil {
			t.Errorf("log entry %+v", d)
		}
	}
	if n := len(other.received()); n != 0 {
		t.Errorf("a hook subscribed to annotations got %d flag events", n)
	}
	if v := counter(t, reg, "flagedge_controlplane_webhook_deliveries_total", "delivered"); v != 3 {
		t.Errorf("delivered counter %v", v)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{outcome=%q}", name, outcome)
	return 0
}

func TestAnnotationEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rc := newReceiver(t, nil)
	f.hook(rc.URL, controlplane.EventAnnotationCreated, controlplane.EventAnnotationUpdated, controlplane.EventAnnotationDeleted)
	f.run(&webhook.Policy{AllowPrivate: true}, webhook.Config{}, nil)
	ctx := controlplane.NewContextWithUser(context.Background(), f.admin)
	content, edited, deleted := "release 1.2", "release 1.2.1", true
	a, err := f.s.Annotations.CreateAnnotation(ctx, f.project.ID, controlplane.AnnotationUpdate{Content: &content})
	if err != nil {
		t.Fatal(err)
	}
	for _, upd := range []controlplane.AnnotationUpdate{{Content: &edited}, {Deleted: &deleted}} {
		if _, err := f.s.Annotations.UpdateAnnotation(ctx, f.project.ID, a.ID, upd); err != nil {
			t.Fatal(err)
		}
	}
	f.flag("not-subscribed")
	waitFor(t, "three deliveries", func() bool { return len(rc.received()) == 3 })
	time.Sleep(200 * time.Millisecond) // nothing more comes
	got := rc.received()
	var kinds []string
	for _, r := range got {
		kinds = append(kinds, r.header.Get(webhook.HeaderEvent))
	}
	slices.Sort(kinds) // deliveries are concurrent: no order is promised
	if len(got) != 3 || strings.Join(kinds, " ") != "annotation.created annotation.deleted annotation.updated" {
		t.Fatalf("kinds %v", kinds)
	}
	for _, r := range got {
		var body struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Data["id"] != float64(a.ID) {
			t.Errorf("annotation body %s: %v", r.body, err)
		}
		if r.header.Get(webhook.HeaderEvent) == controlplane.EventAnnotationUpdated && body.Data["content"] != edited {
			t.Errorf("updated annotation body %s", r.body)
		}
	}
}

func TestDeadReceiverIsRetriedWithBackoffThenGivenUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var mu sync.Mutex
	fails := 3
	flaky := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			http.Error(w, strings.Repeat("x", 5000), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // connection refused from now on
	h500 := f.hook(flaky.URL, controlplane.EventFlagCreated)
	hDead := f.hook(deadURL, controlplane.EventFlagCreated)
	// GiveUpAfter leaves room for the flaky receiver's four attempts (at most 525 ms of
	// backoff between them) and the dead one's three, however slow each round trip.
	f.run(&webhook.Policy{AllowPrivate: true}, webhook.Config{GiveUpAfter: 3 * time.Second}, nil)
	f.flag("retried")

	waitFor(t, "the flaky receiver's fourth attempt", func() bool {
		log := f.deliveries(h500)
		return len(log) == 1 && log[0].Status == controlplane.DeliveryDelivered
	})
	got := flaky.received()
	if len(got) != 4 {
		t.Fatalf("%d attempts, want 4", len(got))
	}
	// Backoff: base 50ms doubling to a 200ms cap, each drawn from [d/2, 3d/2).
	for i, min := range []time.Duration{25, 50, 100} {
		if gap := got[i+1].at.Sub(got[i].at); gap < min*time.Millisecond {
			t.Errorf("retry %d after %v, want at least %v", i+1, gap, min*time.Millisecond)
		}
	}
	if got[0].header.Get(webhook.HeaderEventID) != got[3].header.Get(webhook.HeaderEventID) ||
		got[0].header.Get(webhook.HeaderDelivery) != got[3].header.Get(webhook.HeaderDelivery) {
		t.Error("a retry has another event or delivery id")
	}
	d := f.deliveries(h500)[0]
	if d.Attempts != 4 || *d.LastStatusCode != 200 {
		t.Errorf("log entry %+v", d)
	}

	waitFor(t, "the dead receiver's delivery to be given up", func() bool {
		log := f.deliveries(hDead)
		return len(log) == 1 && log[0].Status == controlplane.DeliveryFailed
	})
	d = f.deliveries(hDead)[0]
	if d.Attempts < 3 || d.LastStatusCode != nil || !strings.Contains(d.LastError, "gave up") || !strings.Contains(d.LastError, "refused") {
		t.Errorf("dead receiver's log entry %+v", d)
	}
}

func TestResponseKeptOnlyAsAPrefixAndRedirectsNotFollowed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	target := newReceiver(t, nil)
	redirect := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
	})
	refusing := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(strings.Repeat("é", 1000))) //nolint:errcheck // the test's own answer
	})
	hRedirect := f.hook(redirect.URL, controlplane.EventFlagCreated)
	hRefusing := f.hook(refusing.URL, controlplane.EventFlagCreated)
	f.run(&webhook.Policy{AllowPrivate: true}, webhook.Config{}, nil)
	f.flag("redirected")
	waitFor(t, "both to fail", func() bool {
		a, b := f.deliveries(hRedirect), f.deliveries(hRefusing)
		return len(a) == 1 && a[0].Status == controlplane.DeliveryFailed && len(b) == 1 && b[0].Status == controlplane.DeliveryFailed
	})
	if n := len(target.received()); n != 0 {
		t.Errorf("the redirect was followed: the target got %d requests", n)
	}
	d := f.deliveries(hRedirect)[0]
	if d.Attempts != 1 || *d.LastStatusCode != 307 || !strings.Contains(d.LastError, "redirects are not followed") {
		t.Errorf("redirect log %+v", d)
	}
	d = f.deliveries(hRefusing)[0]
	if d.Attempts != 1 || *d.LastStatusCode != 400 || len(d.ResponsePrefix) > webhook.ResponsePrefixBytes+3 || !strings.HasPrefix(d.ResponsePrefix, "éé") {
		t.Errorf("4xx log: attempts %d, code %d, prefix of %d bytes", d.Attempts, *d.LastStatusCode, len(d.ResponsePrefix))
	}
}

func TestPrivateAddressRefusedAtDelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rc := newReceiver(t, nil)
	// Stored past the check (as a name that resolved to a public address when saved would be).
	h := f.hook(rc.URL, controlplane.EventFlagCreated)
	f.run(&webhook.Policy{}, webhook.Config{}, nil)
	f.flag("ssrf")
	waitFor(t, "the delivery to be refused", func() bool {
		log := f.deliveries(h)
		return len(log) == 1 && log[0].Status == controlplane.DeliveryFailed
	})
	if n := len(rc.received()); n != 0 {
		t.Fatalf("the loopback receiver got %d requests", n)
	}
	if d := f.deliveries(h)[0]; d.Attempts != 1 || !strings.Contains(d.LastError, "address refused") {
		t.Errorf("log %+v", d)
	}
	// And the checked service refuses it when it is saved.
	url, secret := rc.URL, "s3cret-s3cret-s3cret"
	_, err := webhook.Checked(f.hooks, &webhook.Policy{}).CreateWebhook(controlplane.NewContextWithUser(context.Background(), f.admin), f.project.ID,
		controlplane.WebhookUpdate{URL: &url, Events: []string{controlplane.EventFlagCreated}, Secret: &secret})
	if e, ok := err.(*controlplane.Error); !ok || e.Code != "forbidden_address" {
		t.Errorf("create with a loopback URL: %v", err)
	}
}

func TestSlowReceiverDoesNotSlowWrites(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	release := make(chan struct{})
	slow := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
	})
	t.Cleanup(func() { close(release) })
	f.hook(slow.URL, controlplane.EventFlagCreated, controlplane.EventFlagUpdated)
	f.run(&webhook.Policy{AllowPrivate: true}, webhook.Config{Concurrency: 2, Timeout: 5 * time.Second}, nil)
	f.flag("warm-up")
	waitFor(t, "the slow receiver to be called", func() bool { return len(slow.received()) > 0 })
	// A write that waited for the receiver would take its whole 5 s; a write on a loaded
	// machine is given 2 s.
	var worst time.Duration
	for i := range 20 {
		start := time.Now()
		f.flag(fmt.Sprintf("slow-%d", i))
		worst = max(worst, time.Since(start))
	}
	if worst > 2*time.Second {
		t.Errorf("a flag write took %v while the receiver hangs", worst)
	}
}

func TestTwoDispatchersDeliverEachOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rc := newReceiver(t, nil)
	f.hook(rc.URL, controlplane.EventFlagCreated)
	f.run(&webhook.Policy{AllowPrivate: true}, webhook.Config{}, nil)
	f.run(&webhook.Policy{AllowPrivate: true}, webhook.Config{}, nil)
	const n = 30
	for i := range n {
		f.flag(fmt.Sprintf("once-%d", i))
	}
	waitFor(t, "every delivery", func() bool { return len(rc.received()) >= n })
	time.Sleep(300 * time.Millisecond)
	seen := map[string]int{}
	for _, r := range rc.received() {
		seen[r.header.Get(webhook.HeaderEventID)]++
	}
	if len(seen) != n || len(rc.received()) != n {
		t.Errorf("%d requests for %d events, want %d each once", len(rc.received()), len(seen), n)
	}
}

func TestScheduledChangeEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rc := newReceiver(t, nil)
	f.hook(rc.URL, controlplane.EventScheduledChangeExecuted, controlplane.EventScheduledChangeFailed, controlplane.EventFlagUpdated)
	f.run(&webhook.Policy{AllowPrivate: true}, webhook.Config{}, nil)
	ctx := context.Background()
	store := postgres.NewScheduleStore(f.db)
	s := schedulertest.Start(t, f.db)

	ok, gone := f.flag("scheduled-ok"), f.flag("scheduled-gone")
	now := time.Now()
	for _, fl := range []*controlplane.Flag{ok, gone} {
		if _, err := store.CreateScheduledChange(controlplane.NewContextWithUser(ctx, f.admin), f.project.ID, controlplane.NewScheduledChange{RecordID: fmt.Sprint(fl.ID),
			ModelName: "FeatureFlag", Payload: json.RawMessage(`{"operation": "update_status", "value": false}`), ScheduledAt: &now}); err != nil {
			t.Fatal(err)
		}
	}
	deleted := true
	if _, err := f.s.Flags.UpdateFlag(controlplane.NewContextWithUser(ctx, f.admin), f.project.ID, gone.ID, controlplane.FlagUpdate{Deleted: &deleted}); err != nil {
		t.Fatal(err)
	}
	s.Wake()
	// The applied change: its flag update and its execution; the other: its failure.
	waitFor(t, "three deliveries", func() bool { return len(rc.received()) >= 3 })
	time.Sleep(200 * time.Millisecond)
	byKind := map[string][]map[string]any{}
	for _, r := range rc.received() {
		var body map[string]any
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		byKind[body["event"].(string)] = append(byKind[body["event"].(string)], body)
	}
	if len(byKind["scheduled_change.executed"]) != 1 || len(byKind["scheduled_change.failed"]) != 1 || len(byKind["feature_flag.updated"]) != 1 {
		t.Fatalf("events %v", byKind)
	}
	exec, failed, upd := byKind["scheduled_change.executed"][0], byKind["scheduled_change.failed"][0], byKind["feature_flag.updated"][0]
	if d := exec["data"].(map[string]any); d["record_id"] != fmt.Sprint(ok.ID) || d["executed_at"] == nil || d["failure_reason"] != nil {
		t.Errorf("executed: %v", exec)
	}
	if d := failed["data"].(map[string]any); d["record_id"] != fmt.Sprint(gone.ID) || d["failure_reason"] == nil {
		t.Errorf("failed: %v", failed)
	}
	if exec["snapshot_version"] != upd["snapshot_version"] || exec["actor"].(map[string]any)["email"] != "admin@example.com" {
		t.Errorf("executed %v, flag update %v: not the same version, or no actor", exec, upd)
	}
}

// TestSlowReceiverDelaysOnlyItsOwnHook is the audit's case: project A's receiver answers after
// 9 s and has 100 changes to take; a change in project B, whose receiver is fast, must still
// be delivered within a second. (When every hook shared the dispatcher's slots in order of
// due time, B's delivery waited behind all of A's.)
func TestSlowReceiverDelaysOnlyItsOwnHook(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	slow := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(9 * time.Second):
		case <-r.Context().Done(): // the dispatcher stopped at the test's end
		}
	})
	fast := newReceiver(t, nil)
	f.hook(slow.URL, controlplane.EventFlagCreated)
	pb, err := f.s.Projects.CreateProject(controlplane.NewContextWithUser(context.Background(), f.admin), f.project.OrganizationID, "B")
	if err != nil {
		t.Fatal(err)
	}
	b := *f
	b.project = pb
	b.hook(fast.URL, controlplane.EventFlagCreated)
	f.run(&webhook.Policy{AllowPrivate: true}, webhook.Config{Timeout: 10 * time.Second}, nil)

	for i := range 100 {
		f.flag(fmt.Sprintf("a-%d", i))
	}
	waitFor(t, "the slow receiver to be called", func() bool { return len(slow.received()) > 0 })
	// The second runs from the change's commit, which b.flag has made when it returns; the
	// write's own time on a loaded machine is not the dispatcher's delay.
	b.flag("b")
	start := time.Now()
	const patience = 10 * time.Second
	for len(fast.received()) == 0 {
		if time.Since(start) > patience {
			t.Fatalf("project B's delivery not made %v after its change (the slow receiver got %d requests)",
				patience, len(slow.received()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if late := fast.received()[0].at.Sub(start); late > time.Second {
		t.Errorf("project B's delivery arrived %v after its change, want under 1s", late)
	} else {
		t.Logf("project B's delivery arrived %v after its change", late)
	}
}

// TestPerHookCapHoldsAcrossReplicas: two dispatchers with slots to spare make at most PerHook
// of one hook's deliveries at once between them, since the cap is counted in the outbox.
func TestPerHookCapHoldsAcrossReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var mu sync.Mutex
	var now, most int
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		now++
		most = max(most, now)
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		now--
		mu.Unlock()
	})
	f.hook(rc.URL, controlplane.EventFlagCreated)
	const n = 12
	for i := range n {
		f.flag(fmt.Sprintf("capped-%d", i))
	}
	cfg := webhook.Config{Concurrency: 8, PerHook: 2}
	f.run(&webhook.Policy{AllowPrivate: true}, cfg, nil)
	f.run(&webhook.Policy{AllowPrivate: true}, cfg, nil)
	waitFor(t, "every delivery", func() bool { return len(rc.received()) >= n })
	mu.Lock()
	defer mu.Unlock()
	if most != cfg.PerHook {
		t.Errorf("%d deliveries of the hook at once, want %d", most, cfg.PerHook)
	}
}

// TestConcurrentClaimsKeepThePerHookCap: claims racing as those of many replicas would lease
// at most perHook of one hook's deliveries between them, and none more while those leases
// hold.
func TestConcurrentClaimsKeepThePerHookCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.hook("http://127.0.0.1:9/never-called", controlplane.EventFlagCreated)
	for i := range 30 {
		f.flag(fmt.Sprintf("raced-%d", i))
	}
	const perHook, claimers = 2, 8
	for round := range 5 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		leased := 0
		start := make(chan struct{})
		for range claimers {
			wg.Go(func() {
				<-start
				list, err := f.outbox.Claim(context.Background(), 8, perHook, time.Minute)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				leased += len(list)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		want := perHook
		if round > 0 {
			want = 0 // the first round's leases still hold
		}
		if leased != want {
			t.Fatalf("round %d: %d claims leased %d deliveries of one hook, want %d", round, claimers, leased, want)
		}
	}
}

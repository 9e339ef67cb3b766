package forward_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/forward"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/webhook"
	"github.com/flagedge/flagedge/internal/pgtest"
)

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

// received is one request the receiver got.
type received struct {
	APIKey string `json:"api_key"`
	SentAt string `json:"sent_at"`
	Batch  []struct {
		Event      string          `json:"event"`
		DistinctID string          `json:"distinct_id"`
		Properties json.RawMessage `json:"properties"`
		Timestamp  string          `json:"timestamp"`
		UUID       string          `json:"uuid"`
	} `json:"batch"`
	at time.Time
}

// receiver is a PostHog capture endpoint on 127.0.0.1: it decodes each /batch/ request and
// answers what answer says (200 when it returns 0).
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
	accepted map[string]int // uuid -> times accepted
	answer   func(r received, n int) (int, http.Header)
}

func newReceiver(t *testing.T, answer func(r received, n int) (int, http.Header)) *receiver {
	rc := &receiver{accepted: map[string]int{}, answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/batch/" || r.Header.Get("Content-Encoding") != "gzip" {
			http.Error(w, "wrong path or encoding "+r.URL.Path, 404)
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, "not gzip", 400)
			return
		}
		var got received
		if err := json.NewDecoder(zr).Decode(&got); err != nil {
			http.Error(w, "bad json", 400)
			return
		}
		got.at = time.Now()
		rc.mu.Lock()
		rc.requests = append(rc.requests, got)
		n := len(rc.requests)
		rc.mu.Unlock()
		code, h := rc.answer(got, n)
		if code == 0 {
			code = 200
			rc.mu.Lock()
			for _, e := range got.Batch {
				rc.accepted[e.UUID]++
			}
			rc.mu.Unlock()
		}
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"status": %d}`, code)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) snapshot() ([]received, map[string]int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	acc := make(map[string]int, len(rc.accepted))
	for k, v := range rc.accepted {
		acc[k] = v
	}
	return append([]received(nil), rc.requests...), acc
}

type env struct {
	db    *postgres.DB
	admin context.Context
	dests *postgres.EventDestinationService
	store *postgres.EventStore
	reg   *prometheus.Registry
	disp  *forward.Dispatcher
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db, err := postgres.Open(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	key, err := postgres.NewAuthService(db).AuthenticatePersonalKey(t.Context(), boot.PersonalAPIKey)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := &env{db: db, admin: controlplane.NewContextWithUser(context.Background(), &key.User),
		dests: postgres.NewEventDestinationService(db), store: postgres.NewEventStore(db, log), reg: prometheus.NewRegistry()}
	e.disp = forward.New(postgres.NewSystemForwardQueue(db), &webhook.Policy{AllowPrivate: true}, forward.Config{
		Workers: 2, BatchSize: 100, Timeout: 5 * time.Second, RetryBase: 20 * time.Millisecond, RetryMax: 5 * time.Second,
		Poll: 20 * time.Millisecond}, log, e.reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.disp.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

func (e *env) destination(t *testing.T, url string) int64 {
	t.Helper()
	d, err := e.dests.CreateEventDestination(e.admin, boot.ProjectID, controlplane.EventDestinationUpdate{URL: &url, APIKey: ptr("phc_receiver")})
	if err != nil {
		t.Fatal(err)
	}
	return d.ID
}

// ingest stores n events (properties {"i": i}, and {"poison": true} for the indexes in
// poison) and returns their uuids.
func (e *env) ingest(t *testing.T, n int, poison map[int]bool) []string {
	t.Helper()
	now := time.Now().Truncate(time.Millisecond)
	evs := make([]controlplane.Event, n)
	ids := make([]string, n)
	for i := range evs {
		props := fmt.Sprintf(`{"i": %d}`, i)
		if poison[i] {
			props = fmt.Sprintf(`{"i": %d, "poison": true}`, i)
		}
		ids[i] = uuid.NewString()
		evs[i] = controlplane.Event{UUID: ids[i], ProjectID: boot.ProjectID, Name: "$pageview", DistinctID: fmt.Sprintf("u%d", i%7),
			Properties: json.RawMessage(props), Timestamp: now, ReceivedAt: now}
	}
	if _, err := e.store.Ingest(context.Background(), []controlplane.EventBatch{{ProjectID: boot.ProjectID, Events: evs}}); err != nil {
		t.Fatal(err)
	}
	return ids
}

func (e *env) waitDrained(t *testing.T, id int64) *controlplane.EventDestination {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := e.dests.FindEventDestinationByID(e.admin, boot.ProjectID, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Queued == 0 {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d queued: %+v", d.Queued, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

func (e *env) metric(name, outcome string) float64 {
	mfs, _ := e.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// Every event arrives once, in PostHog's shape, with its uuid, in batches of at most
// BatchSize, and leaves the queue.
func TestForwardsEveryEventInPostHogsShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, func(received, int) (int, http.Header) { return 0, nil })
	id := e.destination(t, rc.URL+"/")
	ids := e.ingest(t, 250, nil)
	d := e.waitDrained(t, id)
	reqs, acc := rc.snapshot()
	for _, u := range ids {
		if acc[u] != 1 {
			t.Fatalf("uuid %s accepted %d times", u, acc[u])
		}
	}
	if len(acc) != 250 || d.SentEvents != 250 || d.LastSentAt == nil {
		t.Errorf("%d uuids received, destination says %d sent", len(acc), d.SentEvents)
	}
	for _, r := range reqs {
		if r.APIKey != "phc_receiver" || len(r.Batch) > 100 || r.SentAt == "" {
			t.Fatalf("request: key %q, %d events, sent_at %q", r.APIKey, len(r.Batch), r.SentAt)
		}
		for _, ev := range r.Batch {
			if ev.Event != "$pageview" || !strings.HasPrefix(ev.DistinctID, "u") || !strings.Contains(string(ev.Properties), `"i"`) ||
				!strings.HasSuffix(ev.Timestamp, "Z") {
				t.Fatalf("event %+v", ev)
			}
		}
	}
	if got := e.metric("flagedge_controlplane_forward_events_total", "sent"); got != 250 {
		t.Errorf("sent events metric %v", got)
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "flagedge_controlplane_forward_lag_seconds" {
			t.Errorf("a drained queue still has lag series: %v", mf)
		}
	}
}

// 413 halves the batch until it fits; 400 bisects down to the events refused, which are
// dead-lettered where the API shows them, and every other event arrives.
func TestSplitsOn413AndDeadLettersWhat400Refuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, func(r received, _ int) (int, http.Header) {
		if len(r.Batch) > 30 {
			return http.StatusRequestEntityTooLarge, nil
		}
		for _, ev := range r.Batch {
			if strings.Contains(string(ev.Properties), "poison") {
				return http.StatusBadRequest, nil
			}
		}
		return 0, nil
	})
	id := e.destination(t, rc.URL)
	poison := map[int]bool{3: true, 77: true, 78: true}
	ids := e.ingest(t, 100, poison)
	e.waitDrained(t, id)
	_, acc := rc.snapshot()
	for i, u := range ids {
		if want := map[bool]int{false: 1, true: 0}[poison[i]]; acc[u] != want {
			t.Errorf("event %d accepted %d times, want %d", i, acc[u], want)
		}
	}
	letters, total, err := e.dests.FindForwardDeadLetters(e.admin, boot.ProjectID, id, 10, 0)
	if err != nil || total != 3 {
		t.Fatalf("dead letters: %d %v", total, err)
	}
	for _, l := range letters {
		if l.StatusCode != 400 || !strings.Contains(string(l.Event), "poison") || !strings.HasPrefix(l.Error, "HTTP 400") {
			t.Errorf("dead letter %+v", l)
		}
	}
	if e.metric("flagedge_controlplane_forward_batches_total", "split") < 1 || e.metric("flagedge_controlplane_forward_batches_total", "bisected") < 1 ||
		e.metric("flagedge_controlplane_forward_events_total", "dead_lettered") != 3 {
		t.Error("split, bisected or dead-lettered not counted")
	}
}

// 429 and 503 are retried, after at least the Retry-After asked; nothing is lost.
func TestRetriesHonouringRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, func(_ received, n int) (int, http.Header) {
		switch n {
		case 1:
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}}
		case 2:
			return http.StatusServiceUnavailable, nil
		}
		return 0, nil
	})
	id := e.destination(t, rc.URL)
	ids := e.ingest(t, 50, nil)
	e.waitDrained(t, id)
	reqs, acc := rc.snapshot()
	if len(acc) != len(ids) {
		t.Fatalf("%d of %d uuids accepted", len(acc), len(ids))
	}
	if gap := reqs[1].at.Sub(reqs[0].at); gap < 900*time.Millisecond {
		t.Errorf("retried %v after a 429 with Retry-After: 1", gap)
	}
	if e.metric("flagedge_controlplane_forward_batches_total", "retry") != 2 || e.metric("flagedge_controlplane_forward_events_total", "retried") != 100 {
		t.Errorf("retries: %v batches, %v events", e.metric("flagedge_controlplane_forward_batches_total", "retry"),
			e.metric("flagedge_controlplane_forward_events_total", "retried"))
	}
}

// A refused key pauses the destination with a visible reason; events stay queued (and keep
// being queued) until the destination is changed, then they all arrive.
func TestRefusedKeyPausesUntilChanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	refuse := true
	rc := newReceiver(t, func(received, int) (int, http.Header) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return http.StatusUnauthorized, nil
		}
		return 0, nil
	})
	id := e.destination(t, rc.URL)
	ids := e.ingest(t, 20, nil)
	var d *controlplane.EventDestination
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if d, err = e.dests.FindEventDestinationByID(e.admin, boot.ProjectID, id); err != nil {
			t.Fatal(err)
		}
		if d.PausedReason != "" || time.Now().After(deadline) {
			break
		}
	}
	if !strings.HasPrefix(d.PausedReason, "HTTP 401") || d.Queued != 20 {
		t.Fatalf("after a 401: %+v", d)
	}
	time.Sleep(200 * time.Millisecond)
	if reqs, _ := rc.snapshot(); len(reqs) != 1 {
		t.Errorf("a paused destination got %d requests", len(reqs))
	}
	ids = append(ids, e.ingest(t, 5, nil)...)
	mu.Lock()
	refuse = false
	mu.Unlock()
	if _, err := e.dests.UpdateEventDestination(e.admin, boot.ProjectID, id, controlplane.EventDestinationUpdate{APIKey: ptr("phc_fixed")}); err != nil {
		t.Fatal(err)
	}
	e.waitDrained(t, id)
	if _, acc := rc.snapshot(); len(acc) != len(ids) {
		t.Errorf("%d of %d arrived after the fix", len(acc), len(ids))
	}
}

// A receiver that is down is retried until it is back.
func TestRetriesWhileTheReceiverIsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, func(received, int) (int, http.Header) { return 0, nil })
	url := rc.URL
	rc.Listener.Close() // connection refused from now on
	id := e.destination(t, url)
	ids := e.ingest(t, 30, nil)
	// The first failed attempt is seen as the error it records, however long it takes to come.
	var d *controlplane.EventDestination
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if d, err = e.dests.FindEventDestinationByID(e.admin, boot.ProjectID, id); err != nil {
			t.Fatal(err)
		}
		if d.LastError != "" || time.Now().After(deadline) {
			break
		}
	}
	if d.Queued != 30 || d.LastError == "" || d.PausedReason != "" {
		t.Fatalf("while down: %+v", d)
	}
	back := newReceiver(t, func(received, int) (int, http.Header) { return 0, nil })
	if _, err := e.dests.UpdateEventDestination(e.admin, boot.ProjectID, id, controlplane.EventDestinationUpdate{URL: &back.URL}); err != nil {
		t.Fatal(err)
	}
	e.waitDrained(t, id)
	if _, acc := back.snapshot(); len(acc) != len(ids) {
		t.Errorf("%d of %d arrived", len(acc), len(ids))
	}
}

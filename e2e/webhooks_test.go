package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane/webhook"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// hookReceiver is a real HTTP receiver on 127.0.0.1 that records what it is sent.
type hookReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []hookRequest
	code int
}

type hookRequest struct {
	header http.Header
	body   []byte
}

func newHookReceiver(t *testing.T, code int) *hookReceiver {
	h := &hookReceiver{code: code}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.got = append(h.got, hookRequest{r.Header.Clone(), b})
		h.mu.Unlock()
		w.WriteHeader(h.code)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) requests() []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// startHookReplica starts a control-plane replica with the given extra flags.
func (s *stack) startHookReplica(name string, extra ...string) (*process, string) {
	s.t.Helper()
	args := append([]string{"serve", "--database-url", s.dbURL, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
		"--drain-delay", "0s"}, extra...)
	p := start(s.t, name, binaries.controlplane, args...)
	addr := p.listening("control plane listening")["http_addr"].(string)
	waitFor(s.t, name+" ready", func() bool { return status("http://"+addr+"/_ready") == 200 })
	return p, "http://" + addr
}

// TestWebhooksWithTwoReplicas runs two control-plane replicas with --webhook-allow-private
// and real receivers on 127.0.0.1: flag and annotation changes made through either replica
// are each delivered exactly once, signed; a receiver answering 500 is retried with backoff
// and its delivery log says so. Then a replica without the flag refuses a loopback hook when
// it is created and, for one stored past that check, when it would deliver.
func TestWebhooksWithTwoReplicas(t *testing.T) {
	s := &stack{t: t, dbURL: pgtest.NewDatabase(t)}
	s.bootstrap()
	fast := []string{"--webhook-allow-private", "--webhook-retry-base", "100ms", "--webhook-retry-max", "400ms"}
	a, aURL := s.startHookReplica("replica-a", fast...)
	b, bURL := s.startHookReplica("replica-b", fast...)
	api := func(base, suffix string) string {
		return fmt.Sprintf("%s/api/projects/%d%s", base, s.projectID, suffix)
	}

	good, dead := newHookReceiver(t, http.StatusNoContent), newHookReceiver(t, http.StatusInternalServerError)
	const secret = "e2e-secret-0123456789"
	all := []string{"feature_flag.created", "feature_flag.updated", "feature_flag.deleted",
		"annotation.created", "annotation.updated", "annotation.deleted"}
	code, out := call(t, "POST", api(aURL, "/webhooks/"), s.personal, map[string]any{"url": good.URL + "/hooks", "events": all, "secret": secret})
	if code != 201 {
		t.Fatalf("create webhook: %d %v", code, out)
	}
	code, out = call(t, "POST", api(bURL, "/webhooks/"), s.personal, map[string]any{"url": dead.URL, "events": []string{"feature_flag.created"}, "secret": secret})
	if code != 201 {
		t.Fatalf("create webhook: %d %v", code, out)
	}
	deadHook := int64(out["id"].(float64))

	// Writes through both replicas.
	code, out = call(t, "POST", api(aURL, "/feature_flags/"), s.personal, map[string]any{"key": "hooked"})
	if code != 201 {
		t.Fatalf("create flag: %d %v", code, out)
	}
	flagID := int64(out["id"].(float64))
	for i, body := range []map[string]any{{"name": "Hooked"}, {"deleted": true}} {
		base := []string{aURL, bURL}[i%2]
		if code, out := call(t, "PATCH", api(base, fmt.Sprintf("/feature_flags/%d/", flagID)), s.personal, body); code != 200 {
			t.Fatalf("patch flag: %d %v", code, out)
		}
	}
	code, out = call(t, "POST", api(bURL, "/annotations/"), s.personal, map[string]any{"content": "deploy 42"})
	if code != 201 {
		t.Fatalf("create annotation: %d %v", code, out)
	}
	noteID := int64(out["id"].(float64))
	for i, body := range []map[string]any{{"content": "deploy 42b"}, {"deleted": true}} {
		base := []string{bURL, aURL}[i%2]
		if code, out := call(t, "PATCH", api(base, fmt.Sprintf("/annotations/%d/", noteID)), s.personal, body); code != 200 {
			t.Fatalf("patch annotation: %d %v", code, out)
		}
	}

	waitFor(t, "six deliveries", func() bool { return len(good.requests()) >= 6 })
	time.Sleep(time.Second) // a second delivery of any event would come within this
	got := good.requests()
	var kinds []string
	events := map[string]bool{}
	for _, r := range got {
		if !webhook.Verify(secret, r.header.Get(webhook.HeaderSignature), r.body, time.Now()) {
			t.Errorf("signature %q does not verify", r.header.Get(webhook.HeaderSignature))
		}
		var body struct {
			Event   string         `json:"event"`
			EventID string         `json:"event_id"`
			Data    map[string]any `json:"data"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		if body.EventID != r.header.Get(webhook.HeaderEventID) || body.Data["id"] == nil {
			t.Errorf("body %s", r.body)
		}
		events[body.EventID] = true
		kinds = append(kinds, body.Event)
	}
	slices.Sort(kinds)
	want := slices.Sorted(slices.Values(all))
	if len(got) != 6 || len(events) != 6 || !slices.Equal(kinds, want) {
		t.Fatalf("%d deliveries of %d events %v, want each of %v once", len(got), len(events), kinds, want)
	}

	// The dead receiver: retried with backoff, in the log.
	waitFor(t, "three attempts at the dead receiver", func() bool { return len(dead.requests()) >= 3 })
	code, out = call(t, "GET", api(aURL, fmt.Sprintf("/webhooks/%d/deliveries/", deadHook)), s.personal, nil)
	if code != 200 || out["count"] != float64(1) {
		t.Fatalf("delivery log: %d %v", code, out)
	}
	d := out["results"].([]any)[0].(map[string]any)
	if d["status"] != "pending" || d["attempts"].(float64) < 2 || d["last_status_code"] != float64(500) || d["next_attempt_at"] == nil ||
		d["last_error"] != "HTTP 500" {
		t.Errorf("dead receiver's delivery %v", d)
	}
	ids := map[string]bool{}
	for _, r := range dead.requests() {
		ids[r.header.Get(webhook.HeaderDelivery)] = true
	}
	if len(ids) != 1 {
		t.Errorf("the retries carry %d delivery ids, want 1", len(ids))
	}
	a.stop()
	b.stop()

	// Without --webhook-allow-private.
	_, cURL := s.startHookReplica("replica-strict", "--webhook-retry-base", "100ms", "--webhook-retry-max", "400ms")
	code, out = call(t, "POST", api(cURL, "/webhooks/"), s.personal, map[string]any{"url": good.URL, "events": all, "secret": secret})
	if code != 400 || out["code"] != "forbidden_address" || out["attr"] != "url" {
		t.Errorf("a loopback hook without --webhook-allow-private: %d %v", code, out)
	}
	before := len(good.requests())
	code, out = call(t, "POST", api(cURL, "/feature_flags/"), s.personal, map[string]any{"key": "refused"})
	if code != 201 {
		t.Fatalf("create flag: %d %v", code, out)
	}
	var goodHook int64
	if err := openDB(t, s.dbURL).QueryRow(context.Background(), `SELECT id FROM webhooks WHERE url = $1`, good.URL+"/hooks").Scan(&goodHook); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivery refused", func() bool {
		_, out := call(t, "GET", api(cURL, fmt.Sprintf("/webhooks/%d/deliveries/", goodHook)), s.personal, nil)
		d := out["results"].([]any)[0].(map[string]any)
		return d["status"] == "failed" && strings.Contains(d["last_error"].(string), "address refused")
	})
	if n := len(good.requests()); n != before {
		t.Errorf("the loopback receiver got %d more requests", n-before)
	}
}

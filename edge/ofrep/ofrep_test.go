package ofrep_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/admit"
	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/edge/httpapi"
	"github.com/flagedge/flagedge/edge/ofrep"
	"github.com/flagedge/flagedge/edge/reqbody"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/clientip"
	"github.com/flagedge/flagedge/shared/syncpb"
)

const token = "phc_ofrep"

// snapshot is a project with a flag of every kind OFREP maps: static, split by rollout,
// targeted, multivariate by hash and by override, an object flag, an inactive flag, a group
// flag.
func snapshot(version int64, extra ...*syncpb.Flag) *syncpb.ProjectSnapshot {
	fl := []*syncpb.Flag{
		{Id: 1, Key: "static-on", Active: true, Version: 2, Filters: []byte(`{"groups":[{"properties":[],"rollout_percentage":100}]}`)},
		{Id: 2, Key: "half", Active: true, Version: 1, Filters: []byte(`{"groups":[{"properties":[],"rollout_percentage":50}]}`)},
		{Id: 3, Key: "beta-users", Active: true, Version: 1, Filters: []byte(`{"groups":[{"properties":[{"key":"email","value":"@example.com","operator":"icontains","type":"person"}],"rollout_percentage":100}],"payloads":{"true":"\"hello\""}}`)},
		{Id: 4, Key: "checkout", Active: true, Version: 5, Filters: []byte(`{"groups":[{"properties":[],"rollout_percentage":100}],"multivariate":{"variants":[{"key":"control","rollout_percentage":50},{"key":"test","rollout_percentage":50}]}}`)},
		{Id: 5, Key: "pinned-variant", Active: true, Version: 1, Filters: []byte(`{"groups":[{"properties":[{"key":"plan","value":["pro"],"operator":"exact","type":"person"}],"rollout_percentage":100,"variant":"b"}],"multivariate":{"variants":[{"key":"a","rollout_percentage":100},{"key":"b","rollout_percentage":0}]}}`)},
		{Id: 6, Key: "banner-config", Active: true, Version: 3, Filters: []byte(`{"groups":[{"properties":[],"rollout_percentage":100}],"payloads":{"true":"{\"color\":\"blue\",\"size\":3}"}}`)},
		{Id: 7, Key: "retired", Active: false, Version: 9, Filters: []byte(`{"groups":[{"properties":[],"rollout_percentage":100}]}`)},
		{Id: 8, Key: "company-flag", Active: true, Version: 1, Filters: []byte(`{"aggregation_group_type_index":0,"groups":[{"properties":[],"rollout_percentage":100}]}`)},
	}
	return &syncpb.ProjectSnapshot{ProjectId: 42, Version: version, ApiToken: token, GroupTypes: map[int32]string{0: "company"},
		BuiltAtUnixMs: 1_700_000_000_000, Flags: append(fl, extra...)}
}

type env struct {
	t      *testing.T
	api    *httpapi.Server
	holder *state.Holder
	hub    *ofrep.Hub
	reg    *prometheus.Registry // the hub's metrics and the refusals
	base   string
	client *http.Client
}

// newEnv serves the edge's HTTP surface with OFREP on a real listener; streams are on with
// maxPerAddr streams per address.
func newEnv(t *testing.T, streams bool, maxPerAddr int) *env {
	t.Helper()
	var opts envOptions
	if streams {
		sc := testStreamConfig()
		sc.MaxPerAddr = maxPerAddr
		opts.streams = &sc
	}
	return newEnvWith(t, opts)
}

// envOptions are what newEnvWith serves with.
type envOptions struct {
	streams *ofrep.StreamConfig // nil: streaming off
	budget  *reqbody.Budget     // the in-flight budget of /decide (and OFREP); nil: unbounded
}

// testStreamConfig is the edge's stream configuration with a key and a short heartbeat.
func testStreamConfig() ofrep.StreamConfig {
	sc := ofrep.DefaultStreamConfig()
	sc.Key, sc.Heartbeat = []byte("0123456789abcdef0123456789abcdef"), 200*time.Millisecond
	return sc
}

// newEnvWith serves the edge's HTTP surface with OFREP on a real listener on 127.0.0.1, by
// the server and listener the edge serves with (httpapi.NewFastHTTPServer, httpapi.Listen).
func newEnvWith(t *testing.T, opts envOptions) *env {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := state.NewHolder("", log, nil)
	if err := holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{snapshot(1)}, InitialSyncDone: true}); err != nil {
		t.Fatal(err)
	}
	ips, _ := clientip.NewResolver("")
	dec := decide.NewHandler(holder, nil, nil, ips, opts.budget, nil, log)
	reg := prometheus.NewRegistry()
	var hub *ofrep.Hub
	if opts.streams != nil {
		hub = ofrep.NewHub(*opts.streams, holder, ips, log, reg)
	}
	api := httpapi.New(httpapi.Config{State: holder, Decide: dec, Logger: log, Refusals: admit.NewRefusals(reg),
		OFREP: ofrep.New(ofrep.Config{State: holder, Decide: dec, Streams: hub, Logger: log})})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewFastHTTPServer(httpapi.ConnConfig{HeaderTimeout: 5 * time.Second, BodyTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 8 << 10}, log)
	go srv.Serve(httpapi.Listen(ln, 0, nil)) //nolint:errcheck // ends with the listener
	t.Cleanup(func() { srv.Shutdown() })
	if hub != nil {
		ctx, cancel := context.WithCancel(context.Background())
		go hub.Run(ctx)
		t.Cleanup(cancel)
	}
	return &env{t: t, api: api, holder: holder, hub: hub, reg: reg, base: "http://" + ln.Addr().String(), client: &http.Client{Timeout: 5 * time.Second}}
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (e *env) do(method, path string, body string, headers ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &a.body); err != nil {
			e.t.Fatalf("%s %s: not JSON: %s", method, path, raw)
		}
	}
	return a
}

func ctxBody(attrs string) string { return `{"context":{` + attrs + `}}` }

// TestEvaluateFlag: every value type and reason, and the errors, as OFREP 0.3.0 shapes them.
func TestEvaluateFlag(t *testing.T) {
	e := newEnv(t, false, 0)
	auth := "Authorization: Bearer " + token
	for _, tc := range []struct {
		name, key, body string
		headers         []string
		status          int
		want            map[string]any
	}{
		{"static boolean", "static-on", ctxBody(`"targetingKey":"u1"`), []string{auth}, 200,
			map[string]any{"key": "static-on", "value": true, "reason": "STATIC", "variant": "true", "metadata": map[string]any{"id": 1.0, "version": 2.0}}},
		{"targeting match with a string payload in metadata", "beta-users", ctxBody(`"targetingKey":"u1","email":"ann@example.com"`), []string{auth}, 200,
			map[string]any{"key": "beta-users", "value": true, "reason": "TARGETING_MATCH", "variant": "true", "metadata": map[string]any{"id": 3.0, "version": 1.0, "payload": `"hello"`}}},
		{"no condition matched", "beta-users", ctxBody(`"targetingKey":"u1","email":"ann@elsewhere.org"`), []string{"X-API-Key: " + token}, 200,
			map[string]any{"key": "beta-users", "value": false, "reason": "DEFAULT", "variant": "false", "metadata": map[string]any{"id": 3.0, "version": 1.0}}},
		{"variant by override", "pinned-variant", ctxBody(`"targetingKey":"u1","plan":"pro"`), []string{auth}, 200,
			map[string]any{"key": "pinned-variant", "value": "b", "reason": "TARGETING_MATCH", "variant": "b", "metadata": map[string]any{"id": 5.0, "version": 1.0}}},
		{"multivariate not matched: code default", "pinned-variant", ctxBody(`"targetingKey":"u1","plan":"free"`), []string{auth}, 200,
			map[string]any{"key": "pinned-variant", "reason": "DEFAULT", "metadata": map[string]any{"id": 5.0, "version": 1.0}}},
		{"object flag", "banner-config", ctxBody(`"targetingKey":"u1"`), []string{auth}, 200,
			map[string]any{"key": "banner-config", "value": map[string]any{"color": "blue", "size": 3.0}, "reason": "STATIC", "variant": "true",
				"metadata": map[string]any{"id": 6.0, "version": 3.0, "payload": `{"color":"blue","size":3}`}}},
		{"disabled", "retired", ctxBody(`"targetingKey":"u1"`), []string{auth}, 200,
			map[string]any{"key": "retired", "value": false, "reason": "DISABLED", "variant": "false", "metadata": map[string]any{"id": 7.0, "version": 9.0}}},
		{"group flag with the group", "company-flag", ctxBody(`"targetingKey":"u1","groups":{"company":"acme"}`), []string{auth}, 200,
			map[string]any{"key": "company-flag", "value": true, "reason": "TARGETING_MATCH", "variant": "true", "metadata": map[string]any{"id": 8.0, "version": 1.0}}},
		{"group flag without the group", "company-flag", ctxBody(`"targetingKey":"u1"`), []string{auth}, 200,
			map[string]any{"key": "company-flag", "value": false, "reason": "DEFAULT", "variant": "false", "metadata": map[string]any{"id": 8.0, "version": 1.0}}},
		{"not found", "nope", ctxBody(`"targetingKey":"u1"`), []string{auth}, 404,
			map[string]any{"key": "nope", "errorCode": "FLAG_NOT_FOUND", "errorDetails": "Flag 'nope' was not found."}},
		{"no targeting key", "static-on", ctxBody(`"email":"a@b.c"`), []string{auth}, 400,
			map[string]any{"key": "static-on", "errorCode": "TARGETING_KEY_MISSING", "errorDetails": "The context has no targetingKey: flagedge evaluates flags for a distinct id."}},
		{"targeting key not a string", "static-on", ctxBody(`"targetingKey":{"a":1}`), []string{auth}, 400,
			map[string]any{"key": "static-on", "errorCode": "INVALID_CONTEXT", "errorDetails": "targetingKey must be a string."}},
		{"context not an object", "static-on", `{"context":[1]}`, []string{auth}, 400,
			map[string]any{"key": "static-on", "errorCode": "INVALID_CONTEXT", "errorDetails": "context must be a JSON object."}},
		{"groups not strings", "static-on", ctxBody(`"targetingKey":"u","groups":{"company":[1]}`), []string{auth}, 400,
			map[string]any{"key": "static-on", "errorCode": "INVALID_CONTEXT", "errorDetails": `the key of group "company" must be a string.`}},
		{"not JSON", "static-on", `{"context":`, []string{auth}, 400,
			map[string]any{"key": "static-on", "errorCode": "PARSE_ERROR", "errorDetails": "The body is not an evaluation request: unexpected end of JSON input"}},
		{"no token", "static-on", ctxBody(`"targetingKey":"u1"`), nil, 401,
			map[string]any{"key": "static-on", "errorCode": "GENERAL", "errorDetails": "No project API key: send it as Authorization: Bearer phc_… or X-API-Key."}},
		{"unknown token", "static-on", ctxBody(`"targetingKey":"u1"`), []string{"Authorization: Bearer phc_other"}, 401,
			map[string]any{"key": "static-on", "errorCode": "GENERAL", "errorDetails": "Project API key invalid."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.do("POST", "/ofrep/v1/evaluate/flags/"+tc.key, tc.body, tc.headers...)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %s", a.status, tc.status, a.raw)
			}
			if diff := cmp.Diff(tc.want, a.body); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if ct := a.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
		})
	}
}

// TestSplitReasons: a rollout under 100% and a variant picked by hash are SPLIT, whichever
// value the hash gives, and the values are those /flags gives for the same person.
func TestSplitReasons(t *testing.T) {
	e := newEnv(t, false, 0)
	seen := map[string]bool{}
	for i := range 40 {
		id := fmt.Sprintf("user-%d", i)
		flagsAnswer := e.do("POST", "/flags/?v=2", fmt.Sprintf(`{"token":%q,"distinct_id":%q}`, token, id))
		for _, key := range []string{"half", "checkout"} {
			a := e.do("POST", "/ofrep/v1/evaluate/flags/"+key, ctxBody(`"targetingKey":"`+id+`"`), "Authorization: Bearer "+token)
			if a.status != 200 || a.body["reason"] != "SPLIT" {
				t.Fatalf("%s for %s: %d %s", key, id, a.status, a.raw)
			}
			f := flagsAnswer.body["flags"].(map[string]any)[key].(map[string]any)
			want := f["enabled"]
			if v, ok := f["variant"].(string); ok {
				want = v
			}
			if a.body["value"] != want {
				t.Errorf("%s for %s: OFREP %v, /flags %v", key, id, a.body["value"], want)
			}
			seen[fmt.Sprint(key, a.body["value"])] = true
		}
	}
	for _, v := range []string{"halftrue", "halffalse", "checkoutcontrol", "checkouttest"} {
		if !seen[v] {
			t.Errorf("no user got %s: the split is not exercised", v)
		}
	}
}

// TestBulk: every flag in one answer, the same as /flags for the same context, an ETag that
// revalidates to 304 and changes when the snapshot changes the answer, and errors in the
// bulk shape.
func TestBulk(t *testing.T) {
	e := newEnv(t, false, 0)
	auth := "Authorization: Bearer " + token
	body := ctxBody(`"targetingKey":"user-7","email":"x@example.com","groups":{"company":"acme"},"groupProperties":{"company":{"seats":3}}`)
	a := e.do("POST", "/ofrep/v1/evaluate/flags", body, auth, "Origin: https://shop.example")
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.raw)
	}
	if _, ok := a.body["eventStreams"]; ok {
		t.Errorf("eventStreams announced with streaming off: %s", a.raw)
	}
	if v := a.header.Get("X-Flagedge-Snapshot-Version"); v != "1" {
		t.Errorf("X-Flagedge-Snapshot-Version %q, want the snapshot's 1", v)
	}
	got := map[string]any{}
	for _, f := range a.body["flags"].([]any) {
		f := f.(map[string]any)
		got[f["key"].(string)] = f["value"]
	}
	flagsAnswer := e.do("POST", "/flags/?v=2", fmt.Sprintf(`{"token":%q,"distinct_id":"user-7","person_properties":{"email":"x@example.com"},"groups":{"company":"acme"},"group_properties":{"company":{"seats":3}}}`, token))
	for key, f := range flagsAnswer.body["flags"].(map[string]any) {
		f := f.(map[string]any)
		want := f["enabled"]
		if v, ok := f["variant"].(string); ok && v != "" {
			want = v
		}
		switch {
		case key == "banner-config" && want == true: // an object flag's value is its payload
			want = map[string]any{"color": "blue", "size": 3.0}
		case (key == "banner-config" || key == "checkout" || key == "pinned-variant") && want == false:
			want = nil // a multivariate or object flag that is off: the code default
		}
		if diff := cmp.Diff(want, got[key]); diff != "" {
			t.Errorf("%s: OFREP differs from /flags (-flags +ofrep):\n%s", key, diff)
		}
	}
	if len(got) != 8 {
		t.Errorf("%d flags, want all 8 (the inactive one included): %v", len(got), got)
	}
	etag := a.header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || a.header.Get("Access-Control-Expose-Headers") != "ETag, Retry-After, X-Flagedge-Snapshot-Version" {
		t.Fatalf("ETag %q, expose %q", etag, a.header.Get("Access-Control-Expose-Headers"))
	}
	if r := e.do("POST", "/ofrep/v1/evaluate/flags", body, auth, "If-None-Match: "+etag); r.status != 304 || len(r.raw) != 0 || r.header.Get("ETag") != etag {
		t.Errorf("revalidation: %d %q etag %q", r.status, r.raw, r.header.Get("ETag"))
	}
	if r := e.do("POST", "/ofrep/v1/evaluate/flags", ctxBody(`"targetingKey":"user-8"`), auth, "If-None-Match: "+etag); r.status != 200 {
		t.Errorf("another context revalidated with this one's ETag: %d", r.status)
	}
	// A new version that changes nothing for this context keeps the ETag; one that does, not.
	extra := &syncpb.Flag{Id: 9, Key: "zz-other", Active: true, Version: 1, Filters: []byte(`{"groups":[{"properties":[{"key":"email","value":["nobody@example.com"],"operator":"exact","type":"person"}],"rollout_percentage":100}]}`)}
	if err := e.holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{snapshot(2)}}); err != nil {
		t.Fatal(err)
	}
	if r := e.do("POST", "/ofrep/v1/evaluate/flags", body, auth, "If-None-Match: "+etag); r.status != 304 {
		t.Errorf("unchanged answer under a new version: %d", r.status)
	}
	if err := e.holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{snapshot(3, extra)}}); err != nil {
		t.Fatal(err)
	}
	if r := e.do("POST", "/ofrep/v1/evaluate/flags", body, auth, "If-None-Match: "+etag); r.status != 200 || r.header.Get("ETag") == etag {
		t.Errorf("changed answer: %d, ETag %q", r.status, r.header.Get("ETag"))
	}

	for _, tc := range []struct {
		name, body string
		headers    []string
		status     int
		want       map[string]any
	}{
		{"no targeting key", ctxBody(``), []string{auth}, 400, map[string]any{"errorCode": "TARGETING_KEY_MISSING",
			"errorDetails": "The context has no targetingKey: flagedge evaluates flags for a distinct id."}},
		{"not JSON", `nope`, []string{auth}, 400, map[string]any{"errorCode": "PARSE_ERROR",
			"errorDetails": "The body is not an evaluation request: invalid character 'o' in literal null (expecting 'u')"}},
		{"no token", body, nil, 401, map[string]any{"errorCode": "GENERAL",
			"errorDetails": "No project API key: send it as Authorization: Bearer phc_… or X-API-Key."}},
		{"too large", ctxBody(`"targetingKey":"u","pad":"` + strings.Repeat("x", ofrep.MaxBodyBytes) + `"`), []string{auth}, 413,
			map[string]any{"errorCode": "PARSE_ERROR", "errorDetails": "The request body is over 1 MB."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/ofrep/v1/evaluate/flags", tc.body, tc.headers...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.raw)
			}
			if diff := cmp.Diff(tc.want, r.body); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestConfigurationAndCORS: the provider configuration, and CORS with preflight on every
// OFREP route.
func TestConfigurationAndCORS(t *testing.T) {
	e := newEnv(t, true, 10)
	a := e.do("GET", "/ofrep/v1/configuration", "")
	want := map[string]any{"name": "flagedge", "capabilities": map[string]any{
		"cacheInvalidation": map[string]any{"polling": map[string]any{"enabled": true, "minPollingIntervalMs": 1000.0}, "sse": map[string]any{"enabled": true}},
		"flagEvaluation":    map[string]any{"supportedTypes": []any{"boolean", "string", "object"}}}}
	if diff := cmp.Diff(want, a.body); diff != "" {
		t.Errorf("configuration (-want +got):\n%s", diff)
	}
	const origin = "https://shop.example"
	for _, tc := range []struct{ method, path string }{
		{"OPTIONS", "/ofrep/v1/evaluate/flags"}, {"OPTIONS", "/ofrep/v1/evaluate/flags/static-on"},
		{"OPTIONS", "/ofrep/v1/configuration"}, {"OPTIONS", "/ofrep/v1/stream"},
		{"POST", "/ofrep/v1/evaluate/flags"}, {"POST", "/ofrep/v1/evaluate/flags/static-on"},
		{"GET", "/ofrep/v1/configuration"}, {"GET", "/ofrep/v1/stream?c=bad"},
	} {
		r := e.do(tc.method, tc.path, ctxBody(`"targetingKey":"u"`), "Origin: "+origin, "Access-Control-Request-Headers: authorization,content-type,if-none-match")
		if r.header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("%s %s: no CORS (%d)", tc.method, tc.path, r.status)
		}
		if tc.method == "OPTIONS" && (r.status != 200 || r.header.Get("Access-Control-Allow-Headers") != "authorization,content-type,if-none-match") {
			t.Errorf("%s %s: preflight %d allows %q", tc.method, tc.path, r.status, r.header.Get("Access-Control-Allow-Headers"))
		}
	}
}

// sse is a client of one change stream.
type sse struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
	head string
}

// openStream connects to url with raw HTTP (to see exactly what is written) and reads the
// response head.
func openStream(t *testing.T, url string, headers ...string) *sse {
	t.Helper()
	hostPath := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(hostPath, "/")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := "GET /" + path + " HTTP/1.1\r\nHost: " + host + "\r\nAccept: text/event-stream\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	s := &sse{t: t, conn: conn, r: bufio.NewReader(conn)}
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("head: %v (%q)", err, s.head)
		}
		s.head += line
		if line == "\r\n" {
			return s
		}
	}
}

// next returns the next SSE block (lines up to a blank line), comments included.
func (s *sse) next(timeout time.Duration) string {
	s.t.Helper()
	s.conn.SetReadDeadline(time.Now().Add(timeout))
	var block string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("stream: %v after %q", err, block)
		}
		if line == "\n" {
			return block
		}
		block += line
	}
}

// nextEvent skips heartbeats.
func (s *sse) nextEvent(timeout time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b := s.next(time.Until(deadline)); b != ":\n" {
			return b
		}
	}
}

func (e *env) streamURL(origin string) string {
	e.t.Helper()
	a := e.do("POST", "/ofrep/v1/evaluate/flags", ctxBody(`"targetingKey":"u1"`), "Authorization: Bearer "+token, "Origin: "+origin)
	streams, _ := a.body["eventStreams"].([]any)
	if a.status != 200 || len(streams) != 1 {
		e.t.Fatalf("bulk: %d %s", a.status, a.raw)
	}
	s := streams[0].(map[string]any)
	if s["type"] != "sse" || s["inactivityDelaySec"] != 120.0 || !strings.HasPrefix(s["url"].(string), e.base+"/ofrep/v1/stream?c=") {
		e.t.Fatalf("eventStreams %v", s)
	}
	return s["url"].(string)
}

// TestStream: a change of the project's snapshot reaches its streams as refetchEvaluation
// with the new version as id; heartbeats keep them; Last-Event-ID of an older version is told
// at once; a bad or foreign credential is 401; streams beyond the per-address limit are 429
// with Retry-After in OFREP's shape; CORS is on the stream.
func TestStream(t *testing.T) {
	e := newEnv(t, true, 3)
	url := e.streamURL("https://shop.example")
	s := openStream(t, url, "Origin: https://shop.example")
	for _, h := range []string{"HTTP/1.1 200 OK\r\n", "Content-Type: text/event-stream\r\n", "Cache-Control: no-cache\r\n",
		"Access-Control-Allow-Origin: https://shop.example\r\n"} {
		if !strings.Contains(s.head, h) {
			t.Errorf("head lacks %q:\n%s", h, s.head)
		}
	}
	if b := s.next(time.Second); b != "retry: 2000\nid: 1\n" {
		t.Fatalf("first block %q", b)
	}
	if b := s.next(time.Second); b != ":\n" {
		t.Fatalf("heartbeat %q", b)
	}
	if err := e.holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{snapshot(2)}}); err != nil {
		t.Fatal(err)
	}
	// Within the second operations.md promises browsers, counted from the change applied.
	want := "id: 2\ndata: {\"type\":\"refetchEvaluation\",\"etag\":\"\\\"42-2\\\"\",\"lastModified\":1700000000}\n"
	if b := s.nextEvent(time.Second); b != want {
		t.Fatalf("event %q, want %q", b, want)
	}

	// A client that saw version 1 reconnects after the change: it is told at once.
	late := openStream(t, url, "Last-Event-ID: 1")
	if b := late.next(time.Second); b != "retry: 2000\n"+want {
		t.Errorf("reconnect with an old id: %q", b)
	}
	current := openStream(t, url, "Last-Event-ID: 2")
	if b := current.next(time.Second); b != "retry: 2000\nid: 2\n" {
		t.Errorf("reconnect with the current id: %q", b)
	}

	// The fourth stream from this address is refused.
	r := e.do("GET", strings.TrimPrefix(url, e.base), "")
	if r.status != 429 || r.header.Get("Retry-After") != "30" || r.body["errorCode"] != "GENERAL" {
		t.Errorf("over the limit: %d %q %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
	// Closing one frees its place.
	late.conn.Close()
	waitFor(t, func() bool {
		r := openStreamStatus(t, url)
		return r == "HTTP/1.1 200 OK"
	})

	for _, bad := range []string{"", "nonsense", "42.99999999999.AAAA", strings.Replace(strings.TrimPrefix(url, e.base+"/ofrep/v1/stream?c="), "42.", "43.", 1)} {
		r := e.do("GET", "/ofrep/v1/stream?c="+bad, "")
		if r.status != 401 || r.body["errorCode"] != "GENERAL" {
			t.Errorf("credential %q: %d %s", bad, r.status, r.raw)
		}
	}
	// A removed project's streams end.
	if err := e.holder.Apply(&syncpb.WatchResponse{RemovedProjects: []int64{42}}); err != nil {
		t.Fatal(err)
	}
	s.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		if _, err := s.r.ReadString('\n'); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("stream of a removed project: %v", err)
		}
	}
}

// openStreamStatus opens a stream and returns its status line, closing it again.
func openStreamStatus(t *testing.T, url string) string {
	host, path, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET /" + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"))
	conn.SetReadDeadline(time.Now().Add(time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line)
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("condition not met in 20 s")
}

// TestOpenAPI: openapi.yaml is a valid description, names every OFREP route the edge
// registers (and no other), and the edge's answers match it.
func TestOpenAPI(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	e := newEnv(t, true, 10)
	var routes, ops []string
	for method, paths := range e.api.Routes() {
		for _, p := range paths {
			if strings.HasPrefix(p, "/ofrep/") {
				routes = append(routes, method+" "+p)
			}
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(routes)
	slices.Sort(ops)
	if diff := cmp.Diff(ops, routes); diff != "" {
		t.Errorf("routes (-openapi.yaml +registered):\n%s", diff)
	}

	auth := "Authorization: Bearer " + token
	bulk := e.do("POST", "/ofrep/v1/evaluate/flags", ctxBody(`"targetingKey":"u1"`), auth)
	for _, tc := range []struct {
		method, specPath, path, body string
		headers                      []string
		status                       int
	}{
		{"POST", "/ofrep/v1/evaluate/flags/{key}", "/ofrep/v1/evaluate/flags/banner-config", ctxBody(`"targetingKey":"u1"`), []string{auth}, 200},
		{"POST", "/ofrep/v1/evaluate/flags/{key}", "/ofrep/v1/evaluate/flags/checkout", ctxBody(`"targetingKey":"u1"`), []string{auth}, 200},
		{"POST", "/ofrep/v1/evaluate/flags/{key}", "/ofrep/v1/evaluate/flags/pinned-variant", ctxBody(`"targetingKey":"u1"`), []string{auth}, 200},
		{"POST", "/ofrep/v1/evaluate/flags/{key}", "/ofrep/v1/evaluate/flags/nope", ctxBody(`"targetingKey":"u1"`), []string{auth}, 404},
		{"POST", "/ofrep/v1/evaluate/flags/{key}", "/ofrep/v1/evaluate/flags/half", ctxBody(``), []string{auth}, 400},
		{"POST", "/ofrep/v1/evaluate/flags/{key}", "/ofrep/v1/evaluate/flags/half", ctxBody(`"targetingKey":"u1"`), nil, 401},
		{"POST", "/ofrep/v1/evaluate/flags", "/ofrep/v1/evaluate/flags", ctxBody(`"targetingKey":"u1"`), []string{auth}, 200},
		{"POST", "/ofrep/v1/evaluate/flags", "/ofrep/v1/evaluate/flags", ctxBody(`"targetingKey":"u1"`), []string{auth, "If-None-Match: " + bulk.header.Get("ETag")}, 304},
		{"POST", "/ofrep/v1/evaluate/flags", "/ofrep/v1/evaluate/flags", `[`, []string{auth}, 400},
		{"POST", "/ofrep/v1/evaluate/flags", "/ofrep/v1/evaluate/flags", ctxBody(`"targetingKey":"u1"`), []string{"X-API-Key: phc_nope"}, 401},
		{"GET", "/ofrep/v1/configuration", "/ofrep/v1/configuration", "", nil, 200},
		{"GET", "/ofrep/v1/stream", "/ofrep/v1/stream?c=x", "", nil, 401},
	} {
		a := e.do(tc.method, tc.path, tc.body, tc.headers...)
		if a.status != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, a.status, tc.status)
			continue
		}
		item := doc.Paths.Value(tc.specPath)
		req, _ := http.NewRequest(tc.method, e.base+tc.path, nil)
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req,
				Route: &routers.Route{Spec: doc, Path: tc.specPath, PathItem: item, Method: tc.method, Operation: item.GetOperation(tc.method)}},
			Status: a.status, Header: a.header, Body: io.NopCloser(bytes.NewReader(a.raw)),
			Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
		}
		if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
			t.Errorf("%s %s: the answer does not match openapi.yaml: %v\n%s", tc.method, tc.path, err, a.raw)
		}
	}
}

// TestWriteErrorOfSharedChecks: a refusal by the edge's shared checks (an *apierror.Error,
// such as a rate limit) is answered in OFREP's shape, and a 429 always has Retry-After.
func TestWriteErrorOfSharedChecks(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name       string
		err        error
		key        string
		preset     string // a Retry-After the check set itself
		status     int
		retryAfter string
		body       string
	}{
		{"rate limited, bulk", &apierror.Error{Status: 429, Type: "throttled_error", Code: "throttled", Detail: "Request was throttled."}, "", "", 429, "1",
			`{"errorCode":"GENERAL","errorDetails":"Request was throttled."}`},
		{"rate limited, one flag, the check's Retry-After kept", &apierror.Error{Status: 429, Type: "throttled_error", Code: "throttled", Detail: "Slow down."}, "my-flag", "7", 429, "7",
			`{"key":"my-flag","errorCode":"GENERAL","errorDetails":"Slow down."}`},
		{"body too large", apierror.TooLarge("The request body is over 20 MB."), "", "", 413, "",
			`{"errorCode":"GENERAL","errorDetails":"The request body is over 20 MB."}`},
		{"an internal error is not shown", io.ErrUnexpectedEOF, "", "", 500, "",
			`{"errorCode":"GENERAL","errorDetails":"A server error occurred."}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			if tc.key != "" {
				ctx.SetUserValue("key", tc.key)
			}
			if tc.preset != "" {
				ctx.Response.Header.Set("Retry-After", tc.preset)
			}
			ofrep.WriteError(&ctx, log, tc.err)
			got := []string{strconv.Itoa(ctx.Response.StatusCode()), string(ctx.Response.Header.Peek("Retry-After")), string(ctx.Response.Body())}
			if diff := cmp.Diff([]string{strconv.Itoa(tc.status), tc.retryAfter, tc.body}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestRuntimeSelection: OFREP leaves out the flags of another runtime, told from the headers
// as /flags tells it, and counts a request they tell nothing of as a server's.
func TestRuntimeSelection(t *testing.T) {
	e := newEnv(t, false, 0)
	on := []byte(`{"groups":[{"properties":[],"rollout_percentage":100}]}`)
	snap := snapshot(2, &syncpb.Flag{Id: 20, Key: "browser-only", Active: true, Version: 1, Filters: on, EvaluationRuntime: "client"},
		&syncpb.Flag{Id: 21, Key: "backend-only", Active: true, Version: 1, Filters: on, EvaluationRuntime: "server"})
	if err := e.holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{snap}}); err != nil {
		t.Fatal(err)
	}
	auth := "Authorization: Bearer " + token
	keys := func(headers ...string) map[string]bool {
		t.Helper()
		a := e.do("POST", "/ofrep/v1/evaluate/flags", ctxBody(`"targetingKey":"u"`), append(headers, auth)...)
		if a.status != 200 {
			t.Fatalf("%d %s", a.status, a.raw)
		}
		out := map[string]bool{}
		for _, f := range a.body["flags"].([]any) {
			out[f.(map[string]any)["key"].(string)] = true
		}
		return out
	}
	if k := keys(); !k["backend-only"] || k["browser-only"] || !k["static-on"] {
		t.Errorf("no headers (a server): %v", k)
	}
	if k := keys("Origin: https://shop.example"); k["backend-only"] || !k["browser-only"] || !k["static-on"] {
		t.Errorf("a browser: %v", k)
	}
	if a := e.do("POST", "/ofrep/v1/evaluate/flags/backend-only", ctxBody(`"targetingKey":"u"`), auth, "User-Agent: Mozilla/5.0"); a.status != 404 {
		t.Errorf("a server flag asked by a browser: %d %s", a.status, a.raw)
	}
	if a := e.do("POST", "/ofrep/v1/evaluate/flags/backend-only", ctxBody(`"targetingKey":"u"`), auth); a.status != 200 || a.body["value"] != true {
		t.Errorf("a server flag asked by a server: %d %s", a.status, a.raw)
	}
}

package httpapi_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/admit"
	"github.com/flagedge/flagedge/edge/cache"
	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/edge/geocache"
	"github.com/flagedge/flagedge/edge/httpapi"
	"github.com/flagedge/flagedge/edge/ofrep"
	"github.com/flagedge/flagedge/edge/reqbody"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/geoip"
	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/shared/clientip"
	"github.com/flagedge/flagedge/shared/flags"
	"github.com/flagedge/flagedge/shared/syncpb"
)

const (
	token     = "phc_test" // the token in the lz-string fixtures
	readKey   = "phx_reader"
	writeOnly = "phx_annotations_only"
	secretKey = "phs_secret"

	otherToken  = "phc_second"
	otherReader = "phx_other_reader"
	otherSecret = "phs_other"
)

func sum(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// testSnapshot is a project whose flags need only what requests carry.
func testSnapshot() *syncpb.ProjectSnapshot {
	f := func(id int64, key string, active bool, filters string) *syncpb.Flag {
		return &syncpb.Flag{Id: id, Key: key, Active: active, Version: 2, Filters: []byte(filters)}
	}
	return &syncpb.ProjectSnapshot{
		ProjectId: 7, Version: 3, ApiToken: token, SecretTokenSha256: sum(secretKey),
		ReadKeySha256: [][]byte{sum(readKey)}, OtherKeySha256: [][]byte{sum(writeOnly)},
		GroupTypes: map[int32]string{0: "company"},
		Flags: []*syncpb.Flag{
			f(1, "everyone", true, `{"groups": [{"rollout_percentage": 100}], "payloads": {"true": "{\"a\": 1}"}}`),
			f(2, "example-emails", true, `{"groups": [{"properties": [{"key": "email", "value": "@example.com", "operator": "icontains"}]}]}`),
			f(3, "off", false, `{"groups": [{}]}`),
			f(4, "nobody", true, `{"groups": [{"rollout_percentage": 0}]}`),
			f(5, "mv", true, `{"groups": [{"variant": "blue"}], "multivariate": {"variants": [{"key": "blue", "rollout_percentage": 50}, {"key": "red", "rollout_percentage": 50}]}, "payloads": {"blue": {"color": "#00f"}}}`),
			f(6, "french", true, `{"groups": [{"properties": [{"key": "$geoip_country_code", "value": "FR"}]}]}`),
			f(8, "pro-cohort", true, `{"groups": [{"properties": [{"key": "id", "value": 9, "type": "cohort", "operator": "in"}]}]}`),
			f(7, "company-flag", true, `{"aggregation_group_type_index": 0, "groups": [{"properties": [{"key": "plan", "value": "enterprise", "type": "group", "group_type_index": 0}]}]}`),
		},
		Cohorts: []*syncpb.Cohort{{Id: 9, Filters: []byte(`{"properties": {"type": "AND", "values": [{"key": "plan", "value": "pro", "type": "person"}]}}`)}},
	}
}

type env struct {
	t       testing.TB
	holder  *state.Holder
	handler fasthttp.RequestHandler
	api     *httpapi.Server
	spool   *spool.Spool
}

func newEnv(t testing.TB, ready bool) *env { return newLimitedEnv(t, ready, limits{}) }

// limits are the bounds on hostile traffic an env's edge applies; the zero value applies none.
type limits struct {
	budget   *reqbody.Budget
	limiter  *admit.Limiter
	ips      *clientip.Resolver
	refusals *admit.Refusals
	registry *prometheus.Registry
	ofrep    bool // serve the OFREP routes too
}

func newLimitedEnv(t testing.TB, ready bool, l limits) *env {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := state.NewHolder("", log, nil)
	if ready {
		if err := holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{testSnapshot(), otherSnapshot()}, InitialSyncDone: true}); err != nil {
			t.Fatal(err)
		}
	}
	reader, err := geoip.Open(geoiptest.MustWrite(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	locator, err := geocache.NewLocator(reader, 1000, cache.NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locator.Close)
	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	dec := decide.NewHandler(holder, nil, locator, l.ips, l.budget, l.limiter, log)
	var of *ofrep.Handler
	if l.ofrep {
		of = ofrep.New(ofrep.Config{State: holder, Decide: dec, Logger: log})
	}
	api := httpapi.New(httpapi.Config{State: holder, Decide: dec, OFREP: of,
		Capture: capture.NewHandler(holder, sp, locator, l.ips, l.budget, l.limiter, nil, log, nil), Logger: log,
		Limiter: l.limiter, IPs: l.ips, Refusals: l.refusals, Registry: l.registry})
	return &env{t: t, holder: holder, handler: api.Handler(), api: api, spool: sp}
}

// testConns are the edge's connection settings in tests.
var testConns = httpapi.ConnConfig{HeaderTimeout: 5 * time.Second, BodyTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
	IdleTimeout: 60 * time.Second, MaxHeaderBytes: 8 << 10}

// serve runs e's API on a real server on 127.0.0.1 with connection settings c and returns
// its address.
func (e *env) serve(c httpapi.ConnConfig, maxConnsPerAddr int) string {
	e.t.Helper()
	srv := e.api.NewFastHTTPServer(c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	go srv.Serve(httpapi.Listen(ln, maxConnsPerAddr, nil))
	e.t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// otherSnapshot is another project, for checks that one project's credentials do not reach
// another's.
func otherSnapshot() *syncpb.ProjectSnapshot {
	return &syncpb.ProjectSnapshot{ProjectId: 8, Version: 1, ApiToken: otherToken, SecretTokenSha256: sum(otherSecret),
		ReadKeySha256: [][]byte{sum(otherReader)}, Flags: []*syncpb.Flag{{Id: 90, Key: "other-flag", Active: true, Version: 1,
			Filters: []byte(`{"groups": [{"rollout_percentage": 100}], "payloads": {"true": "1"}}`)}}}
}

type resp struct {
	status int
	header *fasthttp.ResponseHeader
	body   []byte
	json   map[string]any
}

// call runs one request through the handler; headers are "Name: value" strings.
func (e *env) call(method, uri string, body []byte, headers ...string) resp {
	e.t.Helper()
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	req.SetBody(body)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1234}, nil)
	e.handler(&ctx)
	out := resp{status: ctx.Response.StatusCode(), header: &ctx.Response.Header, body: append([]byte(nil), ctx.Response.Body()...)}
	if len(out.body) > 0 && out.body[0] == '{' {
		if err := json.Unmarshal(out.body, &out.json); err != nil {
			e.t.Fatalf("%s %s: invalid JSON %s: %v", method, uri, out.body, err)
		}
	}
	return out
}

func (e *env) decide(uri string, body any, headers ...string) resp {
	e.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.call("POST", uri, raw, headers...)
}

func wantError(t *testing.T, r resp, status int, code string) {
	t.Helper()
	if r.status != status || r.json["code"] != code || r.json["type"] == nil || r.json["detail"] == nil {
		t.Errorf("got %d %s, want %d %s", r.status, r.body, status, code)
	}
}

func TestDecideVersions(t *testing.T) {
	e := newEnv(t, true)
	req := map[string]any{"api_key": token, "distinct_id": "user-1", "person_properties": map[string]any{"email": "Bob@Example.com"}}

	v3 := e.decide("/decide/?v=3", req)
	if v3.status != 200 {
		t.Fatalf("v3: %d %s", v3.status, v3.body)
	}
	wantFlags := map[string]any{"everyone": true, "example-emails": true, "nobody": false, "mv": "blue", "french": false,
		"company-flag": false, "pro-cohort": false}
	if diff := cmp.Diff(wantFlags, v3.json["featureFlags"]); diff != "" {
		t.Errorf("v3 featureFlags (-want +got):\n%s", diff)
	}
	wantPayloads := map[string]any{"everyone": `{"a": 1}`, "mv": map[string]any{"color": "#00f"}}
	if diff := cmp.Diff(wantPayloads, v3.json["featureFlagPayloads"]); diff != "" {
		t.Errorf("v3 payloads (-want +got):\n%s", diff)
	}
	for k, want := range map[string]any{"errorComputingFlags": false, "errorsWhileComputingFlags": false, "isAuthenticated": false,
		"config": map[string]any{"enable_collect_everything": true}, "editorParams": map[string]any{},
		"supportedCompression": []any{"gzip", "gzip-js"}, "siteApps": []any{}, "sessionRecording": false} {
		if diff := cmp.Diff(want, v3.json[k]); diff != "" {
			t.Errorf("v3 %s (-want +got):\n%s", k, diff)
		}
	}

	v2 := e.decide("/decide?v=2", req)
	if diff := cmp.Diff(map[string]any{"everyone": true, "example-emails": true, "mv": "blue"}, v2.json["featureFlags"]); diff != "" {
		t.Errorf("v2 (-want +got):\n%s", diff)
	}
	if _, ok := v2.json["featureFlagPayloads"]; ok {
		t.Error("v2 has payloads")
	}
	v1 := e.decide("/decide/", req)
	if diff := cmp.Diff([]any{"everyone", "example-emails", "mv"}, v1.json["featureFlags"]); diff != "" {
		t.Errorf("v1 (-want +got):\n%s", diff)
	}

	for _, uri := range []string{"/flags/?v=2", "/flags", "/decide/?v=4", "/flags/?v=2&config=true"} {
		r := e.decide(uri, req)
		fl, ok := r.json["flags"].(map[string]any)
		if r.status != 200 || !ok {
			t.Fatalf("%s: %d %s", uri, r.status, r.body)
		}
		if _, ok := fl["off"]; ok {
			t.Errorf("%s: inactive flag listed", uri)
		}
		wantMV := map[string]any{"key": "mv", "enabled": true, "variant": "blue",
			"reason":   map[string]any{"code": "condition_match", "condition_index": 0.0, "description": "Matched condition set 1"},
			"metadata": map[string]any{"id": 5.0, "version": 2.0, "snapshot_version": 3.0, "description": nil, "payload": `{"color":"#00f"}`}}
		if diff := cmp.Diff(wantMV, fl["mv"]); diff != "" {
			t.Errorf("%s mv (-want +got):\n%s", uri, diff)
		}
		if got := fl["nobody"].(map[string]any)["reason"].(map[string]any)["code"]; got != "out_of_rollout_bound" {
			t.Errorf("%s: nobody's reason %v", uri, got)
		}
		if got := fl["everyone"].(map[string]any)["metadata"].(map[string]any)["payload"]; got != `{"a": 1}` {
			t.Errorf("%s: everyone's payload %v", uri, got)
		}
		if r.json["requestId"] == nil || r.json["evaluatedAt"] == nil || r.json["errorsWhileComputingFlags"] != false {
			t.Errorf("%s: envelope %s", uri, r.body)
		}
		_, hasConfig := r.json["config"]
		if wantConfig := strings.Contains(uri, "config=true") || strings.Contains(uri, "decide"); hasConfig != wantConfig {
			t.Errorf("%s: config present %v", uri, hasConfig)
		}
		if _, ok := r.json["quotaLimited"]; ok {
			t.Errorf("%s: quotaLimited sent", uri)
		}
	}
	for _, uri := range []string{"/decide/?v=3", "/decide/", "/flags/?v=2", "/flags/?v=1"} {
		if got := string(e.decide(uri, req).header.Peek("X-Flagedge-Snapshot-Version")); got != "3" {
			t.Errorf("%s: X-Flagedge-Snapshot-Version %q, want 3", uri, got)
		}
	}
	if r := e.decide("/flags/?v=1", req); r.json["featureFlags"] == nil || r.json["flags"] != nil {
		t.Errorf("flags v1 is the decide v3 shape: %s", r.body)
	}
}

func TestDecideRequestOptions(t *testing.T) {
	e := newEnv(t, true)
	only := e.decide("/decide/?v=3", map[string]any{"token": token, "distinct_id": 42, "flag_keys_to_evaluate": []string{"everyone", "nobody"}})
	if diff := cmp.Diff(map[string]any{"everyone": true, "nobody": false}, only.json["featureFlags"]); diff != "" {
		t.Errorf("flag_keys_to_evaluate with a numeric distinct_id (-want +got):\n%s", diff)
	}
	disabled := e.decide("/decide/?v=3", map[string]any{"$token": token, "distinct_id": "u", "disable_flags": true})
	if diff := cmp.Diff(map[string]any{}, disabled.json["featureFlags"]); diff != "" {
		t.Errorf("disable_flags: %s", diff)
	}
	// Groups: the group flag needs the group and its property.
	g := e.decide("/decide/?v=3", map[string]any{"token": token, "distinct_id": "u", "groups": map[string]any{"company": 99},
		"group_properties": map[string]any{"company": map[string]any{"plan": "enterprise"}}})
	if g.json["featureFlags"].(map[string]any)["company-flag"] != true {
		t.Errorf("group flag: %s", g.body)
	}
	// GeoIP: the first X-Forwarded-For entry; overrides win; geoip_disable turns it off.
	req := map[string]any{"token": token, "distinct_id": "u"}
	for _, tc := range []struct {
		name    string
		body    map[string]any
		headers []string
		want    bool
	}{
		{"paris", req, []string{"X-Forwarded-For: 203.0.113.9, 10.0.0.1"}, true},
		{"sydney", req, []string{"X-Forwarded-For: 198.51.100.1"}, false},
		{"socket address unknown", req, nil, false},
		{"disabled", map[string]any{"token": token, "distinct_id": "u", "geoip_disable": true}, []string{"X-Forwarded-For: 203.0.113.9"}, false},
		{"override wins", map[string]any{"token": token, "distinct_id": "u", "person_properties": map[string]any{"$geoip_country_code": "FR"}},
			[]string{"X-Forwarded-For: 198.51.100.1"}, true},
	} {
		r := e.decide("/decide/?v=3", tc.body, tc.headers...)
		if got := r.json["featureFlags"].(map[string]any)["french"]; got != tc.want {
			t.Errorf("%s: french = %v", tc.name, got)
		}
	}
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func TestDecideEncodings(t *testing.T) {
	e := newEnv(t, true)
	doc := []byte(`{"token":"` + token + `","distinct_id":"user-1","person_properties":{"email":"a@example.com"}}`)
	b64 := base64.StdEncoding.EncodeToString(doc)
	lz := lzFixture(t)
	for _, tc := range []struct {
		name    string
		method  string
		uri     string
		body    []byte
		headers []string
	}{
		{"json", "POST", "/decide/?v=3", doc, nil},
		{"gzip param", "POST", "/decide/?v=3&compression=gzip", gzipped(doc), nil},
		{"gzip-js param", "POST", "/decide/?v=3&compression=gzip-js", gzipped(doc), nil},
		{"gzip header", "POST", "/decide/?v=3", gzipped(doc), []string{"Content-Encoding: gzip"}},
		{"gzip magic", "POST", "/decide/?v=3", gzipped(doc), nil},
		{"base64", "POST", "/decide/?v=3&compression=base64", []byte(b64), nil},
		{"form", "POST", "/decide/?v=3", []byte("data=" + url.QueryEscape(b64)), []string{"Content-Type: application/x-www-form-urlencoded"}},
		{"get data", "GET", "/decide/?v=3&data=" + url.QueryEscape(b64), nil, nil},
		{"lz64", "POST", "/decide/?v=3&compression=lz64", []byte(lz), nil},
		{"lz64 form", "POST", "/decide/?v=3", []byte("compression=lz64&data=" + url.QueryEscape(lz)), []string{"Content-Type: application/x-www-form-urlencoded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.call(tc.method, tc.uri, tc.body, tc.headers...)
			if r.status != 200 || r.json["featureFlags"].(map[string]any)["example-emails"] != true {
				t.Errorf("%d %s", r.status, r.body)
			}
		})
	}
}

// lzFixture returns a /decide body compressed by the npm package lz-string 1.5.0 (posthog-js's
// lz64): {"api_key": "phc_test", "distinct_id": "user-1", "person_properties": {"email":
// "a@example.com"}}.
func lzFixture(t *testing.T) string {
	data, err := os.ReadFile("../../shared/event/testdata/lzstring_fixtures.json")
	if err != nil {
		t.Fatal(err)
	}
	var fixtures []struct{ Plain, LZ64 string }
	if err := json.Unmarshal(data, &fixtures); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fixtures[3].Plain, `"email":"a@example.com"`) {
		t.Fatalf("unexpected fixture %q", fixtures[3].Plain)
	}
	return fixtures[3].LZ64
}

func TestDecideErrors(t *testing.T) {
	e := newEnv(t, true)
	wantError(t, e.decide("/decide/?v=3", map[string]any{"distinct_id": "u"}), 401, "no_api_key")
	wantError(t, e.decide("/decide/?v=3", map[string]any{"api_key": "phc_nope", "distinct_id": "u"}), 401, "invalid_api_key")
	wantError(t, e.decide("/decide/?v=3", map[string]any{"api_key": token}), 400, "missing_distinct_id")
	wantError(t, e.decide("/decide/?v=3", map[string]any{"api_key": token, "distinct_id": ""}), 400, "missing_distinct_id")
	wantError(t, e.call("POST", "/decide/?v=3", []byte(`{"api_key": `)), 400, "invalid_payload")
	wantError(t, e.call("POST", "/decide/?v=3", []byte(`%%% not json`)), 400, "invalid_payload")
	wantError(t, e.call("POST", "/decide/?v=3", []byte(`[1, 2]`)), 400, "invalid_payload")
	wantError(t, e.call("POST", "/decide/?v=3", []byte("\x1f\x8bbroken"), "Content-Encoding: gzip"), 400, "invalid_payload")
	big := `{"api_key":"` + token + `","distinct_id":"u","person_properties":{"x":"` + strings.Repeat("a", 2<<20) + `"}}`
	wantError(t, e.call("POST", "/decide/?v=3", []byte(big)), 413, "request_too_large")
	wantError(t, e.call("PUT", "/decide/", nil), 405, "method_not_allowed")
	wantError(t, e.call("GET", "/nothing", nil), 404, "not_found")

	notReady := newEnv(t, false)
	wantError(t, notReady.decide("/decide/?v=3", map[string]any{"api_key": token, "distinct_id": "u"}), 503, "fetch_team_fail")
	if r := notReady.call("GET", "/_ready", nil); r.status != 503 {
		t.Errorf("ready without a snapshot: %d", r.status)
	}
	if r := e.call("GET", "/_ready", nil); r.status != 200 {
		t.Errorf("not ready with a snapshot: %d", r.status)
	}
}

func TestDefinitions(t *testing.T) {
	e := newEnv(t, true)
	path := "/flags/definitions?token=" + token
	wantError(t, e.call("GET", path, nil), 401, "not_authenticated")
	wantError(t, e.call("GET", path, nil, "Authorization: Bearer phx_unknown"), 401, "invalid_personal_api_key")
	wantError(t, e.call("GET", path, nil, "Authorization: Bearer phs_wrong"), 401, "invalid_personal_api_key")
	wantError(t, e.call("GET", path, nil, "Authorization: Bearer "+writeOnly), 403, "permission_denied")
	wantError(t, e.call("GET", "/flags/definitions", nil, "Authorization: Bearer "+readKey), 401, "no_api_key")
	wantError(t, e.call("GET", "/flags/definitions?token=phc_other", nil, "Authorization: Bearer "+readKey), 401, "invalid_api_key")

	for _, key := range []string{readKey, secretKey} {
		for _, p := range []string{path, "/api/feature_flag/local_evaluation/?token=" + token} {
			r := e.call("GET", p, nil, "Authorization: Bearer "+key)
			if r.status != 200 || len(r.json["flags"].([]any)) != 8 {
				t.Fatalf("%s with %s: %d %s", p, key, r.status, r.body)
			}
			etag := string(r.header.Peek("ETag"))
			if got := string(r.header.Peek("X-Flagedge-Snapshot-Version")); got != "3" {
				t.Errorf("%s: X-Flagedge-Snapshot-Version %q, want 3", p, got)
			}
			if !strings.HasPrefix(etag, `W/"`) || len(etag) != len(`W/"0123456789abcdef"`) || string(r.header.Peek("Cache-Control")) != "private, must-revalidate" {
				t.Errorf("headers: ETag %q Cache-Control %q", etag, r.header.Peek("Cache-Control"))
			}
			notModified := e.call("GET", p, nil, "Authorization: Bearer "+key, "If-None-Match: "+etag)
			if notModified.status != 304 || len(notModified.body) != 0 {
				t.Errorf("If-None-Match: %d %q", notModified.status, notModified.body)
			}
			if r := e.call("GET", p, nil, "Authorization: Bearer "+key, `If-None-Match: W/"0000000000000000"`); r.status != 200 {
				t.Errorf("stale ETag: %d", r.status)
			}
		}
	}
	withCohorts := e.call("GET", path+"&send_cohorts", nil, "Authorization: Bearer "+readKey)
	if c := withCohorts.json["cohorts"].(map[string]any); c["9"] == nil {
		t.Errorf("send_cohorts: %s", withCohorts.body)
	}
	if diff := cmp.Diff(map[string]any{"0": "company"}, withCohorts.json["group_type_mapping"]); diff != "" {
		t.Error(diff)
	}

	rc := "/api/projects/@current/feature_flags/everyone/remote_config?token=" + token
	if r := e.call("GET", rc, nil, "Authorization: Bearer "+secretKey); r.status != 200 || string(r.body) != `"{\"a\": 1}"` {
		t.Errorf("remote config: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/api/projects/7/feature_flags/mv/remote_config?token="+token, nil, "Authorization: Bearer "+secretKey); r.status != 200 || string(r.body) != "null" {
		t.Errorf("remote config without a true payload: %d %s", r.status, r.body)
	}
	wantError(t, e.call("GET", "/api/projects/@current/feature_flags/missing/remote_config?token="+token, nil, "Authorization: Bearer "+secretKey), 404, "not_found")
	wantError(t, e.call("GET", "/api/projects/8/feature_flags/everyone/remote_config?token="+token, nil, "Authorization: Bearer "+secretKey), 404, "not_found")
	wantError(t, e.call("GET", rc, nil), 401, "not_authenticated")
}

func TestBrowserEndpoints(t *testing.T) {
	e := newEnv(t, true)
	pre := e.call("OPTIONS", "/decide/", nil, "Origin: https://app.example.com", "Access-Control-Request-Headers: content-type")
	if pre.status != 200 || string(pre.header.Peek("Access-Control-Allow-Origin")) != "https://app.example.com" ||
		!strings.Contains(string(pre.header.Peek("Access-Control-Allow-Methods")), "POST") ||
		string(pre.header.Peek("Access-Control-Allow-Headers")) != "content-type" {
		t.Errorf("preflight: %d %s", pre.status, pre.header.String())
	}
	r := e.decide("/decide/?v=3", map[string]any{"token": token, "distinct_id": "u"}, "Origin: https://app.example.com")
	if string(r.header.Peek("Access-Control-Allow-Origin")) != "https://app.example.com" || string(r.header.Peek("Access-Control-Allow-Credentials")) != "true" {
		t.Errorf("CORS on POST: %s", r.header.String())
	}
	cfg := e.call("GET", "/array/"+token+"/config", nil)
	if cfg.status != 200 || cfg.json["token"] != token || cmp.Diff([]any{"gzip", "gzip-js"}, cfg.json["supportedCompression"]) != "" {
		t.Errorf("config: %d %s", cfg.status, cfg.body)
	}
	js := e.call("GET", "/array/"+token+"/config.js", nil)
	if js.status != 200 || !strings.Contains(string(js.body), `window._POSTHOG_REMOTE_CONFIG["`+token+`"]`) ||
		string(js.header.ContentType()) != "application/javascript" {
		t.Errorf("config.js: %d %s", js.status, js.body)
	}
	wantError(t, e.call("GET", "/array/phc_unknown/config", nil), 404, "not_found")
	if m := e.call("GET", "/metrics", nil); m.status != 200 || !strings.Contains(string(m.body), `flagedge_edge_http_requests_total{code="200",route="decide"}`) {
		t.Errorf("metrics: %s", m.body)
	}
}

// TestOversizedBodyIs413 sends the headers and the first 8 KiB of a request whose body is
// over the limit to a real server: it answers 413 in the API's shape at once, without
// waiting for (or reading) the rest. (fasthttp reads 8 KiB of every body before handlers.)
func TestOversizedBodyIs413(t *testing.T) {
	addr := newEnv(t, true).serve(testConns, 0)
	for _, path := range []string{"/batch/", "/decide/?v=3"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, capture.MaxBodyBytes+1, strings.Repeat(" ", 8<<10))
		var resp fasthttp.Response
		if err := resp.Read(bufio.NewReader(conn)); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		conn.Close()
		if resp.StatusCode() != 413 || !strings.Contains(string(resp.Body()), `"code":"request_too_large"`) ||
			string(resp.Header.Peek("Access-Control-Allow-Origin")) != "https://app.example" {
			t.Errorf("%s: %d %s %s", path, resp.StatusCode(), resp.Header.Peek("Access-Control-Allow-Origin"), resp.Body())
		}
	}
}

// TestDecidePropertiesOfConsecutiveRequests sends requests with property values of every
// JSON kind, one after the other through the same handler (which reuses its memory for them
// across requests), and compares each answer with the engine's for the same properties
// decoded on their own.
func TestDecidePropertiesOfConsecutiveRequests(t *testing.T) {
	filters := map[string]string{
		"older":      `{"groups": [{"properties": [{"key": "age", "value": 30, "operator": "gt"}]}]}`,
		"pro":        `{"groups": [{"properties": [{"key": "plan", "value": "pro"}]}]}`,
		"tagged":     `{"groups": [{"properties": [{"key": "tags", "value": "b"}]}]}`,
		"nested":     `{"groups": [{"properties": [{"key": "address", "operator": "is_set", "value": "is_set"}]}]}`,
		"beta":       `{"groups": [{"properties": [{"key": "beta", "value": true}]}]}`,
		"big-co":     `{"aggregation_group_type_index": 0, "groups": [{"properties": [{"key": "seats", "value": 50, "operator": "gte", "type": "group", "group_type_index": 0}]}]}`,
		"paid-team":  `{"aggregation_group_type_index": 1, "groups": [{"properties": [{"key": "plan", "value": "paid", "type": "group", "group_type_index": 1}]}]}`,
		"old-client": `{"groups": [{"properties": [{"key": "version", "value": "2.0.0", "operator": "semver_lt"}]}]}`,
	}
	pb := &syncpb.ProjectSnapshot{ProjectId: 1, Version: 1, ApiToken: token, GroupTypes: map[int32]string{0: "company", 1: "team"}}
	project := flags.Project{GroupTypes: map[int]string{0: "company", 1: "team"}}
	id := int64(0)
	for key, f := range filters {
		id++
		pb.Flags = append(pb.Flags, &syncpb.Flag{Id: id, Key: key, Active: true, Version: 1, Filters: []byte(f)})
		project.Flags = append(project.Flags, flags.FlagDefinition{ID: id, Key: key, Active: true, Version: 1, Filters: json.RawMessage(f)})
	}
	snap, err := flags.Compile(project)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := state.NewHolder("", log, nil)
	if err := holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{pb}, InitialSyncDone: true}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, holder: holder, handler: httpapi.New(httpapi.Config{State: holder, Decide: decide.NewHandler(holder, nil, nil, nil, nil, nil, log), Logger: log}).Handler()}
	pick := func(i int, options ...any) any { return options[i%len(options)] }
	for i := range 300 {
		person := map[string]any{"age": pick(i, 25, 31, "40", 30.5, nil), "plan": pick(i/2, "pro", "free", 7, false),
			"tags": pick(i/3, []any{"a", "b"}, []any{"c"}, "b", []any{}), "address": pick(i/5, map[string]any{"city": "Paris"}, nil, "x"),
			"beta": pick(i/7, true, "true", false, 1), "version": pick(i/11, "1.9.9", "2.0.0", "v10", 2)}
		groupProps := map[string]any{"company": map[string]any{"seats": pick(i/13, 10, 50, "60", nil)}}
		if i%3 == 0 {
			groupProps["company"] = map[string]any{"name": "no seats"}
		}
		if i%4 != 0 {
			groupProps["team"] = map[string]any{"plan": pick(i/17, "paid", "free")}
		}
		body := map[string]any{"token": token, "distinct_id": fmt.Sprint("user-", i), "person_properties": person,
			"groups": map[string]any{"company": "acme", "team": "core"}, "group_properties": groupProps}
		raw, _ := json.Marshal(body)
		var decoded struct {
			Person flags.Properties            `json:"person_properties"`
			Groups map[string]flags.Properties `json:"group_properties"`
		}
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{}
		for _, r := range snap.Evaluate(&flags.Request{DistinctID: fmt.Sprint("user-", i), PersonProperties: decoded.Person,
			Groups: map[string]string{"company": "acme", "team": "core"}, GroupProperties: decoded.Groups}, nil) {
			want[r.Key] = r.Value()
		}
		got := e.call("POST", "/decide/?v=3", raw)
		if diff := cmp.Diff(want, got.json["featureFlags"]); diff != "" {
			t.Fatalf("request %d %s (-engine +edge):\n%s", i, raw, diff)
		}
	}
}

// writeCounter counts the writes made to the connections it accepts.
type writeCounter struct {
	net.Listener
	writes *atomic.Int64
}

func (l writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return countedConn{c, l.writes}, err
}

type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestLargeAnswerInOneWrite: an answer of many flags (here 19 KiB; 27 KiB at 1,000 flags)
// leaves in one write system call, headers included. With fasthttp's 4 KiB default buffer it
// took two, which cost the edge an eighth of its kernel time at 1,000 flags.
func TestLargeAnswerInOneWrite(t *testing.T) {
	e := newEnv(t, false)
	snap := testSnapshot()
	snap.Flags = nil
	for i := range 600 {
		snap.Flags = append(snap.Flags, &syncpb.Flag{Id: int64(i + 1), Key: fmt.Sprintf("an-experiment-flag-%04d", i), Active: true, Version: 1,
			Filters: []byte(`{"groups": [{"rollout_percentage": 100}]}`)})
	}
	if err := e.holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{snap}, InitialSyncDone: true}); err != nil {
		t.Fatal(err)
	}
	srv := e.api.NewFastHTTPServer(testConns, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	go srv.Serve(writeCounter{ln, &writes})
	t.Cleanup(func() { srv.Shutdown() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	for range 3 {
		before := writes.Load()
		body := `{"token": "` + token + `", "distinct_id": "user-1"}`
		fmt.Fprintf(conn, "POST /decide/?v=3 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		var resp fasthttp.Response
		if err := resp.Read(br); err != nil {
			t.Fatal(err)
		}
		if n := len(resp.Body()); resp.StatusCode() != 200 || n < 16<<10 {
			t.Fatalf("%d, %d bytes: %.200s", resp.StatusCode(), n, resp.Body())
		}
		if n := writes.Load() - before; n != 1 {
			t.Fatalf("the answer of %d bytes took %d writes", len(resp.Body()), n)
		}
	}
}

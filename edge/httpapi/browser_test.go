package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/edge/jsbundle"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// TestCORSOnEveryAnswer: whatever the edge answers a page on another origin (success, error,
// unknown path, wrong method, preflight on any path, bundles, health), the browser may read it.
func TestCORSOnEveryAnswer(t *testing.T) {
	e := newEnv(t, true)
	const origin = "https://shop.example:8443"
	decideBody := []byte(`{"token":"` + token + `","distinct_id":"u"}`)
	for _, tc := range []struct {
		name, method, uri string
		body              []byte
		status            int
	}{
		{"decide", "POST", "/decide/?v=3", decideBody, 200},
		{"decide without token", "POST", "/decide/", []byte(`{"distinct_id":"u"}`), 401},
		{"flags bad body", "POST", "/flags/?v=2", []byte(`[`), 400},
		{"capture", "POST", "/e/", []byte(`{"token":"` + token + `","event":"x","distinct_id":"u"}`), 200},
		{"unknown path", "GET", "/no/such/path", nil, 404},
		{"wrong method", "PUT", "/decide/", nil, 405},
		{"preflight, known path", "OPTIONS", "/e/", nil, 200},
		{"preflight, unknown path", "OPTIONS", "/no/such/path", nil, 200},
		{"bundle", "GET", "/static/array.js", nil, 200},
		{"missing bundle", "GET", "/static/toolbar.js", nil, 404},
		{"other version's bundle", "GET", "/static/0.0.1/array.js", nil, 404},
		{"remote config of an unknown token", "GET", "/array/phc_nope/config.js", nil, 404},
		{"early access features", "GET", "/api/early_access_features/?token=" + token, nil, 200},
		{"early access features without token", "GET", "/api/early_access_features/", nil, 401},
		{"surveys", "GET", "/api/surveys/?token=" + token, nil, 200},
		{"definitions without key", "GET", "/flags/definitions?token=" + token, nil, 401},
		{"health", "GET", "/_health", nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.call(tc.method, tc.uri, tc.body, "Origin: "+origin, "Access-Control-Request-Headers: content-type,traceparent")
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			got := map[string]string{}
			for _, h := range []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Access-Control-Expose-Headers", "Vary"} {
				got[h] = string(r.header.Peek(h))
			}
			want := map[string]string{"Access-Control-Allow-Origin": origin, "Access-Control-Allow-Credentials": "true",
				"Access-Control-Expose-Headers": "X-Flagedge-Snapshot-Version", "Vary": "Origin"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("CORS headers (-want +got):\n%s", diff)
			}
			if tc.method == "OPTIONS" {
				if m, h, a := string(r.header.Peek("Access-Control-Allow-Methods")), string(r.header.Peek("Access-Control-Allow-Headers")),
					string(r.header.Peek("Access-Control-Max-Age")); m != "GET, POST, OPTIONS" || h != "content-type,traceparent" || a != "86400" {
					t.Errorf("preflight: methods %q, headers %q, max age %q", m, h, a)
				}
			}
		})
	}
}

func TestCORSOrigin(t *testing.T) {
	e := newEnv(t, true)
	for _, tc := range []struct{ origin, want string }{
		{"", "*"},
		{"https://app.example.com", "https://app.example.com"},
		{"http://127.0.0.1:5173", "http://127.0.0.1:5173"},
		{"https://app.example.com/some/path?q=1", "https://app.example.com"},
		{"null", "*"},
		{"file://", "*"},
	} {
		t.Run(tc.origin, func(t *testing.T) {
			var headers []string
			if tc.origin != "" {
				headers = append(headers, "Origin: "+tc.origin)
			}
			r := e.call("GET", "/_health", nil, headers...)
			if got := string(r.header.Peek("Access-Control-Allow-Origin")); got != tc.want {
				t.Errorf("allow origin %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStaticBundles: the embedded posthog-js bundles, with their type, caching and encoding.
func TestStaticBundles(t *testing.T) {
	e := newEnv(t, false) // bundles need no snapshot
	for _, name := range jsbundle.Names() {
		a := jsbundle.Lookup(name)
		t.Run(name, func(t *testing.T) {
			r := e.call("GET", "/static/"+name, nil)
			if r.status != 200 || !bytes.Equal(r.body, a.Body) {
				t.Fatalf("%d, %d bytes, want %d", r.status, len(r.body), len(a.Body))
			}
			for h, want := range map[string]string{"Content-Type": "application/javascript; charset=utf-8",
				"Cache-Control": "public, max-age=3600", "ETag": a.ETag, "Access-Control-Allow-Origin": "*"} {
				if got := string(r.header.Peek(h)); got != want {
					t.Errorf("%s: %q, want %q", h, got, want)
				}
			}
		})
	}
	a := jsbundle.Lookup("array.js")
	for _, tc := range []struct {
		name, method, uri string
		headers           []string
		status            int
		cache, encoding   string
		body              []byte
	}{
		{"query string of lazy loads", "GET", "/static/array.js?v=" + jsbundle.Version, nil, 200, "public, max-age=3600", "", a.Body},
		{"trailing slash", "GET", "/static/array.js/", nil, 200, "public, max-age=3600", "", a.Body},
		{"versioned path", "GET", "/static/" + jsbundle.Version + "/array.js", nil, 200, "public, max-age=31536000, immutable", "", a.Body},
		{"gzip", "GET", "/static/array.js", []string{"Accept-Encoding: gzip, deflate, br"}, 200, "public, max-age=3600", "gzip", a.Body},
		{"revalidation", "GET", "/static/array.js", []string{"If-None-Match: " + a.ETag}, 304, "public, max-age=3600", "", nil},
		{"revalidation, weak list", "GET", "/static/array.js", []string{`If-None-Match: "x", W/` + a.ETag}, 304, "public, max-age=3600", "", nil},
		{"stale etag", "GET", "/static/array.js", []string{`If-None-Match: "x"`}, 200, "public, max-age=3600", "", a.Body},
		{"head", "HEAD", "/static/array.js", nil, 200, "public, max-age=3600", "", nil},
		{"unknown file", "GET", "/static/toolbar.js", nil, 404, "", "", nil},
		{"not a bundle", "GET", "/static/LICENSE", nil, 404, "", "", nil},
		{"another version", "GET", "/static/1.0.0/array.js", nil, 404, "", "", nil},
		{"post", "POST", "/static/array.js", nil, 405, "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.call(tc.method, tc.uri, nil, tc.headers...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %.200s", r.status, tc.status, r.body)
			}
			if tc.status >= 400 {
				return
			}
			if got := string(r.header.Peek("Cache-Control")); got != tc.cache {
				t.Errorf("Cache-Control %q, want %q", got, tc.cache)
			}
			if got := string(r.header.Peek("Content-Encoding")); got != tc.encoding {
				t.Errorf("Content-Encoding %q, want %q", got, tc.encoding)
			}
			body := r.body
			if tc.encoding == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if tc.method != "HEAD" && !bytes.Equal(body, tc.body) {
				t.Errorf("body: %d bytes, want %d", len(body), len(tc.body))
			}
		})
	}
}

func withBrowserConfig(cc *syncpb.ClientConfig) *syncpb.ProjectSnapshot {
	s := testSnapshot()
	s.Version++
	s.ClientConfig = cc
	s.EarlyAccessFeatures = []*syncpb.EarlyAccessFeature{
		{Id: "0190a0d8-0000-7000-8000-000000000001", Name: "Dark mode", Description: "Darker.", Stage: "beta",
			DocumentationUrl: "https://docs.example/dark", FlagKey: "dark-mode"},
		{Id: "0190a0d8-0000-7000-8000-000000000002", Name: "Rockets", Stage: "alpha", FlagKey: "rockets"},
		{Id: "0190a0d8-0000-7000-8000-000000000003", Name: "Unlinked", Stage: "beta"},
		{Id: "0190a0d8-0000-7000-8000-000000000004", Name: "Old", Stage: "archived", FlagKey: "old"},
	}
	return s
}

// TestEarlyAccessFeaturesFromSnapshot: the public list answers from the snapshot, by stage.
func TestEarlyAccessFeaturesFromSnapshot(t *testing.T) {
	e := newEnv(t, true)
	if err := e.holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{withBrowserConfig(nil)}}); err != nil {
		t.Fatal(err)
	}
	dark := map[string]any{"id": "0190a0d8-0000-7000-8000-000000000001", "name": "Dark mode", "description": "Darker.", "stage": "beta",
		"documentationUrl": "https://docs.example/dark", "flagKey": "dark-mode"}
	unlinked := map[string]any{"id": "0190a0d8-0000-7000-8000-000000000003", "name": "Unlinked", "description": "", "stage": "beta",
		"documentationUrl": "", "flagKey": nil}
	rockets := map[string]any{"id": "0190a0d8-0000-7000-8000-000000000002", "name": "Rockets", "description": "", "stage": "alpha",
		"documentationUrl": "", "flagKey": "rockets"}
	for _, tc := range []struct {
		name, query string
		want        []any
	}{
		{"beta by default", "", []any{dark, unlinked}},
		{"one stage", "&stage=alpha", []any{rockets}},
		{"several stages", "&stage=alpha&stage=beta", []any{dark, rockets, unlinked}},
		{"no such stage", "&stage=concept", []any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.call("GET", "/api/early_access_features/?token="+token+tc.query, nil)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if diff := cmp.Diff(map[string]any{"earlyAccessFeatures": tc.want}, r.json); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	wantError(t, e.call("GET", "/api/early_access_features/", nil), 401, "no_api_key")
	wantError(t, e.call("GET", "/api/early_access_features/?token=phc_unknown", nil), 401, "invalid_api_key")
	other := e.call("GET", "/api/early_access_features/?token="+otherToken, nil)
	if diff := cmp.Diff(map[string]any{"earlyAccessFeatures": []any{}}, other.json); diff != "" {
		t.Errorf("other project (-want +got):\n%s", diff)
	}
	wantError(t, newEnv(t, false).call("GET", "/api/early_access_features/?token="+token, nil), 503, "fetch_team_fail")
}

func TestSurveys(t *testing.T) {
	e := newEnv(t, true)
	r := e.call("GET", "/api/surveys/?token="+token, nil)
	if r.status != 200 || string(r.body) != `{"surveys":[]}` || string(r.header.ContentType()) != "application/json" {
		t.Errorf("%d %s", r.status, r.body)
	}
	wantError(t, e.call("GET", "/api/surveys/", nil), 401, "no_api_key")
	wantError(t, e.call("GET", "/api/surveys/?token=phc_unknown", nil), 401, "invalid_api_key")
}

// configMembers are the members of the client configuration every answer must agree on.
var configMembers = []string{"config", "editorParams", "isAuthenticated", "supportedCompression", "sessionRecording",
	"capturePerformance", "autocapture_opt_out", "autocaptureExceptions", "heatmaps", "siteApps", "surveys", "defaultIdentifiedOnly"}

// TestClientConfigPerProject: a project's switches reach /decide (every version), /flags with
// config and the remote config, identically.
func TestClientConfigPerProject(t *testing.T) {
	base := map[string]any{"config": map[string]any{"enable_collect_everything": true}, "editorParams": map[string]any{},
		"isAuthenticated": false, "supportedCompression": []any{"gzip", "gzip-js"}, "sessionRecording": false,
		"capturePerformance": false, "autocapture_opt_out": false, "autocaptureExceptions": false, "heatmaps": false,
		"siteApps": []any{}, "surveys": false, "defaultIdentifiedOnly": true}
	with := func(changes map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range changes {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name string
		cc   *syncpb.ClientConfig
		want map[string]any
	}{
		{"older control plane (none sent)", nil, base},
		{"defaults", &syncpb.ClientConfig{}, base},
		{"autocapture off", &syncpb.ClientConfig{AutocaptureOptOut: true}, with(map[string]any{"autocapture_opt_out": true})},
		{"everything on", &syncpb.ClientConfig{AutocaptureOptOut: true, SessionRecordingOptIn: true, HeatmapsOptIn: true,
			CaptureConsoleLogOptIn: true, CapturePerformanceOptIn: true, AutocaptureExceptionsOptIn: true},
			with(map[string]any{"autocapture_opt_out": true, "heatmaps": true, "autocaptureExceptions": true,
				"capturePerformance": map[string]any{"network_timing": true, "web_vitals": false, "web_vitals_allowed_metrics": nil}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, true)
			if err := e.holder.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{withBrowserConfig(tc.cc)}}); err != nil {
				t.Fatal(err)
			}
			req := map[string]any{"token": token, "distinct_id": "u"}
			answers := map[string]map[string]any{}
			for _, uri := range []string{"/decide/", "/decide/?v=2", "/decide/?v=3", "/decide/?v=4", "/flags/?v=2&config=true", "/flags/?config=true"} {
				answers[uri] = e.decide(uri, req).json
			}
			answers["/array/config"] = e.call("GET", "/array/"+token+"/config", nil).json
			js := string(e.call("GET", "/array/"+token+"/config.js", nil).body)
			start, end := strings.Index(js, "config: "), strings.Index(js, ",\n    siteApps: []")
			if start < 0 || end < start {
				t.Fatalf("config.js: %s", js)
			}
			var fromJS map[string]any
			if err := json.Unmarshal([]byte(js[start+len("config: "):end]), &fromJS); err != nil {
				t.Fatalf("config.js: %v", err)
			}
			answers["/array/config.js"] = fromJS
			for where, answer := range answers {
				got := map[string]any{}
				for _, k := range configMembers {
					if v, ok := answer[k]; ok {
						got[k] = v
					}
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", where, diff)
				}
			}
			if v2 := e.decide("/flags/?v=2", req).json; v2["autocapture_opt_out"] != nil {
				t.Errorf("/flags?v=2 without config carries config: %v", v2)
			}
		})
	}
}

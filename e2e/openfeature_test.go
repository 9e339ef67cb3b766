package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/open-feature/go-sdk/openfeature"
)

// ofCase is one evaluation through an OpenFeature SDK: the typed getter, the flag, the
// caller's default and the context's attributes besides the targeting key.
type ofCase struct {
	Kind    string         `json:"kind"` // boolean, string, number, object
	Key     string         `json:"key"`
	Default any            `json:"default"`
	User    string         `json:"user"`
	Attrs   map[string]any `json:"attrs"`
}

// ofDetails is what an SDK's get…Details answered, in the fields every SDK has.
type ofDetails struct {
	Value     any    `json:"value"`
	Reason    string `json:"reason"`
	Variant   string `json:"variant"`
	ErrorCode string `json:"errorCode"`
}

// openFeatureFlags creates one flag of each kind OFREP maps and waits for them at the edges.
func openFeatureFlags(s *stack, edges ...*edge) (ids map[string]int64) {
	s.t.Helper()
	everyone := []any{map[string]any{"rollout_percentage": 100}}
	ids = map[string]int64{}
	ids["of-static"] = s.createFlag(map[string]any{"key": "of-static", "filters": map[string]any{"groups": everyone}})
	ids["of-pro"] = s.createFlag(map[string]any{"key": "of-pro", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "plan", "value": []any{"pro"}, "operator": "exact", "type": "person"}}, "rollout_percentage": 100}}}})
	s.createFlag(map[string]any{"key": "of-half", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 50}}}})
	s.createFlag(map[string]any{"key": "of-experiment", "filters": map[string]any{"groups": everyone,
		"multivariate": map[string]any{"variants": []any{map[string]any{"key": "control", "rollout_percentage": 50}, map[string]any{"key": "test", "rollout_percentage": 50}}}}})
	s.createFlag(map[string]any{"key": "of-banner", "filters": map[string]any{"groups": everyone,
		"payloads": map[string]any{"true": `{"color": "blue", "size": 3}`}}})
	s.createFlag(map[string]any{"key": "of-retired", "active": false, "filters": map[string]any{"groups": everyone}})
	for _, e := range edges {
		waitFor(s.t, "the flags at "+e.url, func() bool { return len(featureFlags(s.decide(e, map[string]any{"distinct_id": "x"}))) == 5 })
	}
	return ids
}

// openFeatureCases are the evaluations every provider makes, with the answer expected; the
// split flags' values are those /flags gives the same person.
func openFeatureCases(t *testing.T, s *stack, e *edge) ([]ofCase, []ofDetails) {
	t.Helper()
	split := featureFlags(s.decide(e, map[string]any{"distinct_id": "of-user"}))
	half, _ := split["of-half"].(bool)
	experiment, _ := split["of-experiment"].(string)
	if experiment == "" {
		t.Fatalf("/flags: of-experiment %v", split["of-experiment"])
	}
	halfVariant := map[bool]string{true: "true", false: "false"}[half]
	pro, free := map[string]any{"plan": "pro"}, map[string]any{"plan": "free"}
	cases := []ofCase{
		{"boolean", "of-static", false, "of-user", nil},
		{"boolean", "of-pro", false, "of-user", pro},
		{"boolean", "of-pro", true, "of-user", free},
		{"boolean", "of-half", !half, "of-user", nil},
		{"string", "of-experiment", "none", "of-user", nil},
		{"object", "of-banner", map[string]any{"color": "none"}, "of-user", nil},
		{"boolean", "of-retired", true, "of-user", nil},
		{"boolean", "of-missing", true, "of-user", nil},
		{"string", "of-static", "fallback", "of-user", nil},
		{"number", "of-static", 7.0, "of-user", nil},
	}
	want := []ofDetails{
		{true, "STATIC", "true", ""},
		{true, "TARGETING_MATCH", "true", ""},
		{false, "DEFAULT", "false", ""},
		{half, "SPLIT", halfVariant, ""},
		{experiment, "SPLIT", experiment, ""},
		{map[string]any{"color": "blue", "size": 3.0}, "STATIC", "true", ""},
		{false, "DISABLED", "false", ""},
		{true, "ERROR", "", "FLAG_NOT_FOUND"},
		{"fallback", "ERROR", "", "TYPE_MISMATCH"},
		{7.0, "ERROR", "", "TYPE_MISMATCH"},
	}
	return cases, want
}

// nodeOpenFeature evaluates cases with @openfeature/server-sdk and @openfeature/ofrep-provider.
const nodeOpenFeature = `
const { OpenFeature } = require('@openfeature/server-sdk');
const { OFREPProvider } = require('@openfeature/ofrep-provider');
(async () => {
  await OpenFeature.setProviderAndWait(new OFREPProvider({ baseUrl: process.env.BASE,
    headers: [['Authorization', 'Bearer ' + process.env.TOKEN]] }));
  const client = OpenFeature.getClient();
  const getters = { boolean: 'getBooleanDetails', string: 'getStringDetails', number: 'getNumberDetails', object: 'getObjectDetails' };
  const out = [];
  for (const c of JSON.parse(process.env.CASES)) {
    const d = await client[getters[c.kind]](c.key, c.default, { targetingKey: c.user, ...(c.attrs || {}) });
    out.push({ value: d.value, reason: d.reason, variant: d.variant || '', errorCode: d.errorCode || '' });
  }
  process.stdout.write(JSON.stringify(out));
  await OpenFeature.close();
})().catch(e => { console.error(e); process.exit(1); });
`

func runNodeOpenFeature(t *testing.T, e *edge, token string, cases []ofCase) []ofDetails {
	t.Helper()
	out := node(t, nodeOpenFeature, "BASE="+e.url, "TOKEN="+token, "CASES="+string(mustJSON(t, cases)))
	var got []ofDetails
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	return got
}

// TestOpenFeatureProviders points the community OFREP providers at real edges: Node's
// server provider, a Go OpenFeature client, and the web provider in Chromium (with a change
// reaching the page over the change stream, and over polling from an edge without streams).
func TestOpenFeatureProviders(t *testing.T) {
	s := newStack(t)
	streaming := s.startEdge("ofrep-sse", "", true, "--ofrep-streams")
	polling := s.startEdge("ofrep-poll", "", true)
	ids := openFeatureFlags(s, streaming, polling)
	cases, want := openFeatureCases(t, s, streaming)
	changed := []ofCase{{"boolean", "of-pro", true, "of-user", map[string]any{"plan": "free"}}}

	// The server-side providers: Node's community one and the Go SDK's; each evaluates the
	// cases, then sees a change made through the management API (of-pro for everyone).
	providers := []struct {
		name string
		run  func(*testing.T, *edge, string, []ofCase) []ofDetails
	}{{"node", runNodeOpenFeature}, {"go", runGoOpenFeature}}
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			if diff := cmp.Diff(want, p.run(t, streaming, s.token, cases)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	s.patchFlag(ids["of-pro"], map[string]any{"filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	for _, e := range []*edge{streaming, polling} {
		waitFor(t, "the change at "+e.url, func() bool {
			return featureFlags(s.decide(e, map[string]any{"distinct_id": "of-user", "person_properties": map[string]any{"plan": "free"}}))["of-pro"] == true
		})
	}
	for _, p := range providers {
		t.Run(p.name+" sees the change", func(t *testing.T) {
			if diff := cmp.Diff([]ofDetails{{true, "STATIC", "true", ""}}, p.run(t, polling, s.token, changed)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	t.Run("browser", func(t *testing.T) { testOpenFeatureBrowser(t, s, streaming, polling, ids["of-static"]) })
}

// ofrepPage loads @openfeature/web-sdk and @openfeature/ofrep-web-provider as the ES modules
// the packages ship, through an import map (no bundler), from e2e/node/node_modules.
const ofrepPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>OFREP</title>
<script type="importmap">{"imports": {
  "@openfeature/core": "/m/@openfeature/core/dist/esm/index.js",
  "@openfeature/web-sdk": "/m/@openfeature/web-sdk/dist/esm/index.js",
  "@openfeature/ofrep-core": "/m/@openfeature/ofrep-web-provider/node_modules/@openfeature/ofrep-core/index.esm.js",
  "@openfeature/ofrep-web-provider": "/m/@openfeature/ofrep-web-provider/index.esm.js"}}</script>
<script type="module">
import { OpenFeature, ProviderEvents } from '@openfeature/web-sdk';
import { OFREPWebProvider } from '@openfeature/ofrep-web-provider';
// start connects one provider per domain: "sse" to the streaming edge, "poll" to the other.
window.start = async (domain, baseUrl, token, pollInterval) => {
  const log = window.ofrep[domain] = { requests: [], changes: [] };
  const provider = new OFREPWebProvider({
    baseUrl, pollInterval, cacheMode: 'disabled',
    headers: [['Authorization', 'Bearer ' + token]],
    fetchImplementation: async (req, init) => {
      const r = await fetch(req, init);
      log.requests.push({ status: r.status, ifNoneMatch: req.headers.get('If-None-Match') || '', at: Date.now() });
      return r;
    },
  });
  const client = OpenFeature.getClient(domain);
  client.addHandler(ProviderEvents.ConfigurationChanged, (d) => log.changes.push({ flags: d.flagsChanged, at: Date.now() }));
  await OpenFeature.setProviderAndWait(domain, provider);
  window.clients[domain] = client;
};
window.ofrep = {};
window.clients = {};
window.ready = true;
await OpenFeature.setContext({ targetingKey: 'of-user', plan: 'free' });
</script></head><body><p id="ready">OFREP</p></body></html>`

func testOpenFeatureBrowser(t *testing.T, s *stack, streaming, polling *edge, staticFlag int64) {
	node(t, "") // installs e2e/node's packages, which the page loads
	modules := http.StripPrefix("/m/", http.FileServer(http.Dir("node/node_modules")))
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/m/") {
			modules.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, ofrepPage)
	}))
	t.Cleanup(page.Close)
	ctx := newBrowser(t)
	await := func(what, js string) any {
		t.Helper()
		return value(t, ctx, what, chromedp.Evaluate[any](js, chromedp.EvalAwaitPromise))
	}
	run(t, ctx, "open the page", chromedp.Navigate(page.URL), chromedp.WaitVisible(chromedp.CSS("#ready")))
	waitFor(t, "the modules", func() bool { return await("ready", `window.ready === true`) == true })
	await("start the providers", fmt.Sprintf(`Promise.all([start('sse', %q, %q, 0), start('poll', %q, %q, 300)]).then(() => true)`,
		streaming.url, s.token, polling.url, s.token))

	details := func(domain, getter, key string, def any) ofDetails {
		t.Helper()
		js := fmt.Sprintf(`(() => { const d = window.clients[%q].%s(%q, %s);
			return JSON.stringify({ value: d.value, reason: d.reason, variant: d.variant || '', errorCode: d.errorCode || '' }); })()`,
			domain, getter, key, mustJSON(t, def))
		var d ofDetails
		if err := json.Unmarshal([]byte(await(key, js).(string)), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Bulk evaluation: every type from the one answer.
	for _, tc := range []struct {
		getter, key string
		def         any
		want        ofDetails
	}{
		{"getBooleanDetails", "of-static", false, ofDetails{true, "STATIC", "true", ""}},
		{"getBooleanDetails", "of-pro", false, ofDetails{true, "STATIC", "true", ""}}, // changed above: everyone
		{"getObjectDetails", "of-banner", map[string]any{}, ofDetails{map[string]any{"color": "blue", "size": 3.0}, "STATIC", "true", ""}},
		{"getBooleanDetails", "of-retired", true, ofDetails{false, "DISABLED", "false", ""}},
		{"getBooleanDetails", "of-missing", true, ofDetails{true, "ERROR", "", "FLAG_NOT_FOUND"}},
		{"getStringDetails", "of-static", "fallback", ofDetails{"fallback", "ERROR", "", "TYPE_MISMATCH"}},
	} {
		for _, domain := range []string{"sse", "poll"} {
			if diff := cmp.Diff(tc.want, details(domain, tc.getter, tc.key, tc.def)); diff != "" {
				t.Errorf("%s %s(%s) (-want +got):\n%s", domain, tc.getter, tc.key, diff)
			}
		}
	}
	if v := details("sse", "getStringDetails", "of-experiment", "none"); v.Reason != "SPLIT" || (v.Value != "control" && v.Value != "test") {
		t.Errorf("of-experiment: %+v", v)
	}

	// Polling revalidates with the ETag: nothing changed, so 304s.
	waitFor(t, "polls answered 304", func() bool {
		reqs := await("poll requests", `JSON.stringify(window.ofrep.poll.requests)`).(string)
		return strings.Count(reqs, `"status":304`) >= 2
	})
	var polls []struct {
		Status      int
		IfNoneMatch string
	}
	json.Unmarshal([]byte(await("poll requests", `JSON.stringify(window.ofrep.poll.requests)`).(string)), &polls)
	if polls[0].Status != 200 || polls[1].IfNoneMatch == "" {
		t.Errorf("poll requests %+v: want 200 first, then revalidations with If-None-Match", polls)
	}

	// A change in the console's API reaches both pages: through the stream at once, through
	// polling within its interval.
	s.patchFlag(staticFlag, map[string]any{"active": false})
	changedAt := time.Now() // the PATCH answered: the change is committed; the write's own time is not the stream's
	waitFor(t, "ConfigurationChanged over the stream", func() bool {
		return strings.Contains(await("sse changes", `JSON.stringify(window.ofrep.sse.changes)`).(string), "of-static")
	})
	sseLatency := time.Since(changedAt)
	waitFor(t, "ConfigurationChanged by polling", func() bool {
		return strings.Contains(await("poll changes", `JSON.stringify(window.ofrep.poll.changes)`).(string), "of-static")
	})
	for _, domain := range []string{"sse", "poll"} {
		if d := details(domain, "getBooleanDetails", "of-static", true); !cmp.Equal(d, ofDetails{false, "DISABLED", "false", ""}) {
			t.Errorf("%s after the change: %+v", domain, d)
		}
	}
	var sse []struct {
		Status      int
		IfNoneMatch string
	}
	json.Unmarshal([]byte(await("sse requests", `JSON.stringify(window.ofrep.sse.requests)`).(string)), &sse)
	// The first evaluation, then re-fetches on events, each revalidating; the last one finds
	// the change.
	revalidated := len(sse) >= 2 && sse[len(sse)-1].Status == 200
	for _, r := range sse[1:] {
		revalidated = revalidated && r.IfNoneMatch != ""
	}
	if !revalidated {
		t.Errorf("stream page requests %+v: want re-fetches with If-None-Match, the last one a 200", sse)
	}
	t.Logf("change to ConfigurationChanged over the stream: %v (control plane, edge and page included)", sseLatency)
	if sseLatency > 3*time.Second {
		t.Errorf("the change took %v to reach the page over the stream", sseLatency)
	}
}

// ofrepProvider is a minimal OFREP provider for the OpenFeature Go SDK: the community one
// (go-sdk-contrib/providers/ofrep) does not resolve from the module proxy here. It posts the
// flattened context to the single-flag endpoint and maps the answer and OFREP's error codes
// as the OFREP provider specification says.
type ofrepProvider struct {
	base, token string
	client      *http.Client
}

func (p *ofrepProvider) Metadata() openfeature.Metadata { return openfeature.Metadata{Name: "ofrep"} }
func (p *ofrepProvider) Hooks() []openfeature.Hook      { return nil }

func (p *ofrepProvider) evaluate(ctx context.Context, key string, flat openfeature.FlattenedContext) (any, openfeature.ProviderResolutionDetail, bool) {
	body, _ := json.Marshal(map[string]any{"context": flat})
	req, _ := http.NewRequestWithContext(ctx, "POST", p.base+"/ofrep/v1/evaluate/flags/"+key, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, openfeature.ProviderResolutionDetail{ResolutionError: openfeature.NewGeneralResolutionError(err.Error()), Reason: openfeature.ErrorReason}, false
	}
	defer resp.Body.Close()
	var out struct {
		Value        any            `json:"value"`
		Reason       string         `json:"reason"`
		Variant      string         `json:"variant"`
		Metadata     map[string]any `json:"metadata"`
		ErrorCode    string         `json:"errorCode"`
		ErrorDetails string         `json:"errorDetails"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, openfeature.ProviderResolutionDetail{ResolutionError: openfeature.NewParseErrorResolutionError(err.Error()), Reason: openfeature.ErrorReason}, false
	}
	if resp.StatusCode != 200 {
		var re openfeature.ResolutionError
		switch out.ErrorCode {
		case "FLAG_NOT_FOUND":
			re = openfeature.NewFlagNotFoundResolutionError(out.ErrorDetails)
		case "TARGETING_KEY_MISSING":
			re = openfeature.NewTargetingKeyMissingResolutionError(out.ErrorDetails)
		case "INVALID_CONTEXT":
			re = openfeature.NewInvalidContextResolutionError(out.ErrorDetails)
		case "PARSE_ERROR":
			re = openfeature.NewParseErrorResolutionError(out.ErrorDetails)
		default:
			re = openfeature.NewGeneralResolutionError(fmt.Sprintf("%d %s", resp.StatusCode, out.ErrorDetails))
		}
		return nil, openfeature.ProviderResolutionDetail{ResolutionError: re, Reason: openfeature.ErrorReason}, false
	}
	return out.Value, openfeature.ProviderResolutionDetail{Reason: openfeature.Reason(out.Reason), Variant: out.Variant,
		FlagMetadata: openfeature.FlagMetadata(out.Metadata)}, out.Value != nil
}

// typed converts an answer to the getter's type, or to the default with TYPE_MISMATCH.
func typed[T any](v any, d openfeature.ProviderResolutionDetail, found bool, def T) openfeature.GenericResolutionDetail[T] {
	if d.ResolutionError != (openfeature.ResolutionError{}) {
		return openfeature.GenericResolutionDetail[T]{Value: def, ProviderResolutionDetail: d}
	}
	if !found { // OFREP's code default
		return openfeature.GenericResolutionDetail[T]{Value: def, ProviderResolutionDetail: d}
	}
	t, ok := v.(T)
	if !ok {
		return openfeature.GenericResolutionDetail[T]{Value: def, ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
			ResolutionError: openfeature.NewTypeMismatchResolutionError(fmt.Sprintf("the value is a %T", v)), Reason: openfeature.ErrorReason}}
	}
	return openfeature.GenericResolutionDetail[T]{Value: t, ProviderResolutionDetail: d}
}

func (p *ofrepProvider) BooleanEvaluation(ctx context.Context, flag string, def bool, flat openfeature.FlattenedContext) openfeature.BoolResolutionDetail {
	v, d, ok := p.evaluate(ctx, flag, flat)
	return typed(v, d, ok, def)
}

func (p *ofrepProvider) StringEvaluation(ctx context.Context, flag string, def string, flat openfeature.FlattenedContext) openfeature.StringResolutionDetail {
	v, d, ok := p.evaluate(ctx, flag, flat)
	return typed(v, d, ok, def)
}

func (p *ofrepProvider) FloatEvaluation(ctx context.Context, flag string, def float64, flat openfeature.FlattenedContext) openfeature.FloatResolutionDetail {
	v, d, ok := p.evaluate(ctx, flag, flat)
	return typed(v, d, ok, def)
}

func (p *ofrepProvider) IntEvaluation(ctx context.Context, flag string, def int64, flat openfeature.FlattenedContext) openfeature.IntResolutionDetail {
	v, d, ok := p.evaluate(ctx, flag, flat)
	f := typed(v, d, ok, float64(def))
	return openfeature.IntResolutionDetail{Value: int64(f.Value), ProviderResolutionDetail: f.ProviderResolutionDetail}
}

func (p *ofrepProvider) ObjectEvaluation(ctx context.Context, flag string, def any, flat openfeature.FlattenedContext) openfeature.InterfaceResolutionDetail {
	v, d, ok := p.evaluate(ctx, flag, flat)
	if _, isObject := v.(map[string]any); ok && !isObject {
		return openfeature.InterfaceResolutionDetail{Value: def, ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
			ResolutionError: openfeature.NewTypeMismatchResolutionError(fmt.Sprintf("the value is a %T", v)), Reason: openfeature.ErrorReason}}
	}
	return typed(v, d, ok, def)
}

// runGoOpenFeature evaluates cases with the OpenFeature Go SDK through ofrepProvider.
func runGoOpenFeature(t *testing.T, e *edge, token string, cases []ofCase) []ofDetails {
	t.Helper()
	domain := "e2e-" + e.addr
	if err := openfeature.SetNamedProviderAndWait(domain, &ofrepProvider{base: e.url, token: token, client: &http.Client{Timeout: 5 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	client := openfeature.NewClient(domain)
	ctx := context.Background()
	var out []ofDetails
	for _, c := range cases {
		ec := openfeature.NewEvaluationContext(c.User, c.Attrs)
		var d ofDetails
		var rd openfeature.ResolutionDetail
		switch c.Kind {
		case "boolean":
			r, _ := client.BooleanValueDetails(ctx, c.Key, c.Default.(bool), ec)
			d.Value, rd = r.Value, r.ResolutionDetail
		case "string":
			r, _ := client.StringValueDetails(ctx, c.Key, c.Default.(string), ec)
			d.Value, rd = r.Value, r.ResolutionDetail
		case "number":
			r, _ := client.FloatValueDetails(ctx, c.Key, c.Default.(float64), ec)
			d.Value, rd = r.Value, r.ResolutionDetail
		case "object":
			r, _ := client.ObjectValueDetails(ctx, c.Key, c.Default, ec)
			d.Value, rd = r.Value, r.ResolutionDetail
		}
		d.Reason, d.Variant, d.ErrorCode = string(rd.Reason), rd.Variant, string(rd.ErrorCode)
		out = append(out, d)
	}
	return out
}

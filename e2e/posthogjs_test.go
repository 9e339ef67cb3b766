package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// desktopUserAgent is an ordinary desktop Chrome: posthog-js drops events from agents that
// look like bots, headless Chromium's own included.
const desktopUserAgent = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"

// snippetPage is a page with PostHog's official HTML snippet, which loads
// <api_host>/static/array.js and initialises the SDK against the edge.
const snippetPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>shop</title>
<script>
    !function(t,e){var o,n,p,r;e.__SV||(window.posthog && window.posthog.__loaded)||(window.posthog=e,e._i=[],e.init=function(i,s,a){function g(t,e){var o=e.split(".");2==o.length&&(t=t[o[0]],e=o[1]),t[e]=function(){t.push([e].concat(Array.prototype.slice.call(arguments,0)))}}(p=t.createElement("script")).type="text/javascript",p.crossOrigin="anonymous",p.async=!0,p.src=s.api_host.replace(".i.posthog.com","-assets.i.posthog.com")+"/static/array.js",(r=t.getElementsByTagName("script")[0]).parentNode.insertBefore(p,r);var u=e;for(void 0!==a?u=e[a]=[]:a="posthog",u.people=u.people||[],u.toString=function(t){var e="posthog";return"posthog"!==a&&(e+="."+a),t||(e+=" (stub)"),e},u.people.toString=function(){return u.toString(1)+".people (stub)"},o="init capture register register_once register_for_session unregister unregister_for_session getFeatureFlag getFeatureFlagPayload isFeatureEnabled reloadFeatureFlags updateEarlyAccessFeatureEnrollment getEarlyAccessFeatures on onFeatureFlags onSurveysLoaded onSessionId getSurveys getActiveMatchingSurveys renderSurvey canRenderSurvey canRenderSurveyAsync identify setPersonProperties group resetGroups setPersonPropertiesForFlags resetPersonPropertiesForFlags setGroupPropertiesForFlags resetGroupPropertiesForFlags reset get_distinct_id getGroups get_session_id get_session_replay_url alias set_config startSessionRecording stopSessionRecording sessionRecordingStarted captureException loadToolbar get_property getSessionProperty createPersonProfile opt_in_capturing opt_out_capturing has_opted_in_capturing has_opted_out_capturing clear_opt_in_out_capturing debug getPageViewId captureTraceFeedback captureTraceMetric".split(" "),n=0;n<o.length;n++)g(u,o[n]);e._i.push([i,s,a])},e.__SV=1)}(document,window.posthog||[]);
    posthog.init(%q, {
        api_host: %q,
        person_profiles: 'identified_only',
    })
</script>
</head>
<body><h1>Shop</h1><button id="buy">Buy now</button></body></html>`

// TestPostHogJSSnippetInBrowser loads PostHog's official snippet in headless Chromium from a
// page on another origin, with the edge as api_host: the SDK comes from the edge, loads
// flags, captures and identifies; early access features created through the API are listed,
// and opting in gives the person the feature's flag at /decide; a project's autocapture
// switch is honoured; surveys answer an empty list.
func TestPostHogJSSnippetInBrowser(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("browser-edge", "", true)
	api := fmt.Sprintf("http://%s/api/projects/%d", s.httpAddr, s.projectID)

	s.createFlag(map[string]any{"key": "js-everyone", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	code, feature := call(t, "POST", api+"/early_access_feature/", s.personal, map[string]any{
		"name": "Dark mode", "description": "Easier on the eyes.", "stage": "beta", "documentation_url": "https://docs.example.com/dark"})
	if code != 201 {
		t.Fatalf("create early access feature: %d %v", code, feature)
	}
	flagKey := feature["feature_flag"].(map[string]any)["key"].(string)
	if flagKey != "dark-mode" {
		t.Fatalf("feature flag key %q, want dark-mode", flagKey)
	}
	waitFor(t, "the feature at the edge", func() bool {
		code, out := call(t, "GET", e.url+"/api/early_access_features/?token="+s.token, "", nil)
		list, _ := out["earlyAccessFeatures"].([]any)
		return code == 200 && len(list) == 1
	})

	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, snippetPage, s.token, e.url)
	}))
	t.Cleanup(page.Close)
	if strings.Contains(page.URL, e.addr) {
		t.Fatal("the page must be on another origin than the edge")
	}

	// A desktop agent, and navigator.webdriver off: posthog-js treats automated browsers as bots
	// and sends nothing.
	ctx := newBrowser(t, chromedp.UserAgent(desktopUserAgent), chromedp.Flag("disable-blink-features", "AutomationControlled"))
	await := func(what, js string) any {
		t.Helper()
		return value(t, ctx, what, chromedp.Evaluate[any](js, chromedp.EvalAwaitPromise))
	}
	// loaded waits until the SDK from the edge has initialised and loaded flags.
	loaded := func() {
		t.Helper()
		run(t, ctx, "open the page", chromedp.Navigate(page.URL), chromedp.WaitVisible(chromedp.CSS("#buy")))
		got := await("SDK loaded with flags", `new Promise((resolve, reject) => {
			const deadline = Date.now() + 20000;
			(function poll() {
				if (window.posthog && window.posthog.__loaded && window.posthog.featureFlags && window.posthog.featureFlags.hasLoadedFlags) {
					return resolve(posthog.version);
				}
				if (Date.now() > deadline) return reject(new Error('posthog-js did not load from the edge'));
				setTimeout(poll, 50);
			})();
		})`)
		if got != "1.449.2" {
			t.Fatalf("posthog-js version %v", got)
		}
	}
	loaded()

	if got := await("flag from the edge", `Promise.resolve(posthog.isFeatureEnabled('js-everyone'))`); got != true {
		t.Errorf("js-everyone: %v, want true", got)
	}
	await("identify and capture", `Promise.resolve((posthog.identify('browser-user', {email: 'b@example.com'}),
		posthog.capture('browser event', {cart: 3}), true))`)
	waitForEvents(t, s, "browser event", 1)

	list := await("getEarlyAccessFeatures", `new Promise(resolve => posthog.getEarlyAccessFeatures(resolve, true))`)
	want := []any{map[string]any{"id": feature["id"], "name": "Dark mode", "description": "Easier on the eyes.", "stage": "beta",
		"documentationUrl": "https://docs.example.com/dark", "flagKey": "dark-mode"}}
	if got, _ := json.Marshal(list); string(got) != string(mustJSON(t, want)) {
		t.Errorf("early access features %s, want %s", got, string(mustJSON(t, want)))
	}

	if on := featureFlags(s.decide(e, map[string]any{"distinct_id": "browser-user"}))[flagKey]; on != false {
		t.Fatalf("before enrolling, %s is %v", flagKey, on)
	}
	await("enrol", `Promise.resolve((posthog.updateEarlyAccessFeatureEnrollment('dark-mode', true), true))`)
	waitFor(t, "the enrolled person to get the flag at /decide", func() bool {
		return featureFlags(s.decide(e, map[string]any{"distinct_id": "browser-user"}))[flagKey] == true
	})
	if on := featureFlags(s.decide(e, map[string]any{"distinct_id": "someone-else"}))[flagKey]; on != false {
		t.Errorf("someone not enrolled gets %s: %v", flagKey, on)
	}
	waitForEvents(t, s, "$feature_enrollment_update", 1)

	surveys := await("getSurveys", `new Promise(resolve => posthog.getSurveys((surveys, context) =>
		resolve({surveys, error: (context && context.error) || null}), true))`)
	if got := string(mustJSON(t, surveys)); got != `{"error":null,"surveys":[]}` {
		t.Errorf("getSurveys answered %s", got)
	}

	// Autocapture is on by default: a click is an $autocapture event.
	run(t, ctx, "click", chromedp.Click(chromedp.CSS("#buy")))
	waitForEvents(t, s, "$autocapture", 1)

	// Turned off for the project, the SDK captures no click.
	code, project := call(t, "PATCH", api+"/", s.personal, map[string]any{"autocapture_opt_out": true})
	if code != 200 || project["autocapture_opt_out"] != true {
		t.Fatalf("patch project: %d %v", code, project)
	}
	waitFor(t, "the switch at the edge", func() bool {
		_, cfg := call(t, "GET", e.url+"/array/"+url.PathEscape(s.token)+"/config", "", nil)
		return cfg["autocapture_opt_out"] == true
	})
	loaded()
	run(t, ctx, "click again", chromedp.Click(chromedp.CSS("#buy")), chromedp.Click(chromedp.CSS("#buy")))
	await("marker", `Promise.resolve((posthog.capture('after opt-out'), true))`)
	waitForEvents(t, s, "after opt-out", 1)
	if n := countEvents(t, s, "$autocapture"); n != 1 {
		t.Errorf("%d $autocapture events, want only the one before the project turned autocapture off", n)
	}
}

// countEvents returns how many events of the name the control plane stored.
func countEvents(t *testing.T, s *stack, name string) int {
	t.Helper()
	code, out := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/events/?event=%s", s.httpAddr, s.projectID, url.QueryEscape(name)), s.personal, nil)
	if code != 200 {
		t.Fatalf("events: %d %v", code, out)
	}
	n, _ := out["count"].(float64)
	return int(n)
}

// waitForEvents waits until the control plane stored at least n events of the name; the SDK
// sends in batches every few seconds.
func waitForEvents(t *testing.T, s *stack, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for countEvents(t, s, name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d %q events", n, name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the console's screenshots to docs/screenshots")

// newBrowser starts headless Chromium with a fresh profile (and the extra options given)
// and returns a tab's context. Chromium is the chromium on PATH, as deploy/install-deps.sh
// looks for it (it installs one only where none is found): a machine whose chromium is not
// Debian's /usr/bin/chromium is not refused.
func newBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the console's browser tests need chromium: run deploy/install-deps.sh (apt-get install chromium): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), // tests run as root in containers
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	}
	opts = append(opts, extra...)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// The first call starts the browser, which lives as long as this call's context: no
	// timeout here; each step below has its own.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// XPath helpers that find controls by their accessible names, as a person reads the page.
func labelled(label string) string {
	return fmt.Sprintf(`//*[@id=//label[normalize-space()=%q]/@for]`, label)
}
func button(name string) string { return fmt.Sprintf(`//button[normalize-space()=%q]`, name) }
func link(name string) string   { return fmt.Sprintf(`//a[normalize-space()=%q]`, name) }

// stepTimeout bounds one step of the browser test: a page load and a few clicks take well
// under a second, and thirty leave room for a loaded two-core machine.
const stepTimeout = 30 * time.Second

type step = chromedp.Action[chromedp.Void]

// run runs browser steps and fails the test with what was being done and the page it was on.
func run(t *testing.T, ctx context.Context, what string, steps ...step) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		url, _ := chromedp.Run(lctx, chromedp.Location())
		body, _ := chromedp.Run(lctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("%s: %v\nat %s:\n%.1500s", what, err, url, body)
	}
}

// value runs one browser action that answers a value.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// eval runs JavaScript on the page for its effect.
func eval(js string) step {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](js)(ctx, tg)
		return err
	})
}

// fill replaces the value of the control with the given label.
func fill(label, value string) step {
	clear := fmt.Sprintf(`(() => { const l = [...document.querySelectorAll('label')].find(l => l.textContent.trim() === %q);
		if (!l || !l.control) throw new Error('no control labelled ' + %q); l.control.value = ''; })()`, label, label)
	return chromedp.Steps(eval(clear), chromedp.SendKeys(labelled(label), value))
}

// acceptConfirms makes window.confirm answer yes on the current page.
var acceptConfirms = eval(`window.confirm = () => true`)

// shoot saves a PNG of the page under docs/screenshots when -update-screenshots is given.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*updateScreenshots {
		return
	}
	png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	dir := filepath.Join("..", "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// setPassword sets a user's console password with the CLI, as an operator does.
func (s *stack) setPassword(email, password string) {
	s.t.Helper()
	cmd := exec.Command(binaries.controlplane, "users", "set-password", "--database-url", s.dbURL, "--email", email)
	cmd.Stdin = strings.NewReader(password + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("set-password: %v: %s", err, out)
	}
}

// waitDecide polls the edge until has(featureFlags) holds, and returns how long it took. It
// waits up to 20 s: a wait, not a measure (callers that promise a time check it themselves).
func (s *stack) waitDecide(e *edge, distinctID string, has func(map[string]any) bool) time.Duration {
	s.t.Helper()
	start := time.Now()
	for time.Since(start) < 20*time.Second {
		ff := featureFlags(s.decide(e, map[string]any{"distinct_id": distinctID}))
		if has(ff) {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("the edge did not answer as expected within 20s")
	return 0
}

// TestConsoleInBrowser drives the console in headless Chromium against the real binaries:
// logging in, the flag lifecycle seen through the REST API and an edge's /decide, an
// annotation, a personal key used over HTTP, and the refusals (wrong password, forged CSRF
// token, a viewer editing a role-protected flag).
func TestConsoleInBrowser(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge-console", "", true)
	const password = "correct horse battery"
	s.setPassword("ops@example.com", password)
	base := "http://" + s.httpAddr
	api := func(path string) string { return fmt.Sprintf("%s/api/projects/%d%s", base, s.projectID, path) }
	ctx := newBrowser(t)
	run(t, ctx, "viewport", chromedp.EmulateViewport(1440, 900))

	// A wrong password is refused; the right one opens the flags page.
	var msg string
	run(t, ctx, "wrong password",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(labelled("Email")),
		fill("Email", "ops@example.com"), fill("Password", "not the password"),
		chromedp.Click(button("Log in")),
		chromedp.WaitVisible(chromedp.CSS(`[role=alert]`)))
	msg = value(t, ctx, "alert", chromedp.Text(chromedp.CSS(`[role=alert]`)))
	if !strings.Contains(msg, "Invalid email or password") {
		t.Errorf("wrong password: %q", msg)
	}
	run(t, ctx, "clear the form for the screenshot", chromedp.Navigate(base+"/login"), chromedp.WaitVisible(labelled("Email")),
		fill("Email", "ops@example.com"))
	shoot(t, ctx, "login")
	run(t, ctx, "log in",
		fill("Password", password),
		chromedp.Click(button("Log in")),
		chromedp.WaitVisible(link("New feature flag")),
		chromedp.WaitVisible(link("Feature flags")),
		chromedp.WaitVisible(link("Annotations")))

	// Create a flag with a condition and a 50% rollout.
	run(t, ctx, "create a flag",
		chromedp.Click(link("New feature flag")),
		chromedp.WaitVisible(labelled("Key")),
		fill("Key", "new-checkout"),
		fill("Description", "The one-page checkout"),
		chromedp.Click(button("Add property filter")),
		chromedp.WaitVisible(chromedp.CSS(`input[name=c0_p0_key]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=c0_p0_key]`), "email"),
		eval(`document.querySelector('select[name=c0_p0_op]').value = 'icontains'`),
		chromedp.SendKeys(chromedp.CSS(`input[name=c0_p0_value]`), "@example.com"),
		fill("Rollout percentage", "50"),
		chromedp.Click(button("Save")),
		chromedp.WaitVisible(link("Activity")))
	// The edge is asked first: the second runs from the save to the edge's answer, with
	// nothing of the test's own in between.
	saved := time.Now()
	took := s.waitDecide(e, "ada", func(ff map[string]any) bool { return hasKey(ff, "new-checkout") })
	if since := time.Since(saved); since > time.Second {
		t.Errorf("the edge answered the new flag %v after the save (polling took %v), want within a second", since, took)
	}
	code, flagsPage := call(t, "GET", api("/feature_flags/"), s.personal, nil)
	results, _ := flagsPage["results"].([]any)
	if code != 200 || len(results) != 1 {
		t.Fatalf("REST flags: %d %v", code, flagsPage)
	}
	flag := results[0].(map[string]any)
	filters := fmt.Sprint(flag["filters"])
	if flag["key"] != "new-checkout" || flag["name"] != "The one-page checkout" || !strings.Contains(filters, "rollout_percentage:50") ||
		!strings.Contains(filters, "operator:icontains") || !strings.Contains(filters, "@example.com") {
		t.Errorf("REST flag = %v", flag)
	}
	id := int64(flag["id"].(float64))
	// The page after the save loads, once shown, the line saying on how many edges the save is
	// live (console.js replaces the placeholder): all of them, the edge having answered it.
	run(t, ctx, "rollout line", chromedp.WaitVisible(chromedp.CSS(`[data-rollout-done]`)))
	line := value(t, ctx, "rollout line", chromedp.Text(chromedp.CSS(`[data-rollout-done]`)))
	if m := regexp.MustCompile(`Live on (\d+) of (\d+) edges`).FindStringSubmatch(line); m == nil || m[1] != m[2] || m[1] == "0" {
		t.Errorf("rollout line after the save: %q, want live on every connected edge", line)
	}
	flagURL := fmt.Sprintf("%s/project/%d/feature_flags/%d", base, s.projectID, id)

	// Some persons and events through the edge, and more flags, for the pages to show.
	var batch []any
	for i, email := range []string{"ada@example.com", "grace@example.com", "linus@kernel.org", "margaret@example.com"} {
		batch = append(batch, map[string]any{"event": "$pageview", "distinct_id": fmt.Sprintf("user-%d", i+1),
			"properties": map[string]any{"$current_url": "https://shop.example.com/checkout", "$browser": "Chrome", "$set": map[string]any{"email": email, "plan": []string{"free", "pro"}[i%2]}}})
	}
	if code, body := call(t, "POST", e.url+"/batch/", "", map[string]any{"api_key": s.token, "batch": batch}); code != 200 {
		t.Fatalf("capture: %d %v", code, body)
	}
	for _, f := range []map[string]any{
		{"key": "dark-mode", "name": "Dark theme for the web app", "tags": []string{"web", "design"}, "filters": map[string]any{
			"groups":       []any{map[string]any{"properties": []any{}, "rollout_percentage": 100}},
			"multivariate": map[string]any{"variants": []any{map[string]any{"key": "control", "rollout_percentage": 50}, map[string]any{"key": "dark", "rollout_percentage": 50}}}}},
		{"key": "pricing-page-v2", "name": "New pricing page", "active": false, "tags": []string{"growth"}, "filters": map[string]any{
			"groups": []any{map[string]any{"properties": []any{map[string]any{"key": "plan", "value": []string{"pro"}, "operator": "exact", "type": "person"}}, "rollout_percentage": 20}}}},
		{"key": "search-v3", "name": "Typo-tolerant search", "filters": map[string]any{"groups": []any{
			map[string]any{"properties": []any{}, "rollout_percentage": 10}, map[string]any{"properties": []any{map[string]any{"key": "email", "value": "@example.com", "operator": "icontains", "type": "person"}}, "rollout_percentage": 100}}}},
	} {
		s.createFlag(f)
	}
	waitFor(t, "persons stored", func() bool {
		_, p := call(t, "GET", api("/persons/"), s.personal, nil)
		return p["count"] == 4.0
	})
	run(t, ctx, "open the flag with a test", chromedp.Navigate(flagURL+"?distinct_id=user-1&properties=plan%3Dpro"), chromedp.WaitVisible(link("Activity")))
	shoot(t, ctx, "flag-edit")
	run(t, ctx, "events", chromedp.Click(link("Events")), chromedp.WaitVisible(`//td[normalize-space()="$pageview"]`))
	shoot(t, ctx, "events")

	// Toggle it off from the list.
	run(t, ctx, "toggle off",
		chromedp.Click(link("Feature flags")),
		chromedp.WaitVisible(chromedp.CSS(`input[role=switch][aria-label=Active]:checked`)),
		chromedp.Click(chromedp.CSS(`a[href$="/feature_flags/`+fmt.Sprint(id)+`"]`)),
		chromedp.WaitVisible(labelled("Key")),
		chromedp.NavigateBack(),
		chromedp.WaitVisible(link("New feature flag")),
		chromedp.Click(chromedp.CSS(`tr:has(a[href$="/feature_flags/`+fmt.Sprint(id)+`"]) input[role=switch][aria-label=Active]`)),
		chromedp.WaitVisible(`//*[contains(@class,"flash") and contains(., "is now off")]`),
		chromedp.WaitVisible(chromedp.CSS(`tr:has(a[href$="/feature_flags/`+fmt.Sprint(id)+`"]) input[role=switch][aria-label=Active]:not(:checked)`)))
	if _, f := call(t, "GET", api(fmt.Sprintf("/feature_flags/%d/", id)), s.personal, nil); f["active"] != false {
		t.Errorf("after the toggle: active = %v", f["active"])
	}
	s.waitDecide(e, "ada", func(ff map[string]any) bool { return !hasKey(ff, "new-checkout") })
	shoot(t, ctx, "flags")

	// Edit it, soft delete it, restore it, read its activity.
	run(t, ctx, "edit",
		chromedp.Navigate(flagURL), chromedp.WaitVisible(labelled("Description")),
		fill("Description", "One-page checkout, take two"),
		fill("Rollout percentage", "30"),
		chromedp.Click(button("Save")),
		chromedp.WaitVisible(`//*[contains(@class,"flash") and contains(., "saved")]`))
	if _, f := call(t, "GET", api(fmt.Sprintf("/feature_flags/%d/", id)), s.personal, nil); f["name"] != "One-page checkout, take two" {
		t.Errorf("after the edit: name = %v", f["name"])
	}
	run(t, ctx, "delete", acceptConfirms, chromedp.Click(button("Delete")), chromedp.WaitVisible(button("Restore")))
	if _, f := call(t, "GET", api(fmt.Sprintf("/feature_flags/%d/", id)), s.personal, nil); f["deleted"] != true {
		t.Errorf("after delete: deleted = %v", f["deleted"])
	}
	run(t, ctx, "restore", chromedp.Click(button("Restore")), chromedp.WaitVisible(button("Delete")))
	if _, f := call(t, "GET", api(fmt.Sprintf("/feature_flags/%d/", id)), s.personal, nil); f["deleted"] != false {
		t.Errorf("after restore: deleted = %v", f["deleted"])
	}
	// Schedule it on again two seconds ahead; it runs, and the edge serves it.
	at := time.Now().UTC().Add(2 * time.Second).Format("2006-01-02T15:04:05")
	run(t, ctx, "schedule a change",
		chromedp.SetValue(chromedp.CSS(`#schedule-operation`), "enable"),
		eval(fmt.Sprintf(`document.querySelector('#schedule-at').value = %q`, at)),
		chromedp.Click(button("Schedule")),
		chromedp.WaitVisible(`//*[contains(@class,"flash") and contains(., "Change scheduled")]`),
		chromedp.WaitVisible(`//tr[@data-schedule]//*[normalize-space()="Pending"]`))
	s.waitDecide(e, "ada", func(ff map[string]any) bool { return hasKey(ff, "new-checkout") })
	run(t, ctx, "the change ran", chromedp.Reload(), chromedp.WaitVisible(`//tr[@data-schedule]//*[normalize-space()="Executed"]`))
	shoot(t, ctx, "flag-scheduled")
	s.patchFlag(id, map[string]any{"active": false}) // off again, as the checks below expect
	var activity string
	run(t, ctx, "activity", chromedp.Click(link("Activity")),
		chromedp.WaitVisible(chromedp.CSS(`.timeline`)))
	activity = value(t, ctx, "activity text", chromedp.Text(chromedp.CSS(`.timeline`)))
	for _, want := range []string{"created the flag", "updated the flag", "deleted the flag", "active", "The one-page checkout", "by scheduled change #1",
		`"rollout_percentage": 50`, `"rollout_percentage": 30`} {
		if !strings.Contains(activity, want) {
			t.Errorf("activity lacks %q:\n%s", want, activity)
		}
	}
	shoot(t, ctx, "flag-activity")

	// An annotation.
	run(t, ctx, "annotation",
		chromedp.Click(link("Annotations")),
		chromedp.Click(button("New annotation")),
		chromedp.WaitVisible(labelled("Content")),
		fill("Content", "Launched the one-page checkout"),
		chromedp.Click(button("Save")),
		chromedp.WaitVisible(`//td[normalize-space()="Launched the one-page checkout"]`))
	if _, a := call(t, "GET", api("/annotations/?search=one-page"), s.personal, nil); a["count"] != 1.0 {
		t.Errorf("REST annotations: %v", a)
	}
	shoot(t, ctx, "annotations")

	// A personal key created in the console works over HTTP, within its scope, until revoked.
	var secret string
	run(t, ctx, "create a key",
		chromedp.Navigate(base+"/settings/keys"),
		chromedp.WaitVisible(labelled("Label")),
		fill("Label", "browser test"),
		chromedp.Click(chromedp.CSS(`input[aria-label="feature_flag: read"]`)),
		chromedp.Click(button("Create key")),
		chromedp.WaitVisible(chromedp.CSS(`#new-key-value`)))
	secret = value(t, ctx, "key value", chromedp.Value(chromedp.CSS(`#new-key-value`)))
	if !strings.HasPrefix(secret, "phx_") {
		t.Fatalf("key value %q", secret)
	}
	shoot(t, ctx, "keys")
	if code, _ := call(t, "GET", api("/feature_flags/"), secret, nil); code != 200 {
		t.Errorf("the new key reading flags: %d", code)
	}
	if code, body := call(t, "POST", api("/feature_flags/"), secret, map[string]any{"key": "x"}); code != 403 {
		t.Errorf("the read-only key creating a flag: %d %v", code, body)
	}
	run(t, ctx, "revoke the key", chromedp.Navigate(base+"/settings/keys"), chromedp.WaitVisible(button("Revoke")),
		acceptConfirms, chromedp.Click(button("Revoke")),
		chromedp.WaitVisible(`//*[contains(@class,"flash") and contains(., "revoked")]`))
	if code, _ := call(t, "GET", api("/feature_flags/"), secret, nil); code != 401 {
		t.Errorf("the revoked key: %d, want 401", code)
	}

	// A forged CSRF token is refused, and changes nothing.
	var forbidden string
	run(t, ctx, "forged csrf",
		chromedp.Navigate(fmt.Sprintf("%s/project/%d/feature_flags", base, s.projectID)),
		chromedp.WaitVisible(chromedp.CSS(`input[role=switch]`)),
		eval(`(() => { const f = document.querySelector('input[role=switch]').form;
			f.querySelector('[name=csrf_token]').value = 'forged'; f.querySelector('input[role=switch]').checked = true; f.submit(); })()`),
		chromedp.WaitVisible(`//h1[normalize-space()="Forbidden"]`))
	forbidden = value(t, ctx, "forbidden page", chromedp.Text(chromedp.CSS(`main`)))
	if !strings.Contains(forbidden, "security token") {
		t.Errorf("forged csrf page: %q", forbidden)
	}
	if _, f := call(t, "GET", api(fmt.Sprintf("/feature_flags/%d/", id)), s.personal, nil); f["active"] != false {
		t.Errorf("a forged form turned the flag on")
	}

	// A viewer cannot edit a flag that role access protects.
	if out, err := exec.Command(binaries.controlplane, "users", "create", "--database-url", s.dbURL, "--email", "viewer@example.com",
		"--organization-of", "ops@example.com").CombinedOutput(); err != nil {
		t.Fatalf("users create: %v %s", err, out)
	}
	s.setPassword("viewer@example.com", "viewer password 1")
	_, role := call(t, "POST", base+"/api/organizations/@current/roles/", s.personal, map[string]any{"name": "Checkout team"})
	if code, body := call(t, "POST", api(fmt.Sprintf("/feature_flags/%d/role_access/", id)), s.personal, map[string]any{"role_id": role["id"]}); code != 201 {
		t.Fatalf("role access: %d %v", code, body)
	}
	var denied string
	run(t, ctx, "log in as the viewer",
		chromedp.Navigate(base+"/settings/keys"),
		chromedp.WaitVisible(button("Log out")),
		chromedp.Click(button("Log out")),
		chromedp.WaitVisible(labelled("Email")),
		fill("Email", "viewer@example.com"), fill("Password", "viewer password 1"),
		chromedp.Click(button("Log in")),
		chromedp.WaitVisible(link("New feature flag")),
		chromedp.WaitVisible(chromedp.CSS(`input[role=switch][aria-label=Active]:disabled`)),
		chromedp.Navigate(flagURL),
		chromedp.WaitVisible(`//*[@role="note" and contains(., "can view this flag but not change it")]`),
		// The Save button is disabled; submit the form anyway, as a crafted request would.
		eval(`(() => { document.getElementById('name').value = 'hijacked'; const f = document.querySelector('form.flag-form');
			const b = f.querySelector('button[value=save]'); b.disabled = false; b.click(); })()`),
		chromedp.WaitVisible(`//h1[normalize-space()="Permission denied"]`))
	denied = value(t, ctx, "denied page", chromedp.Text(chromedp.CSS(`main`)))
	if !strings.Contains(denied, "permission") {
		t.Errorf("viewer's save: %q", denied)
	}
	if _, f := call(t, "GET", api(fmt.Sprintf("/feature_flags/%d/", id)), s.personal, nil); f["name"] != "One-page checkout, take two" {
		t.Errorf("the viewer changed the flag: name = %v", f["name"])
	}
}

package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConsoleReviewInBrowser drives the console's review workflow in headless Chromium
// against the real binaries and an edge: a member's save of a gated flag says "sent for
// review" on the change request's page and changes nothing at the edge; the approver's
// rejection without a reason is refused beside the form; the approval applies the change, the
// edge serves it and the page says on how many edges it is live. Then a flag is promoted to two
// projects from its page: the preview names the dependency that comes along, and the result
// shows the copy into one and the other's policy holding it for approval.
func TestConsoleReviewInBrowser(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge-review", "", true)
	base := "http://" + s.httpAddr
	const adminPassword, memberPassword = "correct horse battery", "member horse battery"
	s.setPassword("ops@example.com", adminPassword)
	_, _ = s.member("dev@example.com")
	s.setPassword("dev@example.com", memberPassword)
	_, me := call(t, "GET", base+"/api/users/@me/", s.personal, nil)
	adminID := me["id"]
	id := s.createFlag(map[string]any{"key": "reviewed", "active": false,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 100}}}})
	// The flag to promote later, made before the policy gates enabling: its dependency is on.
	dep := s.createFlag(map[string]any{"key": "promo-base", "active": true})
	promo := s.createFlag(map[string]any{"key": "promo", "active": false, "filters": map[string]any{"groups": []any{map[string]any{
		"properties":         []any{map[string]any{"key": fmt.Sprint(dep), "type": "flag", "value": true, "operator": "flag_evaluates_to"}},
		"rollout_percentage": 100}}}})
	if code, out := call(t, "POST", fmt.Sprintf("%s/api/projects/%d/approval_policies/", base, s.projectID), s.personal,
		map[string]any{"action_key": "feature_flag.enable", "approver_config": map[string]any{"users": []any{adminID}, "quorum": 1}}); code != 201 {
		t.Fatalf("policy: %d %v", code, out)
	}
	flagURL := fmt.Sprintf("%s/project/%d/feature_flags/%d", base, s.projectID, id)
	login := func(email, password string) step {
		return chromedp.Steps(chromedp.Navigate(base+"/login"), chromedp.WaitVisible(labelled("Email")),
			fill("Email", email), fill("Password", password), chromedp.Click(button("Log in")), chromedp.WaitVisible(link("New feature flag")))
	}
	ctx := newBrowser(t)

	// The member turns the flag on in its form and saves: the change waits for review.
	run(t, ctx, "the member's gated save",
		login("dev@example.com", memberPassword),
		chromedp.Navigate(flagURL),
		chromedp.WaitVisible(`//label[normalize-space()="Active"]/input`),
		chromedp.Click(`//label[normalize-space()="Active"]/input`),
		chromedp.Click(button("Save")),
		chromedp.WaitVisible(`//*[@role="status" and contains(., "Sent for review")]`))
	reviewURL := value(t, ctx, "location", chromedp.Location())
	if !regexp.MustCompile(`/change_requests/[0-9a-f-]{36}$`).MatchString(reviewURL) {
		t.Fatalf("the gated save led to %s, want its change request", reviewURL)
	}
	if ff := featureFlags(s.decide(e, map[string]any{"distinct_id": "ada"})); ff["reviewed"] == true {
		t.Fatal("the edge serves the held change")
	}

	// The approver finds it in the list, is refused a rejection without a reason, approves.
	run(t, ctx, "the approver opens the request",
		chromedp.Click(button("Log out")), chromedp.WaitVisible(labelled("Email")),
		login("ops@example.com", adminPassword),
		chromedp.Click(link("Change requests")),
		chromedp.WaitVisible(link("Enable feature flag 'reviewed'")),
		chromedp.Click(link("Enable feature flag 'reviewed'")),
		chromedp.WaitVisible(button("Approve")),
		chromedp.Click(button("Reject")),
		chromedp.WaitVisible(`//*[@role="alert" and contains(., "A reason is required for rejection.")]`),
		fill("Reason (required to reject)", "metrics look fine"),
		chromedp.Click(button("Approve")),
		chromedp.WaitVisible(`//*[@role="status" and contains(., "Quorum reached. Change applied successfully.")]`))
	s.waitDecide(e, "ada", func(ff map[string]any) bool { return ff["reviewed"] == true })
	// The page loads, once shown, the line saying on how many edges the change is live.
	run(t, ctx, "live line", chromedp.WaitVisible(chromedp.CSS(`[data-rollout-done]`)))
	line := value(t, ctx, "live line", chromedp.Text(chromedp.CSS(`[data-rollout-done]`)))
	if m := regexp.MustCompile(`Live on (\d+) of (\d+) edges`).FindStringSubmatch(line); m == nil || m[1] != "1" || m[2] != "1" {
		t.Errorf("live line: %q, want live on the one edge", line)
	}
	state := value(t, ctx, "state", chromedp.Text(chromedp.CSS(`.cr-state`)))
	if !strings.Contains(state, "applied") {
		t.Errorf("state after the approval: %q", state)
	}

	// Promotion: staging takes the copy; production's policy gates rollout changes.
	projects := map[string]int64{}
	for _, name := range []string{"Staging", "Production"} {
		code, out := call(t, "POST", base+"/api/projects/", s.personal, map[string]any{"name": name})
		if code != 201 {
			t.Fatalf("create project: %d %v", code, out)
		}
		projects[name] = int64(out["id"].(float64))
	}
	if code, out := call(t, "POST", fmt.Sprintf("%s/api/projects/%d/approval_policies/", base, projects["Production"]), s.personal,
		map[string]any{"action_key": "feature_flag.update", "approver_config": map[string]any{"users": []any{adminID}, "quorum": 1}}); code != 201 {
		t.Fatalf("production's policy: %d %v", code, out)
	}
	run(t, ctx, "preview the promotion",
		chromedp.Navigate(fmt.Sprintf("%s/project/%d/feature_flags/%d", base, s.projectID, promo)),
		chromedp.WaitVisible(link("Promote")),
		chromedp.Click(link("Promote")),
		chromedp.WaitVisible(`//label[normalize-space()="Staging"]/input`),
		chromedp.Click(`//label[normalize-space()="Staging"]/input`),
		chromedp.Click(`//label[normalize-space()="Production"]/input`),
		chromedp.Click(`//label[normalize-space()="Copy the flags it depends on that a target lacks"]/input`),
		chromedp.Click(button("Preview what comes along")),
		chromedp.WaitVisible(chromedp.CSS(`#promote-preview`)))
	if preview := value(t, ctx, "preview", chromedp.Text(chromedp.CSS(`#promote-preview`))); !strings.Contains(preview, "1 dependency flag can be copied.") ||
		!strings.Contains(preview, "copies promo-base") {
		t.Errorf("preview: %q", preview)
	}
	run(t, ctx, "promote", chromedp.Click(button("Promote")), chromedp.WaitVisible(`//h2[normalize-space()="Result"]`))
	result := value(t, ctx, "result", chromedp.Text(`//h2[normalize-space()="Result"]/../..`))
	if !regexp.MustCompile(`Staging\s+copied`).MatchString(result) || !regexp.MustCompile(`Production\s+held for approval`).MatchString(result) {
		t.Errorf("promotion result: %q", result)
	}
	code, copied := call(t, "GET", fmt.Sprintf("%s/api/projects/%d/feature_flags/?key=promo", base, projects["Staging"]), s.personal, nil)
	if code != 200 || !strings.Contains(fmt.Sprint(copied["results"]), "key:promo ") {
		t.Errorf("staging's copy: %d %v", code, copied)
	}
}

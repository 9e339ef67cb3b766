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
// edge serves it and the page says on how many edges it is live.
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
}

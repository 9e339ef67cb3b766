package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestReleasePlanInBrowser drives a flag's release plan page in headless Chromium against
// the real binaries: bad input is told beside the form, a plan with two steps and a
// guardrail starts from the form and is paused, resumed and cancelled with its buttons; a
// second plan started from the form meets SDK-shaped traffic whose treatment raises
// $exception, and the page shows it rolled back, with the guardrail's arms and interval
// drawn and marked a regression, and their history over the evaluations charted.
func TestReleasePlanInBrowser(t *testing.T) {
	s := newStack(t, "--release-plan-interval", "100ms")
	e := s.startEdge("edge-plans", "", true)
	const password = "correct horse battery"
	s.setPassword("ops@example.com", password)
	base := "http://" + s.httpAddr
	flag := s.createFlag(map[string]any{"key": "guarded-console",
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 0}}}})
	planPage := fmt.Sprintf("%s/project/%d/feature_flags/%d/release_plan", base, s.projectID, flag)
	ctx := newBrowser(t)
	run(t, ctx, "log in", chromedp.EmulateViewport(1440, 900),
		chromedp.Navigate(fmt.Sprintf("%s/project/%d/feature_flags/%d", base, s.projectID, flag)),
		chromedp.WaitVisible(labelled("Email")),
		fill("Email", "ops@example.com"), fill("Password", password),
		chromedp.Click(button("Log in")),
		chromedp.WaitVisible(link("Release plan")),
		chromedp.Click(link("Release plan")),
		chromedp.WaitVisible(button("Start plan")))

	// The form's first two steps, and its $exception guardrail, are the defaults; a third
	// step out of range is refused beside the form, then so is a form with no step.
	run(t, ctx, "a step out of range",
		fill("Step 1 rollout %", "50"), fill("Step 3 rollout %", "150"),
		chromedp.Click(button("Start plan")),
		chromedp.WaitVisible(chromedp.CSS(`#start [role=alert]`)))
	if msg := value(t, ctx, "alert", chromedp.Text(chromedp.CSS(`#start [role=alert]`))); !strings.Contains(msg, "rollout_percentage must be above 0 and at most 100.") {
		t.Errorf("a step at 150%%: %q", msg)
	}
	run(t, ctx, "no steps",
		eval(`document.querySelector('#start [role=alert]').remove()`), // the next page's alert is the answer
		fill("Step 1 rollout %", " "), fill("Step 2 rollout %", " "), fill("Step 3 rollout %", " "),
		chromedp.Click(button("Start plan")),
		chromedp.WaitVisible(chromedp.CSS(`#start [role=alert]`)))
	if msg := value(t, ctx, "alert", chromedp.Text(chromedp.CSS(`#start [role=alert]`))); !strings.Contains(msg, "A plan needs at least one step.") {
		t.Errorf("no steps: %q", msg)
	}

	// Two steps and a guardrail: the plan runs, and is paused, resumed and cancelled.
	run(t, ctx, "start a plan",
		fill("Step 1 rollout %", "5"), fill("Step 2 rollout %", "100"),
		chromedp.Click(button("Start plan")),
		chromedp.WaitVisible(chromedp.CSS(`[data-state=running]`)),
		chromedp.WaitVisible(`//td/span[normalize-space()="started"]`),
		chromedp.WaitVisible(chromedp.CSS(`svg.plan-chart`)))
	if code, plan := call(t, "GET", s.planURL(flag, ""), s.personal, nil); code != 200 || plan["state"] != "running" || len(plan["steps"].([]any)) != 2 {
		t.Fatalf("the API's plan: %d %v", code, plan)
	}
	run(t, ctx, "pause", chromedp.Click(button("Pause")), chromedp.WaitVisible(chromedp.CSS(`[data-state=paused]`)),
		chromedp.WaitVisible(`//td/span[normalize-space()="paused"]`))
	run(t, ctx, "resume", chromedp.Click(button("Resume")), chromedp.WaitVisible(chromedp.CSS(`[data-state=running]`)),
		chromedp.WaitVisible(`//td/span[normalize-space()="resumed"]`))
	run(t, ctx, "cancel", acceptConfirms, chromedp.Click(button("Cancel plan")), chromedp.WaitVisible(chromedp.CSS(`[data-state=cancelled]`)),
		chromedp.WaitVisible(button("Start plan")))

	// A second plan meets traffic whose treatment hits $exception three times as often.
	run(t, ctx, "start a second plan",
		fill("Step 1 rollout %", "50"), fill("Step 2 rollout %", "100"),
		chromedp.Click(button("Start plan")),
		chromedp.WaitVisible(chromedp.CSS(`[data-state=running]`)))
	waitFor(t, "the edge serves the first step", func() bool {
		return featureFlags(s.decide(e, map[string]any{"distinct_id": "probe"}))["guarded-console"] != nil
	})
	g := guardedTraffic{s: s, e: e, flag: "guarded-console"}
	g.run(t, "console", 0, 1600, func(i int, enabled bool) bool {
		if enabled {
			return i%20 < 3
		}
		return i%20 == 0
	})
	s.waitPlan(flag, "the plan rolls back", func(p map[string]any) bool { return p["state"] == "rolled_back" })
	run(t, ctx, "the rolled back plan", chromedp.Navigate(planPage), chromedp.WaitVisible(chromedp.CSS(`[data-state=rolled_back]`)),
		chromedp.WaitVisible(`//td/span[normalize-space()="rolled_back"]`),
		chromedp.WaitVisible(chromedp.CSS(`svg.plan-chart line.interval`)))
	// The plan was evaluated every 100 ms while the traffic came in: each guardrail's history
	// chart draws a vertex per point on both arms' lines and the interval's band, and the
	// latest interval.
	type chart struct{ Points, Control, Treatment, Band, Latest int }
	drawn := value(t, ctx, "the history chart", chromedp.Evaluate[chart](`(() => {
		const svg = document.querySelector('[data-guardrail] svg.plan-history');
		if (!svg) return {};
		const n = sel => ((svg.querySelector(sel) || {getAttribute: () => ''}).getAttribute('points') || '').trim().split(/\s+/).filter(Boolean).length;
		return {Points: +svg.dataset.points, Control: n('.arm-control'), Treatment: n('.arm-treatment'), Band: n('.interval-band'), Latest: svg.querySelectorAll('line.interval').length};
	})()`))
	if drawn.Points < 3 || drawn.Control != drawn.Points || drawn.Treatment != drawn.Points || drawn.Band < 2 || drawn.Latest != 1 {
		t.Errorf("the history chart after several evaluations: %+v", drawn)
	}
	if code, plan := call(t, "GET", s.planURL(flag, "?history=true"), s.personal, nil); code != 200 ||
		len(plan["guardrails"].([]any)[0].(map[string]any)["history"].([]any)) != drawn.Points {
		t.Errorf("the API's history (%d) does not hold the %d points the chart draws", code, drawn.Points)
	}
	shoot(t, ctx, "release-plan")
	text := value(t, ctx, "guardrail", chromedp.Text(chromedp.CSS(`[data-guardrail]`)))
	if !strings.Contains(text, "regression") || !strings.Contains(text, "sequence") {
		t.Errorf("the guardrail does not show the regression and its interval: %q", text)
	}
}

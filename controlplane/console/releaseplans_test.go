package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// planForm is the start form with two steps (5% then 100%) and the $exception guardrail;
// set overrides fields.
func planForm(tok string, set map[string]string) url.Values {
	f := url.Values{"csrf_token": {tok}, "step0_rollout": {"5"}, "step0_duration": {"600"}, "step0_exposures": {"1000"},
		"step1_rollout": {"100"}, "step1_duration": {"600"}, "step1_exposures": {"1000"},
		"guard0_event": {"$exception"}, "guard0_stat": {"count"}, "guard0_direction": {"increase"},
		"alpha": {"0.05"}, "on_regression": {"rollback"}}
	for k, v := range set {
		f.Set(k, v)
	}
	return f
}

// TestConsoleReleasePlan starts a release plan from a flag's plan page, watches it and
// pauses, resumes and cancels it; bad input is told beside the form and starts nothing; a
// member who may not change the flag sees the plan but no form or buttons, and their POSTs,
// like ones without the CSRF token, are refused.
func TestConsoleReleasePlan(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	admin := s.browser()
	tok := admin.login("admin@example.com", s.password)
	base := fmt.Sprintf("/project/%d/feature_flags", s.project)
	p := admin.post(base+"/new", url.Values{"csrf_token": {tok}, "key": {"guarded"}, "active": {"on"}, "cond_count": {"1"}, "action": {"save"}})
	flagPath, _, _ := strings.Cut(p.location, "?")
	planPath := flagPath + "/release_plan"
	if page := admin.get(flagPath); !strings.Contains(page.body, `href="`+planPath+`"`) {
		t.Fatalf("the flag page does not link to its release plan: %.3000s", page.body)
	}
	page := admin.get(planPath)
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="plan-form"`) || strings.Contains(page.body, "data-state=") {
		t.Fatalf("a flag without a plan does not offer the form: %d %.3000s", page.status, page.body)
	}

	for _, tc := range []struct {
		set        map[string]string
		says, attr string
	}{
		{map[string]string{"step0_rollout": "", "step1_rollout": ""}, "A plan needs at least one step.", "steps"},
		{map[string]string{"step1_rollout": "150"}, "rollout_percentage must be above 0 and at most 100.", "steps.1.rollout_percentage"},
		{map[string]string{"step0_rollout": "five"}, "rollout_percentage must be above 0 and at most 100.", "steps.0.rollout_percentage"},
		{map[string]string{"guard0_event": ""}, "A plan needs at least one guardrail.", "guardrails"},
		{map[string]string{"guard0_stat": "mean"}, "A mean needs the numeric property it averages.", "guardrails.0.property"},
		{map[string]string{"alpha": "0.9"}, "alpha must be above 0 and at most 0.2.", "alpha"},
	} {
		p := admin.post(planPath, planForm(tok, tc.set))
		if p.status != http.StatusBadRequest || !strings.Contains(p.body, tc.says) || !strings.Contains(p.body, `data-attr="`+tc.attr+`"`) ||
			!strings.Contains(p.body, `id="plan-form"`) {
			t.Errorf("%v: %d, want 400 saying %q about %s beside the form: %.3000s", tc.set, p.status, tc.says, tc.attr, p.body)
		}
	}
	if p := admin.post(planPath, planForm(tok, map[string]string{"step1_rollout": "150"})); !strings.Contains(p.body, `name="step1_rollout" value="150"`) ||
		!strings.Contains(p.body, `class="has-error"`) {
		t.Errorf("a refused form does not keep what was typed or mark the field: %.4000s", p.body)
	}
	if page := admin.get(planPath); strings.Contains(page.body, "data-state=") {
		t.Fatal("bad input started a plan")
	}

	if p := admin.post(planPath, planForm(tok, nil)); p.status != http.StatusSeeOther {
		t.Fatalf("start: %d %.2000s", p.status, p.body)
	}
	page = admin.get(planPath)
	for _, want := range []string{`data-state="running"`, "Release plan started: the flag is rolled out to 5%.", `<span class="tag">started</span>`,
		"$exception per user", "waiting for users", `<svg class="plan-chart"`, `>Pause</button>`, `>Cancel plan</button>`} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the running plan's page lacks %q", want)
		}
	}
	if strings.Contains(page.body, `id="plan-form"`) {
		t.Error("a second plan is offered while one runs")
	}
	adminUser, err := postgres.NewUserService(s.db, bcrypt.MinCost).CheckPassword(ctx, "admin@example.com", s.password)
	if err != nil {
		t.Fatal(err)
	}
	flags := postgres.NewServices(s.db, bcrypt.MinCost).Flags
	var flagID int64
	fmt.Sscanf(flagPath[strings.LastIndex(flagPath, "/")+1:], "%d", &flagID)
	f, err := flags.FindFlagByID(controlplane.NewContextWithUser(ctx, adminUser), s.project, flagID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(f.Filters), `"rollout_percentage": 5}`) {
		t.Errorf("the first step is not written to the flag: %s", f.Filters)
	}

	// A member who may not change the flag (role access) sees the plan, not the controls.
	users := postgres.NewUserService(s.db, bcrypt.MinCost)
	if _, err := postgres.CreateUser(ctx, s.db, "admin@example.com", "viewer@example.com", "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := users.SetPassword(ctx, "viewer@example.com", "viewer password"); err != nil {
		t.Fatal(err)
	}
	role, err := postgres.NewRoleService(s.db).CreateRole(controlplane.NewContextWithUser(ctx, adminUser), controlplaneRole("Release team"))
	if err != nil {
		t.Fatal(err)
	}
	if p := admin.post(flagPath+"/role_access", url.Values{"csrf_token": {tok}, "role_id": {role.ID}}); p.status != http.StatusSeeOther {
		t.Fatalf("grant: %d", p.status)
	}
	viewer := s.browser()
	vtok := viewer.login("viewer@example.com", "viewer password")
	if vp := viewer.get(planPath); vp.status != http.StatusOK || !strings.Contains(vp.body, `data-state="running"`) ||
		strings.Contains(vp.body, `>Pause</button>`) || strings.Contains(vp.body, `>Cancel plan</button>`) {
		t.Errorf("the viewer's plan page: %d %.3000s", vp.status, vp.body)
	}
	for _, path := range []string{planPath + "/pause", planPath + "/cancel"} {
		if p := viewer.post(path, url.Values{"csrf_token": {vtok}}); p.status != http.StatusForbidden {
			t.Errorf("viewer POST %s: %d, want 403", path, p.status)
		}
	}
	if p := admin.post(planPath+"/pause", url.Values{"csrf_token": {"forged"}}); p.status != http.StatusForbidden {
		t.Errorf("a POST with a forged CSRF token: %d, want 403", p.status)
	}
	if p := admin.post(planPath+"/explode", url.Values{"csrf_token": {tok}}); p.status != http.StatusNotFound {
		t.Errorf("an unknown action: %d, want 404", p.status)
	}

	steer := func(action, state, says string) string {
		t.Helper()
		if p := admin.post(planPath+"/"+action, url.Values{"csrf_token": {tok}}); p.status != http.StatusSeeOther {
			t.Fatalf("%s: %d %.1000s", action, p.status, p.body)
		}
		page := admin.get(planPath)
		if !strings.Contains(page.body, `data-state="`+state+`"`) || !strings.Contains(page.body, says) ||
			!strings.Contains(page.body, `<span class="tag">`+action[:len(action)-1]) {
			t.Fatalf("after %s the page does not show %s, %q and the decision: %.4000s", action, state, says, page.body)
		}
		return page.body
	}
	if body := steer("pause", "paused", "Release plan paused."); !strings.Contains(body, `>Resume</button>`) {
		t.Error("a paused plan offers no resume")
	}
	if p := viewer.post(planPath+"/resume", url.Values{"csrf_token": {vtok}}); p.status != http.StatusForbidden {
		t.Errorf("viewer resume: %d, want 403", p.status)
	}
	steer("resume", "running", "Release plan resumed.")
	if body := steer("cancel", "cancelled", "Release plan cancelled"); !strings.Contains(body, `id="plan-form"`) || strings.Contains(body, `>Pause</button>`) {
		t.Error("a cancelled plan is still steerable, or no new plan is offered")
	}
	if p := admin.post(planPath+"/pause", url.Values{"csrf_token": {tok}}); p.status != http.StatusSeeOther ||
		!strings.Contains(admin.get(planPath).body, "The flag has no running or paused release plan.") {
		t.Errorf("pausing an ended plan: %d, want a redirect that says why", p.status)
	}
	if vp := viewer.get(planPath); strings.Contains(vp.body, `id="plan-form"`) {
		t.Error("the viewer is offered the start form")
	}
}

// TestConsoleReleasePlanThroughTheGate: on a flag whose rollout changes need approval, the
// start form leads to the change request that now holds the plan; once it is approved, the
// plan page shows the plan running and the request that started it.
func TestConsoleReleasePlanThroughTheGate(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx, admin := s.admin(t)
	services := postgres.NewServices(s.db, 4)
	key := "gated-plan"
	flag, err := services.Flags.CreateFlag(ctx, s.project, controlplane.FlagUpdate{Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	update := controlplane.ActionFlagUpdate
	if _, err := services.Approvals.CreateApprovalPolicy(ctx, s.project, controlplane.ApprovalPolicyUpdate{ActionKey: &update,
		ApproverConfig: &controlplane.ApproverConfig{Users: []int64{admin.ID}, Quorum: 1}}); err != nil {
		t.Fatal(err)
	}
	m, mtok, _ := s.member(t, "member@example.com")
	planPath := fmt.Sprintf("/project/%d/feature_flags/%d/release_plan", s.project, flag.ID)
	held := m.post(planPath, planForm(mtok, nil))
	if held.status != http.StatusSeeOther || !strings.Contains(held.location, "/change_requests/") {
		t.Fatalf("gated start: %d %q %.500s", held.status, held.location, held.body)
	}
	review := m.get(held.location)
	for _, want := range []string{"Sent for review", "Start a release plan on feature flag &#39;gated-plan&#39;: rollout 5% -&gt; 100%"} {
		if !strings.Contains(review.body, want) {
			t.Errorf("the review page lacks %q: %.4000s", want, review.body)
		}
	}
	if page := m.get(planPath); strings.Contains(page.body, "data-state=") {
		t.Fatal("a plan exists before its approval")
	}
	id := held.location[strings.LastIndex(strings.TrimSuffix(held.location, "/"), "/")+1:]
	id, _, _ = strings.Cut(id, "?")
	if d, err := services.Approvals.ApproveChangeRequest(ctx, s.project, id, ""); err != nil || d.Status != controlplane.StateApplied {
		t.Fatalf("approve %s: %+v, %v", id, d, err)
	}
	page := m.get(planPath)
	if !strings.Contains(page.body, `data-state="running"`) || !strings.Contains(page.body, "Started on the approval of") {
		t.Errorf("the approved plan's page: %.4000s", page.body)
	}
}

package postgres_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// gatedPlanEnv is an approvals environment (newApprovalEnv: the flag at 10%, alice and bob
// approve) whose requester starts release plans.
type gatedPlanEnv struct {
	*approvalEnv
	fx *planFixture // as the requester
}

func newGatedPlanEnv(t *testing.T) *gatedPlanEnv {
	t.Helper()
	e := newApprovalEnv(t)
	fx := &planFixture{db: e.db, ctx: e.reqCtx, plans: postgres.NewReleasePlanStore(e.db), flags: postgres.NewFlagService(e.db),
		events: postgres.NewEventStore(e.db, slog.New(slog.NewTextHandler(io.Discard, nil))), pid: e.project, flag: e.flag}
	return &gatedPlanEnv{approvalEnv: e, fx: fx}
}

// gatedStart starts twoSteps as the requester and expects the gate to file a request for it.
func (g *gatedPlanEnv) gatedStart(t *testing.T, code string) *controlplane.ChangeRequest {
	t.Helper()
	_, err := g.fx.plans.CreateReleasePlan(g.reqCtx, g.project, g.flag.ID, twoSteps())
	var gate *controlplane.ApprovalRequiredError
	if !errors.As(err, &gate) || gate.Code != code {
		t.Fatalf("CreateReleasePlan: got %v, want %s", err, code)
	}
	return gate.ChangeRequest
}

// approvedPlan starts twoSteps through its change request, approved by alice.
func (g *gatedPlanEnv) approvedPlan(t *testing.T) (*controlplane.ChangeRequest, *controlplane.ReleasePlan) {
	t.Helper()
	cr := g.gatedStart(t, "approval_required")
	d, err := g.s.Approvals.ApproveChangeRequest(g.aliceCtx, g.project, cr.ID, "")
	if err != nil || d.Status != controlplane.StateApplied {
		t.Fatalf("approving the plan: %+v, %v", d, err)
	}
	p, err := g.fx.plans.FindReleasePlan(g.reqCtx, g.project, g.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	return cr, p
}

// balanced stores 500 exposed users per arm with equal $exception rates: enough for the
// first step (no minimum) to advance.
func (g *gatedPlanEnv) balanced(t *testing.T, prefix string) {
	t.Helper()
	g.fx.traffic(t, prefix+"c", 0, 500, 10, "$exception", false)
	g.fx.traffic(t, prefix+"t", 0, 500, 10, "$exception", true)
}

func (g *gatedPlanEnv) evaluate(t *testing.T) []controlplane.ReleaseDecision {
	t.Helper()
	decided, err := g.fx.plans.EvaluatePlans(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return decided
}

func (g *gatedPlanEnv) plan(t *testing.T) *controlplane.ReleasePlan {
	t.Helper()
	p, err := g.fx.plans.FindReleasePlan(g.reqCtx, g.project, g.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func allowApprovedPlans(u *controlplane.ApprovalPolicyUpdate) {
	u.AllowApprovedReleasePlans = ptr(true)
}

// TestReleasePlanStartIsGated: on a flag whose rollout changes need approval, starting a plan
// files a change request for the plan (its steps and guardrails in the intent, described for
// reviewers, reported to webhooks) and starts nothing; approving it starts the plan in the
// vote's transaction, its first step written to the flag.
func TestReleasePlanStartIsGated(t *testing.T) {
	t.Parallel()
	g := newGatedPlanEnv(t)
	g.policy(t, controlplane.ActionFlagUpdate, 1)
	url, secret := "https://93.184.215.14/hook", "0123456789abcdef"
	if _, err := g.s.Webhooks.CreateWebhook(g.adminCtx, g.project, controlplane.WebhookUpdate{URL: &url, Secret: &secret,
		Events: []string{controlplane.EventChangeRequestRequested, controlplane.EventChangeRequestApplied}}); err != nil {
		t.Fatal(err)
	}

	cr := g.gatedStart(t, "approval_required")
	if in := cr.Intent.ReleasePlan; in == nil || len(in.Steps) != 2 || in.Steps[0].RolloutPercentage != 50 ||
		len(in.Guardrails) != 2 || in.Alpha != 0.05 || in.OnRegression != controlplane.OnRegressionRollback {
		t.Fatalf("the request's plan: %+v", cr.Intent.ReleasePlan)
	}
	if d := cr.IntentDisplay.Description; !strings.Contains(d, "Start a release plan on feature flag 'checkout': rollout 50% -> 100%") ||
		!strings.Contains(d, "$exception per user") {
		t.Errorf("description: %q", d)
	}
	if cr.ActionKey != controlplane.ActionFlagUpdate || cr.ResourceID == nil || *cr.ResourceID != strconv.FormatInt(g.flag.ID, 10) {
		t.Errorf("filed %+v", cr)
	}
	if _, err := g.fx.plans.FindReleasePlan(g.reqCtx, g.project, g.flag.ID); controlplane.ErrorKind(err) != controlplane.NotFound {
		t.Errorf("a gated plan exists before approval: %v", err)
	}
	if got := g.fx.rollout(t); got != 10.0 {
		t.Errorf("the gated start moved the rollout to %v", got)
	}
	if dup := g.gatedStart(t, "change_request_pending"); dup.ID != cr.ID {
		t.Errorf("a second start names %s, not the pending %s", dup.ID, cr.ID)
	}

	d, err := g.s.Approvals.ApproveChangeRequest(g.aliceCtx, g.project, cr.ID, "plan looks sane")
	if err != nil || d.Status != controlplane.StateApplied || d.Result == nil || d.Result.ResourceID != g.flag.ID {
		t.Fatalf("approval: %+v, %v", d, err)
	}
	p := g.plan(t)
	if p.State != controlplane.PlanRunning || p.ApprovedChangeRequest != cr.ID || p.CreatedBy.ID != g.requester.ID ||
		len(p.Decisions) != 1 || !strings.Contains(p.Decisions[0].Reason, "approved in change request "+cr.ID) {
		t.Errorf("the approved plan: %+v", p)
	}
	if got := g.fx.rollout(t); got != 50.0 {
		t.Errorf("rollout after approval = %v, want the first step's 50", got)
	}
	var kinds []string
	rows, err := g.db.Pool.Query(t.Context(), `SELECT kind FROM webhook_deliveries ORDER BY created_at, kind`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, k)
	}
	if got := strings.Join(kinds, ","); got != "change_request.requested,change_request.applied" {
		t.Errorf("webhook events: %s", got)
	}
}

// TestReleasePlanAdvanceWaitsForApproval: without allow_approved_release_plans, an advance of
// even an approved plan files a change request and the plan waits, naming it; it advances in
// the vote that applies the request.
func TestReleasePlanAdvanceWaitsForApproval(t *testing.T) {
	t.Parallel()
	g := newGatedPlanEnv(t)
	g.policy(t, controlplane.ActionFlagUpdate, 1)
	g.approvedPlan(t)
	g.balanced(t, "")

	decided := g.evaluate(t)
	if len(decided) != 1 || decided[0].Kind != controlplane.DecisionAwaitingApproval || decided[0].Step != 0 {
		t.Fatalf("decisions: %+v", decided)
	}
	p := g.plan(t)
	if p.WaitingChangeRequest == "" || p.State != controlplane.PlanRunning || p.Step != 0 ||
		!strings.Contains(decided[0].Reason, "change request "+p.WaitingChangeRequest) {
		t.Fatalf("waiting plan: %+v, reason %q", p, decided[0].Reason)
	}
	if got := g.fx.rollout(t); got != 50.0 {
		t.Errorf("a gated advance moved the rollout to %v", got)
	}
	if again := g.evaluate(t); len(again) != 0 {
		t.Errorf("a waiting plan decided again: %+v", again)
	}
	cr, err := g.s.Approvals.FindChangeRequestByID(g.aliceCtx, g.project, p.WaitingChangeRequest)
	if err != nil || cr.CreatedBy.ID != g.requester.ID || cr.State != controlplane.StatePending {
		t.Fatalf("the advance's request: %+v, %v", cr, err)
	}

	d, err := g.s.Approvals.ApproveChangeRequest(g.bobCtx, g.project, cr.ID, "")
	if err != nil || d.Status != controlplane.StateApplied {
		t.Fatalf("approving the advance: %+v, %v", d, err)
	}
	p = g.plan(t)
	last := p.Decisions[len(p.Decisions)-1]
	if p.Step != 1 || p.WaitingChangeRequest != "" || last.Kind != controlplane.DecisionAdvanced || last.Step != 1 ||
		!strings.Contains(last.Reason, cr.ID) {
		t.Errorf("after the approval: step %d, waiting %q, last decision %+v", p.Step, p.WaitingChangeRequest, last)
	}
	if got := g.fx.rollout(t); got != 100.0 {
		t.Errorf("rollout = %v, want the second step's 100", got)
	}
}

// TestReleasePlanRejectedAdvancePauses: a rejected advance pauses the plan, saying so; resumed,
// it asks again.
func TestReleasePlanRejectedAdvancePauses(t *testing.T) {
	t.Parallel()
	g := newGatedPlanEnv(t)
	g.policy(t, controlplane.ActionFlagUpdate, 1)
	g.approvedPlan(t)
	g.balanced(t, "")
	g.evaluate(t)
	waiting := g.plan(t).WaitingChangeRequest
	if _, err := g.s.Approvals.RejectChangeRequest(g.aliceCtx, g.project, waiting, "not this week"); err != nil {
		t.Fatal(err)
	}
	p := g.plan(t)
	last := p.Decisions[len(p.Decisions)-1]
	if p.State != controlplane.PlanPaused || p.WaitingChangeRequest != "" || last.Kind != controlplane.DecisionPaused ||
		!strings.Contains(last.Reason, waiting+" for the next step was rejected") {
		t.Fatalf("after the rejection: %+v, last %+v", p, last)
	}
	if _, err := g.fx.plans.SetReleasePlanState(g.reqCtx, g.project, g.flag.ID, controlplane.PlanRunning); err != nil {
		t.Fatal(err)
	}
	decided := g.evaluate(t)
	if len(decided) != 1 || decided[0].Kind != controlplane.DecisionAwaitingApproval || strings.Contains(decided[0].Reason, waiting) {
		t.Errorf("resumed: %+v, want a new request", decided)
	}
}

// TestReleasePlanApprovedAdvancesWithoutReview: a policy with allow_approved_release_plans
// lets an approved plan advance on its own; a plan that was never approved still asks.
func TestReleasePlanApprovedAdvancesWithoutReview(t *testing.T) {
	t.Parallel()
	t.Run("approved", func(t *testing.T) {
		t.Parallel()
		g := newGatedPlanEnv(t)
		g.policy(t, controlplane.ActionFlagUpdate, 1, allowApprovedPlans)
		g.approvedPlan(t)
		g.balanced(t, "")
		decided := g.evaluate(t)
		if len(decided) != 1 || decided[0].Kind != controlplane.DecisionAdvanced {
			t.Fatalf("decisions: %+v", decided)
		}
		if got := g.fx.rollout(t); got != 100.0 {
			t.Errorf("rollout = %v, want 100", got)
		}
	})
	t.Run("never approved", func(t *testing.T) {
		t.Parallel()
		g := newGatedPlanEnv(t)
		if _, err := g.fx.plans.CreateReleasePlan(g.reqCtx, g.project, g.flag.ID, twoSteps()); err != nil {
			t.Fatal(err) // no policy yet: the plan starts at once, unapproved
		}
		g.policy(t, controlplane.ActionFlagUpdate, 1, allowApprovedPlans)
		g.balanced(t, "")
		decided := g.evaluate(t)
		if len(decided) != 1 || decided[0].Kind != controlplane.DecisionAwaitingApproval {
			t.Fatalf("decisions: %+v", decided)
		}
	})
}

// TestReleasePlanRollbackPassesGate: a regression rolls back at once under a gate without the
// option — no request, no reviewer — and ends the wait for a pending advance, whose request
// then fails on its precondition.
func TestReleasePlanRollbackPassesGate(t *testing.T) {
	t.Parallel()
	g := newGatedPlanEnv(t)
	g.policy(t, controlplane.ActionFlagUpdate, 1)
	g.approvedPlan(t)
	g.balanced(t, "")
	g.evaluate(t)
	waiting := g.plan(t).WaitingChangeRequest
	if waiting == "" {
		t.Fatal("the advance did not wait")
	}
	g.fx.traffic(t, "rc", 0, 600, 20, "$exception", false) // 5%
	g.fx.traffic(t, "rt", 0, 600, 2, "$exception", true)   // 50%
	decided := g.evaluate(t)
	if len(decided) != 1 || decided[0].Kind != controlplane.DecisionRolledBack {
		t.Fatalf("decisions: %+v", decided)
	}
	if got := g.fx.rollout(t); got != 10.0 {
		t.Errorf("rollout after the rollback = %v, want the 10 from before the plan", got)
	}
	p := g.plan(t)
	if p.State != controlplane.PlanRolledBack || p.WaitingChangeRequest != "" {
		t.Errorf("plan: state %s, waiting %q", p.State, p.WaitingChangeRequest)
	}
	var open int
	if err := g.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM change_requests WHERE state = 'pending' AND id <> $1::uuid`,
		waiting).Scan(&open); err != nil || open != 0 {
		t.Errorf("the rollback filed %d requests, %v", open, err)
	}
	d, err := g.s.Approvals.ApproveChangeRequest(g.aliceCtx, g.project, waiting, "")
	if err != nil || d.Status != controlplane.StateFailed {
		t.Errorf("approving the stale advance: %+v, %v", d, err)
	}
	if p := g.plan(t); p.State != controlplane.PlanRolledBack {
		t.Errorf("the failed request moved the rolled-back plan to %s", p.State)
	}
	if got := g.fx.rollout(t); got != 10.0 {
		t.Errorf("rollout = %v after the stale request", got)
	}
}

// TestReleasePlanAdvanceBehindAnotherRequest: an advance the gate stops while a person's
// request to change the flag's rollout is pending cannot wait for a request of its own (one
// open request per action and flag): the plan pauses, naming the pending one.
func TestReleasePlanAdvanceBehindAnotherRequest(t *testing.T) {
	t.Parallel()
	g := newGatedPlanEnv(t)
	g.policy(t, controlplane.ActionFlagUpdate, 1)
	g.approvedPlan(t)
	other := g.gated(t, g.reqCtx, controlplane.FlagUpdate{
		Filters: json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 70}]}`)}, "approval_required")
	g.balanced(t, "")
	decided := g.evaluate(t)
	if len(decided) != 1 || decided[0].Kind != controlplane.DecisionPaused || !strings.Contains(decided[0].Reason, other.ID) {
		t.Fatalf("decisions: %+v", decided)
	}
	if p := g.plan(t); p.State != controlplane.PlanPaused || p.WaitingChangeRequest != "" {
		t.Errorf("plan: state %s, waiting %q", p.State, p.WaitingChangeRequest)
	}
	if got := g.fx.rollout(t); got != 50.0 {
		t.Errorf("rollout = %v", got)
	}
}

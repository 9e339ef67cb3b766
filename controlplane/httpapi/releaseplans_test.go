package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestReleasePlanBodies: what is wrong in a plan's body is a 400 naming the field, never a
// 5xx; a flag without a plan is a 404; a started plan answers its state.
func TestReleasePlanBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flag := e.mustCreateFlag(map[string]any{"key": "guarded"})
	path := e.flagsPath(fmt.Sprintf("/%d/release_plan/", flag))
	step := map[string]any{"rollout_percentage": 10}
	guard := map[string]any{"event": "$exception"}
	for _, c := range []struct {
		body any
		attr string
	}{
		{map[string]any{"steps": "10%", "guardrails": []any{guard}}, "steps"},
		{map[string]any{"steps": []any{map[string]any{"rollout_percentage": "ten"}}, "guardrails": []any{guard}}, "steps"},
		{map[string]any{"steps": []any{step}, "guardrails": []any{map[string]any{"evnt": "$exception"}}}, "guardrails"},
		{map[string]any{"steps": []any{step}, "guardrails": []any{guard}, "holdout": 5}, "holdout"},
		{map[string]any{"steps": []any{step}, "guardrails": []any{guard}, "alpha": "0.05"}, "alpha"},
		{map[string]any{"steps": nil, "guardrails": []any{guard}}, "steps"},
		{map[string]any{"steps": []any{map[string]any{"rollout_percentage": 101}}, "guardrails": []any{guard}}, "steps.0.rollout_percentage"},
		{map[string]any{"steps": []any{step}, "guardrails": []any{map[string]any{"event": "x", "direction": "up"}}}, "guardrails.0.direction"},
		{map[string]any{"steps": []any{step}, "guardrails": []any{guard}, "min_exposures_per_arm": 5}, "min_exposures_per_arm"},
	} {
		r := e.do("POST", path, e.key, c.body)
		if r.status != 400 || r.body["attr"] != c.attr || r.body["type"] != "validation_error" {
			t.Errorf("%v: %d %s, want a 400 on %s", c.body, r.status, r.raw, c.attr)
		}
	}
	if r := e.do("GET", path, e.key, nil); r.status != 404 {
		t.Errorf("no plan yet: %d %s", r.status, r.raw)
	}
	// alpha 0 (or absent) takes the default 0.05.
	r := e.do("POST", path, e.key, map[string]any{"steps": []any{step}, "guardrails": []any{guard}, "alpha": 0})
	if r.status != 201 || r.body["state"] != "running" || r.body["alpha"] != 0.05 || r.body["rollout_percentage"] != 10.0 {
		t.Fatalf("start: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", path, e.key, map[string]any{"steps": []any{step}, "guardrails": []any{guard}}); r.status != 400 || r.body["attr"] != "feature_flag" {
		t.Errorf("a second plan: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", e.flagsPath("/999999/release_plan/"), e.key, map[string]any{"steps": []any{step}, "guardrails": []any{guard}}); r.status != 404 {
		t.Errorf("no such flag: %d %s", r.status, r.raw)
	}
}

// evaluatePlans evaluates the running plans once, as a replica's releaser does.
func (e *env) evaluatePlans() {
	e.t.Helper()
	if _, err := postgres.NewReleasePlanStore(e.db).EvaluatePlans(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// TestReleasePlanHistoryAnswer: the GET answers the guardrails' histories only when asked
// (?history=true), one point per evaluation that changed a guardrail; a history= that is not
// a boolean is a 400 naming it.
func TestReleasePlanHistoryAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flag := e.mustCreateFlag(map[string]any{"key": "charted"})
	path := e.flagsPath(fmt.Sprintf("/%d/release_plan/", flag))
	if r := e.do("POST", path, e.key, map[string]any{"steps": []any{map[string]any{"rollout_percentage": 10, "min_duration_seconds": 600}},
		"guardrails": []any{map[string]any{"event": "$exception"}, map[string]any{"event": "$pageview", "property": "$duration", "stat": "mean"}}}); r.status != 201 {
		t.Fatalf("start: %d %s", r.status, r.raw)
	}
	e.evaluatePlans()
	e.evaluatePlans() // nothing changed: no second point
	r := e.do("GET", path, e.key, nil)
	if g := r.body["guardrails"].([]any)[0].(map[string]any); r.status != 200 || g["history"] != nil {
		t.Errorf("the default answer: %d %s", r.status, r.raw)
	}
	r = e.do("GET", path+"?history=true", e.key, nil)
	guardrails, _ := r.body["guardrails"].([]any)
	if r.status != 200 || len(guardrails) != 2 {
		t.Fatalf("with history: %d %s", r.status, r.raw)
	}
	for i, g := range guardrails {
		h, _ := g.(map[string]any)["history"].([]any)
		if len(h) != 1 {
			t.Fatalf("guardrail %d: history %v, want one point", i, h)
		}
		pt := h[0].(map[string]any)
		if pt["step"] != 0.0 || pt["change"] != nil || pt["control"].(map[string]any)["users"] != 0.0 || pt["at"] == nil {
			t.Errorf("guardrail %d's point: %v", i, pt)
		}
	}
	if r := e.do("GET", path+"?history=maybe", e.key, nil); r.status != 400 || r.body["attr"] != "history" {
		t.Errorf("history=maybe: %d %s", r.status, r.raw)
	}
}

// TestReleasePlanThroughTheGate: on a flag whose rollout changes a policy gates, POST
// release_plan answers as a gated flag PATCH does — 409 approval_required naming the change
// request, which holds the plan — and starts nothing; approving the request starts the plan,
// which names it. The policy's allow_approved_release_plans is read and written as a boolean.
func TestReleasePlanThroughTheGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flag := e.mustCreateFlag(map[string]any{"key": "gated-plan", "active": true,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 10}}}})
	me := e.do("GET", "/api/users/@me/", e.key, nil)
	policies := fmt.Sprintf("/api/projects/%d/approval_policies/", e.project)
	policy := e.do("POST", policies, e.key, map[string]any{"action_key": "feature_flag.update", "allow_self_approve": true,
		"approver_config": map[string]any{"users": []any{me.body["id"]}, "quorum": 1}, "allow_approved_release_plans": true})
	if policy.status != http.StatusCreated || policy.body["allow_approved_release_plans"] != true {
		t.Fatalf("policy: %d %s", policy.status, policy.raw)
	}
	if r := e.do("PATCH", policies+policy.str("id")+"/", e.key, map[string]any{"allow_approved_release_plans": "yes"}); r.status != 400 ||
		r.body["attr"] != "allow_approved_release_plans" {
		t.Errorf("a non-boolean option: %d %s", r.status, r.raw)
	}

	path := e.flagsPath(fmt.Sprintf("/%d/release_plan/", flag))
	body := map[string]any{"steps": []any{map[string]any{"rollout_percentage": 25}, map[string]any{"rollout_percentage": 100}},
		"guardrails": []any{map[string]any{"event": "$exception"}}}
	r := e.do("POST", path, e.key, body)
	id, _ := r.body["change_request_id"].(string)
	cr, _ := r.body["change_request"].(map[string]any)
	intent, _ := cr["intent"].(map[string]any)
	plan, _ := intent["release_plan"].(map[string]any)
	if r.status != http.StatusConflict || r.body["code"] != "approval_required" || id == "" || plan == nil || len(plan["steps"].([]any)) != 2 {
		t.Fatalf("a gated start: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", path, e.key, nil); r.status != http.StatusNotFound {
		t.Errorf("a plan exists before its approval: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", path, e.key, body); r.status != http.StatusConflict || r.body["code"] != "change_request_pending" ||
		r.body["change_request_id"] != id {
		t.Errorf("a second start: %d %s", r.status, r.raw)
	}
	approve := e.do("POST", fmt.Sprintf("/api/projects/%d/change_requests/%s/approve/", e.project, id), e.key, map[string]any{})
	if approve.status != http.StatusOK || approve.body["status"] != "applied" {
		t.Fatalf("approve: %d %s", approve.status, approve.raw)
	}
	got := e.do("GET", path, e.key, nil)
	if got.status != http.StatusOK || got.body["state"] != "running" || got.body["approved_change_request_id"] != id ||
		got.body["waiting_change_request_id"] != nil || got.body["rollout_percentage"] != 25.0 {
		t.Errorf("the approved plan: %d %s", got.status, got.raw)
	}
}

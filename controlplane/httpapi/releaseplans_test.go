package httpapi_test

import (
	"context"
	"fmt"
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

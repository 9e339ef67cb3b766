package httpapi_test

import (
	"fmt"
	"testing"
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

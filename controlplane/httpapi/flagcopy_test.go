package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestCopyFlags copies a flag through the API into another project and a project of no
// organisation's, as PostHog answers: the copy as the flag API serialises it with team_id and
// the warnings of a dropped dependency, and the unknown project in failed.
func TestCopyFlags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := e.mustCreateFlag(map[string]any{"key": "base"})
	e.mustCreateFlag(map[string]any{"key": "promoted", "name": "Promoted", "filters": map[string]any{"groups": []any{
		map[string]any{"properties": []any{map[string]any{"key": fmt.Sprint(base), "type": "flag", "value": true, "operator": "flag_evaluates_to"}},
			"rollout_percentage": 30}}}})
	target := e.do("POST", "/api/projects/", e.key, map[string]any{"name": "Production"})
	targetID := int64(target.body["id"].(float64))
	path := "/api/organizations/@current/feature_flags/copy_flags/"

	r := e.do("POST", path, e.key, map[string]any{"feature_flag_key": "promoted", "from_project": e.project,
		"target_project_ids": []int64{targetID, 999999}})
	if r.status != http.StatusOK {
		t.Fatalf("copy: %d %s", r.status, r.raw)
	}
	success, _ := r.body["success"].([]any)
	failed, _ := r.body["failed"].([]any)
	if len(success) != 1 || len(failed) != 1 {
		t.Fatalf("copy: %s", r.raw)
	}
	copied := success[0].(map[string]any)
	if copied["key"] != "promoted" || copied["name"] != "Promoted" || copied["team_id"] != float64(targetID) || copied["active"] != false ||
		copied["can_edit"] != true || copied["filters"] == nil {
		t.Errorf("copied flag: %v", copied)
	}
	if w, _ := copied["flag_dependency_warnings"].([]any); len(w) != 2 ||
		w[0] != "Removed dependency on flag 'base' because no flag with that key exists in the target project." {
		t.Errorf("flag_dependency_warnings: %v", copied["flag_dependency_warnings"])
	}
	if _, ok := copied["copied_dependency_keys"]; ok {
		t.Errorf("copied_dependency_keys present without dependencies copied: %s", r.raw)
	}
	if f := failed[0].(map[string]any); f["project_id"] != float64(999999) || f["error_message"] != "Project not found." {
		t.Errorf("failed: %v", f)
	}
	got := e.do("GET", fmt.Sprintf("/api/projects/%d/feature_flags/%v/", targetID, copied["id"]), e.key, nil)
	if got.status != http.StatusOK || got.str("key") != "promoted" {
		t.Errorf("the copy in the target: %d %s", got.status, got.raw)
	}

	// With its dependency: base is copied first and the condition names the target's base.
	r = e.do("POST", path, e.key, map[string]any{"feature_flag_key": "promoted", "from_project": e.project,
		"target_project_ids": []int64{targetID}, "copy_dependencies": true})
	copied = r.body["success"].([]any)[0].(map[string]any)
	if keys, _ := copied["copied_dependency_keys"].([]any); r.status != http.StatusOK || len(keys) != 1 || keys[0] != "base" || copied["active"] != true {
		t.Errorf("copy with dependencies: %d %s", r.status, r.raw)
	}

	preview := e.do("POST", path+"dependency_requirements/", e.key, map[string]any{"feature_flag_key": "promoted",
		"from_project": e.project, "target_project_ids": []int64{targetID}})
	if preview.status != http.StatusOK || preview.body["can_copy_dependencies"] != false || preview.body["dependency_count"] != float64(1) ||
		fmt.Sprint(preview.body["reused_dependency_keys"]) != "[base]" {
		t.Errorf("preview: %d %s", preview.status, preview.raw)
	}
}

// TestCopyFlagsRefusals: PostHog's 400 and 403 of a copy, and the field errors of its body.
func TestCopyFlagsRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	locked := e.mustCreateFlag(map[string]any{"key": "locked"})
	role := e.mustRole("Locked editors", 37)
	if r := e.do("POST", e.flagsPath(fmt.Sprintf("/%d/role_access/", locked)), e.key, map[string]any{"role_id": role}); r.status != http.StatusCreated {
		t.Fatalf("role access: %d %s", r.status, r.raw)
	}
	memberKey, _ := e.mustUser("member@example.com", false)
	path := "/api/organizations/@current/feature_flags/copy_flags/"
	body := func(key string) map[string]any {
		return map[string]any{"feature_flag_key": key, "from_project": e.project, "target_project_ids": []int64{e.project}}
	}
	for _, p := range []string{path, path + "dependency_requirements/"} {
		r := e.do("POST", p, e.key, body("missing"))
		wantError(t, r, 400, "validation_error", "invalid_input", nil)
		if r.str("detail") != "Feature flag to copy does not exist." {
			t.Errorf("%s missing flag: %s", p, r.raw)
		}
		r = e.do("POST", p, memberKey, body("locked"))
		wantError(t, r, 403, "authentication_error", "permission_denied", nil)
		if r.str("detail") != "You do not have permission to copy this flag." {
			t.Errorf("%s restricted flag: %s", p, r.raw)
		}
	}
	for _, tc := range []struct {
		body map[string]any
		attr string
	}{
		{map[string]any{"from_project": e.project, "target_project_ids": []int64{e.project}}, "feature_flag_key"},
		{map[string]any{"feature_flag_key": "locked", "target_project_ids": []int64{e.project}}, "from_project"},
		{map[string]any{"feature_flag_key": "locked", "from_project": e.project, "target_project_ids": []int64{}}, "target_project_ids"},
		{map[string]any{"feature_flag_key": "locked", "from_project": e.project, "target_project_ids": make([]int64, 51)}, "target_project_ids"},
		{map[string]any{"feature_flag_key": "locked", "from_project": "one", "target_project_ids": []int64{1}}, "from_project"},
		{map[string]any{"feature_flag_key": "locked", "from_project": e.project, "target_project_ids": []int64{1}, "copy_schedule": "yes"}, "copy_schedule"},
	} {
		r := e.do("POST", path, e.key, tc.body)
		if r.status != 400 || r.body["attr"] != tc.attr {
			t.Errorf("%v: %d %s, want 400 on %s", tc.body, r.status, r.raw, tc.attr)
		}
	}
}

// TestCopyFlagsThroughTheGate copies an active flag into a project whose approval policy
// gates enabling flags: the target fails with the change request that now holds the copy, and
// the target has no such flag until the request is approved.
func TestCopyFlagsThroughTheGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mustCreateFlag(map[string]any{"key": "promoted", "active": true})
	targetID := int64(e.do("POST", "/api/projects/", e.key, map[string]any{"name": "Production"}).body["id"].(float64))
	me := e.do("GET", "/api/users/@me/", e.key, nil)
	if r := e.do("POST", fmt.Sprintf("/api/projects/%d/approval_policies/", targetID), e.key, map[string]any{
		"action_key": "feature_flag.enable", "approver_config": map[string]any{"users": []any{me.body["id"]}, "quorum": 1}}); r.status != http.StatusCreated {
		t.Fatalf("policy: %d %s", r.status, r.raw)
	}
	r := e.do("POST", "/api/organizations/@current/feature_flags/copy_flags/", e.key, map[string]any{"feature_flag_key": "promoted",
		"from_project": e.project, "target_project_ids": []int64{targetID}})
	failed, _ := r.body["failed"].([]any)
	if r.status != http.StatusOK || len(failed) != 1 {
		t.Fatalf("copy: %d %s", r.status, r.raw)
	}
	f := failed[0].(map[string]any)
	id, _ := f["change_request_id"].(string)
	if f["project_id"] != float64(targetID) || f["approval_pending"] != true || id == "" {
		t.Fatalf("failed: %v", f)
	}
	cr := e.do("GET", fmt.Sprintf("/api/projects/%d/change_requests/%s/", targetID, id), e.key, nil)
	if cr.status != http.StatusOK || cr.str("state") != "pending" || cr.str("action_key") != "feature_flag.enable" {
		t.Errorf("change request: %d %s", cr.status, cr.raw)
	}
	if list := e.do("GET", fmt.Sprintf("/api/projects/%d/feature_flags/?search=promoted", targetID), e.key, nil); list.body["count"] != float64(0) {
		t.Errorf("the target has the flag before any approval: %s", list.raw)
	}
}

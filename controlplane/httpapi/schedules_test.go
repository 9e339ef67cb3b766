package httpapi_test

import (
	"context"
	"fmt"
	"testing"
)

func (e *env) scheduledPath(suffix string) string {
	return fmt.Sprintf("/api/projects/%d/scheduled_changes%s", e.project, suffix)
}

// TestScheduledChangeValidation: every kind of bad input is a 400 in the documented shape,
// naming the field.
func TestScheduledChangeValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flag := e.mustCreateFlag(map[string]any{"key": "sched"})
	good := func(changes map[string]any) map[string]any {
		body := map[string]any{"record_id": fmt.Sprint(flag), "model_name": "FeatureFlag", "scheduled_at": "2030-05-01T10:00:00Z",
			"payload": map[string]any{"operation": "update_status", "value": true}}
		for k, v := range changes {
			if v == nil {
				delete(body, k)
			} else {
				body[k] = v
			}
		}
		return body
	}
	for _, tc := range []struct {
		name string
		body any
		code string
		attr any
	}{
		{"unknown flag", good(map[string]any{"record_id": "999999"}), "invalid_input", nil},
		{"record id not a number", good(map[string]any{"record_id": "abc"}), "invalid_input", nil},
		{"record id missing", good(map[string]any{"record_id": nil}), "required", "record_id"},
		{"record id of wrong type", good(map[string]any{"record_id": true}), "invalid_input", "record_id"},
		{"other model", good(map[string]any{"model_name": "Survey"}), "invalid_choice", "model_name"},
		{"bad operation", good(map[string]any{"payload": map[string]any{"operation": "explode", "value": true}}), "invalid_input", "payload"},
		{"status not boolean", good(map[string]any{"payload": map[string]any{"operation": "update_status", "value": "yes"}}), "invalid_input", "payload"},
		{"no value", good(map[string]any{"payload": map[string]any{"operation": "update_status"}}), "invalid_input", "payload"},
		{"payload not an object", good(map[string]any{"payload": "on"}), "invalid_input", "payload"},
		{"condition without groups", good(map[string]any{"payload": map[string]any{"operation": "add_release_condition", "value": map[string]any{}}}), "invalid_input", "payload"},
		{"variants not summing to 100", good(map[string]any{"payload": map[string]any{"operation": "update_variants",
			"value": map[string]any{"variants": []any{map[string]any{"key": "a", "rollout_percentage": 70}}}}}), "invalid_input", "payload"},
		{"bad date", good(map[string]any{"scheduled_at": "next tuesday"}), "invalid_date", "scheduled_at"},
		{"no date", good(map[string]any{"scheduled_at": nil}), "required", "scheduled_at"},
		{"recurring", good(map[string]any{"is_recurring": true, "recurrence_interval": "daily"}), "invalid_input", "is_recurring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.do("POST", e.scheduledPath("/"), e.key, tc.body), 400, "validation_error", tc.code, tc.attr)
		})
	}
	wantError(t, e.do("POST", e.scheduledPath("/"), e.key, "[1]"), 400, "validation_error", "invalid_payload", nil)
	if r := e.do("POST", e.scheduledPath("/"), e.key, good(nil)); r.status != 201 || r.body["record_id"] != fmt.Sprint(flag) ||
		r.body["executed_at"] != nil || r.body["failure_reason"] != nil || r.body["created_by"] == nil {
		t.Fatalf("a valid change: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", e.scheduledPath("/"), e.key, good(map[string]any{"record_id": flag})); r.status != 201 {
		t.Fatalf("record_id as a number: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", e.scheduledPath("/"), e.key, good(map[string]any{"record_id": "0" + fmt.Sprint(flag)})); r.status != 201 ||
		r.body["record_id"] != fmt.Sprint(flag) {
		t.Fatalf("record_id with a leading zero: %d %s", r.status, r.raw)
	}
}

// TestScheduledChangeListAndAccess: the list filters by model and record, a member who may
// not edit the flag can read but neither schedule nor cancel, and a deleted change is gone.
func TestScheduledChangeListAndAccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.mustCreateFlag(map[string]any{"key": "a"})
	b := e.mustCreateFlag(map[string]any{"key": "b"})
	create := func(key string, flag int64) response {
		return e.do("POST", e.scheduledPath("/"), key, map[string]any{"record_id": fmt.Sprint(flag), "model_name": "FeatureFlag",
			"scheduled_at": "2030-05-01T10:00:00Z", "payload": map[string]any{"operation": "update_status", "value": false}})
	}
	first := create(e.key, a)
	create(e.key, a)
	create(e.key, b)
	for path, want := range map[string]float64{
		"/": 3, fmt.Sprintf("/?record_id=%d", a): 2, fmt.Sprintf("/?record_id=%d&model_name=FeatureFlag", b): 1,
		"/?model_name=Survey": 0, "/?limit=1": 3,
	} {
		r := e.do("GET", e.scheduledPath(path), e.key, nil)
		if r.status != 200 || r.body["count"] != want {
			t.Errorf("GET %s: %d %s, want count %v", path, r.status, r.raw, want)
		}
	}

	// Restrict flag a to a role the member is not in.
	role := e.mustRole("Editors", 37)
	if r := e.do("POST", e.flagsPath(fmt.Sprintf("/%d/role_access/", a)), e.key, map[string]any{"role_id": role}); r.status != 201 {
		t.Fatalf("role access: %d %s", r.status, r.raw)
	}
	member, _ := e.mustUser("member@example.com", false)
	id := int64(first.body["id"].(float64))
	if r := e.do("GET", e.scheduledPath(fmt.Sprintf("/%d/", id)), member, nil); r.status != 200 {
		t.Errorf("member reads: %d %s", r.status, r.raw)
	}
	wantError(t, create(member, a), 403, "authentication_error", "permission_denied", nil)
	wantError(t, e.do("DELETE", e.scheduledPath(fmt.Sprintf("/%d/", id)), member, nil), 403, "authentication_error", "permission_denied", nil)
	if r := create(member, b); r.status != 201 {
		t.Errorf("member schedules an unrestricted flag: %d %s", r.status, r.raw)
	}

	if r := e.do("DELETE", e.scheduledPath(fmt.Sprintf("/%d/", id)), e.key, nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	wantError(t, e.do("GET", e.scheduledPath(fmt.Sprintf("/%d/", id)), e.key, nil), 404, "invalid_request", "not_found", nil)
	wantError(t, e.do("DELETE", e.scheduledPath(fmt.Sprintf("/%d/", id)), e.key, nil), 404, "invalid_request", "not_found", nil)
	wantError(t, e.do("GET", e.scheduledPath("/abc/"), e.key, nil), 404, "invalid_request", "not_found", nil)
}

// TestScheduledChangeUpdate: a pending change takes a new time and payload; its record and
// model do not change; one that has run cannot be changed.
func TestScheduledChangeUpdate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flag := e.mustCreateFlag(map[string]any{"key": "moved"})
	r := e.do("POST", e.scheduledPath("/"), e.key, map[string]any{"record_id": flag, "model_name": "FeatureFlag",
		"scheduled_at": "2030-05-01T10:00:00Z", "payload": map[string]any{"operation": "update_status", "value": false}})
	path := e.scheduledPath(fmt.Sprintf("/%v/", r.body["id"]))
	r = e.do("PATCH", path, e.key, map[string]any{"scheduled_at": "2030-06-01T10:00:00Z",
		"payload": map[string]any{"operation": "update_status", "value": true}, "record_id": fmt.Sprint(flag)})
	if r.status != 200 || r.body["scheduled_at"] != "2030-06-01T10:00:00.000000Z" || fmt.Sprint(r.body["payload"]) != "map[operation:update_status value:true]" {
		t.Fatalf("update: %d %s", r.status, r.raw)
	}
	wantError(t, e.do("PATCH", path, e.key, map[string]any{"record_id": "1234"}), 400, "validation_error", "invalid_input", "record_id")
	wantError(t, e.do("PATCH", path, e.key, map[string]any{"payload": map[string]any{"operation": "nope", "value": 1}}), 400, "validation_error", "invalid_input", "payload")
	wantError(t, e.do("PATCH", path, e.key, map[string]any{"scheduled_at": "soon"}), 400, "validation_error", "invalid_date", "scheduled_at")
	if _, err := e.db.Pool.Exec(context.Background(), `UPDATE scheduled_changes SET executed_at = now()`); err != nil {
		t.Fatal(err)
	}
	wantError(t, e.do("PATCH", path, e.key, map[string]any{"scheduled_at": "2030-07-01T10:00:00Z"}), 400, "validation_error", "invalid_input", nil)
	wantError(t, e.do("PATCH", e.scheduledPath("/999999/"), e.key, map[string]any{}), 404, "invalid_request", "not_found", nil)
}

package httpapi_test

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFlagLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	created := e.do("POST", e.flagsPath("/"), e.key, map[string]any{"key": "new-checkout", "name": "The new checkout"})
	if created.status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	id := int64(created.body["id"].(float64))
	var keys []string
	for k := range created.body {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	wantKeys := []string{"active", "analytics_dashboards", "bucketing_identifier", "can_edit", "created_at", "created_by", "deleted",
		"ensure_experience_continuity", "evaluation_contexts", "evaluation_counts", "evaluation_runtime", "evaluation_tags", "experiment_set", "features", "filters", "has_enriched_analytics", "id",
		"is_simple_flag", "key", "last_called_at", "last_modified_by", "name", "performed_rollback", "rollback_conditions",
		"rollout_percentage", "stale", "surveys", "tags", "updated_at", "usage_dashboard", "version"}
	if diff := cmp.Diff(wantKeys, keys); diff != "" {
		t.Errorf("flag fields (-want +got):\n%s", diff)
	}
	wantValues := map[string]any{
		"key": "new-checkout", "name": "The new checkout", "active": true, "deleted": false, "version": 1.0,
		"is_simple_flag": true, "rollout_percentage": nil, "can_edit": true, "tags": []any{},
		"experiment_set": []any{}, "surveys": map[string]any{}, "features": []any{},
		"analytics_dashboards": []any{}, "usage_dashboard": nil, "rollback_conditions": nil,
		"performed_rollback": false, "has_enriched_analytics": false, "ensure_experience_continuity": false,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": nil}}},
	}
	for k, want := range wantValues {
		if diff := cmp.Diff(want, created.body[k]); diff != "" {
			t.Errorf("field %s (-want +got):\n%s", k, diff)
		}
	}
	creator := created.body["created_by"].(map[string]any)
	if creator["email"] != "admin@example.com" || creator["uuid"] == "" || creator["distinct_id"] == "" {
		t.Errorf("created_by = %v", creator)
	}
	for _, k := range []string{"created_at", "updated_at"} {
		if _, err := time.Parse(time.RFC3339Nano, created.str(k)); err != nil {
			t.Errorf("%s = %q is not ISO 8601: %v", k, created.str(k), err)
		}
	}

	got := e.do("GET", e.flagsPath(fmt.Sprintf("/%d/", id)), e.key, nil)
	if diff := cmp.Diff(created.body, got.body); got.status != 200 || diff != "" {
		t.Errorf("get: %d (-created +got):\n%s", got.status, diff)
	}

	patched := e.do("PATCH", e.flagsPath(fmt.Sprintf("/%d", id)), e.key, map[string]any{
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 30}}},
		"tags":    []string{"checkout"}, "name": "Checkout v2",
	})
	if patched.status != 200 || patched.body["version"] != 2.0 || patched.body["rollout_percentage"] != 30.0 ||
		patched.body["name"] != "Checkout v2" || cmp.Diff([]any{"checkout"}, patched.body["tags"]) != "" {
		t.Errorf("patch: %d %s", patched.status, patched.raw)
	}

	// Every write names the project version that contains it; a write that changes nothing
	// names the current one, and reads name none.
	createdIn, _ := strconv.Atoi(created.header.Get("X-Flagedge-Snapshot-Version"))
	patchedIn, _ := strconv.Atoi(patched.header.Get("X-Flagedge-Snapshot-Version"))
	if createdIn <= 0 || patchedIn != createdIn+1 {
		t.Errorf("snapshot versions of the writes: created in %d, patched in %d", createdIn, patchedIn)
	}
	same := e.do("PATCH", e.flagsPath(fmt.Sprintf("/%d/", id)), e.key, map[string]any{"name": "Checkout v2"})
	if v := same.header.Get("X-Flagedge-Snapshot-Version"); v != strconv.Itoa(patchedIn) {
		t.Errorf("no-op patch: snapshot version %q, want %d", v, patchedIn)
	}
	if v := got.header.Get("X-Flagedge-Snapshot-Version"); v != "" {
		t.Errorf("a read names snapshot version %q", v)
	}

	// DELETE is never allowed: 405 and an empty body, and the flag is unchanged.
	del := e.do("DELETE", e.flagsPath(fmt.Sprintf("/%d/", id)), e.key, nil)
	if del.status != http.StatusMethodNotAllowed || len(del.raw) != 0 {
		t.Errorf("delete: %d %q, want 405 with no body", del.status, del.raw)
	}

	soft := e.do("PATCH", e.flagsPath(fmt.Sprintf("/%d/", id)), e.key, map[string]any{"deleted": true})
	if soft.status != 200 || soft.body["deleted"] != true {
		t.Fatalf("soft delete: %d %s", soft.status, soft.raw)
	}
	if list := e.do("GET", e.flagsPath("/"), e.key, nil); list.body["count"] != 0.0 {
		t.Errorf("a deleted flag is listed: %s", list.raw)
	}
	if still := e.do("GET", e.flagsPath(fmt.Sprintf("/%d", id)), e.key, nil); still.status != 200 || still.body["deleted"] != true {
		t.Errorf("get deleted flag: %d %s", still.status, still.raw)
	}

	// The key is free again once deleted; a restore then conflicts.
	other := e.mustCreateFlag(map[string]any{"key": "new-checkout"})
	restore := e.do("PATCH", e.flagsPath(fmt.Sprintf("/%d", id)), e.key, map[string]any{"deleted": false})
	wantError(t, restore, 400, "validation_error", "unique", "key")
	e.do("PATCH", e.flagsPath(fmt.Sprintf("/%d", other)), e.key, map[string]any{"deleted": true})
	restore = e.do("PATCH", e.flagsPath(fmt.Sprintf("/%d", id)), e.key, map[string]any{"deleted": false})
	if restore.status != 200 || restore.body["deleted"] != false {
		t.Errorf("restore: %d %s", restore.status, restore.raw)
	}
	if list := e.do("GET", e.flagsPath(""), e.key, nil); list.body["count"] != 1.0 {
		t.Errorf("restored flag not listed: %s", list.raw)
	}
}

func TestFlagWritableFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := map[string]any{
		"key": "all-fields", "name": "n", "active": false, "ensure_experience_continuity": true,
		"rollback_conditions": []any{map[string]any{"threshold": 10}}, "performed_rollback": true,
		"tags": []string{"a", "b"}, "analytics_dashboards": []int{4, 5}, "has_enriched_analytics": true,
		"created_at": "2024-03-01T10:00:00+02:00",
		// Read-only and unknown fields are ignored.
		"id": 999, "version": 50, "is_simple_flag": false, "can_edit": false, "whatever": 1,
	}
	r := e.do("POST", e.flagsPath(""), e.key, body)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	want := map[string]any{
		"active": false, "ensure_experience_continuity": true,
		"rollback_conditions": []any{map[string]any{"threshold": 10.0}}, "performed_rollback": true,
		"tags": []any{"a", "b"}, "analytics_dashboards": []any{4.0, 5.0}, "has_enriched_analytics": true,
		"created_at": "2024-03-01T08:00:00.000000Z", "version": 1.0, "is_simple_flag": true, "can_edit": true,
	}
	for k, w := range want {
		if diff := cmp.Diff(w, r.body[k]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	if r.body["id"] == 999.0 {
		t.Error("id was writable")
	}
	// rollback_conditions may be reset to null.
	p := e.do("PATCH", e.flagsPath(fmt.Sprintf("/%d", int64(r.body["id"].(float64)))), e.key, map[string]any{"rollback_conditions": nil})
	if p.status != 200 || p.body["rollback_conditions"] != nil {
		t.Errorf("reset rollback_conditions: %d %s", p.status, p.raw)
	}
}

func TestDerivedFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name    string
		filters map[string]any
		simple  bool
		rollout any
	}{
		{"rollout", map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 25}}}, true, 25.0},
		{"properties", map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "email", "value": "x", "operator": "icontains", "type": "person"}}, "rollout_percentage": 25}}}, false, nil},
		{"two-groups", map[string]any{"groups": []any{map[string]any{"rollout_percentage": 25}, map[string]any{"rollout_percentage": 50}}}, false, nil},
		{"group-flag", map[string]any{"aggregation_group_type_index": 0, "groups": []any{map[string]any{"rollout_percentage": 25}}}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", e.flagsPath(""), e.key, map[string]any{"key": tc.name, "filters": tc.filters})
			if r.status != 201 || r.body["is_simple_flag"] != tc.simple || r.body["rollout_percentage"] != tc.rollout {
				t.Errorf("got %d simple=%v rollout=%v, want simple=%v rollout=%v; %s", r.status,
					r.body["is_simple_flag"], r.body["rollout_percentage"], tc.simple, tc.rollout, r.raw)
			}
		})
	}
}

// TestFlagEvaluationRuntime: evaluation_runtime and evaluation_tags are written, read,
// validated as PostHog validates them, and logged in the activity.
func TestFlagEvaluationRuntime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := e.do("POST", e.flagsPath("/"), e.key, map[string]any{"key": "rt"})
	if created.status != 201 || created.body["evaluation_runtime"] != "all" || fmt.Sprint(created.body["evaluation_tags"]) != "[]" {
		t.Fatalf("defaults: %d %v %v", created.status, created.body["evaluation_runtime"], created.body["evaluation_tags"])
	}
	path := e.flagsPath(fmt.Sprintf("/%v/", created.body["id"]))
	r := e.do("PATCH", path, e.key, map[string]any{"evaluation_runtime": "client", "tags": []string{"Docs", "app"},
		"evaluation_tags": []string{" docs", "APP", "app"}})
	if r.status != 200 || r.body["evaluation_runtime"] != "client" || fmt.Sprint(r.body["evaluation_tags"]) != "[app docs]" {
		t.Fatalf("patch: %d %s", r.status, r.raw)
	}
	if got := e.do("GET", path, e.key, nil); got.body["evaluation_runtime"] != "client" || fmt.Sprint(got.body["evaluation_tags"]) != "[app docs]" {
		t.Errorf("read back: %v %v", got.body["evaluation_runtime"], got.body["evaluation_tags"])
	}
	wantError(t, e.do("PATCH", path, e.key, map[string]any{"evaluation_runtime": "edge"}), 400, "validation_error", "invalid_choice", "evaluation_runtime")
	wantError(t, e.do("PATCH", path, e.key, map[string]any{"evaluation_runtime": 1}), 400, "validation_error", "invalid_input", "evaluation_runtime")
	// Evaluation tags must be among the tags the same request sends, as in PostHog.
	bad := e.do("PATCH", path, e.key, map[string]any{"evaluation_tags": []string{"app"}})
	wantError(t, bad, 400, "validation_error", "invalid_input", "evaluation_tags")
	if d, _ := bad.body["detail"].(string); d != "Evaluation tags must be a subset of tags. Invalid evaluation tags: app" {
		t.Errorf("detail %q", d)
	}
	if r := e.do("PATCH", path, e.key, map[string]any{"evaluation_runtime": nil, "evaluation_tags": []string{}}); r.status != 200 ||
		r.body["evaluation_runtime"] != "all" || fmt.Sprint(r.body["evaluation_tags"]) != "[]" {
		t.Errorf("null runtime and no tags: %d %s", r.status, r.raw)
	}
	// bucketing_identifier is a field of the flag in PostHog (null: the distinct id).
	if r := e.do("PATCH", path, e.key, map[string]any{"bucketing_identifier": "device_id", "evaluation_contexts": []string{}}); r.status != 200 ||
		r.body["bucketing_identifier"] != "device_id" {
		t.Errorf("bucketing: %d %s", r.status, r.raw)
	}
	wantError(t, e.do("PATCH", path, e.key, map[string]any{"bucketing_identifier": "session_id"}), 400, "validation_error", "invalid_choice", "bucketing_identifier")
	if r := e.do("PATCH", path, e.key, map[string]any{"bucketing_identifier": nil}); r.status != 200 || r.body["bucketing_identifier"] != nil {
		t.Errorf("bucketing null: %d %s", r.status, r.raw)
	}
	activity := e.do("GET", path+"activity/", e.key, nil)
	if !strings.Contains(string(activity.raw), `"field":"evaluation_runtime"`) || !strings.Contains(string(activity.raw), `"field":"evaluation_tags"`) {
		t.Errorf("activity does not log the fields: %s", activity.raw)
	}
}

func TestFlagValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mustCreateFlag(map[string]any{"key": "taken"})
	person := func(op string, value any) map[string]any {
		return map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "p", "value": value, "operator": op, "type": "person"}}}}}
	}
	variants := func(pcts ...float64) map[string]any {
		var vs []any
		for i, p := range pcts {
			vs = append(vs, map[string]any{"key": fmt.Sprintf("v%d", i), "rollout_percentage": p})
		}
		return map[string]any{"groups": []any{map[string]any{}}, "multivariate": map[string]any{"variants": vs}}
	}
	for _, tc := range []struct {
		name       string
		body       any
		code, attr string
	}{
		{"no key", map[string]any{"name": "x"}, "required", "key"},
		{"bad key", map[string]any{"key": "has space"}, "invalid_key", "key"},
		{"unicode key", map[string]any{"key": "clé"}, "invalid_key", "key"},
		{"empty key", map[string]any{"key": ""}, "blank", "key"},
		{"duplicate key", map[string]any{"key": "taken"}, "unique", "key"},
		{"key not a string", map[string]any{"key": 12}, "invalid_input", "key"},
		{"name not a string", map[string]any{"key": "a", "name": 12}, "invalid_input", "name"},
		{"name null", map[string]any{"key": "a", "name": nil}, "invalid_input", "name"},
		{"active not a bool", map[string]any{"key": "a", "active": "yes"}, "invalid_input", "active"},
		{"tags not a list", map[string]any{"key": "a", "tags": "x"}, "invalid_input", "tags"},
		{"dashboards not ints", map[string]any{"key": "a", "analytics_dashboards": []string{"x"}}, "invalid_input", "analytics_dashboards"},
		{"created_at bad", map[string]any{"key": "a", "created_at": "yesterday"}, "invalid_date", "created_at"},
		{"filters not an object", map[string]any{"key": "a", "filters": []any{}}, "invalid_input", "filters"},
		{"groups not a list", map[string]any{"key": "a", "filters": map[string]any{"groups": "x"}}, "invalid_input", "filters"},
		{"variants sum", map[string]any{"key": "a", "filters": variants(50, 40)}, "invalid_input", "filters"},
		{"variant override unknown", map[string]any{"key": "a", "filters": map[string]any{
			"groups": []any{map[string]any{"variant": "nope"}}, "multivariate": map[string]any{"variants": []any{map[string]any{"key": "x", "rollout_percentage": 100}}}}}, "invalid_input", "filters"},
		{"rollout over 100", map[string]any{"key": "a", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 101}}}}, "invalid_input", "filters"},
		{"rollout negative", map[string]any{"key": "a", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": -1}}}}, "invalid_input", "filters"},
		{"group property on person flag", map[string]any{"key": "a", "filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "plan", "value": "x", "type": "group", "group_type_index": 0}}}}}}, "invalid_input", "filters"},
		{"person property on group flag", map[string]any{"key": "a", "filters": map[string]any{"aggregation_group_type_index": 1, "groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "plan", "value": "x", "type": "person"}}}}}}, "invalid_input", "filters"},
		{"other group type", map[string]any{"key": "a", "filters": map[string]any{"aggregation_group_type_index": 1, "groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "plan", "value": "x", "type": "group", "group_type_index": 0}}}}}}, "invalid_input", "filters"},
		{"regex not a string", map[string]any{"key": "a", "filters": person("regex", 5)}, "invalid_input", "filters"},
		{"icontains list", map[string]any{"key": "a", "filters": person("icontains", []string{"a"})}, "invalid_input", "filters"},
		{"gt object", map[string]any{"key": "a", "filters": person("gt", map[string]any{})}, "invalid_input", "filters"},
		{"unknown operator", map[string]any{"key": "a", "filters": person("sounds_like", "x")}, "invalid_input", "filters"},
		{"payload key on boolean flag", map[string]any{"key": "a", "filters": map[string]any{"groups": []any{}, "payloads": map[string]any{"v1": "{}"}}}, "invalid_input", "filters"},
		{"payload key not a variant", map[string]any{"key": "a", "filters": map[string]any{
			"groups": []any{}, "multivariate": map[string]any{"variants": []any{map[string]any{"key": "x", "rollout_percentage": 100}}},
			"payloads": map[string]any{"true": "{}"}}}, "invalid_input", "filters"},
		{"payload not JSON", map[string]any{"key": "a", "filters": map[string]any{"groups": []any{}, "payloads": map[string]any{"true": "{not json"}}}, "invalid_input", "filters"},
		{"aggregation index out of range", map[string]any{"key": "a", "filters": map[string]any{"aggregation_group_type_index": 7, "groups": []any{}}}, "invalid_input", "filters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", e.flagsPath(""), e.key, tc.body)
			wantError(t, r, 400, "validation_error", tc.code, tc.attr)
		})
	}
	t.Run("valid definitions are accepted", func(t *testing.T) {
		for i, filters := range []any{
			person("exact", []any{"a", 1, true}), person("is_set", nil), person("regex", `^\d+$`), person("gt", 10),
			person("gte", "10"), person("is_date_after", "-30d"), person("is_date_before", "2024-01-01"),
			person("semver_gte", "v1.2.3-beta"), person("semver_wildcard", "1.2.*"), person("not_icontains", "x"),
			// As PostHog: a pattern, date or version the server cannot read is saved, and
			// matches nothing (docs/flags.md).
			person("regex", "("), person("regex", "foo(?=bar)"), person("is_date_before", "last tuesday"),
			person("semver_gt", "one.two"),
			// Mixed targeting: a person condition in a group flag.
			map[string]any{"aggregation_group_type_index": 0, "groups": []any{
				map[string]any{"aggregation_group_type_index": nil, "properties": []any{map[string]any{"key": "plan", "value": "x", "type": "person"}}},
				map[string]any{"properties": []any{map[string]any{"key": "plan", "value": "x", "type": "group", "group_type_index": 0}}}}},
			variants(33.33, 33.33, 33.34),
			map[string]any{"groups": []any{}, "payloads": map[string]any{"true": `{"a": 1}`}},
			map[string]any{"groups": []any{}, "payloads": map[string]any{"true": map[string]any{"a": 1}}},
		} {
			r := e.do("POST", e.flagsPath(""), e.key, map[string]any{"key": fmt.Sprintf("ok-%d", i), "filters": filters})
			if r.status != 201 {
				t.Errorf("filters %v: %d %s", filters, r.status, r.raw)
			}
		}
	})
	t.Run("references", func(t *testing.T) {
		cohort := e.do("POST", fmt.Sprintf("/api/projects/%d/cohorts/", e.project), e.key, map[string]any{"name": "c", "filters": map[string]any{
			"properties": map[string]any{"type": "AND", "values": []any{map[string]any{"key": "plan", "value": "pro"}}}}})
		if cohort.status != 201 {
			t.Fatalf("cohort: %d %s", cohort.status, cohort.raw)
		}
		inCohort := func(id any) map[string]any {
			return map[string]any{"groups": []any{map[string]any{"properties": []any{map[string]any{"key": "id", "value": id, "type": "cohort"}}}}}
		}
		dependsOn := func(key string) map[string]any {
			return map[string]any{"groups": []any{map[string]any{"properties": []any{map[string]any{"key": key, "value": true, "type": "flag"}}}}}
		}
		if r := e.do("POST", e.flagsPath(""), e.key, map[string]any{"key": "in-cohort", "filters": inCohort(cohort.body["id"])}); r.status != 201 {
			t.Errorf("existing cohort: %d %s", r.status, r.raw)
		}
		if r := e.do("POST", e.flagsPath(""), e.key, map[string]any{"key": "dependent", "filters": dependsOn("taken")}); r.status != 201 {
			t.Errorf("existing flag: %d %s", r.status, r.raw)
		}
		wantError(t, e.do("POST", e.flagsPath(""), e.key, map[string]any{"key": "r1", "filters": inCohort(987654)}), 400, "validation_error", "invalid_input", "filters")
		wantError(t, e.do("POST", e.flagsPath(""), e.key, map[string]any{"key": "r2", "filters": dependsOn("nope")}), 400, "validation_error", "invalid_input", "filters")
		wantError(t, e.do("POST", e.flagsPath(""), e.key, map[string]any{"key": "self", "filters": dependsOn("self")}), 400, "validation_error", "invalid_input", "filters")
		// A cycle through other flags is refused with PostHog's message naming it.
		base := e.mustCreateFlag(map[string]any{"key": "cycle-a"})
		if r := e.do("POST", e.flagsPath(""), e.key, map[string]any{"key": "cycle-b", "filters": dependsOn(fmt.Sprint(base))}); r.status != 201 {
			t.Fatalf("cycle-b: %d %s", r.status, r.raw)
		}
		r := e.do("PATCH", e.flagsPath(fmt.Sprintf("/%d", base)), e.key, map[string]any{"filters": dependsOn("cycle-b")})
		wantError(t, r, 400, "validation_error", "invalid_input", "filters")
		if r.body["detail"] != "Circular dependency detected: cycle-a → cycle-b → cycle-a" {
			t.Errorf("detail %v", r.body["detail"])
		}
	})
	t.Run("malformed bodies", func(t *testing.T) {
		wantError(t, e.do("POST", e.flagsPath(""), e.key, `{"key": `), 400, "validation_error", "invalid_payload", nil)
		wantError(t, e.do("POST", e.flagsPath(""), e.key, `["key"]`), 400, "validation_error", "invalid_payload", nil)
		wantError(t, e.do("POST", e.flagsPath(""), e.key, `null`), 400, "validation_error", "invalid_payload", nil)
		big := `{"key": "big", "name": "` + strings.Repeat("x", 3<<20) + `"}`
		wantError(t, e.do("POST", e.flagsPath(""), e.key, big), 413, "invalid_request", "request_too_large", nil)
	})
	t.Run("patch validation", func(t *testing.T) {
		id := e.mustCreateFlag(map[string]any{"key": "patch-me"})
		path := e.flagsPath(fmt.Sprintf("/%d", id))
		wantError(t, e.do("PATCH", path, e.key, map[string]any{"key": "taken"}), 400, "validation_error", "unique", "key")
		wantError(t, e.do("PATCH", path, e.key, map[string]any{"key": "a b"}), 400, "validation_error", "invalid_key", "key")
		wantError(t, e.do("PATCH", path, e.key, map[string]any{"deleted": "yes"}), 400, "validation_error", "invalid_input", "deleted")
		if r := e.do("GET", path, e.key, nil); r.body["version"] != 1.0 || r.body["key"] != "patch-me" {
			t.Errorf("a rejected patch changed the flag: %s", r.raw)
		}
	})
}

func TestConcurrentCreatesOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 10
	statuses := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.do("POST", e.flagsPath(""), e.key, map[string]any{"key": "race"})
		}()
	}
	wg.Wait()
	counts := map[int]int{}
	for _, r := range statuses {
		counts[r.status]++
		if r.status == 400 && r.body["code"] != "unique" {
			t.Errorf("loser got %s", r.raw)
		}
	}
	if counts[201] != 1 || counts[400] != n-1 {
		t.Errorf("statuses %v, want one 201 and %d 400", counts, n-1)
	}
}

func TestFlagNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.mustCreateFlag(map[string]any{"key": "mine"})
	// A second project of the same organisation cannot see the first one's flag.
	p2 := e.do("POST", "/api/projects/", e.key, map[string]any{"name": "Second"})
	if p2.status != 201 {
		t.Fatalf("create project: %d %s", p2.status, p2.raw)
	}
	other := fmt.Sprintf("/api/projects/%d/feature_flags/%d", int64(p2.body["id"].(float64)), id)
	for _, path := range []string{other, other + "/activity", e.flagsPath("/999999"), e.flagsPath("/abc"), e.flagsPath("/999999/activity")} {
		for _, method := range []string{"GET", "PATCH"} {
			if strings.HasSuffix(path, "activity") && method == "PATCH" {
				continue
			}
			r := e.do(method, path, e.key, map[string]any{"name": "x"})
			wantError(t, r, 404, "invalid_request", "not_found", nil)
		}
	}
	wantError(t, e.do("GET", "/api/nothing-here", e.key, nil), 404, "invalid_request", "not_found", nil)
}

// TestFlagListFilters covers PostHog's list filters and order over the API.
func TestFlagListFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mv := map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}},
		"multivariate": map[string]any{"variants": []any{map[string]any{"key": "a", "rollout_percentage": 100}}}}
	alpha := e.mustCreateFlag(map[string]any{"key": "alpha-search", "name": "first", "tags": []string{"web"}})
	e.mustCreateFlag(map[string]any{"key": "beta", "name": "Mentions ALPHA", "filters": mv})
	e.mustCreateFlag(map[string]any{"key": "gamma_1", "name": "", "active": false, "tags": []string{"api", "web"},
		"evaluation_runtime": "server", "evaluation_tags": []string{"API"}})
	keys := func(query string) []string {
		t.Helper()
		r := e.do("GET", e.flagsPath("/"+query), e.key, nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", query, r.status, r.raw)
		}
		var out []string
		for _, f := range r.body["results"].([]any) {
			out = append(out, f.(map[string]any)["key"].(string))
		}
		if int(r.body["count"].(float64)) != len(out) {
			t.Errorf("%s: count %v for %d results", query, r.body["count"], len(out))
		}
		return out
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"gamma_1", "beta", "alpha-search"}},   // newest first
		{"?search=ALPHA", []string{"beta", "alpha-search"}}, // key or name, any case
		{"?search=a_1", []string{"gamma_1"}},                // _ is literal
		{"?search=%25", nil},
		{"?active=true", []string{"beta", "alpha-search"}},
		{"?active=false", []string{"gamma_1"}},
		{"?active=STALE", nil}, // nothing is 30 days old
		{"?type=multivariant", []string{"beta"}},
		{"?type=boolean", []string{"gamma_1", "alpha-search"}},
		{"?type=experiment", nil},
		{"?type=whatever", []string{"gamma_1", "beta", "alpha-search"}},
		{`?tags=["web"]`, []string{"gamma_1", "alpha-search"}},
		{`?tags=["api","nope"]`, []string{"gamma_1"}},
		{`?tags=web`, []string{"gamma_1", "beta", "alpha-search"}}, // not a JSON list: ignored
		{`?excluded_properties=["beta"]`, []string{"gamma_1", "alpha-search"}},
		{"?evaluation_runtime=all", []string{"beta", "alpha-search"}},
		{"?evaluation_runtime=server", []string{"gamma_1"}},
		{"?evaluation_runtime=client", nil},
		{"?evaluation_runtime=both", nil}, // PostHog's documented value matches no flag there either
		{"?has_evaluation_tags=false", []string{"beta", "alpha-search"}},
		{"?has_evaluation_tags=true", []string{"gamma_1"}},
		{"?order=key", []string{"alpha-search", "beta", "gamma_1"}},
		{"?order=-key", []string{"gamma_1", "beta", "alpha-search"}},
		{"?order=created_at", []string{"alpha-search", "beta", "gamma_1"}},
		{"?search=a&active=true&order=key", []string{"alpha-search", "beta"}},
	} {
		if diff := cmp.Diff(tc.want, keys(tc.query)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.query, diff)
		}
	}
	creator := e.do("GET", e.flagsPath(fmt.Sprintf("/%d/", alpha)), e.key, nil).body["created_by"].(map[string]any)["id"]
	if diff := cmp.Diff([]string{"gamma_1", "beta", "alpha-search"}, keys(fmt.Sprintf("?created_by_id=%v", creator))); diff != "" {
		t.Errorf("created_by_id (-want +got):\n%s", diff)
	}
	if got := keys("?created_by_id=999999"); len(got) != 0 {
		t.Errorf("another creator: %v", got)
	}
	wantError(t, e.do("GET", e.flagsPath("/?order=filters"), e.key, nil), 400, "validation_error", "invalid_input", "order")
	wantError(t, e.do("GET", e.flagsPath("/?created_by_id=me"), e.key, nil), 400, "validation_error", "invalid_input", "created_by_id")
	// Pagination keeps the filters in its links, and counts what they select.
	page := e.do("GET", e.flagsPath("/?search=alpha&limit=1"), e.key, nil)
	next, _ := page.body["next"].(string)
	if page.body["count"] != 2.0 || !strings.Contains(next, "search=alpha") || !strings.Contains(next, "offset=1") {
		t.Errorf("page: count %v, next %q", page.body["count"], next)
	}
}

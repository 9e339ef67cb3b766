package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

// enrollment is the super condition PostHog gives the flag of a feature in a release stage.
func enrollment(key string) []any {
	return []any{map[string]any{"properties": []any{map[string]any{"key": "$feature_enrollment/" + key, "type": "person",
		"operator": "exact", "value": []any{"true"}}}, "rollout_percentage": float64(100)}}
}

// TestEarlyAccessFeatures: creating a feature creates or links its flag, the stage decides
// the flag's enrolment condition, the flag lists its feature, and deleting takes the
// condition away; the snapshot carries the features.
func TestEarlyAccessFeatures(t *testing.T) {
	e := newEnv(t)
	path := func(suffix string) string {
		return fmt.Sprintf("/api/projects/%d/early_access_feature%s", e.project, suffix)
	}
	flagOf := func(id float64) map[string]any {
		t.Helper()
		r := e.do("GET", e.flagsPath(fmt.Sprintf("/%d/", int64(id))), e.key, nil)
		if r.status != 200 {
			t.Fatalf("flag: %d %s", r.status, r.raw)
		}
		return r.body
	}
	superOf := func(flag map[string]any) any { return flag["filters"].(map[string]any)["super_groups"] }

	// Created with a flag keyed from the name; beta is a release stage.
	r := e.do("POST", path("/"), e.key, map[string]any{"name": "Dark Mode: v2!", "stage": "beta", "description": "Darker."})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	id := r.str("id")
	nested := r.body["feature_flag"].(map[string]any)
	if nested["key"] != "dark-mode-v2" || nested["name"] != "Feature Flag for Feature Dark Mode: v2!" {
		t.Errorf("created flag %v", nested)
	}
	flag := flagOf(nested["id"].(float64))
	if diff := cmp.Diff(enrollment("dark-mode-v2"), superOf(flag)); diff != "" {
		t.Errorf("super condition (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]any{map[string]any{"properties": []any{}, "rollout_percentage": float64(0), "variant": nil}},
		flag["filters"].(map[string]any)["groups"]); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	wantFeatures := []any{map[string]any{"id": id, "name": "Dark Mode: v2!", "description": "Darker.", "stage": "beta",
		"documentationUrl": "", "flagKey": "dark-mode-v2"}}
	if diff := cmp.Diff(wantFeatures, flag["features"]); diff != "" {
		t.Errorf("flag features (-want +got):\n%s", diff)
	}

	// The stage decides the condition.
	for _, tc := range []struct {
		stage string
		super any
	}{
		{"alpha", enrollment("dark-mode-v2")}, // release to release: kept
		{"draft", nil},
		{"concept", nil},
		{"general-availability", enrollment("dark-mode-v2")},
		{"archived", nil},
	} {
		t.Run("stage "+tc.stage, func(t *testing.T) {
			r := e.do("PATCH", path("/"+id+"/"), e.key, map[string]any{"stage": tc.stage})
			if r.status != 200 || r.str("stage") != tc.stage {
				t.Fatalf("patch: %d %s", r.status, r.raw)
			}
			if diff := cmp.Diff(tc.super, superOf(flagOf(nested["id"].(float64)))); diff != "" {
				t.Errorf("super condition (-want +got):\n%s", diff)
			}
		})
	}

	// Linking an existing flag.
	plain := e.mustCreateFlag(map[string]any{"key": "plain"})
	linked := e.do("POST", path("/"), e.key, map[string]any{"name": "Linked", "stage": "alpha", "feature_flag_id": plain})
	if linked.status != 201 || linked.body["feature_flag"].(map[string]any)["key"] != "plain" {
		t.Fatalf("link: %d %s", linked.status, linked.raw)
	}
	if diff := cmp.Diff(enrollment("plain"), superOf(flagOf(float64(plain)))); diff != "" {
		t.Errorf("linked flag's super condition (-want +got):\n%s", diff)
	}
	multi := e.mustCreateFlag(map[string]any{"key": "multi", "filters": map[string]any{"groups": []any{map[string]any{}},
		"multivariate": map[string]any{"variants": []any{map[string]any{"key": "a", "rollout_percentage": 100}}}}})
	group := e.mustCreateFlag(map[string]any{"key": "group", "filters": map[string]any{"aggregation_group_type_index": 0,
		"groups": []any{map[string]any{}}}})
	for _, tc := range []struct {
		name string
		body map[string]any
		attr string
		code string
	}{
		{"no name", map[string]any{"stage": "beta"}, "name", "required"},
		{"no stage", map[string]any{"name": "x"}, "stage", "required"},
		{"blank name", map[string]any{"name": " ", "stage": "beta"}, "name", "blank"},
		{"bad stage", map[string]any{"name": "x", "stage": "gamma"}, "stage", "invalid_choice"},
		{"bad link", map[string]any{"name": "x", "stage": "beta", "documentation_url": "docs"}, "documentation_url", "invalid"},
		{"name without a key", map[string]any{"name": "!!!", "stage": "beta"}, "name", "invalid_input"},
		{"key taken", map[string]any{"name": "Plain", "stage": "beta"}, "key", "unique"},
		{"unknown flag", map[string]any{"name": "x", "stage": "beta", "feature_flag_id": 999999}, "feature_flag_id", "invalid_input"},
		{"flag with a feature", map[string]any{"name": "x", "stage": "beta", "feature_flag_id": plain}, "feature_flag_id", "invalid_input"},
		{"multivariate flag", map[string]any{"name": "x", "stage": "beta", "feature_flag_id": multi}, "feature_flag_id", "invalid_input"},
		{"group flag", map[string]any{"name": "x", "stage": "beta", "feature_flag_id": group}, "feature_flag_id", "invalid_input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.do("POST", path("/"), e.key, tc.body), 400, "validation_error", tc.code, tc.attr)
		})
	}

	list := e.do("GET", path("/"), e.key, nil)
	if list.status != 200 || list.body["count"] != float64(2) {
		t.Fatalf("list: %d %s", list.status, list.raw)
	}
	snap, err := postgres.NewSnapshotStore(e.db).BuildSnapshot(context.Background(), e.project)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, f := range snap.Features {
		keys = append(keys, f.Stage+":"+f.FlagKey)
	}
	if diff := cmp.Diff([]string{"archived:dark-mode-v2", "alpha:plain"}, keys); diff != "" {
		t.Errorf("snapshot features (-want +got):\n%s", diff)
	}

	// Deleting keeps the flag, without the condition.
	if r := e.do("DELETE", path("/"+linked.str("id")+"/"), e.key, nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	after := flagOf(float64(plain))
	if superOf(after) != nil || len(after["features"].([]any)) != 0 || after["deleted"] != false {
		t.Errorf("flag after its feature was deleted: %v", after)
	}
	for _, missing := range []string{linked.str("id"), "not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
		wantError(t, e.do("GET", path("/"+missing+"/"), e.key, nil), 404, "invalid_request", "not_found", nil)
	}
}

// TestProjectClientConfig: the switches are stored, answered, validated and in the snapshot.
func TestProjectClientConfig(t *testing.T) {
	e := newEnv(t)
	proj := fmt.Sprintf("/api/projects/%d/", e.project)
	names := []string{"autocapture_opt_out", "session_recording_opt_in", "heatmaps_opt_in", "capture_console_log_opt_in",
		"capture_performance_opt_in", "autocapture_exceptions_opt_in"}
	got := e.do("GET", proj, e.key, nil)
	for _, n := range names {
		if got.body[n] != false {
			t.Errorf("default %s: %v", n, got.body[n])
		}
	}
	before, err := postgres.NewSnapshotStore(e.db).BuildSnapshot(context.Background(), e.project)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		t.Run(n, func(t *testing.T) {
			r := e.do("PATCH", proj, e.key, map[string]any{n: true})
			if r.status != 200 || r.body[n] != true {
				t.Fatalf("%d %s", r.status, r.raw)
			}
			for _, other := range names[i+1:] {
				if r.body[other] != false {
					t.Errorf("%s changed %s", n, other)
				}
			}
			wantError(t, e.do("PATCH", proj, e.key, map[string]any{n: "yes"}), 400, "validation_error", "invalid_input", n)
		})
	}
	after, err := postgres.NewSnapshotStore(e.db).BuildSnapshot(context.Background(), e.project)
	if err != nil {
		t.Fatal(err)
	}
	cc, _ := json.Marshal(after.ClientConfig)
	want := `{"autocapture_opt_out":true,"session_recording_opt_in":true,"heatmaps_opt_in":true,"capture_console_log_opt_in":true,"capture_performance_opt_in":true,"autocapture_exceptions_opt_in":true}`
	if string(cc) != want || after.Version <= before.Version {
		t.Errorf("snapshot v%d→v%d, client config %s", before.Version, after.Version, cc)
	}
}

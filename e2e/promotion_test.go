package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestPromoteFlagToProjects promotes a flag between projects as an organisation with one
// project per environment does: a flag that uses a static cohort (with members), a property
// cohort and another flag is copied, with that flag, into three projects through copy_flags;
// then an edge answers /decide in each of them as in the source, for the same 50 users.
func TestPromoteFlagToProjects(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	db, err := postgres.Open(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	api := "http://" + s.httpAddr
	cohort := func(body map[string]any) int64 {
		t.Helper()
		code, out := call(t, "POST", fmt.Sprintf("%s/api/projects/%d/cohorts/", api, s.projectID), s.personal, body)
		if code != 201 {
			t.Fatalf("create cohort: %d %v", code, out)
		}
		return int64(out["id"].(float64))
	}
	beta := cohort(map[string]any{"name": "beta testers", "is_static": true})
	pro := cohort(map[string]any{"name": "pro plan", "filters": map[string]any{"properties": map[string]any{"type": "AND",
		"values": []any{map[string]any{"key": "plan", "type": "person", "operator": "exact", "value": "pro"}}}}})
	// The first 15 users are beta testers, stored with their persons in the source.
	for i := range 15 {
		var person int64
		if err := db.Pool.QueryRow(ctx, `INSERT INTO persons (project_id) VALUES ($1) RETURNING id`, s.projectID).Scan(&person); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) VALUES ($1, $2, $3)`,
			s.projectID, fmt.Sprintf("user-%d", i), person); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO cohort_people (cohort_id, person_id) VALUES ($1, $2)`, beta, person); err != nil {
			t.Fatal(err)
		}
	}
	base := s.createFlag(map[string]any{"key": "new-billing", "filters": map[string]any{
		"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 50}}}})
	s.createFlag(map[string]any{"key": "billing-page", "name": "The new billing page", "filters": map[string]any{"groups": []any{
		map[string]any{"properties": []any{map[string]any{"key": "id", "type": "cohort", "value": beta}}, "rollout_percentage": 100},
		map[string]any{"properties": []any{
			map[string]any{"key": "id", "type": "cohort", "value": pro},
			map[string]any{"key": fmt.Sprint(base), "type": "flag", "value": true, "operator": "flag_evaluates_to"},
		}, "rollout_percentage": 100},
	}}})

	tokens := map[int64]string{s.projectID: s.token}
	var targets []int64
	for _, name := range []string{"staging", "eu", "us"} {
		code, out := call(t, "POST", api+"/api/projects/", s.personal, map[string]any{"name": name})
		if code != 201 {
			t.Fatalf("create project: %d %v", code, out)
		}
		id := int64(out["id"].(float64))
		targets, tokens[id] = append(targets, id), out["api_token"].(string)
	}

	copyURL := api + "/api/organizations/@current/feature_flags/copy_flags/"
	body := map[string]any{"feature_flag_key": "billing-page", "from_project": s.projectID, "target_project_ids": targets}
	code, preview := call(t, "POST", copyURL+"dependency_requirements/", s.personal, body)
	if code != 200 || preview["can_copy_dependencies"] != true || fmt.Sprint(preview["copied_dependency_keys"]) != "[new-billing]" {
		t.Fatalf("preview: %d %v", code, preview)
	}
	body["copy_dependencies"] = true
	code, copied := call(t, "POST", copyURL, s.personal, body)
	success, _ := copied["success"].([]any)
	if code != 200 || len(success) != 3 || len(copied["failed"].([]any)) != 0 {
		t.Fatalf("copy: %d %v", code, copied)
	}
	for _, c := range success {
		c := c.(map[string]any)
		if c["active"] != true || fmt.Sprint(c["copied_dependency_keys"]) != "[new-billing]" || c["flag_dependency_warnings"] != nil {
			t.Errorf("copy into %v: %v", c["team_id"], c)
		}
	}

	e := s.startEdge("edge", "", true)
	answer := func(project int64, user int) map[string]any {
		plan := "free"
		if user%3 == 0 {
			plan = "pro"
		}
		return featureFlags(s.decide(e, map[string]any{"api_key": tokens[project], "distinct_id": fmt.Sprintf("user-%d", user),
			"person_properties": map[string]any{"plan": plan}}))
	}
	for _, p := range append([]int64{s.projectID}, targets...) {
		waitFor(t, fmt.Sprintf("the flags of project %d at the edge", p), func() bool {
			ff := answer(p, 0)
			return hasKey(ff, "billing-page") && hasKey(ff, "new-billing")
		})
	}
	enabled := 0
	for user := range 50 {
		want := answer(s.projectID, user)
		if want["billing-page"] == true {
			enabled++
		}
		for _, p := range targets {
			if got := answer(p, user); got["billing-page"] != want["billing-page"] || got["new-billing"] != want["new-billing"] {
				t.Errorf("user-%d in project %d: %v, in the source %v", user, p, got, want)
			}
		}
	}
	// Both conditions matter: the 15 beta testers and some pro users whose dependency is on.
	if enabled <= 15 || enabled >= 50 {
		t.Errorf("billing-page is on for %d of 50 users in the source: the flag does not exercise its conditions", enabled)
	}
}

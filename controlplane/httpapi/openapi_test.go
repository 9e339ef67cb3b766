package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// loadSpec parses and validates the embedded description.
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(httpapi.OpenAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI 3 description: %v", err)
	}
	return doc
}

// registeredRoutes lists "METHOD /pattern" for every route the server registers.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	e := newEnv(t)
	var routes []string
	for _, r := range e.api.Routes() {
		routes = append(routes, r.Method+" "+r.Pattern)
	}
	if len(routes) < 40 {
		t.Fatalf("the server lists only %d routes", len(routes))
	}
	return routes
}

// specOperations lists "METHOD /path" for every operation of the description, paths without
// their trailing slash as the server's patterns have them.
func specOperations(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+strings.TrimSuffix(path, "/"))
		}
	}
	sort.Strings(ops)
	return ops
}

// TestOpenAPIDescribesEveryRoute fails when a registered route is missing from the
// description, or the description has an operation no route serves.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	ops := specOperations(doc)
	routes := registeredRoutes(t)
	for _, r := range routes {
		if !slices.Contains(ops, r) {
			t.Errorf("route %q is not in openapi.yaml", r)
		}
	}
	for _, op := range ops {
		if !slices.Contains(routes, op) {
			t.Errorf("openapi.yaml describes %q, which no route serves", op)
		}
	}
}

func init() {
	// The schema endpoint answers YAML as text.
	openapi3filter.RegisterBodyDecoder("application/vnd.oai.openapi", func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(r)
		return string(b), err
	})
}

// TestOpenAPIValidatesResponses sends a real request to every operation of the description
// (success and error answers) and validates each answer against it.
func TestOpenAPIValidatesResponses(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	e := newEnv(t)
	ctx := context.Background()

	// Data for the read endpoints: a person with an event, and a group.
	now := time.Now().UTC()
	_, err := postgres.NewEventStore(e.db, slog.New(slog.NewTextHandler(io.Discard, nil))).Ingest(ctx, []controlplane.EventBatch{{
		ProjectID: e.project, Events: []controlplane.Event{
			{UUID: "018f0000-0000-7000-8000-000000000001", ProjectID: e.project, Name: "$pageview", DistinctID: "user-1",
				Properties: json.RawMessage(`{"$set": {"email": "u1@example.com"}}`), Timestamp: now, ReceivedAt: now},
			{UUID: "018f0000-0000-7000-8000-000000000002", ProjectID: e.project, Name: "$groupidentify", DistinctID: "user-1",
				Properties: json.RawMessage(`{"$group_type": "company", "$group_key": "acme", "$group_set": {"plan": "pro"}}`), Timestamp: now, ReceivedAt: now},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	memberKey, memberUUID := e.mustUser("member@example.com", false)
	adminID := int64(e.do("GET", "/api/users/@me/", e.key, nil).body["id"].(float64))

	// state collects ids from earlier answers for later paths.
	state := map[string]string{"project": strconv.FormatInt(e.project, 10), "member": memberUUID}
	proj := func(suffix string) string { return "/api/projects/" + state["project"] + suffix }
	type step struct {
		method, specPath string
		path             func() string
		key              string // "" means the admin's key; "-" none
		body             any
		want             int
		save             map[string]string // state name → top-level field of the answer
	}
	p := func(s string) func() string {
		return func() string {
			for k, v := range state {
				s = strings.ReplaceAll(s, "{"+k+"}", v)
			}
			return s
		}
	}
	steps := []step{
		{method: "GET", specPath: "/_health", path: p("/_health"), key: "-", want: 200},
		{method: "GET", specPath: "/_ready", path: p("/_ready"), key: "-", want: 200},
		{method: "GET", specPath: "/metrics", path: p("/metrics"), key: "-", want: 200},
		{method: "GET", specPath: "/api/schema/", path: p("/api/schema/"), key: "-", want: 200},
		{method: "GET", specPath: "/api/users/{user}/", path: p("/api/users/@me/"), want: 200},
		{method: "GET", specPath: "/api/users/{user}/", path: p("/api/users/@me/"), key: "-", want: 401},
		{method: "POST", specPath: "/api/personal_api_keys/", path: p("/api/personal_api_keys/"),
			body: map[string]any{"label": "ci", "scopes": []string{"feature_flag:read"}}, want: 201, save: map[string]string{"key": "id"}},
		{method: "POST", specPath: "/api/personal_api_keys/", path: p("/api/personal_api_keys/"),
			body: map[string]any{"label": "ci", "scopes": []string{"nope:read"}}, want: 400},
		{method: "GET", specPath: "/api/personal_api_keys/", path: p("/api/personal_api_keys/"), want: 200},
		{method: "GET", specPath: "/api/personal_api_keys/{id}/", path: p("/api/personal_api_keys/{key}/"), want: 200},
		{method: "PATCH", specPath: "/api/personal_api_keys/{id}/", path: p("/api/personal_api_keys/{key}/"),
			body: map[string]any{"label": "ci2", "scoped_teams": []int64{e.project}}, want: 200},
		{method: "DELETE", specPath: "/api/personal_api_keys/{id}/", path: p("/api/personal_api_keys/{key}/"), want: 204},
		{method: "GET", specPath: "/api/personal_api_keys/{id}/", path: p("/api/personal_api_keys/{key}/"), want: 404},
		{method: "GET", specPath: "/api/organizations/{org}/members/", path: p("/api/organizations/@current/members/"), want: 200},
		{method: "POST", specPath: "/api/organizations/{org}/invites/", path: p("/api/organizations/@current/invites/"),
			body: map[string]any{"target_email": "new@example.com", "level": 1}, want: 201, save: map[string]string{"invited": "id"}},
		{method: "POST", specPath: "/api/organizations/{org}/invites/", path: p("/api/organizations/@current/invites/"),
			key: memberKey, body: map[string]any{"target_email": "x@example.com"}, want: 403},
		{method: "DELETE", specPath: "/api/organizations/{org}/members/{user}/", path: p("/api/organizations/@current/members/{invited}/"), want: 204},
		{method: "GET", specPath: "/api/projects/", path: p("/api/projects/"), want: 200},
		{method: "POST", specPath: "/api/projects/", path: p("/api/projects/"), body: map[string]any{"name": "Second"}, want: 201},
		{method: "GET", specPath: "/api/projects/{project_id}/", path: p(proj("/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/", path: p(proj("/")), body: map[string]any{"timezone": "Europe/Paris"}, want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/", path: p(proj("/")), body: map[string]any{"autocapture_opt_out": true, "heatmaps_opt_in": true}, want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/", path: p(proj("/")), body: map[string]any{"heatmaps_opt_in": "yes"}, want: 400},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/", path: p(proj("/feature_flags/")), body: map[string]any{
			"key": "checkout", "name": "New checkout", "filters": map[string]any{
				"groups":       []any{map[string]any{"properties": []any{map[string]any{"key": "email", "value": "example.com", "operator": "icontains", "type": "person"}}, "rollout_percentage": 50}},
				"multivariate": map[string]any{"variants": []any{map[string]any{"key": "a", "rollout_percentage": 50}, map[string]any{"key": "b", "rollout_percentage": 50}}},
				"payloads":     map[string]any{"a": `{"x": 1}`},
			}}, want: 201, save: map[string]string{"flag": "id"}},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/", path: p(proj("/feature_flags/")), body: map[string]any{"key": "bad key"}, want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/", path: p(proj("/feature_flags/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/", path: p(proj("/feature_flags/{flag}/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/", path: p(proj("/feature_flags/999999/")), want: 404},
		{method: "PATCH", specPath: "/api/projects/{project_id}/feature_flags/{id}/", path: p(proj("/feature_flags/{flag}/")), body: map[string]any{"active": false, "tags": []string{"web"}}, want: 200},
		{method: "DELETE", specPath: "/api/projects/{project_id}/feature_flags/{id}/", path: p(proj("/feature_flags/{flag}/")), want: 405},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/activity/", path: p(proj("/feature_flags/{flag}/activity/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/evaluations/", path: p(proj("/feature_flags/{flag}/evaluations/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/evaluations/", path: p(proj("/feature_flags/{flag}/evaluations/?days=31")), want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/", path: p(proj("/feature_flags/?stale=true")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/activity/", path: p(proj("/feature_flags/activity/")), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/scheduled_changes/", path: p(proj("/scheduled_changes/")), body: map[string]any{
			"record_id": "{flag}", "model_name": "FeatureFlag", "scheduled_at": "2030-01-01T09:00:00Z",
			"payload": map[string]any{"operation": "add_release_condition", "value": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 20}}}}},
			want: 201, save: map[string]string{"scheduled": "id"}},
		{method: "POST", specPath: "/api/projects/{project_id}/scheduled_changes/", path: p(proj("/scheduled_changes/")), body: map[string]any{
			"record_id": "{flag}", "model_name": "FeatureFlag", "scheduled_at": "2030-01-01T09:00:00Z", "payload": map[string]any{"operation": "explode", "value": true}}, want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/scheduled_changes/", path: p(proj("/scheduled_changes/?model_name=FeatureFlag&record_id={flag}")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/scheduled_changes/{id}/", path: p(proj("/scheduled_changes/{scheduled}/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/scheduled_changes/{id}/", path: p(proj("/scheduled_changes/{scheduled}/")),
			body: map[string]any{"scheduled_at": "2030-02-01T09:00:00Z"}, want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/scheduled_changes/{id}/", path: p(proj("/scheduled_changes/{scheduled}/")),
			body: map[string]any{"model_name": "Survey"}, want: 400},
		{method: "DELETE", specPath: "/api/projects/{project_id}/scheduled_changes/{id}/", path: p(proj("/scheduled_changes/{scheduled}/")), want: 204},
		{method: "GET", specPath: "/api/projects/{project_id}/scheduled_changes/{id}/", path: p(proj("/scheduled_changes/{scheduled}/")), want: 404},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/", path: p(proj("/feature_flags/")),
			body: map[string]any{"key": "guarded"}, want: 201, save: map[string]string{"guarded": "id"}},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/", path: p(proj("/feature_flags/{guarded}/release_plan/")), want: 404},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/", path: p(proj("/feature_flags/{guarded}/release_plan/")),
			body: map[string]any{"steps": []any{map[string]any{"rollout_percentage": 10, "min_duration_seconds": 600, "min_exposures": 1000}, map[string]any{"rollout_percentage": 100}},
				"guardrails": []any{map[string]any{"event": "$exception"}, map[string]any{"event": "$pageview", "property": "$duration", "stat": "mean"}}}, want: 201},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/", path: p(proj("/feature_flags/{guarded}/release_plan/")),
			body: map[string]any{"steps": []any{map[string]any{"rollout_percentage": 10, "min_exposure": 5}}, "guardrails": []any{map[string]any{"event": "$exception"}}}, want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/", path: p(proj("/feature_flags/{guarded}/release_plan/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/", path: func() string {
			e.evaluatePlans() // a point in each guardrail's history
			return p(proj("/feature_flags/{guarded}/release_plan/?history=true"))()
		}, want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/", path: p(proj("/feature_flags/{guarded}/release_plan/?history=maybe")), want: 400},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/pause/", path: p(proj("/feature_flags/{guarded}/release_plan/pause/")), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/pause/", path: p(proj("/feature_flags/{guarded}/release_plan/pause/")), want: 400},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/resume/", path: p(proj("/feature_flags/{guarded}/release_plan/resume/")), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/cancel/", path: p(proj("/feature_flags/{guarded}/release_plan/cancel/")), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/release_plan/cancel/", path: p(proj("/feature_flags/{guarded}/release_plan/cancel/")), want: 404},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/evaluation_reasons/",
			path: p(proj(`/feature_flags/evaluation_reasons/?distinct_id=user-1&person_properties={"email":"a@example.com"}`)), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/evaluation_reasons/", path: p(proj("/feature_flags/evaluation_reasons/")), want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/local_evaluation/", path: p(proj("/feature_flags/local_evaluation/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/my_flags/", path: p(proj("/feature_flags/my_flags/")), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/user_blast_radius/", path: p(proj("/feature_flags/user_blast_radius/")),
			body: map[string]any{"condition": map[string]any{"properties": []any{}, "rollout_percentage": 50}}, want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/create_static_cohort_for_flag/", path: p(proj("/feature_flags/{flag}/create_static_cohort_for_flag/")), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/dashboard/", path: p(proj("/feature_flags/{flag}/dashboard/")), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/enrich_usage_dashboard/", path: p(proj("/feature_flags/{flag}/enrich_usage_dashboard/")), want: 200},
		{method: "GET", specPath: "/flags/definitions", path: p("/flags/definitions?token=" + e.token), want: 200},
		{method: "GET", specPath: "/flags/definitions", path: p("/flags/definitions"), key: "-", want: 401},
		{method: "GET", specPath: "/api/feature_flag/local_evaluation/", path: p("/api/feature_flag/local_evaluation/?token=" + e.token + "&send_cohorts"), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/cohorts/", path: p(proj("/cohorts/")), body: map[string]any{"name": "Pros", "filters": map[string]any{
			"properties": map[string]any{"type": "AND", "values": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}}}}, want: 201, save: map[string]string{"cohort": "id"}},
		{method: "GET", specPath: "/api/projects/{project_id}/cohorts/", path: p(proj("/cohorts/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/cohorts/{id}/", path: p(proj("/cohorts/{cohort}/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/cohorts/{id}/", path: p(proj("/cohorts/{cohort}/")), body: map[string]any{"description": "paying"}, want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/early_access_feature/", path: p(proj("/early_access_feature/")),
			body: map[string]any{"name": "Dark mode", "stage": "beta", "documentation_url": "https://docs.example.com/dark"}, want: 201,
			save: map[string]string{"feature": "id"}},
		{method: "POST", specPath: "/api/projects/{project_id}/early_access_feature/", path: p(proj("/early_access_feature/")),
			body: map[string]any{"name": "x", "stage": "gamma"}, want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/early_access_feature/", path: p(proj("/early_access_feature/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/early_access_feature/{id}/", path: p(proj("/early_access_feature/{feature}/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/early_access_feature/{id}/", path: p(proj("/early_access_feature/{feature}/")),
			body: map[string]any{"stage": "draft"}, want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/", path: p(proj("/feature_flags/?limit=1")), want: 200},
		{method: "DELETE", specPath: "/api/projects/{project_id}/early_access_feature/{id}/", path: p(proj("/early_access_feature/{feature}/")), want: 204},
		{method: "GET", specPath: "/api/projects/{project_id}/early_access_feature/{id}/", path: p(proj("/early_access_feature/{feature}/")), want: 404},
		{method: "POST", specPath: "/api/organizations/{org}/roles/", path: p("/api/organizations/@current/roles/"), body: map[string]any{"name": "Eng"}, want: 201, save: map[string]string{"role": "id"}},
		{method: "GET", specPath: "/api/organizations/{org}/roles/", path: p("/api/organizations/@current/roles/"), want: 200},
		{method: "POST", specPath: "/api/organizations/{org}/feature_flags/copy_flags/", path: p("/api/organizations/@current/feature_flags/copy_flags/"),
			body: map[string]any{"feature_flag_key": "checkout", "from_project": e.project, "target_project_ids": []int64{e.project, 999999}}, want: 200},
		{method: "POST", specPath: "/api/organizations/{org}/feature_flags/copy_flags/", path: p("/api/organizations/@current/feature_flags/copy_flags/"),
			body: map[string]any{"feature_flag_key": "nope", "from_project": e.project, "target_project_ids": []int64{e.project}}, want: 400},
		{method: "POST", specPath: "/api/organizations/{org}/feature_flags/copy_flags/dependency_requirements/",
			path: p("/api/organizations/@current/feature_flags/copy_flags/dependency_requirements/"),
			body: map[string]any{"feature_flag_key": "checkout", "from_project": e.project, "target_project_ids": []int64{e.project}}, want: 200},
		{method: "GET", specPath: "/api/organizations/{org}/roles/{role}/", path: p("/api/organizations/@current/roles/{role}/"), want: 200},
		{method: "PATCH", specPath: "/api/organizations/{org}/roles/{role}/", path: p("/api/organizations/@current/roles/{role}/"), body: map[string]any{"feature_flags_access_level": 21}, want: 200},
		{method: "POST", specPath: "/api/organizations/{org}/roles/{role}/role_memberships/", path: p("/api/organizations/@current/roles/{role}/role_memberships/"),
			body: map[string]any{"user_uuid": memberUUID}, want: 201, save: map[string]string{"membership": "id"}},
		{method: "GET", specPath: "/api/organizations/{org}/roles/{role}/role_memberships/", path: p("/api/organizations/@current/roles/{role}/role_memberships/"), want: 200},
		{method: "DELETE", specPath: "/api/organizations/{org}/roles/{role}/role_memberships/{id}/", path: p("/api/organizations/@current/roles/{role}/role_memberships/{membership}/"), want: 204},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/{id}/role_access/", path: p(proj("/feature_flags/{flag}/role_access/")),
			body: map[string]any{"role_id": "{role}"}, want: 201, save: map[string]string{"access": "id"}},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/role_access/", path: p(proj("/feature_flags/{flag}/role_access/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/feature_flags/{id}/role_access/{access_id}/", path: p(proj("/feature_flags/{flag}/role_access/{access}/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/feature_flags/{id}/", path: p(proj("/feature_flags/{flag}/")), key: memberKey, body: map[string]any{"active": true}, want: 403},
		{method: "DELETE", specPath: "/api/projects/{project_id}/feature_flags/{id}/role_access/{access_id}/", path: p(proj("/feature_flags/{flag}/role_access/{access}/")), want: 204},
		{method: "DELETE", specPath: "/api/organizations/{org}/roles/{role}/", path: p("/api/organizations/@current/roles/{role}/"), want: 204},
		{method: "POST", specPath: "/api/projects/{project_id}/annotations/", path: p(proj("/annotations/")),
			body: map[string]any{"content": "Launched checkout", "date_marker": "2026-11-20T10:00:00Z", "scope": "project"}, want: 201, save: map[string]string{"annotation": "id"}},
		{method: "POST", specPath: "/api/projects/{project_id}/annotations/", path: p(proj("/annotations/")), body: map[string]any{"scope": "galaxy"}, want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/annotations/", path: p(proj("/annotations/?search=launch")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/annotations/{id}/", path: p(proj("/annotations/{annotation}/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/annotations/{id}/", path: p(proj("/annotations/{annotation}/")), body: map[string]any{"deleted": true}, want: 200},
		{method: "DELETE", specPath: "/api/projects/{project_id}/annotations/{id}/", path: p(proj("/annotations/{annotation}/")), want: 405},
		{method: "POST", specPath: "/api/projects/{project_id}/webhooks/", path: p(proj("/webhooks/")), body: map[string]any{
			"url": "https://93.184.215.14/hook", "events": []string{"feature_flag.updated"}, "secret": "0123456789abcdef"}, want: 201, save: map[string]string{"hook": "id"}},
		{method: "POST", specPath: "/api/projects/{project_id}/webhooks/", path: p(proj("/webhooks/")), body: map[string]any{
			"url": "http://127.0.0.1:9/hook", "events": []string{"feature_flag.updated"}, "secret": "0123456789abcdef"}, want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/webhooks/", path: p(proj("/webhooks/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/webhooks/{id}/", path: p(proj("/webhooks/{hook}/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/webhooks/{id}/", path: p(proj("/webhooks/{hook}/")), body: map[string]any{"enabled": false}, want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/webhooks/{id}/deliveries/", path: p(proj("/webhooks/{hook}/deliveries/")), want: 200},
		{method: "DELETE", specPath: "/api/projects/{project_id}/webhooks/{id}/", path: p(proj("/webhooks/{hook}/")), want: 204},
		{method: "GET", specPath: "/api/projects/{project_id}/webhooks/{id}/", path: p(proj("/webhooks/{hook}/")), want: 404},
		{method: "POST", specPath: "/api/projects/{project_id}/approval_policies/", path: p(proj("/approval_policies/")), body: map[string]any{
			"action_key": "feature_flag.enable", "approver_config": map[string]any{"users": []int64{adminID}, "quorum": 1}},
			want: 201, save: map[string]string{"policy": "id"}},
		{method: "POST", specPath: "/api/projects/{project_id}/approval_policies/", path: p(proj("/approval_policies/")), body: map[string]any{
			"action_key": "feature_flag.nope", "approver_config": map[string]any{"users": []int64{adminID}, "quorum": 1}}, want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/approval_policies/", path: p(proj("/approval_policies/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/approval_policies/{id}/", path: p(proj("/approval_policies/{policy}/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/approval_policies/{id}/", path: p(proj("/approval_policies/{policy}/")),
			body: map[string]any{"expires_after": "7 00:00:00"}, want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/feature_flags/", path: p(proj("/feature_flags/")),
			body: map[string]any{"key": "gated", "active": false}, want: 201, save: map[string]string{"gated": "id"}},
		{method: "PATCH", specPath: "/api/projects/{project_id}/feature_flags/{id}/", path: p(proj("/feature_flags/{gated}/")), key: memberKey,
			body: map[string]any{"active": true}, want: 409, save: map[string]string{"request": "change_request_id"}},
		{method: "PATCH", specPath: "/api/projects/{project_id}/feature_flags/{id}/", path: p(proj("/feature_flags/{gated}/")), key: memberKey,
			body: map[string]any{"active": true}, want: 409},
		{method: "GET", specPath: "/api/projects/{project_id}/change_requests/", path: p(proj("/change_requests/?state=pending,approved&resource_type=feature_flag")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/change_requests/{id}/", path: p(proj("/change_requests/{request}/")), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/change_requests/{id}/reject/", path: p(proj("/change_requests/{request}/reject/")), want: 400},
		{method: "POST", specPath: "/api/projects/{project_id}/change_requests/{id}/cancel/", path: p(proj("/change_requests/{request}/cancel/")), want: 403},
		{method: "POST", specPath: "/api/projects/{project_id}/change_requests/{id}/approve/", path: p(proj("/change_requests/{request}/approve/")),
			body: map[string]any{"reason": "ship it"}, want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/change_requests/{id}/", path: p(proj("/change_requests/{request}/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/feature_flags/{id}/", path: p(proj("/feature_flags/{gated}/")), body: map[string]any{"active": false}, want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/feature_flags/{id}/", path: p(proj("/feature_flags/{gated}/")), key: memberKey,
			body: map[string]any{"active": true}, want: 409, save: map[string]string{"request": "change_request_id"}},
		{method: "POST", specPath: "/api/projects/{project_id}/change_requests/{id}/cancel/", path: p(proj("/change_requests/{request}/cancel/")), key: memberKey, want: 200},
		{method: "DELETE", specPath: "/api/projects/{project_id}/approval_policies/{id}/", path: p(proj("/approval_policies/{policy}/")), want: 204},
		{method: "GET", specPath: "/api/projects/{project_id}/approval_policies/{id}/", path: p(proj("/approval_policies/{policy}/")), want: 404},
		{method: "POST", specPath: "/api/projects/{project_id}/event_destinations/", path: p(proj("/event_destinations/")), body: map[string]any{
			"url": "https://93.184.215.14", "api_key": "phc_0123456789abcdef"}, want: 201, save: map[string]string{"destination": "id"}},
		{method: "POST", specPath: "/api/projects/{project_id}/event_destinations/", path: p(proj("/event_destinations/")), body: map[string]any{
			"url": "https://93.184.215.14"}, want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/event_destinations/", path: p(proj("/event_destinations/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/event_destinations/{id}/", path: p(proj("/event_destinations/{destination}/")), want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/event_destinations/{id}/", path: p(proj("/event_destinations/{destination}/")), body: map[string]any{"enabled": false}, want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/event_destinations/{id}/dead_letters/", path: p(proj("/event_destinations/{destination}/dead_letters/")), want: 200},
		{method: "DELETE", specPath: "/api/projects/{project_id}/event_destinations/{id}/", path: p(proj("/event_destinations/{destination}/")), want: 204},
		{method: "GET", specPath: "/api/projects/{project_id}/event_destinations/{id}/", path: p(proj("/event_destinations/{destination}/")), want: 404},
		{method: "GET", specPath: "/api/projects/{project_id}/events/", path: p(proj("/events/")), want: 200, save: map[string]string{}},
		{method: "GET", specPath: "/api/projects/{project_id}/events/{id}/", path: p(proj("/events/018f0000-0000-7000-8000-000000000001/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/persons/", path: p(proj("/persons/?distinct_id=user-1")), want: 200, save: map[string]string{"person": "results.0.id"}},
		{method: "GET", specPath: "/api/projects/{project_id}/persons/{id}/", path: p(proj("/persons/{person}/")), want: 200},
		{method: "POST", specPath: "/api/projects/{project_id}/cohorts/", path: p(proj("/cohorts/")), body: map[string]any{"name": "Listed", "is_static": true},
			want: 201, save: map[string]string{"static": "id"}},
		{method: "PATCH", specPath: "/api/projects/{project_id}/cohorts/{id}/add_persons_to_static_cohort/", path: p(proj("/cohorts/{static}/add_persons_to_static_cohort/")),
			body: map[string]any{"distinct_ids": []string{"user-1", "user-2"}}, want: 200},
		{method: "PATCH", specPath: "/api/projects/{project_id}/cohorts/{id}/add_persons_to_static_cohort/", path: p(proj("/cohorts/{static}/add_persons_to_static_cohort/")),
			body: map[string]any{"person_ids": []string{"not a uuid"}}, want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/cohorts/{id}/persons/", path: p(proj("/cohorts/{static}/persons/")), want: 200,
			save: map[string]string{"listed": "results.0.uuid"}},
		{method: "GET", specPath: "/api/projects/{project_id}/cohorts/{id}/persons/", path: p(proj("/cohorts/{cohort}/persons/")), want: 400},
		{method: "PATCH", specPath: "/api/projects/{project_id}/cohorts/{id}/remove_person_from_static_cohort/", path: p(proj("/cohorts/{static}/remove_person_from_static_cohort/")),
			body: map[string]any{"person_id": "{listed}"}, want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/groups/", path: p(proj("/groups/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/groups/", path: p(proj("/groups/?limit=-1")), want: 400},
		{method: "GET", specPath: "/api/projects/{project_id}/edges/", path: p(proj("/edges/")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/rollout_status/", path: p(proj("/rollout_status/?version=1&timeout=0s")), want: 200},
		{method: "GET", specPath: "/api/projects/{project_id}/rollout_status/", path: p(proj("/rollout_status/?version=x")), want: 400},
	}

	covered := map[string]bool{}
	for i, st := range steps {
		path := st.path()
		name := fmt.Sprintf("%02d %s %s", i, st.method, path)
		key := e.key
		switch st.key {
		case "-":
			key = ""
		case "":
		default:
			key = st.key
		}
		body := st.body
		if m, ok := body.(map[string]any); ok {
			for k, v := range m {
				if s, ok := v.(string); ok && strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
					if val, ok := state[strings.Trim(s, "{}")]; ok {
						m[k] = val
					}
				}
			}
		}
		r := e.do(st.method, path, key, body)
		if r.status != st.want {
			t.Fatalf("%s: status %d, want %d; body %s", name, r.status, st.want, r.raw)
		}
		validateResponse(t, doc, name, st.method, st.specPath, path, r, e)
		covered[st.method+" "+strings.TrimSuffix(st.specPath, "/")] = true
		for stateName, field := range st.save {
			state[stateName] = fieldOf(t, r.raw, field)
		}
	}
	for _, op := range specOperations(doc) {
		if !covered[op] {
			t.Errorf("no request exercised %q: add one so its answers are validated", op)
		}
	}
}

// fieldOf reads a dotted path (object keys, array indexes) from a JSON answer as text.
func fieldOf(t *testing.T, raw []byte, path string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			v = c[part]
		case []any:
			i, _ := strconv.Atoi(part)
			if i >= len(c) {
				t.Fatalf("no %s in %s", path, raw)
			}
			v = c[i]
		}
	}
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatInt(int64(x), 10)
	}
	t.Fatalf("no %s in %s", path, raw)
	return ""
}

// validateResponse checks one real answer against the description's operation.
func validateResponse(t *testing.T, doc *openapi3.T, name, method, specPath, path string, r response, e *env) {
	t.Helper()
	item := doc.Paths.Value(specPath)
	if item == nil {
		t.Fatalf("%s: openapi.yaml has no path %s", name, specPath)
	}
	op := item.GetOperation(method)
	if op == nil {
		t.Fatalf("%s: openapi.yaml has no %s %s", name, method, specPath)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	header := http.Header{}
	if len(r.raw) > 0 {
		header.Set("Content-Type", r.contentType)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req,
			Route:   &routers.Route{Spec: doc, Path: specPath, PathItem: item, Method: method, Operation: op},
			Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
		},
		Status:  r.status,
		Header:  header,
		Body:    io.NopCloser(bytes.NewReader(r.raw)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s: the answer does not match openapi.yaml: %v\nbody: %.600s", name, err, r.raw)
	}
}

package httpapi_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

func TestAnnotationLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := e.do("POST", e.annotationsPath("/"), e.key, map[string]any{
		"content": "Launched the new pricing page", "date_marker": "2024-05-01T12:00:00+02:00", "dashboard_item": 12,
	})
	if created.status != 201 {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	var keys []string
	for k := range created.body {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"content", "created_at", "created_by", "creation_type", "dashboard_id", "dashboard_item", "dashboard_name",
		"date_marker", "deleted", "id", "insight_derived_name", "insight_name", "insight_short_id", "scope", "updated_at"}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("annotation fields (-want +got):\n%s", diff)
	}
	for k, v := range map[string]any{"content": "Launched the new pricing page", "date_marker": "2024-05-01T10:00:00.000000Z",
		"creation_type": "USR", "scope": "dashboard_item", "dashboard_item": 12.0, "deleted": false, "insight_short_id": nil,
		"insight_name": nil, "dashboard_name": nil} {
		if diff := cmp.Diff(v, created.body[k]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	id := int64(created.body["id"].(float64))
	path := e.annotationsPath(fmt.Sprintf("/%d/", id))
	if got := e.do("GET", path, e.key, nil); got.status != 200 || cmp.Diff(created.body, got.body) != "" {
		t.Errorf("get: %d %s", got.status, got.raw)
	}
	p := e.do("PATCH", path, e.key, map[string]any{"content": "Launched pricing v2", "scope": "project", "creation_type": "GIT", "date_marker": nil})
	if p.status != 200 || p.body["content"] != "Launched pricing v2" || p.body["scope"] != "project" || p.body["creation_type"] != "GIT" || p.body["date_marker"] != nil {
		t.Errorf("patch: %d %s", p.status, p.raw)
	}
	del := e.do("DELETE", path, e.key, nil)
	if del.status != 405 || len(del.raw) != 0 {
		t.Errorf("delete: %d %q", del.status, del.raw)
	}
	if soft := e.do("PATCH", path, e.key, map[string]any{"deleted": true}); soft.status != 200 || soft.body["deleted"] != true {
		t.Errorf("soft delete: %s", soft.raw)
	}
	if list := e.do("GET", e.annotationsPath("/"), e.key, nil); list.body["count"] != 0.0 {
		t.Errorf("deleted annotation listed: %s", list.raw)
	}
	if list := e.do("GET", e.annotationsPath("/?deleted=true"), e.key, nil); list.body["count"] != 1.0 {
		t.Errorf("deleted=true: %s", list.raw)
	}
	if got := e.do("GET", path, e.key, nil); got.status != 200 || got.body["deleted"] != true {
		t.Errorf("get a deleted annotation: %s", got.raw)
	}
	// Every change is in the activity log.
	admin, err := postgres.NewAuthService(e.db).AuthenticatePersonalKey(context.Background(), e.key)
	if err != nil {
		t.Fatal(err)
	}
	list, _, err := postgres.NewActivityService(e.db).FindActivity(controlplane.NewContextWithUser(context.Background(), &admin.User), controlplane.ActivityFilter{
		ProjectID: e.project, Scope: "Annotation", ItemID: fmt.Sprint(id), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, a := range list {
		kinds = append(kinds, a.Activity)
	}
	if fmt.Sprint(kinds) != "[deleted updated created]" {
		t.Errorf("annotation activity %v", kinds)
	}
}

func TestAnnotationValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name       string
		body       any
		code, attr string
	}{
		{"bad scope", map[string]any{"content": "x", "scope": "galaxy"}, "invalid_choice", "scope"},
		{"bad creation type", map[string]any{"content": "x", "creation_type": "BOT"}, "invalid_choice", "creation_type"},
		{"content too long", map[string]any{"content": strings.Repeat("é", 401)}, "max_length", "content"},
		{"content not a string", map[string]any{"content": 5}, "invalid_input", "content"},
		{"bad date", map[string]any{"content": "x", "date_marker": "soon"}, "invalid_date", "date_marker"},
		{"dashboard item not an integer", map[string]any{"content": "x", "dashboard_item": "twelve"}, "invalid_input", "dashboard_item"},
		{"deleted not a bool", map[string]any{"content": "x", "deleted": "no"}, "invalid_input", "deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.do("POST", e.annotationsPath("/"), e.key, tc.body), 400, "validation_error", tc.code, tc.attr)
		})
	}
	wantError(t, e.do("POST", e.annotationsPath("/"), e.key, `[1]`), 400, "validation_error", "invalid_payload", nil)
	if r := e.do("POST", e.annotationsPath("/"), e.key, map[string]any{"content": strings.Repeat("é", 400), "scope": "organization", "creation_type": "GIT"}); r.status != 201 {
		t.Errorf("400 characters: %d %s", r.status, r.raw)
	}
	for _, path := range []string{e.annotationsPath("/999999/"), e.annotationsPath("/abc/")} {
		wantError(t, e.do("GET", path, e.key, nil), 404, "invalid_request", "not_found", nil)
		wantError(t, e.do("PATCH", path, e.key, map[string]any{"content": "x"}), 404, "invalid_request", "not_found", nil)
	}
	readOnly := e.mustKey([]string{"annotation:read"}, nil)
	wantError(t, e.do("POST", e.annotationsPath("/"), readOnly, map[string]any{"content": "x"}), 403, "authentication_error", "permission_denied", nil)
	if r := e.do("GET", e.annotationsPath("/"), readOnly, nil); r.status != 200 {
		t.Errorf("read scope: %d", r.status)
	}
	wantError(t, e.do("GET", e.annotationsPath("/"), e.mustKey([]string{"feature_flag:read"}, nil), nil), 403, "authentication_error", "permission_denied", nil)
}

func TestAnnotationFiltersAndVisibility(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mk := func(body map[string]any) int64 {
		t.Helper()
		r := e.do("POST", e.annotationsPath("/"), e.key, body)
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.raw)
		}
		return int64(r.body["id"].(float64))
	}
	a := mk(map[string]any{"content": "Deploy of API v3", "date_marker": "2024-03-01T00:00:00Z", "dashboard_item": 1})
	b := mk(map[string]any{"content": "Outage", "date_marker": "2024-04-01T00:00:00Z", "scope": "project"})
	c := mk(map[string]any{"content": "Company offsite (deploy freeze)", "date_marker": "2024-05-01T00:00:00Z", "scope": "organization"})
	ids := func(query string) string {
		t.Helper()
		r := e.do("GET", e.annotationsPath("/"+query), e.key, nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", query, r.status, r.raw)
		}
		var out []string
		for _, it := range r.body["results"].([]any) {
			out = append(out, fmt.Sprint(it.(map[string]any)["id"]))
		}
		return strings.Join(out, ",")
	}
	for query, want := range map[string][]int64{
		"":                                    {c, b, a}, // newest date_marker first
		"?search=DEPLOY":                      {c, a},
		"?scope=project":                      {b},
		"?dashboardItemId=1":                  {a},
		"?after=2024-03-15":                   {c, b},
		"?before=2024-04-15T00:00:00Z":        {b, a},
		"?after=2024-03-15&before=2024-04-15": {b},
		"?limit=1&offset=1":                   {b},
	} {
		var w []string
		for _, id := range want {
			w = append(w, fmt.Sprint(id))
		}
		if got := ids(query); got != strings.Join(w, ",") {
			t.Errorf("%q: %s, want %s", query, got, strings.Join(w, ","))
		}
	}
	wantError(t, e.do("GET", e.annotationsPath("/?after=yesterday"), e.key, nil), 400, "validation_error", "invalid_date", "after")

	// A second project of the organisation sees only the organisation-scoped annotation.
	p2 := e.do("POST", "/api/projects/", e.key, map[string]any{"name": "Second"})
	second := fmt.Sprintf("/api/projects/%d/annotations/", int64(p2.body["id"].(float64)))
	r := e.do("GET", second, e.key, nil)
	if r.body["count"] != 1.0 || r.body["results"].([]any)[0].(map[string]any)["id"] != float64(c) {
		t.Errorf("organisation annotation from another project: %s", r.raw)
	}
	wantError(t, e.do("GET", fmt.Sprintf("%s%d/", second, a), e.key, nil), 404, "invalid_request", "not_found", nil)
	if r := e.do("GET", fmt.Sprintf("%s%d/", second, c), e.key, nil); r.status != 200 {
		t.Errorf("organisation annotation by id from another project: %d", r.status)
	}
	// Another organisation sees none of them.
	other, err := postgres.Bootstrap(context.Background(), e.db, bcrypt.MinCost, "someone@elsewhere.org", "")
	if err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", fmt.Sprintf("/api/projects/%d/annotations/", other.ProjectID), other.PersonalAPIKey, nil); r.body["count"] != 0.0 {
		t.Errorf("other organisation: %s", r.raw)
	}
	wantError(t, e.do("GET", e.annotationsPath("/"), other.PersonalAPIKey, nil), 403, "authentication_error", "permission_denied", nil)
}

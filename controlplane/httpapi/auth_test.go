package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name, header, code string
	}{
		{"no header", "", "not_authenticated"},
		{"not bearer", "Basic abc", "not_authenticated"},
		{"empty bearer", "Bearer ", "not_authenticated"},
		{"unknown key", "Bearer phx_unknown", "invalid_personal_api_key"},
		{"project token is not a personal key", "Bearer " + e.token, "invalid_personal_api_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.srv.URL+e.flagsPath("/"), nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := response{status: resp.StatusCode}
			if err := json.NewDecoder(resp.Body).Decode(&r.body); err != nil {
				t.Fatal(err)
			}
			wantError(t, r, 401, "authentication_error", tc.code, nil)
		})
	}
}

// TestScopeMatrix checks every endpoint against keys that have exactly the scope it needs,
// the matching write scope, the wrong scope, and no relevant scope.
func TestScopeMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.mustCreateFlag(map[string]any{"key": "scoped"})
	endpoints := []struct {
		method, path string
		body         any
		scope        string // the scope the endpoint needs
		ok           int
	}{
		{"GET", e.flagsPath(""), nil, "feature_flag:read", 200},
		{"POST", e.flagsPath(""), map[string]any{"key": "k-%s"}, "feature_flag:write", 201},
		{"GET", e.flagsPath(fmt.Sprintf("/%d", id)), nil, "feature_flag:read", 200},
		{"PATCH", e.flagsPath(fmt.Sprintf("/%d", id)), map[string]any{"name": "n-%s"}, "feature_flag:write", 200},
		{"GET", e.flagsPath(fmt.Sprintf("/%d/activity", id)), nil, "activity_log:read", 200},
		{"GET", e.flagsPath("/activity"), nil, "activity_log:read", 200},
		{"GET", "/api/projects", nil, "project:read", 200},
		{"GET", fmt.Sprintf("/api/projects/%d", e.project), nil, "project:read", 200},
		{"PATCH", fmt.Sprintf("/api/projects/%d", e.project), map[string]any{"name": "p-%s"}, "project:write", 200},
	}
	keys := map[string]string{}
	keyFor := func(scope string) string {
		if keys[scope] == "" {
			keys[scope] = e.mustKey([]string{scope}, nil)
		}
		return keys[scope]
	}
	for i, ep := range endpoints {
		t.Run(ep.method+" "+ep.path, func(t *testing.T) {
			obj := ep.scope[:len(ep.scope)-len(":read")]
			if ep.scope[len(ep.scope)-5:] == "write" {
				obj = ep.scope[:len(ep.scope)-len(":write")]
			}
			calls := 0
			body := func(string) any {
				calls++
				if m, ok := ep.body.(map[string]any); ok {
					out := map[string]any{}
					for k, v := range m {
						out[k] = fmt.Sprintf(v.(string), fmt.Sprintf("%d-%d", i, calls))
					}
					return out
				}
				return nil
			}
			granted := []string{ep.scope, obj + ":write", "*"}
			for _, scope := range granted {
				if r := e.do(ep.method, ep.path, keyFor(scope), body(scope)); r.status != ep.ok {
					t.Errorf("scope %s: %d %s, want %d", scope, r.status, r.raw, ep.ok)
				}
			}
			denied := []string{"annotation:write", "event:read"}
			if ep.scope[len(ep.scope)-5:] == "write" {
				denied = append(denied, obj+":read")
			}
			for _, scope := range denied {
				r := e.do(ep.method, ep.path, keyFor(scope), body(scope))
				wantError(t, r, 403, "authentication_error", "permission_denied", nil)
				if want := fmt.Sprintf("API key missing required scope '%s'", ep.scope); r.str("detail") != want {
					t.Errorf("detail %q, want %q", r.str("detail"), want)
				}
			}
		})
	}
}

func TestProjectReach(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	second := e.do("POST", "/api/projects", e.key, map[string]any{"name": "Second"})
	if second.status != 201 {
		t.Fatalf("create project: %d %s", second.status, second.raw)
	}
	secondID := int64(second.body["id"].(float64))
	limited := e.mustKey([]string{"*"}, []int64{secondID})

	// A key limited to one project cannot reach the other, and @current is that one project.
	wantError(t, e.do("GET", e.flagsPath(""), limited, nil), 403, "authentication_error", "permission_denied", nil)
	if r := e.do("GET", fmt.Sprintf("/api/projects/%d/feature_flags", secondID), limited, nil); r.status != 200 {
		t.Errorf("limited key on its project: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/api/projects/@current/feature_flags/", limited, map[string]any{"key": "current"}); r.status != 201 {
		t.Errorf("@current: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", fmt.Sprintf("/api/projects/%d/feature_flags", secondID), e.key, nil); r.body["count"] != 1.0 {
		t.Errorf("@current created the flag elsewhere: %s", r.raw)
	}
	if r := e.do("GET", "/api/projects", limited, nil); r.body["count"] != 1.0 {
		t.Errorf("limited key lists %v projects, want 1", r.body["count"])
	}
	// The unrestricted key reaches two projects: @current is ambiguous.
	wantError(t, e.do("GET", "/api/projects/@current/feature_flags", e.key, nil), 400, "validation_error", "invalid_input", "project_id")

	// Another organisation's key reaches nothing here, and a missing project is no different.
	other, err := postgres.Bootstrap(ctx, e.db, bcrypt.MinCost, "someone@elsewhere.org", "")
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, e.do("GET", e.flagsPath(""), other.PersonalAPIKey, nil), 403, "authentication_error", "permission_denied", nil)
	wantError(t, e.do("GET", fmt.Sprintf("/api/projects/%d", e.project), other.PersonalAPIKey, nil), 403, "authentication_error", "permission_denied", nil)
	wantError(t, e.do("GET", "/api/projects/987654/feature_flags", e.key, nil), 403, "authentication_error", "permission_denied", nil)
	if r := e.do("GET", "/api/projects/", other.PersonalAPIKey, nil); r.body["count"] != 1.0 || r.raw == nil {
		t.Errorf("other org lists %s", r.raw)
	}
}

func TestProjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("GET", fmt.Sprintf("/api/projects/%d/", e.project), e.key, nil)
	if r.status != 200 || r.str("api_token") != e.token || r.str("secret_api_token") == "" || r.str("timezone") != "UTC" {
		t.Errorf("get project: %d %s", r.status, r.raw)
	}
	p := e.do("PATCH", fmt.Sprintf("/api/projects/%d/", e.project), e.key, map[string]any{"name": "Renamed", "timezone": "Europe/Paris"})
	if p.status != 200 || p.str("name") != "Renamed" || p.str("timezone") != "Europe/Paris" {
		t.Errorf("patch project: %d %s", p.status, p.raw)
	}
	wantError(t, e.do("PATCH", fmt.Sprintf("/api/projects/%d/", e.project), e.key, map[string]any{"timezone": "Mars/Olympus"}), 400, "validation_error", "invalid_choice", "timezone")
	wantError(t, e.do("POST", "/api/projects/", e.key, map[string]any{}), 400, "validation_error", "required", "name")
	c := e.do("POST", "/api/projects/", e.key, map[string]any{"name": "Fresh"})
	if c.status != 201 || c.str("api_token") == e.token || len(c.str("api_token")) < 20 {
		t.Errorf("create project: %d %s", c.status, c.raw)
	}
}

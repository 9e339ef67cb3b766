package httpapi_test

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

const rolesPath = "/api/organizations/@current/roles/"

func (e *env) mustRole(name string, level int) string {
	e.t.Helper()
	r := e.do("POST", rolesPath, e.key, map[string]any{"name": name, "feature_flags_access_level": level})
	if r.status != 201 {
		e.t.Fatalf("create role: %d %s", r.status, r.raw)
	}
	return r.str("id")
}

func (e *env) mustMember(roleID, userUUID string) string {
	e.t.Helper()
	r := e.do("POST", rolesPath+roleID+"/role_memberships/", e.key, map[string]any{"user_uuid": userUUID})
	if r.status != 201 {
		e.t.Fatalf("add member: %d %s", r.status, r.raw)
	}
	return r.str("id")
}

func TestRoles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	memberKey, memberUUID := e.mustUser("member@example.com", false)
	created := e.do("POST", rolesPath, e.key, map[string]any{"name": "Engineers"})
	if created.status != 201 || created.body["feature_flags_access_level"] != 37.0 {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	var keys []string
	for k := range created.body {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if diff := cmp.Diff([]string{"associated_flags", "created_at", "created_by", "feature_flags_access_level", "id", "members", "name"}, keys); diff != "" {
		t.Errorf("role fields (-want +got):\n%s", diff)
	}
	id := created.str("id")
	wantError(t, e.do("POST", rolesPath, e.key, map[string]any{"name": "Engineers"}), 400, "validation_error", "unique", "name")
	wantError(t, e.do("POST", rolesPath, e.key, map[string]any{"name": "x", "feature_flags_access_level": 99}), 400, "validation_error", "invalid_choice", "feature_flags_access_level")
	wantError(t, e.do("POST", rolesPath, e.key, map[string]any{}), 400, "validation_error", "required", "name")

	m := e.do("POST", rolesPath+id+"/role_memberships/", e.key, map[string]any{"user_uuid": memberUUID})
	if m.status != 201 || m.body["user"].(map[string]any)["email"] != "member@example.com" {
		t.Fatalf("add member: %d %s", m.status, m.raw)
	}
	wantError(t, e.do("POST", rolesPath+id+"/role_memberships/", e.key, map[string]any{"user_uuid": memberUUID}), 400, "validation_error", "unique", "user_uuid")
	wantError(t, e.do("POST", rolesPath+id+"/role_memberships/", e.key, map[string]any{"user_uuid": "00000000-0000-0000-0000-000000000000"}), 400, "validation_error", "invalid_input", "user_uuid")
	if r := e.do("GET", rolesPath+id+"/", e.key, nil); r.str("members") != memberUUID {
		t.Errorf("members %q, want %q", r.str("members"), memberUUID)
	}
	if r := e.do("GET", rolesPath+id+"/role_memberships/", e.key, nil); r.body["count"] != 1.0 {
		t.Errorf("memberships: %s", r.raw)
	}
	if r := e.do("PATCH", rolesPath+id+"/", e.key, map[string]any{"name": "Platform", "feature_flags_access_level": 21}); r.str("name") != "Platform" || r.body["feature_flags_access_level"] != 21.0 {
		t.Errorf("patch: %s", r.raw)
	}
	// Members may read roles but not change them; writes are for organisation admins.
	if r := e.do("GET", rolesPath, memberKey, nil); r.status != 200 || r.body["count"] != 1.0 {
		t.Errorf("member reads roles: %d %s", r.status, r.raw)
	}
	wantError(t, e.do("POST", rolesPath, memberKey, map[string]any{"name": "Mine"}), 403, "authentication_error", "permission_denied", nil)
	wantError(t, e.do("GET", rolesPath, e.mustKey([]string{"feature_flag:read"}, nil), nil), 403, "authentication_error", "permission_denied", nil)

	if r := e.do("DELETE", rolesPath+id+"/role_memberships/"+m.str("id")+"/", e.key, nil); r.status != 204 || len(r.raw) != 0 {
		t.Errorf("remove member: %d %s", r.status, r.raw)
	}
	wantError(t, e.do("DELETE", rolesPath+id+"/role_memberships/"+m.str("id")+"/", e.key, nil), 404, "invalid_request", "not_found", nil)
	if r := e.do("DELETE", rolesPath+id+"/", e.key, nil); r.status != 204 {
		t.Errorf("delete role: %d", r.status)
	}
	wantError(t, e.do("GET", rolesPath+id+"/", e.key, nil), 404, "invalid_request", "not_found", nil)
	wantError(t, e.do("GET", rolesPath+"not-a-uuid/", e.key, nil), 404, "invalid_request", "not_found", nil)

	// Another organisation's roles are out of reach.
	other, err := postgres.Bootstrap(context.Background(), e.db, bcrypt.MinCost, "someone@elsewhere.org", "")
	if err != nil {
		t.Fatal(err)
	}
	kept := e.mustRole("Kept", 37)
	wantError(t, e.do("GET", rolesPath+kept+"/", other.PersonalAPIKey, nil), 404, "invalid_request", "not_found", nil)
	wantError(t, e.do("GET", "/api/organizations/00000000-0000-0000-0000-000000000000/roles/", e.key, nil), 403, "authentication_error", "permission_denied", nil)
}

func TestRoleAccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flagID := e.mustCreateFlag(map[string]any{"key": "guarded"})
	role := e.mustRole("Release managers", 37)
	path := e.flagsPath(fmt.Sprintf("/%d/role_access/", flagID))
	created := e.do("POST", path, e.key, map[string]any{"role_id": role})
	if created.status != 201 {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	var keys []string
	for k := range created.body {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if diff := cmp.Diff([]string{"added_at", "feature_flag", "id", "role", "role_id", "updated_at"}, keys); diff != "" {
		t.Errorf("role access fields (-want +got):\n%s", diff)
	}
	if created.body["feature_flag"].(map[string]any)["key"] != "guarded" || created.body["role"].(map[string]any)["name"] != "Release managers" ||
		created.str("role_id") != role || created.body["role"].(map[string]any)["associated_flags"] != fmt.Sprint(flagID) {
		t.Errorf("nested objects: %s", created.raw)
	}
	if len(created.body["feature_flag"].(map[string]any)) < 20 {
		t.Error("the nested flag is not the full flag object")
	}
	wantError(t, e.do("POST", path, e.key, map[string]any{"role_id": role}), 400, "validation_error", "unique", "role_id")
	wantError(t, e.do("POST", path, e.key, map[string]any{"role_id": "not-a-uuid"}), 400, "validation_error", "invalid_input", "role_id")
	wantError(t, e.do("POST", path, e.key, map[string]any{}), 400, "validation_error", "required", "role_id")
	other, err := postgres.Bootstrap(context.Background(), e.db, bcrypt.MinCost, "someone@elsewhere.org", "")
	if err != nil {
		t.Fatal(err)
	}
	foreign := e.do("POST", rolesPath, other.PersonalAPIKey, map[string]any{"name": "Theirs"})
	wantError(t, e.do("POST", path, e.key, map[string]any{"role_id": foreign.str("id")}), 400, "validation_error", "invalid_input", "role_id")

	if r := e.do("GET", path, e.key, nil); r.status != 200 || r.body["count"] != 1.0 {
		t.Errorf("list: %d %s", r.status, r.raw)
	}
	one := e.do("GET", fmt.Sprintf("%s%v/", path, created.body["id"]), e.key, nil)
	if one.status != 200 || one.body["id"] != created.body["id"] {
		t.Errorf("get: %d %s", one.status, one.raw)
	}
	wantError(t, e.do("GET", path+"99999/", e.key, nil), 404, "invalid_request", "not_found", nil)
	wantError(t, e.do("GET", e.flagsPath("/99999/role_access/"), e.key, nil), 404, "invalid_request", "not_found", nil)
	wantError(t, e.do("POST", path, e.mustKey([]string{"feature_flag:read"}, nil), map[string]any{"role_id": role}), 403, "authentication_error", "permission_denied", nil)
	if r := e.do("DELETE", fmt.Sprintf("%s%v/", path, created.body["id"]), e.key, nil); r.status != 204 || len(r.raw) != 0 {
		t.Errorf("delete: %d %q", r.status, r.raw)
	}
	if r := e.do("GET", path, e.key, nil); r.body["count"] != 0.0 {
		t.Errorf("after delete: %s", r.raw)
	}
}

// TestRoleAccessEnforcement is the matrix: once a flag has role access records, only members
// of those roles with edit level, organisation admins and the flag's creator may change it.
func TestRoleAccessEnforcement(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	creatorKey, _ := e.mustUser("creator@example.com", false)
	viewerKey, viewerUUID := e.mustUser("viewer@example.com", false)
	editorKey, editorUUID := e.mustUser("editor@example.com", false)
	outsiderKey, _ := e.mustUser("outsider@example.com", false)
	adminKey, _ := e.mustUser("second-admin@example.com", true)

	r := e.do("POST", e.flagsPath("/"), creatorKey, map[string]any{"key": "restricted"})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	flag := e.flagsPath(fmt.Sprintf("/%v/", r.body["id"]))
	// Without role access records, every user may edit.
	for _, key := range []string{viewerKey, outsiderKey} {
		if got := e.do("GET", flag, key, nil); got.body["can_edit"] != true {
			t.Errorf("unrestricted flag not editable: %s", got.raw)
		}
	}
	viewers, editors := e.mustRole("Viewers", 21), e.mustRole("Editors", 37)
	e.mustMember(viewers, viewerUUID)
	e.mustMember(editors, editorUUID)
	for _, role := range []string{viewers, editors} {
		if got := e.do("POST", flag+"role_access/", creatorKey, map[string]any{"role_id": role}); got.status != 201 {
			t.Fatalf("grant: %d %s", got.status, got.raw)
		}
	}
	for _, tc := range []struct {
		who     string
		key     string
		canEdit bool
	}{
		{"member with view level", viewerKey, false},
		{"member with edit level", editorKey, true},
		{"non-member", outsiderKey, false},
		{"organisation admin", adminKey, true},
		{"creator", creatorKey, true},
	} {
		t.Run(tc.who, func(t *testing.T) {
			got := e.do("GET", flag, tc.key, nil)
			if got.body["can_edit"] != tc.canEdit {
				t.Errorf("can_edit = %v, want %v", got.body["can_edit"], tc.canEdit)
			}
			list := e.do("GET", e.flagsPath("/"), tc.key, nil)
			if item := list.body["results"].([]any)[0].(map[string]any); item["can_edit"] != tc.canEdit {
				t.Errorf("can_edit in the list = %v", item["can_edit"])
			}
			patch := e.do("PATCH", flag, tc.key, map[string]any{"name": "by " + tc.who})
			grant := e.do("POST", flag+"role_access/", tc.key, map[string]any{"role_id": e.mustRole("Temp "+tc.who, 37)})
			if tc.canEdit {
				if patch.status != 200 || grant.status != 201 {
					t.Errorf("allowed user refused: patch %d, grant %d %s", patch.status, grant.status, grant.raw)
				}
				if del := e.do("DELETE", fmt.Sprintf("%srole_access/%v/", flag, grant.body["id"]), tc.key, nil); del.status != 204 {
					t.Errorf("revoke: %d", del.status)
				}
			} else {
				wantError(t, patch, 403, "authentication_error", "permission_denied", nil)
				wantError(t, grant, 403, "authentication_error", "permission_denied", nil)
			}
		})
	}
}

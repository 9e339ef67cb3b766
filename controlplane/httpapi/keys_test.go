package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

// snapshotVersions reads every project's snapshot version.
func (e *env) snapshotVersions() map[int64]int64 {
	e.t.Helper()
	v, err := postgres.NewSnapshotStore(e.db).ProjectVersions(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func TestPersonalKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	second := e.do("POST", "/api/projects/", e.key, map[string]any{"name": "Second"})
	secondID := int64(second.body["id"].(float64))

	created := e.do("POST", "/api/personal_api_keys/", e.key, map[string]any{
		"label": "deploys", "scopes": []string{"feature_flag:read"}, "scoped_teams": []int64{e.project}})
	if created.status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	var fields []string
	for k := range created.body {
		fields = append(fields, k)
	}
	sort.Strings(fields)
	want := []string{"created_at", "id", "label", "last_used_at", "mask_value", "scoped_organizations", "scoped_teams", "scopes", "user_id", "value"}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("create fields (-want +got):\n%s", diff)
	}
	secret := created.str("value")
	if mask := created.str("mask_value"); mask != secret[:4]+"..."+secret[len(secret)-4:] {
		t.Errorf("mask_value = %q for %q", mask, secret)
	}
	id := int64(created.body["id"].(float64))
	keyPath := fmt.Sprintf("/api/personal_api_keys/%d/", id)

	// The secret is never shown again.
	got := e.do("GET", keyPath, e.key, nil)
	if _, ok := got.body["value"]; ok || got.status != 200 {
		t.Errorf("get: %d %s", got.status, got.raw)
	}
	list := e.do("GET", "/api/personal_api_keys/", e.key, nil)
	if list.status != 200 || len(list.raw) == 0 || list.raw[0] != '[' {
		t.Errorf("list: %d %s", list.status, list.raw)
	}

	// The new key works within its scope and project, and last_used_at is recorded.
	if r := e.do("GET", e.flagsPath("/"), secret, nil); r.status != 200 {
		t.Errorf("the new key reads flags: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", fmt.Sprintf("/api/projects/%d/feature_flags/", secondID), secret, nil); r.status != 403 {
		t.Errorf("the new key reaches another project: %d", r.status)
	}
	if r := e.do("GET", keyPath, e.key, nil); r.body["last_used_at"] == nil {
		t.Errorf("last_used_at not recorded: %s", r.raw)
	}

	// A key cannot mint a key stronger than itself, nor manage keys without the scope.
	writer := e.mustKey([]string{"personal_api_key:write", "feature_flag:read"}, []int64{e.project})
	for _, tc := range []struct {
		name string
		body map[string]any
		attr string
	}{
		{"a scope it lacks", map[string]any{"label": "x", "scopes": []string{"feature_flag:write"}, "scoped_teams": []int64{e.project}}, "scopes"},
		{"star", map[string]any{"label": "x", "scopes": []string{"*"}, "scoped_teams": []int64{e.project}}, "scopes"},
		{"a project it does not reach", map[string]any{"label": "x", "scopes": []string{"feature_flag:read"}, "scoped_teams": []int64{secondID}}, "scoped_teams"},
		{"every project", map[string]any{"label": "x", "scopes": []string{"feature_flag:read"}}, "scoped_teams"},
		{"an unknown scope", map[string]any{"label": "x", "scopes": []string{"flag:read"}}, "scopes"},
		{"no label", map[string]any{"scopes": []string{"feature_flag:read"}, "scoped_teams": []int64{e.project}}, "label"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/api/personal_api_keys/", writer, tc.body)
			if r.status != 400 || r.body["attr"] != tc.attr {
				t.Errorf("%d %s, want 400 on %s", r.status, r.raw, tc.attr)
			}
		})
	}
	wantError(t, e.do("GET", "/api/personal_api_keys/", secret, nil), 403, "authentication_error", "permission_denied", nil)
	// Another user's key is not found.
	otherKey, _ := e.mustUser("other@example.com", false)
	wantError(t, e.do("GET", keyPath, otherKey, nil), 404, "invalid_request", "not_found", nil)
	if r := e.do("GET", "/api/personal_api_keys/@current/", otherKey, nil); r.status != 200 || r.str("label") != "test" {
		t.Errorf("@current: %d %s", r.status, r.raw)
	}

	// PATCH changes scopes and bumps the affected projects.
	before := e.snapshotVersions()
	patched := e.do("PATCH", keyPath, e.key, map[string]any{"label": "deploys v2", "scopes": []string{"feature_flag:write"}})
	if patched.status != 200 || patched.str("label") != "deploys v2" || cmp.Diff([]any{"feature_flag:write"}, patched.body["scopes"]) != "" {
		t.Errorf("patch: %d %s", patched.status, patched.raw)
	}
	after := e.snapshotVersions()
	if after[e.project] <= before[e.project] || after[secondID] != before[secondID] {
		t.Errorf("patch bumped %v → %v; want only project %d", before, after, e.project)
	}

	// DELETE revokes: the API refuses the key, and only the projects it reached are bumped
	// (edges drop it with their next snapshot).
	before = after
	if r := e.do("DELETE", keyPath, e.key, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	after = e.snapshotVersions()
	if after[e.project] <= before[e.project] || after[secondID] != before[secondID] {
		t.Errorf("delete bumped %v → %v; want only project %d", before, after, e.project)
	}
	wantError(t, e.do("GET", e.flagsPath("/"), secret, nil), 401, "authentication_error", "invalid_personal_api_key", nil)
	wantError(t, e.do("DELETE", keyPath, e.key, nil), 404, "invalid_request", "not_found", nil)
	snap, err := postgres.NewSnapshotStore(e.db).BuildSnapshot(context.Background(), e.project)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range append(snap.ReadKeySHA256, snap.OtherKeySHA256...) {
		if string(h) == string(postgres.HashKey(secret)) {
			t.Error("the revoked key is still in the project's snapshot")
		}
	}
}

func TestUsersMe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		key    string
		path   string
		status int
	}{
		{"scope *", e.key, "/api/users/@me/", 200},
		{"user:read", e.mustKey([]string{"user:read"}, []int64{e.project}), "/api/users/@me", 200},
		{"missing scope", e.mustKey([]string{"feature_flag:read"}, nil), "/api/users/@me/", 403},
		{"someone else", e.key, "/api/users/1/", 404},
		{"no key", "", "/api/users/@me/", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("GET", tc.path, tc.key, nil)
			if r.status != tc.status {
				t.Fatalf("%d %s, want %d", r.status, r.raw, tc.status)
			}
			if r.status != 200 {
				return
			}
			org := r.body["organization"].(map[string]any)
			teams := org["teams"].([]any)
			if r.str("email") != "admin@example.com" || org["membership_level"] != 8.0 || len(teams) != 1 ||
				teams[0].(map[string]any)["id"] != float64(e.project) || r.body["team"] == nil {
				t.Errorf("me: %s", r.raw)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	memberKey, _ := e.mustUser("member@example.com", false)
	const members, invites = "/api/organizations/@current/members/", "/api/organizations/@current/invites/"

	list := e.do("GET", members, memberKey, nil)
	if list.status != 200 || list.body["count"] != 2.0 {
		t.Fatalf("list: %d %s", list.status, list.raw)
	}
	// Writes are for admins.
	wantError(t, e.do("POST", invites, memberKey, map[string]any{"target_email": "x@example.com"}), 403, "authentication_error", "permission_denied", nil)
	for _, tc := range []struct {
		name string
		body map[string]any
		code string
		attr string
	}{
		{"no email", map[string]any{}, "required", "target_email"},
		{"bad email", map[string]any{"target_email": "nope"}, "invalid", "target_email"},
		{"taken", map[string]any{"target_email": "member@example.com"}, "unique", "target_email"},
		{"bad level", map[string]any{"target_email": "y@example.com", "level": 15}, "invalid_choice", "level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.do("POST", invites, e.key, tc.body), 400, "validation_error", tc.code, tc.attr)
		})
	}

	// An admin's key limited to this very project may not invite an admin (who would see
	// every project): the audit's escalation, 201 with a set-password link before.
	limited := e.mustKey([]string{"*"}, []int64{e.project})
	wantError(t, e.do("POST", invites, limited, map[string]any{"target_email": "escalate@example.com", "level": 8}), 403, "authentication_error", "permission_denied", nil)
	if r := e.do("GET", members, e.key, nil); r.body["count"] != 2.0 {
		t.Errorf("after a refused invite the organisation has %v members, want 2", r.body["count"])
	}

	inv := e.do("POST", invites, e.key, map[string]any{"target_email": "new@example.com", "first_name": "Nia", "level": 8})
	if inv.status != 201 || inv.body["level"] != 8.0 {
		t.Fatalf("invite: %d %s", inv.status, inv.raw)
	}
	link, err := url.Parse(inv.str("set_password_url"))
	if err != nil || link.Path != "/set-password" || link.Query().Get("token") == "" || link.Host != e.srv.Listener.Addr().String() {
		t.Fatalf("set_password_url = %q", inv.str("set_password_url"))
	}
	users := postgres.NewUserService(e.db, bcrypt.MinCost)
	ctx := context.Background()
	token := link.Query().Get("token")
	if _, err := users.SetPasswordWithToken(ctx, token, "short"); err == nil {
		t.Error("a short password was accepted")
	}
	if _, err := users.SetPasswordWithToken(ctx, token, "a long enough password"); err != nil {
		t.Fatalf("set password: %v", err)
	}
	if _, err := users.SetPasswordWithToken(ctx, token, "another long password"); err == nil {
		t.Error("the one-time token worked twice")
	}
	if u, err := users.CheckPassword(ctx, "NEW@example.com", "a long enough password"); err != nil || u.Email != "new@example.com" {
		t.Errorf("login after set-password: %v", err)
	}

	// Removing a member ends their keys and their login.
	list = e.do("GET", members, e.key, nil)
	var memberUUID string
	for _, m := range list.body["results"].([]any) {
		u := m.(map[string]any)["user"].(map[string]any)
		if u["email"] == "member@example.com" {
			memberUUID = u["uuid"].(string)
		}
	}
	if _, err := users.SetPassword(ctx, "member@example.com", "member password 1"); err != nil {
		t.Fatal(err)
	}
	wantError(t, e.do("DELETE", members+memberUUID+"/", memberKey, nil), 403, "authentication_error", "permission_denied", nil)
	if r := e.do("DELETE", members+memberUUID+"/", e.key, nil); r.status != http.StatusNoContent {
		t.Fatalf("remove: %d %s", r.status, r.raw)
	}
	wantError(t, e.do("GET", e.flagsPath("/"), memberKey, nil), 401, "authentication_error", "invalid_personal_api_key", nil)
	if _, err := users.CheckPassword(ctx, "member@example.com", "member password 1"); err == nil {
		t.Error("a removed member can still log in")
	}
	wantError(t, e.do("DELETE", members+memberUUID+"/", e.key, nil), 404, "invalid_request", "not_found", nil)
	if r := e.do("GET", members, e.key, nil); r.body["count"] != 2.0 {
		t.Errorf("members after removal: %s", r.raw)
	}
	// An admin cannot remove themselves (the organisation would be left without them).
	me := e.do("GET", "/api/users/@me/", e.key, nil)
	wantError(t, e.do("DELETE", members+me.str("uuid")+"/", e.key, nil), 400, "validation_error", "invalid_input", "user")
}

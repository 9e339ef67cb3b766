package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// matrixFixtures are the objects the matrix's requests address. Requests that consume an
// object (a delete, a unique create) make a fresh one each time.
type matrixFixtures struct {
	e          *env
	org        string // the organisation's uuid
	flag       int64
	role       string
	annotation int64
	cohort     int64
	event      string
	person     int64
	personUUID string
	feature    string
	hook       int64
	dest       int64
	// approvers is the role of the approval policy's approvers; every caller of the matrix is
	// a member, so that it may vote. requester is a member's key that files change requests,
	// policy the policy gating enables, request a pending change request.
	approvers, requester, policy, request string
	n                                     int // makes names unique
}

// freshChangeRequest files a change request: the requester enables a fresh disabled flag.
func (f *matrixFixtures) freshChangeRequest() string {
	id := f.e.mustCreateFlag(map[string]any{"key": f.unique("gated"), "active": false})
	r := f.e.do("PATCH", f.e.flagsPath(fmt.Sprintf("/%d/", id)), f.requester, map[string]any{"active": true})
	if r.status != 409 || r.str("code") != "approval_required" {
		f.e.t.Fatalf("gated write: %d %s", r.status, r.raw)
	}
	return r.str("change_request_id")
}

// updatePolicy returns the policy gating rollout updates, created once: the matrix deletes it
// only with the last call.
func (f *matrixFixtures) updatePolicy() string {
	path := fmt.Sprintf("/api/projects/%d/approval_policies/", f.e.project)
	if r := f.e.do("GET", path+"?action_key=feature_flag.update", f.e.key, nil); r.status == 200 && r.body["count"].(float64) > 0 {
		return r.body["results"].([]any)[0].(map[string]any)["id"].(string)
	}
	r := f.e.do("POST", path, f.e.key, map[string]any{"action_key": "feature_flag.update",
		"approver_config": map[string]any{"roles": []string{f.approvers}, "quorum": 1}, "bypass_org_membership_levels": []int{8}})
	if r.status != 201 {
		f.e.t.Fatalf("create policy: %d %s", r.status, r.raw)
	}
	return r.str("id")
}

// freshHook creates a webhook for a request that deletes one.
func (f *matrixFixtures) freshHook() int64 {
	r := f.e.do("POST", fmt.Sprintf("/api/projects/%d/webhooks/", f.e.project), f.e.key,
		map[string]any{"url": "https://93.184.215.14/" + f.unique("hook"), "events": []string{"annotation.created"}, "secret": "0123456789abcdef"})
	if r.status != 201 {
		f.e.t.Fatalf("create webhook: %d %s", r.status, r.raw)
	}
	return int64(r.body["id"].(float64))
}

// freshDestination creates an event destination for a request that deletes one.
func (f *matrixFixtures) freshDestination() int64 {
	r := f.e.do("POST", fmt.Sprintf("/api/projects/%d/event_destinations/", f.e.project), f.e.key,
		map[string]any{"url": "https://93.184.215.14/" + f.unique("capture"), "api_key": "phc_matrixmatrixmatrix"})
	if r.status != 201 {
		f.e.t.Fatalf("create event destination: %d %s", r.status, r.raw)
	}
	return int64(r.body["id"].(float64))
}

// freshFeature creates an early access feature (with its flag) for a request that deletes one.
func (f *matrixFixtures) freshFeature() string {
	r := f.e.do("POST", fmt.Sprintf("/api/projects/%d/early_access_feature/", f.e.project), f.e.key,
		map[string]any{"name": f.unique("feature"), "stage": "beta"})
	if r.status != 201 {
		f.e.t.Fatalf("create early access feature: %d %s", r.status, r.raw)
	}
	return r.str("id")
}

// freshScheduledChange schedules a change of the fixtures' flag, far ahead, for a request
// that reads or deletes one.
func (f *matrixFixtures) freshScheduledChange() int64 {
	r := f.e.do("POST", fmt.Sprintf("/api/projects/%d/scheduled_changes/", f.e.project), f.e.key, map[string]any{
		"record_id": f.flag, "model_name": "FeatureFlag", "scheduled_at": "2031-01-01T00:00:00Z",
		"payload": map[string]any{"operation": "update_status", "value": true}})
	if r.status != 201 {
		f.e.t.Fatalf("create scheduled change: %d %s", r.status, r.raw)
	}
	return int64(r.body["id"].(float64))
}

// copyBody copies the fixtures' flag into its own project.
func (f *matrixFixtures) copyBody() map[string]any {
	return map[string]any{"feature_flag_key": "matrix", "from_project": f.e.project, "target_project_ids": []int64{f.e.project}}
}

// planBody is a valid release plan to start.
func planBody() map[string]any {
	return map[string]any{"steps": []any{map[string]any{"rollout_percentage": 10}}, "guardrails": []any{map[string]any{"event": "$exception"}}}
}

// freshPlan starts a release plan on a new flag, paused when paused, for a request that
// reads or steers one; it returns the flag's id.
func (f *matrixFixtures) freshPlan(paused bool) int64 {
	id := f.e.mustCreateFlag(map[string]any{"key": f.unique("guarded")})
	if r := f.e.do("POST", f.e.flagsPath(fmt.Sprintf("/%d/release_plan/", id)), f.e.key, planBody()); r.status != 201 {
		f.e.t.Fatalf("start release plan: %d %s", r.status, r.raw)
	}
	if paused {
		if r := f.e.do("POST", f.e.flagsPath(fmt.Sprintf("/%d/release_plan/pause/", id)), f.e.key, nil); r.status != 200 {
			f.e.t.Fatalf("pause release plan: %d %s", r.status, r.raw)
		}
	}
	return id
}

func (f *matrixFixtures) unique(prefix string) string {
	f.n++
	return fmt.Sprintf("%s-%d", prefix, f.n)
}

func (f *matrixFixtures) freshRole() string { return f.e.mustRole(f.unique("role"), 37) }

func (f *matrixFixtures) freshMembership() (role, id string) {
	role = f.freshRole()
	_, user := f.e.mustUser(f.unique("member")+"@example.com", false)
	return role, f.e.mustMember(role, user)
}

func (f *matrixFixtures) freshRoleAccess() int64 {
	r := f.e.do("POST", f.e.flagsPath(fmt.Sprintf("/%d/role_access/", f.flag)), f.e.key, map[string]any{"role_id": f.freshRole()})
	if r.status != 201 {
		f.e.t.Fatalf("create role access: %d %s", r.status, r.raw)
	}
	return int64(r.body["id"].(float64))
}

// matrixEntry says how to call one route and what it answers when allowed.
type matrixEntry struct {
	ok      int
	request func(f *matrixFixtures) (path string, body any)
}

// matrixTable has an entry for every route the server registers, keyed "METHOD pattern".
func matrixTable() map[string]matrixEntry {
	get := func(ok int, path func(f *matrixFixtures) string) matrixEntry {
		return matrixEntry{ok, func(f *matrixFixtures) (string, any) { return path(f), nil }}
	}
	proj := func(f *matrixFixtures, suffix string, args ...any) string {
		return fmt.Sprintf("/api/projects/%d", f.e.project) + fmt.Sprintf(suffix, args...)
	}
	flag := func(f *matrixFixtures, suffix string) string {
		return f.e.flagsPath(fmt.Sprintf("/%d%s", f.flag, suffix))
	}
	roles := func(f *matrixFixtures, suffix string, args ...any) string {
		return "/api/organizations/" + f.org + "/roles" + fmt.Sprintf(suffix, args...)
	}
	const flags = "/api/projects/{project_id}/feature_flags"
	const roleP = "/api/organizations/{org}/roles"
	return map[string]matrixEntry{
		"GET /_health":      get(200, func(f *matrixFixtures) string { return "/_health" }),
		"GET /_ready":       get(200, func(f *matrixFixtures) string { return "/_ready" }),
		"GET /metrics":      get(200, func(f *matrixFixtures) string { return "/metrics" }),
		"GET /api/projects": get(200, func(f *matrixFixtures) string { return "/api/projects/" }),
		"POST /api/projects": {201, func(f *matrixFixtures) (string, any) {
			return "/api/projects/", map[string]any{"name": f.unique("project")}
		}},
		"GET /api/projects/{project_id}": get(200, func(f *matrixFixtures) string { return proj(f, "/") }),
		"PATCH /api/projects/{project_id}": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/"), map[string]any{"name": f.unique("renamed")}
		}},
		"GET " + flags: get(200, func(f *matrixFixtures) string { return f.e.flagsPath("/") }),
		"POST " + flags: {201, func(f *matrixFixtures) (string, any) {
			return f.e.flagsPath("/"), map[string]any{"key": f.unique("flag")}
		}},
		"GET " + flags + "/{id}": get(200, func(f *matrixFixtures) string { return flag(f, "/") }),
		"PATCH " + flags + "/{id}": {200, func(f *matrixFixtures) (string, any) {
			return flag(f, "/"), map[string]any{"name": f.unique("name")}
		}},
		"DELETE " + flags + "/{id}":          get(405, func(f *matrixFixtures) string { return flag(f, "/") }),
		"GET " + flags + "/{id}/activity":    get(200, func(f *matrixFixtures) string { return flag(f, "/activity/") }),
		"GET " + flags + "/{id}/evaluations": get(200, func(f *matrixFixtures) string { return flag(f, "/evaluations/") }),
		"GET " + flags + "/{id}/release_plan": get(200, func(f *matrixFixtures) string {
			return f.e.flagsPath(fmt.Sprintf("/%d/release_plan/", f.freshPlan(false)))
		}),
		"POST " + flags + "/{id}/release_plan": {201, func(f *matrixFixtures) (string, any) {
			return f.e.flagsPath(fmt.Sprintf("/%d/release_plan/", f.e.mustCreateFlag(map[string]any{"key": f.unique("guarded")}))), planBody()
		}},
		"POST " + flags + "/{id}/release_plan/pause": get(200, func(f *matrixFixtures) string {
			return f.e.flagsPath(fmt.Sprintf("/%d/release_plan/pause/", f.freshPlan(false)))
		}),
		"POST " + flags + "/{id}/release_plan/resume": get(200, func(f *matrixFixtures) string {
			return f.e.flagsPath(fmt.Sprintf("/%d/release_plan/resume/", f.freshPlan(true)))
		}),
		"POST " + flags + "/{id}/release_plan/cancel": get(200, func(f *matrixFixtures) string {
			return f.e.flagsPath(fmt.Sprintf("/%d/release_plan/cancel/", f.freshPlan(false)))
		}),
		"GET " + flags + "/activity":           get(200, func(f *matrixFixtures) string { return f.e.flagsPath("/activity/") }),
		"GET " + flags + "/evaluation_reasons": get(200, func(f *matrixFixtures) string { return f.e.flagsPath("/evaluation_reasons?distinct_id=u1") }),
		"GET " + flags + "/local_evaluation":   get(200, func(f *matrixFixtures) string { return f.e.flagsPath("/local_evaluation/") }),
		"GET " + flags + "/my_flags":           get(200, func(f *matrixFixtures) string { return f.e.flagsPath("/my_flags/") }),
		"POST " + flags + "/user_blast_radius": {200, func(f *matrixFixtures) (string, any) {
			return f.e.flagsPath("/user_blast_radius/"), map[string]any{"condition": map[string]any{"properties": []any{}, "rollout_percentage": 50}}
		}},
		"POST " + flags + "/{id}/create_static_cohort_for_flag": {200, func(f *matrixFixtures) (string, any) {
			return flag(f, "/create_static_cohort_for_flag/"), map[string]any{}
		}},
		"POST " + flags + "/{id}/dashboard": {200, func(f *matrixFixtures) (string, any) { return flag(f, "/dashboard/"), nil }},
		"POST " + flags + "/{id}/enrich_usage_dashboard": {200, func(f *matrixFixtures) (string, any) {
			return flag(f, "/enrich_usage_dashboard/"), nil
		}},
		"GET /flags/definitions": get(200, func(f *matrixFixtures) string { return "/flags/definitions?token=" + f.e.token }),
		"GET /api/feature_flag/local_evaluation": get(200, func(f *matrixFixtures) string {
			return "/api/feature_flag/local_evaluation?token=" + f.e.token
		}),
		"GET /api/projects/{project_id}/cohorts": get(200, func(f *matrixFixtures) string { return proj(f, "/cohorts/") }),
		"POST /api/projects/{project_id}/cohorts": {201, func(f *matrixFixtures) (string, any) {
			return proj(f, "/cohorts/"), map[string]any{"name": f.unique("cohort"), "is_static": true}
		}},
		"GET /api/projects/{project_id}/cohorts/{id}": get(200, func(f *matrixFixtures) string { return proj(f, "/cohorts/%d/", f.cohort) }),
		"PATCH /api/projects/{project_id}/cohorts/{id}": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/cohorts/%d/", f.cohort), map[string]any{"name": f.unique("cohort")}
		}},
		"GET /api/projects/{project_id}/cohorts/{id}/persons": get(200, func(f *matrixFixtures) string {
			return proj(f, "/cohorts/%d/persons/", f.cohort)
		}),
		"PATCH /api/projects/{project_id}/cohorts/{id}/add_persons_to_static_cohort": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/cohorts/%d/add_persons_to_static_cohort/", f.cohort), map[string]any{"person_ids": []string{f.personUUID}}
		}},
		"PATCH /api/projects/{project_id}/cohorts/{id}/remove_person_from_static_cohort": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/cohorts/%d/remove_person_from_static_cohort/", f.cohort), map[string]any{"person_id": f.personUUID}
		}},
		"GET " + flags + "/{id}/role_access": get(200, func(f *matrixFixtures) string { return flag(f, "/role_access/") }),
		"POST " + flags + "/{id}/role_access": {201, func(f *matrixFixtures) (string, any) {
			return flag(f, "/role_access/"), map[string]any{"role_id": f.freshRole()}
		}},
		"GET " + flags + "/{id}/role_access/{access_id}": get(200, func(f *matrixFixtures) string {
			return flag(f, fmt.Sprintf("/role_access/%d/", f.freshRoleAccess()))
		}),
		"DELETE " + flags + "/{id}/role_access/{access_id}": get(204, func(f *matrixFixtures) string {
			return flag(f, fmt.Sprintf("/role_access/%d/", f.freshRoleAccess()))
		}),
		"GET /api/projects/{project_id}/early_access_feature": get(200, func(f *matrixFixtures) string {
			return proj(f, "/early_access_feature/")
		}),
		"POST /api/projects/{project_id}/early_access_feature": {201, func(f *matrixFixtures) (string, any) {
			return proj(f, "/early_access_feature/"), map[string]any{"name": f.unique("feature"), "stage": "alpha"}
		}},
		"GET /api/projects/{project_id}/early_access_feature/{id}": get(200, func(f *matrixFixtures) string {
			return proj(f, "/early_access_feature/%s/", f.feature)
		}),
		"PATCH /api/projects/{project_id}/early_access_feature/{id}": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/early_access_feature/%s/", f.feature), map[string]any{"description": f.unique("text")}
		}},
		"DELETE /api/projects/{project_id}/early_access_feature/{id}": get(204, func(f *matrixFixtures) string {
			return proj(f, "/early_access_feature/%s/", f.freshFeature())
		}),
		"GET /api/projects/{project_id}/scheduled_changes": get(200, func(f *matrixFixtures) string {
			return proj(f, "/scheduled_changes/?record_id=%d", f.flag)
		}),
		"POST /api/projects/{project_id}/scheduled_changes": {201, func(f *matrixFixtures) (string, any) {
			return proj(f, "/scheduled_changes/"), map[string]any{"record_id": fmt.Sprint(f.flag), "model_name": "FeatureFlag",
				"scheduled_at": "2031-01-01T00:00:00Z", "payload": map[string]any{"operation": "update_status", "value": false}}
		}},
		"GET /api/projects/{project_id}/scheduled_changes/{id}": get(200, func(f *matrixFixtures) string {
			return proj(f, "/scheduled_changes/%d/", f.freshScheduledChange())
		}),
		"PATCH /api/projects/{project_id}/scheduled_changes/{id}": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/scheduled_changes/%d/", f.freshScheduledChange()), map[string]any{"scheduled_at": "2031-02-01T00:00:00Z"}
		}},
		"DELETE /api/projects/{project_id}/scheduled_changes/{id}": get(204, func(f *matrixFixtures) string {
			return proj(f, "/scheduled_changes/%d/", f.freshScheduledChange())
		}),
		"GET /api/projects/{project_id}/annotations": get(200, func(f *matrixFixtures) string { return f.e.annotationsPath("/") }),
		"POST /api/projects/{project_id}/annotations": {201, func(f *matrixFixtures) (string, any) {
			return f.e.annotationsPath("/"), map[string]any{"content": f.unique("note")}
		}},
		"GET /api/projects/{project_id}/annotations/{id}": get(200, func(f *matrixFixtures) string {
			return f.e.annotationsPath(fmt.Sprintf("/%d/", f.annotation))
		}),
		"PATCH /api/projects/{project_id}/annotations/{id}": {200, func(f *matrixFixtures) (string, any) {
			return f.e.annotationsPath(fmt.Sprintf("/%d/", f.annotation)), map[string]any{"content": f.unique("note")}
		}},
		"DELETE /api/projects/{project_id}/annotations/{id}": get(405, func(f *matrixFixtures) string {
			return f.e.annotationsPath(fmt.Sprintf("/%d/", f.annotation))
		}),
		"GET " + roleP:             get(200, func(f *matrixFixtures) string { return roles(f, "/") }),
		"POST " + roleP:            {201, func(f *matrixFixtures) (string, any) { return roles(f, "/"), map[string]any{"name": f.unique("role")} }},
		"GET " + roleP + "/{role}": get(200, func(f *matrixFixtures) string { return roles(f, "/%s/", f.role) }),
		"PATCH " + roleP + "/{role}": {200, func(f *matrixFixtures) (string, any) {
			return roles(f, "/%s/", f.role), map[string]any{"name": f.unique("role")}
		}},
		"DELETE " + roleP + "/{role}":               get(204, func(f *matrixFixtures) string { return roles(f, "/%s/", f.freshRole()) }),
		"GET " + roleP + "/{role}/role_memberships": get(200, func(f *matrixFixtures) string { return roles(f, "/%s/role_memberships/", f.role) }),
		"POST " + roleP + "/{role}/role_memberships": {201, func(f *matrixFixtures) (string, any) {
			_, user := f.e.mustUser(f.unique("joiner")+"@example.com", false)
			return roles(f, "/%s/role_memberships/", f.role), map[string]any{"user_uuid": user}
		}},
		"DELETE " + roleP + "/{role}/role_memberships/{id}": get(204, func(f *matrixFixtures) string {
			role, id := f.freshMembership()
			return roles(f, "/%s/role_memberships/%s/", role, id)
		}),
		"GET /api/projects/{project_id}/webhooks": get(200, func(f *matrixFixtures) string { return proj(f, "/webhooks/") }),
		"POST /api/projects/{project_id}/webhooks": {201, func(f *matrixFixtures) (string, any) {
			return proj(f, "/webhooks/"), map[string]any{"url": "https://93.184.215.14/" + f.unique("hook"), "events": []string{"feature_flag.created"}, "secret": "0123456789abcdef"}
		}},
		"GET /api/projects/{project_id}/webhooks/{id}": get(200, func(f *matrixFixtures) string { return proj(f, "/webhooks/%d/", f.hook) }),
		"PATCH /api/projects/{project_id}/webhooks/{id}": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/webhooks/%d/", f.hook), map[string]any{"enabled": true}
		}},
		"DELETE /api/projects/{project_id}/webhooks/{id}": get(204, func(f *matrixFixtures) string { return proj(f, "/webhooks/%d/", f.freshHook()) }),
		"GET /api/projects/{project_id}/webhooks/{id}/deliveries": get(200, func(f *matrixFixtures) string {
			return proj(f, "/webhooks/%d/deliveries/", f.hook)
		}),
		"GET /api/projects/{project_id}/approval_policies": get(200, func(f *matrixFixtures) string { return proj(f, "/approval_policies/") }),
		"POST /api/projects/{project_id}/approval_policies": {201, func(f *matrixFixtures) (string, any) {
			return proj(f, "/approval_policies/"), map[string]any{"action_key": "feature_flag.disable",
				"approver_config": map[string]any{"roles": []string{f.approvers}, "quorum": 1}, "bypass_org_membership_levels": []int{8}}
		}},
		"GET /api/projects/{project_id}/approval_policies/{id}": get(200, func(f *matrixFixtures) string {
			return proj(f, "/approval_policies/%s/", f.policy)
		}),
		"PATCH /api/projects/{project_id}/approval_policies/{id}": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/approval_policies/%s/", f.policy), map[string]any{"expires_after": "7 00:00:00"}
		}},
		"DELETE /api/projects/{project_id}/approval_policies/{id}": get(204, func(f *matrixFixtures) string {
			return proj(f, "/approval_policies/%s/", f.updatePolicy())
		}),
		"GET /api/projects/{project_id}/change_requests": get(200, func(f *matrixFixtures) string {
			return proj(f, "/change_requests/?state=pending&action_key=feature_flag.enable")
		}),
		"GET /api/projects/{project_id}/change_requests/{id}": get(200, func(f *matrixFixtures) string {
			return proj(f, "/change_requests/%s/", f.request)
		}),
		"POST /api/projects/{project_id}/change_requests/{id}/approve": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/change_requests/%s/approve/", f.freshChangeRequest()), map[string]any{}
		}},
		"POST /api/projects/{project_id}/change_requests/{id}/reject": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/change_requests/%s/reject/", f.freshChangeRequest()), map[string]any{"reason": "no"}
		}},
		// Only the requester cancels, and no caller of the matrix filed the request: with the
		// scope, the store refuses (the requester's own cancel is in the approvals tests).
		"POST /api/projects/{project_id}/change_requests/{id}/cancel": {403, func(f *matrixFixtures) (string, any) {
			return proj(f, "/change_requests/%s/cancel/", f.request), map[string]any{}
		}},
		"GET /api/projects/{project_id}/event_destinations": get(200, func(f *matrixFixtures) string { return proj(f, "/event_destinations/") }),
		"POST /api/projects/{project_id}/event_destinations": {201, func(f *matrixFixtures) (string, any) {
			return proj(f, "/event_destinations/"), map[string]any{"url": "https://93.184.215.14/" + f.unique("capture"), "api_key": "phc_matrixmatrixmatrix"}
		}},
		"GET /api/projects/{project_id}/event_destinations/{id}": get(200, func(f *matrixFixtures) string {
			return proj(f, "/event_destinations/%d/", f.dest)
		}),
		"PATCH /api/projects/{project_id}/event_destinations/{id}": {200, func(f *matrixFixtures) (string, any) {
			return proj(f, "/event_destinations/%d/", f.dest), map[string]any{"enabled": true}
		}},
		"DELETE /api/projects/{project_id}/event_destinations/{id}": get(204, func(f *matrixFixtures) string {
			return proj(f, "/event_destinations/%d/", f.freshDestination())
		}),
		"GET /api/projects/{project_id}/event_destinations/{id}/dead_letters": get(200, func(f *matrixFixtures) string {
			return proj(f, "/event_destinations/%d/dead_letters/", f.dest)
		}),
		"GET /api/projects/{project_id}/events":      get(200, func(f *matrixFixtures) string { return proj(f, "/events/") }),
		"GET /api/projects/{project_id}/events/{id}": get(200, func(f *matrixFixtures) string { return proj(f, "/events/%s/", f.event) }),
		"GET /api/projects/{project_id}/persons":     get(200, func(f *matrixFixtures) string { return proj(f, "/persons/") }),
		"GET /api/projects/{project_id}/persons/{id}": get(200, func(f *matrixFixtures) string {
			return proj(f, "/persons/%d/", f.person)
		}),
		"GET /api/projects/{project_id}/groups":         get(200, func(f *matrixFixtures) string { return proj(f, "/groups/") }),
		"GET /api/projects/{project_id}/edges":          get(200, func(f *matrixFixtures) string { return proj(f, "/edges/") }),
		"GET /api/projects/{project_id}/rollout_status": get(200, func(f *matrixFixtures) string { return proj(f, "/rollout_status/?version=1&timeout=0") }),

		"GET /api/users/{user}":      get(200, func(f *matrixFixtures) string { return "/api/users/@me/" }),
		"GET /api/personal_api_keys": get(200, func(f *matrixFixtures) string { return "/api/personal_api_keys/" }),
		"POST /api/personal_api_keys": {201, func(f *matrixFixtures) (string, any) {
			return "/api/personal_api_keys/", map[string]any{"label": f.unique("key"), "scopes": []string{"personal_api_key:read"}}
		}},
		// Keys are the caller's own: @current is the key making the call.
		"GET /api/personal_api_keys/{id}": get(200, func(f *matrixFixtures) string { return "/api/personal_api_keys/@current/" }),
		"PATCH /api/personal_api_keys/{id}": {200, func(f *matrixFixtures) (string, any) {
			return "/api/personal_api_keys/@current/", map[string]any{"label": f.unique("key")}
		}},
		"DELETE /api/personal_api_keys/{id}": get(204, func(f *matrixFixtures) string { return "/api/personal_api_keys/@current/" }),
		"GET /api/organizations/{org}/members": get(200, func(f *matrixFixtures) string {
			return "/api/organizations/" + f.org + "/members/"
		}),
		"DELETE /api/organizations/{org}/members/{user}": get(204, func(f *matrixFixtures) string {
			_, user := f.e.mustUser(f.unique("leaver")+"@example.com", false)
			return "/api/organizations/" + f.org + "/members/" + user + "/"
		}),
		"POST /api/organizations/{org}/invites": {201, func(f *matrixFixtures) (string, any) {
			return "/api/organizations/" + f.org + "/invites/", map[string]any{"target_email": f.unique("invitee") + "@example.com"}
		}},
		"POST /api/organizations/{org}/feature_flags/copy_flags": {200, func(f *matrixFixtures) (string, any) {
			return "/api/organizations/" + f.org + "/feature_flags/copy_flags/", f.copyBody()
		}},
		"POST /api/organizations/{org}/feature_flags/copy_flags/dependency_requirements": {200, func(f *matrixFixtures) (string, any) {
			return "/api/organizations/" + f.org + "/feature_flags/copy_flags/dependency_requirements/", f.copyBody()
		}},
		"GET /api/schema": get(200, func(f *matrixFixtures) string { return "/api/schema/" }),
	}
}

// TestRouteAuthorisationMatrix calls every registered route (the list comes from the
// server, so a new route without an entry here fails) with no key, a key lacking the
// route's scope, a key with exactly that scope, and keys that do not reach the addressed
// project or organisation (another organisation's; one limited to another project).
func TestRouteAuthorisationMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	fx := &matrixFixtures{e: e}
	fx.org = e.do("GET", fmt.Sprintf("/api/projects/%d/", e.project), e.key, nil).str("organization")
	fx.flag = e.mustCreateFlag(map[string]any{"key": "matrix"})
	fx.role = e.mustRole("Matrix", 37)
	fx.annotation = int64(e.do("POST", e.annotationsPath("/"), e.key, map[string]any{"content": "matrix"}).body["id"].(float64))
	fx.cohort = int64(e.do("POST", fmt.Sprintf("/api/projects/%d/cohorts/", e.project), e.key, map[string]any{"name": "matrix", "is_static": true}).body["id"].(float64))
	fx.feature = fx.freshFeature()
	fx.hook = fx.freshHook()
	fx.dest = fx.freshDestination()
	fx.event = uuid.NewString()
	fx.approvers = e.mustRole("Approvers", 37)
	fx.requester, _ = e.mustUser("requester@example.com", false)
	fx.policy = e.do("POST", fmt.Sprintf("/api/projects/%d/approval_policies/", e.project), e.key, map[string]any{
		"action_key": "feature_flag.enable", "approver_config": map[string]any{"roles": []string{fx.approvers}, "quorum": 1},
		"bypass_org_membership_levels": []int{8}}).str("id")
	fx.request = fx.freshChangeRequest()
	now := time.Now()
	if _, err := postgres.NewEventStore(e.db, slog.New(slog.NewTextHandler(io.Discard, nil))).Ingest(ctx, []controlplane.EventBatch{{
		ProjectID: e.project, Events: []controlplane.Event{{UUID: fx.event, Name: "$pageview", DistinctID: "u1",
			Properties: json.RawMessage(`{}`), Timestamp: now, ReceivedAt: now}}}}); err != nil {
		t.Fatal(err)
	}
	admin, err := postgres.NewAuthService(e.db).AuthenticatePersonalKey(ctx, e.key)
	if err != nil {
		t.Fatal(err)
	}
	persons, _, err := postgres.NewEventReader(e.db).FindPersons(controlplane.NewContextWithUser(ctx, &admin.User), controlplane.PersonFilter{ProjectID: e.project, Limit: 1})
	if err != nil || len(persons) != 1 {
		t.Fatalf("person: %v %v", persons, err)
	}
	fx.person, fx.personUUID = persons[0].ID, persons[0].UUID

	// Keys that must not reach this project or organisation.
	other, err := postgres.Bootstrap(ctx, e.db, bcrypt.MinCost, "outsider@elsewhere.org", "")
	if err != nil {
		t.Fatal(err)
	}
	second := e.do("POST", "/api/projects/", e.key, map[string]any{"name": "Second"})
	limitedElsewhere := e.mustKey([]string{"*"}, []int64{int64(second.body["id"].(float64))})
	limitedHere := e.mustKey([]string{"*"}, []int64{e.project})

	table := matrixTable()
	routes := e.api.Routes()
	seen := map[string]bool{}
	// Each call gets a key of its own, held by an organisation admin of its own: users may
	// hold only ten keys, and a route may delete the key that calls it.
	keyFor := func(scope string) string {
		email := fx.unique("caller") + "@example.com"
		u, err := postgres.CreateUser(ctx, e.db, "admin@example.com", email, "", true)
		if err != nil {
			t.Fatal(err)
		}
		e.mustMember(fx.approvers, u.UUID)
		k, err := postgres.NewAuthService(e.db).CreatePersonalKey(ctx, email, "matrix", []string{scope}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return k.Secret
	}
	for _, rt := range routes {
		name := rt.Method + " " + rt.Pattern
		seen[name] = true
		entry, ok := table[name]
		if !ok {
			t.Errorf("route %s (%s, scope %q) has no entry in the authorisation matrix: add one", name, rt.Access, rt.Scope)
			continue
		}
		t.Run(name, func(t *testing.T) {
			call := func(key string) response {
				path, body := entry.request(fx)
				return e.do(rt.Method, path, key, body)
			}
			if rt.Access == httpapi.AccessPublic {
				if r := call(""); r.status != entry.ok {
					t.Errorf("without a key: %d %s, want %d", r.status, r.raw, entry.ok)
				}
				return
			}
			wantError(t, call(""), 401, "authentication_error", "not_authenticated", nil)
			scope := string(rt.Scope)
			object, access, _ := strings.Cut(scope, ":")
			denied := []string{"annotation:write"}
			if object == "annotation" {
				denied = []string{"event:read"}
			}
			if access == "write" {
				denied = append(denied, object+":read")
			}
			for _, d := range denied {
				r := call(keyFor(d))
				wantError(t, r, 403, "authentication_error", "permission_denied", nil)
				if want := fmt.Sprintf("API key missing required scope '%s'", scope); r.str("detail") != want {
					t.Errorf("scope %s: detail %q, want %q", d, r.str("detail"), want)
				}
			}
			switch rt.Access {
			case httpapi.AccessProject, httpapi.AccessToken:
				for who, key := range map[string]string{"another organisation's key": other.PersonalAPIKey, "a key limited to another project": limitedElsewhere} {
					if r := call(key); r.status != 403 {
						t.Errorf("%s: %d %s, want 403", who, r.status, r.raw)
					}
				}
			case httpapi.AccessOrganization:
				if r := call(other.PersonalAPIKey); r.status != 403 {
					t.Errorf("another organisation's key: %d %s, want 403", r.status, r.raw)
				}
				// A key limited to projects, even this organisation's own project and with
				// every scope, may not act on the organisation: an invited admin, a role or a
				// membership reaches every project.
				for who, key := range map[string]string{"a key limited to another project": limitedElsewhere, "a key limited to this project": limitedHere} {
					r := call(key)
					wantError(t, r, 403, "authentication_error", "permission_denied", nil)
					if want := "API key with scoped projects are only supported on project-based views."; r.str("detail") != want {
						t.Errorf("%s: detail %q, want %q", who, r.str("detail"), want)
					}
				}
			}
			if r := call(keyFor(scope)); r.status != entry.ok {
				t.Errorf("scope %s: %d %s, want %d", scope, r.status, r.raw, entry.ok)
			}
		})
	}
	for name := range table {
		if !seen[name] {
			t.Errorf("matrix entry %s matches no registered route: remove it", name)
		}
	}
}

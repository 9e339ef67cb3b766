package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// member adds a member (not an admin) to the site's organisation and logs them in.
func (s *site) member(t *testing.T, email string) (*browser, string, *controlplane.User) {
	t.Helper()
	u, err := postgres.CreateUser(context.Background(), s.db, "admin@example.com", email, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.NewUserService(s.db, 4).SetPassword(context.Background(), email, "member-password-1"); err != nil {
		t.Fatal(err)
	}
	b := s.browser()
	return b, b.login(email, "member-password-1"), u
}

// admin is the site's bootstrapped admin, as a context acting as them.
func (s *site) admin(t *testing.T) (context.Context, *controlplane.User) {
	t.Helper()
	a, err := postgres.NewServices(s.db, 4).Auth.AuthenticatePersonalKey(context.Background(), s.adminKey)
	if err != nil {
		t.Fatal(err)
	}
	return controlplane.NewContextWithUser(context.Background(), &a.User), &a.User
}

func TestConsoleChangeRequests(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx, admin := s.admin(t)
	services := postgres.NewServices(s.db, 4)
	key, inactive := "reviewed-flag", false
	flag, err := services.Flags.CreateFlag(ctx, s.project, controlplane.FlagUpdate{Key: &key, Active: &inactive})
	if err != nil {
		t.Fatal(err)
	}
	enable := controlplane.ActionFlagEnable
	if _, err := services.Approvals.CreateApprovalPolicy(ctx, s.project, controlplane.ApprovalPolicyUpdate{ActionKey: &enable,
		ApproverConfig: &controlplane.ApproverConfig{Users: []int64{admin.ID}, Quorum: 1}}); err != nil {
		t.Fatal(err)
	}
	m, mtok, _ := s.member(t, "member@example.com")
	a := s.browser()
	atok := a.login("admin@example.com", s.password)
	flagPath := fmt.Sprintf("/project/%d/feature_flags/%d", s.project, flag.ID)

	// The member's gated save of the flag form is held: the console leads to its change request.
	held := m.post(flagPath, url.Values{"csrf_token": {mtok}, "key": {key}, "active": {"on"}, "cond_count": {"1"}, "c0_rollout": {"100"},
		"var_count": {"0"}, "action": {"save"}})
	if held.status != http.StatusSeeOther || !strings.Contains(held.location, "/change_requests/") {
		t.Fatalf("gated save: %d %q %.500s", held.status, held.location, held.body)
	}
	review := m.get(held.location)
	for _, want := range []string{"Sent for review", "Enable feature flag &#39;reviewed-flag&#39;", ">pending<", "Cancel the request", `diff-line diff-add`} {
		if !strings.Contains(review.body, want) {
			t.Errorf("the requester's review page lacks %q: %d %.4000s", want, review.status, review.body)
		}
	}
	if strings.Contains(review.body, "/approve") {
		t.Error("the requester, not an approver, is offered the vote")
	}
	if f, _ := services.Flags.FindFlagByID(ctx, s.project, flag.ID); f.Active {
		t.Fatal("the held change was made")
	}
	if list := m.get(fmt.Sprintf("/project/%d/change_requests", s.project)); !strings.Contains(list.body, held.location) {
		t.Errorf("the list does not link the request: %.3000s", list.body)
	}
	// The same change again, from the list's switch, finds the pending request.
	if again := m.post(flagPath+"/active", url.Values{"csrf_token": {mtok}, "active": {"true"}}); again.location != held.location {
		t.Errorf("the same change again: %d %q", again.status, again.location)
	} else if p := m.get(again.location); !strings.Contains(p.body, "already waiting for review") {
		t.Errorf("the duplicate's page: %.2000s", p.body)
	}

	// Votes need the session's token, and the member is no approver.
	if p := a.post(held.location+"/approve", url.Values{"csrf_token": {"forged"}}); p.status != http.StatusForbidden {
		t.Errorf("a forged approval: %d", p.status)
	}
	if p := m.post(held.location+"/approve", url.Values{"csrf_token": {mtok}}); p.status != http.StatusForbidden {
		t.Errorf("the requester's own approval: %d", p.status)
	}
	// A rejection needs a reason, shown beside the form.
	if p := a.post(held.location+"/reject", url.Values{"csrf_token": {atok}, "reason": {"  "}}); p.status != http.StatusBadRequest ||
		!strings.Contains(p.body, "A reason is required for rejection.") {
		t.Errorf("a rejection without a reason: %d %.2000s", p.status, p.body)
	}
	// The approver approves from the review page: the flag changes.
	if p := a.get(held.location); !strings.Contains(p.body, "/approve") {
		t.Fatalf("the approver is not offered the vote: %.4000s", p.body)
	}
	if p := a.post(held.location+"/approve", url.Values{"csrf_token": {atok}, "reason": {"ship it"}}); p.status != http.StatusSeeOther {
		t.Fatalf("approve: %d %.2000s", p.status, p.body)
	}
	if f, _ := services.Flags.FindFlagByID(ctx, s.project, flag.ID); !f.Active {
		t.Fatal("the approved change was not made")
	}
	done := a.get(held.location)
	for _, want := range []string{"Quorum reached. Change applied successfully.", ">applied<", "ship it", "data-fragment=\"/project/"} {
		if !strings.Contains(done.body, want) {
			t.Errorf("the applied request's page lacks %q: %.4000s", want, done.body)
		}
	}

	// A second request, rejected with a reason; a third, cancelled by its requester.
	disable := controlplane.ActionFlagDisable
	if _, err := services.Approvals.CreateApprovalPolicy(ctx, s.project, controlplane.ApprovalPolicyUpdate{ActionKey: &disable,
		ApproverConfig: &controlplane.ApproverConfig{Users: []int64{admin.ID}, Quorum: 1}}); err != nil {
		t.Fatal(err)
	}
	off := m.post(flagPath+"/active", url.Values{"csrf_token": {mtok}, "active": {"false"}})
	if off.status != http.StatusSeeOther || off.location == held.location {
		t.Fatalf("gated disable: %d %q", off.status, off.location)
	}
	if p := a.post(off.location+"/reject", url.Values{"csrf_token": {atok}, "reason": {"not now"}}); p.status != http.StatusSeeOther {
		t.Fatalf("reject: %d %.2000s", p.status, p.body)
	}
	if p := a.get(off.location); !strings.Contains(p.body, ">rejected<") || !strings.Contains(p.body, "not now") {
		t.Errorf("the rejected request's page: %.4000s", p.body)
	}
	again := m.post(flagPath+"/active", url.Values{"csrf_token": {mtok}, "active": {"false"}})
	if p := m.post(again.location+"/cancel", url.Values{"csrf_token": {mtok}}); p.status != http.StatusSeeOther {
		t.Fatalf("cancel: %d %.2000s", p.status, p.body)
	}
	if p := m.get(again.location); !strings.Contains(p.body, "Change request canceled.") {
		t.Errorf("the cancelled request's page: %.3000s", p.body)
	}
	if f, _ := services.Flags.FindFlagByID(ctx, s.project, flag.ID); !f.Active {
		t.Error("a rejected or cancelled change was made")
	}
	// Pending requests come first in the list, before newer ones that are settled.
	pending := m.post(flagPath+"/active", url.Values{"csrf_token": {mtok}, "active": {"false"}})
	key2, off2 := "reviewed-too", false
	flag2, err := services.Flags.CreateFlag(ctx, s.project, controlplane.FlagUpdate{Key: &key2, Active: &off2})
	if err != nil {
		t.Fatal(err)
	}
	newer := m.post(fmt.Sprintf("/project/%d/feature_flags/%d/active", s.project, flag2.ID), url.Values{"csrf_token": {mtok}, "active": {"true"}})
	if p := a.post(newer.location+"/reject", url.Values{"csrf_token": {atok}, "reason": {"later"}}); p.status != http.StatusSeeOther {
		t.Fatalf("reject the newer request: %d", p.status)
	}
	list := a.get(fmt.Sprintf("/project/%d/change_requests", s.project)).body
	if i, j := strings.Index(list, pending.location), strings.Index(list, newer.location); i < 0 || j < 0 || i > j {
		t.Errorf("the older pending request (%d) is not listed before the newer rejected one (%d): %.4000s", i, j, list)
	}
}

func TestConsoleApprovalPolicies(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx, admin := s.admin(t)
	a := s.browser()
	atok := a.login("admin@example.com", s.password)
	base := fmt.Sprintf("/project/%d/approval_policies", s.project)
	if p := a.get(base); p.status != 200 || !strings.Contains(p.body, "No approval policies") || !strings.Contains(p.body, "Create a policy") {
		t.Fatalf("policies page: %d %.3000s", p.status, p.body)
	}
	form := func(action, quorum string, users ...string) url.Values {
		return url.Values{"csrf_token": {atok}, "action_key": {action}, "quorum": {quorum}, "expiry_days": {"3"}, "users": users}
	}
	adminID := fmt.Sprint(admin.ID)
	if p := a.post(base, form("feature_flag.enable", "2", adminID)); p.status != http.StatusBadRequest ||
		!strings.Contains(p.body, "The quorum is more than the approvers listed.") {
		t.Errorf("a quorum above the approvers: %d %.2000s", p.status, p.body)
	}
	create := form("feature_flag.enable", "1", adminID)
	create.Set("allow_approved_release_plans", "on")
	if p := a.post(base, create); p.status != http.StatusSeeOther {
		t.Fatalf("create: %d %.2000s", p.status, p.body)
	}
	list, _, err := postgres.NewServices(s.db, 4).Approvals.FindApprovalPolicies(ctx, controlplane.ApprovalPolicyFilter{ProjectID: s.project, Limit: 10})
	if err != nil || len(list) != 1 || list[0].ExpiresAfter != 3*24*time.Hour || !list[0].Enabled || list[0].ApproverConfig.Users[0] != admin.ID ||
		!list[0].AllowApprovedReleasePlans {
		t.Fatalf("stored policies: %+v %v", list, err)
	}
	if p := a.get(base); !strings.Contains(p.body, "feature_flag.enable") || !strings.Contains(p.body, "3 days") || !strings.Contains(p.body, ">admin@example.com</span>") ||
		!strings.Contains(p.body, "advance without review") {
		t.Errorf("the list: %.3000s", p.body)
	}
	polPath := base + "/" + list[0].ID

	// A member sees the policies and cannot change them, with or without the form.
	m, mtok, _ := s.member(t, "member@example.com")
	if p := m.get(base); p.status != 200 || !strings.Contains(p.body, "feature_flag.enable") || strings.Contains(p.body, "Create a policy") ||
		strings.Contains(p.body, "/delete") {
		t.Errorf("a member's policies page: %d %.3000s", p.status, p.body)
	}
	for _, path := range []string{base, polPath + "/enabled", polPath + "/delete"} {
		f := form("feature_flag.disable", "1", adminID)
		f.Set("csrf_token", mtok)
		f.Set("enabled", "false")
		if p := m.post(path, f); p.status != http.StatusForbidden {
			t.Errorf("a member's POST %s: %d", path, p.status)
		}
		if p := a.post(path, url.Values{"csrf_token": {"forged"}}); p.status != http.StatusForbidden {
			t.Errorf("a forged POST %s: %d", path, p.status)
		}
	}

	if p := a.post(polPath+"/enabled", url.Values{"csrf_token": {atok}, "enabled": {"false"}}); p.status != http.StatusSeeOther {
		t.Fatalf("disable: %d %.2000s", p.status, p.body)
	}
	if p := a.get(base); !strings.Contains(p.body, ">disabled<") {
		t.Errorf("the disabled policy: %.3000s", p.body)
	}
	if p := a.post(polPath+"/delete", url.Values{"csrf_token": {atok}}); p.status != http.StatusSeeOther {
		t.Fatalf("delete: %d", p.status)
	}
	if p := a.get(base); !strings.Contains(p.body, "No approval policies") {
		t.Error("the policy is still listed after its deletion")
	}
}

func TestConsolePromote(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx, admin := s.admin(t)
	services := postgres.NewServices(s.db, 4)
	staging, err := services.Projects.CreateProject(ctx, admin.OrganizationID, "Staging")
	if err != nil {
		t.Fatal(err)
	}
	prod, err := services.Projects.CreateProject(ctx, admin.OrganizationID, "Production")
	if err != nil {
		t.Fatal(err)
	}
	depKey, key := "checkout-base", "checkout-v2"
	dep, err := services.Flags.CreateFlag(ctx, s.project, controlplane.FlagUpdate{Key: &depKey})
	if err != nil {
		t.Fatal(err)
	}
	filters := json.RawMessage(fmt.Sprintf(`{"groups": [{"properties": [{"key": "%d", "type": "flag", "value": true, "operator": "flag_evaluates_to"}], "rollout_percentage": 50}]}`, dep.ID))
	flag, err := services.Flags.CreateFlag(ctx, s.project, controlplane.FlagUpdate{Key: &key, Filters: filters})
	if err != nil {
		t.Fatal(err)
	}
	// Production gates enabling: the copy there waits for review.
	enable := controlplane.ActionFlagEnable
	if _, err := services.Approvals.CreateApprovalPolicy(ctx, prod.ID, controlplane.ApprovalPolicyUpdate{ActionKey: &enable,
		ApproverConfig: &controlplane.ApproverConfig{Users: []int64{admin.ID}, Quorum: 1}}); err != nil {
		t.Fatal(err)
	}

	a := s.browser()
	tok := a.login("admin@example.com", s.password)
	flagPath := fmt.Sprintf("/project/%d/feature_flags/%d", s.project, flag.ID)
	if p := a.get(flagPath); !strings.Contains(p.body, flagPath+"/promote") {
		t.Fatalf("the flag page does not link its promotion: %.3000s", p.body)
	}
	form := a.get(flagPath + "/promote")
	if form.status != 200 || !strings.Contains(form.body, "> Staging</label>") || strings.Contains(form.body, fmt.Sprintf(`name="targets" value="%d"`, s.project)) {
		t.Fatalf("promote form: %d %.3000s", form.status, form.body)
	}
	targets := func(op string) url.Values {
		return url.Values{"csrf_token": {tok}, "op": {op}, "copy_dependencies": {"on"},
			"targets": {fmt.Sprint(staging.ID), fmt.Sprint(prod.ID)}}
	}
	preview := a.post(flagPath+"/promote", targets("preview"))
	if preview.status != 200 || !strings.Contains(preview.body, "1 dependency flag can be copied.") || !strings.Contains(preview.body, "copies checkout-base") {
		t.Errorf("preview: %d %.4000s", preview.status, preview.body)
	}
	if flags, _, _ := services.Flags.FindFlags(ctx, controlplane.FlagFilter{ProjectID: staging.ID, Limit: 10}); len(flags) != 0 {
		t.Fatalf("the preview copied: %v", flags)
	}
	if p := a.post(flagPath+"/promote", url.Values{"csrf_token": {"forged"}, "targets": {fmt.Sprint(staging.ID)}}); p.status != http.StatusForbidden {
		t.Errorf("a forged promotion: %d", p.status)
	}
	if p := a.post(flagPath+"/promote", url.Values{"csrf_token": {tok}, "op": {"copy"}}); p.status != http.StatusBadRequest ||
		!strings.Contains(p.body, "Ensure this field has at least 1 elements.") {
		t.Errorf("a promotion without targets: %d %.2000s", p.status, p.body)
	}
	done := a.post(flagPath+"/promote", targets("copy"))
	if done.status != 200 {
		t.Fatalf("promote: %d %.3000s", done.status, done.body)
	}
	staged, _, err := services.Flags.FindFlags(ctx, controlplane.FlagFilter{ProjectID: staging.ID, Limit: 10})
	if err != nil || len(staged) != 2 {
		t.Fatalf("staging's flags: %v %v", staged, err)
	}
	for _, want := range []string{"promote-success", "with checkout-base", "held for approval", fmt.Sprintf("/project/%d/change_requests/", prod.ID)} {
		if !strings.Contains(done.body, want) {
			t.Errorf("the result lacks %q: %.5000s", want, done.body)
		}
	}
}

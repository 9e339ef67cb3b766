package controlplane_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/controlplane"
)

func ptr[T any](v T) *T { return &v }

func TestFlagActions(t *testing.T) {
	flag := func(active bool, filters string) *controlplane.Flag {
		return &controlplane.Flag{ID: 7, Key: "f", Active: active, Version: 3, Filters: json.RawMessage(filters)}
	}
	const ten = `{"groups": [{"properties": [], "rollout_percentage": 10}]}`
	const fifty = `{"groups": [{"properties": [], "rollout_percentage": 50}]}`
	for _, tc := range []struct {
		name   string
		before *controlplane.Flag // nil: a creation
		upd    controlplane.FlagUpdate
		want   []string
	}{
		{"create active", nil, controlplane.FlagUpdate{Key: ptr("f")}, []string{controlplane.ActionFlagEnable}},
		{"create inactive", nil, controlplane.FlagUpdate{Key: ptr("f"), Active: ptr(false)}, nil},
		{"create with a rollout", nil, controlplane.FlagUpdate{Key: ptr("f"), Active: ptr(false), Filters: json.RawMessage(ten)},
			[]string{controlplane.ActionFlagUpdate}},
		{"enable", flag(false, ten), controlplane.FlagUpdate{Active: ptr(true)}, []string{controlplane.ActionFlagEnable}},
		{"enable an enabled flag", flag(true, ten), controlplane.FlagUpdate{Active: ptr(true)}, nil},
		{"disable", flag(true, ten), controlplane.FlagUpdate{Active: ptr(false)}, []string{controlplane.ActionFlagDisable}},
		{"rollout change", flag(true, ten), controlplane.FlagUpdate{Filters: json.RawMessage(fifty)}, []string{controlplane.ActionFlagUpdate}},
		{"same rollout, other properties", flag(true, ten), controlplane.FlagUpdate{
			Filters: json.RawMessage(`{"groups": [{"properties": [{"key": "a", "value": "b", "type": "person"}], "rollout_percentage": 10}]}`)}, nil},
		{"a condition added", flag(true, ten), controlplane.FlagUpdate{
			Filters: json.RawMessage(`{"groups": [{"rollout_percentage": 10}, {"rollout_percentage": 5}]}`)}, []string{controlplane.ActionFlagUpdate}},
		{"holdout", flag(true, ten), controlplane.FlagUpdate{
			Filters: json.RawMessage(`{"groups": [{"rollout_percentage": 10}], "holdout": {"exclusion_percentage": 5}}`)}, []string{controlplane.ActionFlagUpdate}},
		{"variants", flag(true, `{"groups": [], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 100}]}}`), controlplane.FlagUpdate{
			Filters: json.RawMessage(`{"groups": [], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 50}, {"key": "b", "rollout_percentage": 50}]}}`)},
			[]string{controlplane.ActionFlagUpdate}},
		{"enable and a rollout change", flag(false, ten), controlplane.FlagUpdate{Active: ptr(true), Filters: json.RawMessage(fifty)},
			[]string{controlplane.ActionFlagEnable, controlplane.ActionFlagUpdate}},
		{"a rename", flag(true, ten), controlplane.FlagUpdate{Name: ptr("x")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := &controlplane.Flag{Key: "f", Active: true}
			if tc.before != nil {
				*after = *tc.before
			}
			tc.upd.Apply(after)
			var got []string
			for _, a := range controlplane.FlagActions(tc.before, after, &tc.upd) {
				got = append(got, a.Key)
				if tc.before != nil && (a.Intent.FlagID == nil || *a.Intent.Preconditions.Version != 3) {
					t.Errorf("%s: intent without the flag's id and version: %+v", a.Key, a.Intent)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolicyConditionsMatch(t *testing.T) {
	intent := func(before, after float64) *controlplane.FlagIntent {
		return &controlplane.FlagIntent{
			CurrentState: controlplane.IntentState{RolloutPercentage: []controlplane.RolloutValue{{Path: "groups[0].rollout_percentage", Value: &before}}},
			GatedChanges: controlplane.IntentState{RolloutPercentage: []controlplane.RolloutValue{{Path: "groups[0].rollout_percentage", Value: &after}}},
		}
	}
	cond := func(typ, op string, v float64) controlplane.PolicyConditions {
		return controlplane.PolicyConditions{Type: typ, Field: "rollout_percentage", Operator: op, Value: &v}
	}
	for _, tc := range []struct {
		name string
		c    controlplane.PolicyConditions
		in   *controlplane.FlagIntent
		want bool
	}{
		{"none gates everything", controlplane.PolicyConditions{}, intent(10, 10), true},
		{"any change", controlplane.PolicyConditions{Type: "any_change", Field: "rollout_percentage"}, intent(10, 20), true},
		{"no change", controlplane.PolicyConditions{Type: "any_change", Field: "rollout_percentage"}, intent(10, 10), false},
		{"after > 50", cond("before_after", ">", 50), intent(10, 60), true},
		{"after not > 50", cond("before_after", ">", 50), intent(60, 50), false},
		{"up by more than 20", cond("change_amount", ">", 20), intent(10, 40), true},
		{"up by 20", cond("change_amount", ">", 20), intent(10, 30), false},
		{"down by 20", cond("change_amount", "<=", -20), intent(50, 30), true},
		{"== ", cond("before_after", "==", 100), intent(50, 100), true},
		{"!=", cond("change_amount", "!=", 0), intent(50, 50), false},
		{"enable intents have no rollout", cond("before_after", ">", 0),
			&controlplane.FlagIntent{GatedChanges: controlplane.IntentState{Active: ptr(true)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Match(tc.in); got != tc.want {
				t.Errorf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWhoVotesAndCancels(t *testing.T) {
	requester := &controlplane.User{ID: 1, OrgRole: controlplane.OrgRoleMember}
	approver := &controlplane.User{ID: 2, OrgRole: controlplane.OrgRoleMember}
	byRole := &controlplane.User{ID: 3, OrgRole: controlplane.OrgRoleMember}
	admin := &controlplane.User{ID: 4, OrgRole: controlplane.OrgRoleAdmin}
	const role = "11111111-1111-1111-1111-111111111111"
	cr := func(state string, selfApprove bool, approvals ...string) *controlplane.ChangeRequest {
		c := &controlplane.ChangeRequest{State: state, CreatedBy: requester, ValidationStatus: controlplane.ValidationValid,
			PolicySnapshot: controlplane.PolicySnapshot{Users: []int64{1, 2}, Roles: []string{role}, Quorum: 1, AllowSelfApprove: selfApprove}}
		for _, d := range approvals {
			c.Approvals = append(c.Approvals, controlplane.Approval{Decision: d, CreatedBy: approver})
		}
		return c
	}
	refusal := func(err error) string {
		if err == nil {
			return ""
		}
		return err.(*controlplane.Error).Detail
	}
	for _, tc := range []struct {
		name  string
		c     *controlplane.ChangeRequest
		u     *controlplane.User
		roles []string
		want  string
	}{
		{"an approver", cr("pending", false), approver, nil, ""},
		{"by role", cr("pending", false), byRole, []string{role}, ""},
		{"the requester", cr("pending", false), requester, nil, "You cannot approve your own change request"},
		{"the requester, allowed", cr("pending", true), requester, nil, ""},
		{"an admin not listed", cr("pending", false), admin, nil, "You are not in the approver set for this change request"},
		{"not pending", cr("applied", false), approver, nil, "Only pending change requests can be approved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refusal(tc.c.ApproveRefusal(tc.u, tc.roles)); got != tc.want {
				t.Errorf("refusal %q, want %q", got, tc.want)
			}
		})
	}
	stale := cr("pending", false, controlplane.DecisionApproved)
	stale.ValidationStatus = controlplane.ValidationStale
	for _, tc := range []struct {
		name string
		c    *controlplane.ChangeRequest
		u    *controlplane.User
		want bool
	}{
		{"requester, no approval", cr("pending", false), requester, true},
		{"someone else", cr("pending", false), approver, false},
		{"after an approval", cr("pending", false, controlplane.DecisionApproved), requester, false},
		{"after an approval, stale", stale, requester, true},
		{"rejected", cr("rejected", false), requester, false},
	} {
		t.Run("cancel "+tc.name, func(t *testing.T) {
			if got := tc.c.CanBeCanceledBy(tc.u); got != tc.want {
				t.Errorf("CanBeCanceledBy = %v, want %v", got, tc.want)
			}
		})
	}
	p := &controlplane.ApprovalPolicy{BypassOrgMembershipLevels: []int{controlplane.MembershipLevelAdmin}, BypassRoles: []string{role}}
	if !p.Bypasses(admin, nil) || !p.Bypasses(byRole, []string{role}) || p.Bypasses(approver, nil) {
		t.Error("bypass by level or role")
	}
}

func TestDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"14 00:00:00": 14 * 24 * time.Hour, "01:30:00": 90 * time.Minute,
		"7 0:0:5": 7*24*time.Hour + 5*time.Second, "3600": time.Hour, "10:05": 10*time.Minute + 5*time.Second} {
		if got, ok := controlplane.ParseDuration(in); !ok || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "14 days", "1:2:3:4", "-5"} {
		if _, ok := controlplane.ParseDuration(bad); ok {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
	if got := controlplane.FormatDuration(14*24*time.Hour + 90*time.Minute); got != "14 01:30:00" {
		t.Errorf("FormatDuration = %q", got)
	}
}

func TestPolicyValidate(t *testing.T) {
	cfg := &controlplane.ApproverConfig{Users: []int64{1}, Quorum: 1}
	for _, tc := range []struct {
		name string
		upd  controlplane.ApprovalPolicyUpdate
		attr string // "" when valid
	}{
		{"valid", controlplane.ApprovalPolicyUpdate{ActionKey: ptr(controlplane.ActionFlagEnable), ApproverConfig: cfg}, ""},
		{"no action", controlplane.ApprovalPolicyUpdate{ApproverConfig: cfg}, "action_key"},
		{"unknown action", controlplane.ApprovalPolicyUpdate{ActionKey: ptr("flag.explode"), ApproverConfig: cfg}, "action_key"},
		{"quorum 0", controlplane.ApprovalPolicyUpdate{ActionKey: ptr(controlplane.ActionFlagEnable),
			ApproverConfig: &controlplane.ApproverConfig{Users: []int64{1}}}, "approver_config"},
		{"quorum over the users", controlplane.ApprovalPolicyUpdate{ActionKey: ptr(controlplane.ActionFlagEnable),
			ApproverConfig: &controlplane.ApproverConfig{Users: []int64{1}, Quorum: 2}}, "approver_config"},
		{"conditions on enable", controlplane.ApprovalPolicyUpdate{ActionKey: ptr(controlplane.ActionFlagEnable), ApproverConfig: cfg,
			Conditions: &controlplane.PolicyConditions{Type: "any_change", Field: "rollout_percentage"}}, "conditions"},
		{"change_amount without value", controlplane.ApprovalPolicyUpdate{ActionKey: ptr(controlplane.ActionFlagUpdate), ApproverConfig: cfg,
			Conditions: &controlplane.PolicyConditions{Type: "change_amount", Field: "rollout_percentage", Operator: ">"}}, "conditions"},
		{"bad level", controlplane.ApprovalPolicyUpdate{ActionKey: ptr(controlplane.ActionFlagEnable), ApproverConfig: cfg,
			BypassOrgMembershipLevels: &[]int{5}}, "bypass_org_membership_levels"},
		{"bad role", controlplane.ApprovalPolicyUpdate{ActionKey: ptr(controlplane.ActionFlagEnable), ApproverConfig: cfg,
			BypassRoles: &[]string{"admins"}}, "bypass_roles"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.upd.Validate(true, &controlplane.ApprovalPolicy{})
			got := ""
			if err != nil {
				got = err.(*controlplane.Error).Attr
			}
			if got != tc.attr {
				t.Errorf("Validate: %v, want an error about %q", err, tc.attr)
			}
		})
	}
}

package controlplane_test

import (
	"context"
	"testing"

	"github.com/flagedge/flagedge/controlplane"
)

func TestCurrentUser(t *testing.T) {
	if _, err := controlplane.CurrentUser(context.Background()); controlplane.ErrorKind(err) != controlplane.NotAuthenticated {
		t.Errorf("no user: %v, want NotAuthenticated", err)
	}
	u := &controlplane.User{ID: 3}
	if got, err := controlplane.CurrentUser(controlplane.NewContextWithUser(context.Background(), u)); got != u || err != nil {
		t.Errorf("CurrentUser = %v %v", got, err)
	}
}

func TestAccessPredicates(t *testing.T) {
	admin := &controlplane.User{ID: 1, OrganizationID: 10, OrgRole: controlplane.OrgRoleAdmin}
	member := &controlplane.User{ID: 2, OrganizationID: 10, OrgRole: controlplane.OrgRoleMember}
	creator := &controlplane.User{ID: 3, OrganizationID: 10, OrgRole: controlplane.OrgRoleMember}
	outsider := &controlplane.User{ID: 4, OrganizationID: 20, OrgRole: controlplane.OrgRoleAdmin}
	flag := &controlplane.Flag{CreatedBy: &controlplane.User{ID: creator.ID}}
	orphan := &controlplane.Flag{} // its creator's account is gone
	open, restricted := controlplane.FlagRoleAccess{}, controlplane.FlagRoleAccess{Restricted: true}
	editor := controlplane.FlagRoleAccess{Restricted: true, Editor: true}

	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"member reads own org", controlplane.CanReadOrg(member, 10), true},
		{"admin of another org reads this one", controlplane.CanReadOrg(outsider, 10), false},
		{"no user reads", controlplane.CanReadOrg(nil, 10), false},
		{"org 0 is no org", controlplane.CanReadOrg(&controlplane.User{}, 0), false},
		{"admin administers own org", controlplane.CanAdminOrg(admin, 10), true},
		{"member administers", controlplane.CanAdminOrg(member, 10), false},
		{"admin of another org administers this one", controlplane.CanAdminOrg(outsider, 10), false},
		{"no user administers", controlplane.CanAdminOrg(nil, 10), false},

		{"member edits a flag without role access", controlplane.CanEditFlag(member, 10, flag, open), true},
		{"member edits a restricted flag", controlplane.CanEditFlag(member, 10, flag, restricted), false},
		{"editor-role member edits a restricted flag", controlplane.CanEditFlag(member, 10, flag, editor), true},
		{"creator edits a restricted flag", controlplane.CanEditFlag(creator, 10, flag, restricted), true},
		{"member edits a restricted flag whose creator is gone", controlplane.CanEditFlag(member, 10, orphan, restricted), false},
		{"admin edits a restricted flag", controlplane.CanEditFlag(admin, 10, flag, restricted), true},
		{"another org's admin edits an open flag", controlplane.CanEditFlag(outsider, 10, flag, open), false},
		{"another org's editor edits", controlplane.CanEditFlag(outsider, 10, flag, editor), false},
		{"no user edits", controlplane.CanEditFlag(nil, 10, flag, open), false},

		{"owner manages own key", controlplane.CanManageKey(member, member.ID), true},
		{"admin manages a member's key", controlplane.CanManageKey(admin, member.ID), false},
		{"no user manages", controlplane.CanManageKey(nil, member.ID), false},
		{"owner 0 is no owner", controlplane.CanManageKey(&controlplane.User{}, 0), false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

package postgres_test

import (
	"context"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/postgres/postgrestest"
)

// TestActingAsAUser calls the services the way a background actor does — no HTTP
// request, only the user in the context — and checks they apply the same rules as the API.
func TestActingAsAUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, boot, _ := postgrestest.Open(t)
	user := func(email string, admin bool) *controlplane.User {
		u, err := postgres.CreateUser(ctx, db, "admin@example.com", email, "", admin)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	creator, viewer, admin := user("creator@example.com", false), user("viewer@example.com", false), user("boss@example.com", true)
	other, err := postgres.Bootstrap(ctx, db, bcrypt.MinCost, "someone@elsewhere.example", "")
	if err != nil {
		t.Fatal(err)
	}
	s := postgres.NewServices(db, bcrypt.MinCost)
	as := controlplane.NewContextWithUser
	name := func(n string) controlplane.FlagUpdate { return controlplane.FlagUpdate{Name: &n} }

	key := "scheduled"
	hookURL, hookSecret := "https://93.184.215.14/hook", "0123456789abcdef"
	hook := controlplane.WebhookUpdate{URL: &hookURL, Events: []string{controlplane.EventFlagUpdated}, Secret: &hookSecret}
	flag, err := s.Flags.CreateFlag(as(ctx, creator), boot.ProjectID, controlplane.FlagUpdate{Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	role, err := s.Roles.CreateRole(as(ctx, admin), controlplane.RoleUpdate{Name: &key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Roles.CreateRoleAccess(as(ctx, creator), boot.ProjectID, flag.ID, role.ID); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		err  error
		want controlplane.Kind
	}{
		{"no user", func() error {
			_, err := s.Flags.UpdateFlag(ctx, boot.ProjectID, flag.ID, name("x"))
			return err
		}(), controlplane.NotAuthenticated},
		{"a user without edit access to the flag", func() error {
			_, err := s.Flags.UpdateFlag(as(ctx, viewer), boot.ProjectID, flag.ID, name("x"))
			return err
		}(), controlplane.Forbidden},
		{"a project of another organisation", func() error {
			_, _, err := s.Flags.FindFlags(as(ctx, creator), controlplane.FlagFilter{ProjectID: other.ProjectID, Limit: 1})
			return err
		}(), controlplane.Forbidden},
		{"a role write by a member", func() error {
			_, err := s.Roles.CreateRole(as(ctx, viewer), controlplane.RoleUpdate{Name: &key})
			return err
		}(), controlplane.Forbidden},
		{"granting role access without edit access", func() error {
			_, err := s.Roles.CreateRoleAccess(as(ctx, viewer), boot.ProjectID, flag.ID, role.ID)
			return err
		}(), controlplane.Forbidden},
		{"a webhook created by a member", func() error {
			_, err := s.Webhooks.CreateWebhook(as(ctx, viewer), boot.ProjectID, hook)
			return err
		}(), controlplane.Forbidden},
		{"webhooks listed by a member", func() error {
			_, _, err := s.Webhooks.FindWebhooks(as(ctx, viewer), boot.ProjectID, 10, 0)
			return err
		}(), controlplane.Forbidden},
		{"a webhook on a project of another organisation", func() error {
			_, err := s.Webhooks.CreateWebhook(as(ctx, admin), other.ProjectID, hook)
			return err
		}(), controlplane.Forbidden},
	} {
		if tc.err == nil || controlplane.ErrorKind(tc.err) != tc.want {
			t.Errorf("%s: got %v, want kind %d", tc.name, tc.err, tc.want)
		}
	}
	if _, err := s.Webhooks.CreateWebhook(as(ctx, admin), boot.ProjectID, hook); err != nil {
		t.Errorf("an admin may create a webhook: %v", err)
	}
	for _, u := range []*controlplane.User{creator, admin} {
		if _, err := s.Flags.UpdateFlag(as(ctx, u), boot.ProjectID, flag.ID, name("by "+u.Email)); err != nil {
			t.Errorf("%s may edit the flag: %v", u.Email, err)
		}
	}
}

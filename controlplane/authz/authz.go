// Package authz is the one home of the control plane's permission checks: it wraps the
// services and decides, from the user the context acts as (controlplane.UserFromContext),
// whether a call may proceed. The management API, the web console and any background actor
// (a scheduled change acting for the user who scheduled it) call the services through it,
// so they are subject to the same rules:
//
//   - a user reaches only their own organisation: its projects and everything in them, its
//     roles, members and annotations; another organisation's project is a 403, whether it
//     exists or not;
//   - only organisation admins change roles and role memberships;
//   - a flag with role access is changed (and its role access granted or withdrawn) only by
//     an admin, its creator, or a member of a role with edit access (RoleService.EditableFlags);
//
// What a personal API key adds (its scopes, the projects it is limited to) is the API's
// business (controlplane/httpapi): the key narrows what its user may do, never widens it.
// Calls without a user in the context are refused as not authenticated, except the ones
// that establish who the user is (passwords, sessions, key look-up), which pass through.
package authz

import (
	"context"

	"github.com/flagedge/flagedge/controlplane"
)

// Wrap returns the services guarded by the permission checks. The services given are the
// stores (controlplane/postgres), which check nothing themselves.
func Wrap(s controlplane.Services) controlplane.Services {
	g := &guard{s: s}
	out := s // pass through: the services that establish the user (Auth, Sessions) and those whose stores check (Projects, Analytics, Annotations, EarlyAccess, Users, Keys, Webhooks)
	out.Flags = flags{g}
	out.Activity = activity{g}
	out.Roles = roles{g}
	out.Cohorts = cohorts{g}
	out.Dashboards = dashboards{g}
	out.Schedules = schedules{g}
	return out
}

// guard holds the unguarded services and the checks the wrappers share.
type guard struct{ s controlplane.Services }

// user is the user ctx acts as.
func (g *guard) user(ctx context.Context) (*controlplane.User, error) {
	if u := controlplane.UserFromContext(ctx); u != nil {
		return u, nil
	}
	return nil, controlplane.ErrNotAuthenticated
}

// org checks that orgID is the organisation of the user ctx acts as.
func (g *guard) org(ctx context.Context, orgID int64) (*controlplane.User, error) {
	u, err := g.user(ctx)
	if err == nil && u.OrganizationID != orgID {
		err = controlplane.ErrPermissionDenied
	}
	return u, err
}

// orgAdmin checks that orgID is the organisation of the user ctx acts as, who administers it.
func (g *guard) orgAdmin(ctx context.Context, orgID int64) error {
	u, err := g.org(ctx, orgID)
	if err == nil && !u.IsAdmin() {
		err = controlplane.ErrPermissionDenied
	}
	return err
}

// project returns the project, when it is in the organisation of the user ctx acts as. A
// project the user does not reach is a 403 whether it exists or not, so that ids of other
// organisations' projects cannot be probed.
func (g *guard) project(ctx context.Context, id int64) (*controlplane.User, *controlplane.Project, error) {
	u, err := g.user(ctx)
	if err != nil {
		return nil, nil, err
	}
	p, err := g.s.Projects.FindProjectByID(ctx, id)
	if controlplane.ErrorKind(err) == controlplane.NotFound || (err == nil && p.OrganizationID != u.OrganizationID) {
		return nil, nil, controlplane.ErrPermissionDenied
	}
	return u, p, err
}

// editable checks that the user ctx acts as may change the flag of the project.
func (g *guard) editable(ctx context.Context, projectID, flagID int64) (*controlplane.User, error) {
	u, _, err := g.project(ctx, projectID)
	if err != nil {
		return nil, err
	}
	if _, err := g.s.Flags.FindFlagByID(ctx, projectID, flagID); err != nil {
		return nil, err
	}
	ok, err := g.s.Roles.EditableFlags(ctx, u, []int64{flagID})
	if err != nil {
		return nil, err
	}
	if !ok[flagID] {
		return nil, controlplane.ErrPermissionDenied
	}
	return u, nil
}

// sameUser checks that the actor a service is given is the user ctx acts as: a call cannot
// act as one user under the rights of another.
func (g *guard) sameUser(ctx context.Context, actor *controlplane.User) error {
	u, err := g.user(ctx)
	if err == nil && (actor == nil || actor.ID != u.ID) {
		err = controlplane.ErrPermissionDenied
	}
	return err
}

package controlplane

import "context"

// Who may do what. These are pure functions of the user a call acts as and of the rows the
// call is about; the stores (controlplane/postgres) call them inside the transaction that
// writes, on the rows they have read or locked there, so that no change can slip between the
// check and the write and no check costs a look-up of its own. Identity comes only from the
// context (CurrentUser): no service method takes the acting user as an argument.
//
// A personal API key narrows its user's rights (scopes, a limit to some projects); that is
// checked where the key is, in controlplane/httpapi, before any service is called.

// CurrentUser returns the user ctx acts as (NewContextWithUser), or ErrNotAuthenticated: a
// call that names no user may read or change nothing of an organisation.
func CurrentUser(ctx context.Context) (*User, error) {
	if u := UserFromContext(ctx); u != nil {
		return u, nil
	}
	return nil, ErrNotAuthenticated
}

// CanReadOrg reports whether u belongs to the organisation: members see everything in it
// (its projects and all they hold, its roles, members and annotations).
func CanReadOrg(u *User, orgID int64) bool {
	return u != nil && orgID != 0 && u.OrganizationID == orgID
}

// CanAdminOrg reports whether u administers the organisation: only admins change roles,
// role memberships, members and invites, and read or change a project's webhooks.
func CanAdminOrg(u *User, orgID int64) bool {
	return CanReadOrg(u, orgID) && u.IsAdmin()
}

// FlagRoleAccess is what a flag's role access says about one user, read with the flag.
type FlagRoleAccess struct {
	// Restricted is true when the flag has role access entries: only some may change it.
	Restricted bool
	// Editor is true when the user is a member of a role with edit access to the flag.
	Editor bool
}

// CanEditFlag reports whether u may change the flag of a project in the organisation orgID
// (and grant or withdraw its role access, schedule its changes, make cohorts or dashboards
// from it): a member of the organisation may, unless the flag has role access, which then
// admits only admins, the flag's creator and members of a role with edit access.
func CanEditFlag(u *User, orgID int64, f *Flag, access FlagRoleAccess) bool {
	if !CanReadOrg(u, orgID) {
		return false
	}
	if u.IsAdmin() || !access.Restricted || access.Editor {
		return true
	}
	return f.CreatedBy != nil && f.CreatedBy.ID == u.ID
}

// CanManageKey reports whether u may read, change or revoke a personal API key of the user
// ownerID: keys are their owner's alone, admins included.
func CanManageKey(u *User, ownerID int64) bool {
	return u != nil && ownerID != 0 && u.ID == ownerID
}

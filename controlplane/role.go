package controlplane

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"
)

// Feature flag access levels of a role.
const (
	AccessLevelView = 21
	AccessLevelEdit = 37
)

// Role is an organisation role.
type Role struct {
	ID                      string
	OrganizationID          int64
	Name                    string
	FeatureFlagsAccessLevel int
	CreatedAt               time.Time
	CreatedBy               *User
	// MemberUUIDs and FlagIDs are the role's members and the flags it has access to.
	MemberUUIDs []string
	FlagIDs     []int64
}

// MaxRoleNameLength bounds a role's name, as PostHog does; the name is unique per
// organisation, and PostgreSQL cannot index a much longer one.
const MaxRoleNameLength = 200

// RoleUpdate holds a role's writable fields.
type RoleUpdate struct {
	Name                    *string
	FeatureFlagsAccessLevel *int
}

// Validate checks the update.
func (u *RoleUpdate) Validate(creating bool) error {
	if creating && u.Name == nil {
		return FieldError("name", "required", "This field is required.")
	}
	if u.Name != nil && *u.Name == "" {
		return FieldError("name", "blank", "This field may not be blank.")
	}
	if u.Name != nil && utf8.RuneCountInString(*u.Name) > MaxRoleNameLength {
		return FieldError("name", "max_length", fmt.Sprintf("Ensure this field has no more than %d characters.", MaxRoleNameLength))
	}
	if l := u.FeatureFlagsAccessLevel; l != nil && *l != AccessLevelView && *l != AccessLevelEdit {
		return FieldError("feature_flags_access_level", "invalid_choice", "Use 21 (can view) or 37 (can edit).")
	}
	return nil
}

// RoleMembership is a user's membership of a role.
type RoleMembership struct {
	ID       string
	RoleID   string
	User     User
	JoinedAt time.Time
}

// RoleAccess grants a role access to a flag.
type RoleAccess struct {
	ID            int64
	FeatureFlagID int64
	Role          Role
	AddedAt       time.Time
	UpdatedAt     time.Time
}

// RoleService manages roles, memberships and flag role access. The user is the one the
// context acts as (NewContextWithUser): every call fails with ErrNotAuthenticated without
// one, and with ErrPermissionDenied for an organisation other than the user's, or a project
// that is not of the user's organisation, whether it exists or not.
type RoleService interface {
	// FindRoles, FindRoleByID and FindMemberships read the organisation's roles and their
	// members, for any member of the organisation.
	FindRoles(ctx context.Context, orgID int64, limit, offset int) ([]*Role, int, error)
	FindRoleByID(ctx context.Context, orgID int64, id string) (*Role, error)
	// CreateRole creates a role in the user's organisation; only an admin of it may
	// (CanAdminOrg), as for UpdateRole and DeleteRole.
	CreateRole(ctx context.Context, upd RoleUpdate) (*Role, error)
	UpdateRole(ctx context.Context, orgID int64, id string, upd RoleUpdate) (*Role, error)
	DeleteRole(ctx context.Context, orgID int64, id string) error

	FindMemberships(ctx context.Context, orgID int64, roleID string, limit, offset int) ([]*RoleMembership, int, error)
	// AddMember and RemoveMember change a role's members; only an admin of the organisation
	// may.
	AddMember(ctx context.Context, orgID int64, roleID, userUUID string) (*RoleMembership, error)
	RemoveMember(ctx context.Context, orgID int64, roleID, membershipID string) error

	// FindRoleAccess and FindRoleAccessByID read the role access of a flag of the project, for
	// any member of the project's organisation.
	FindRoleAccess(ctx context.Context, projectID, flagID int64, limit, offset int) ([]*RoleAccess, int, error)
	FindRoleAccessByID(ctx context.Context, projectID, flagID, id int64) (*RoleAccess, error)
	// CreateRoleAccess and DeleteRoleAccess grant and withdraw a role's access to a flag of
	// the project; only a user who may change the flag may (CanEditFlag): ErrNotFound when
	// the project has no such flag.
	CreateRoleAccess(ctx context.Context, projectID, flagID int64, roleID string) (*RoleAccess, error)
	DeleteRoleAccess(ctx context.Context, projectID, flagID, id int64) error

	// EditableFlags reports, for each flag id, whether the user may change the flag
	// (CanEditFlag): a flag without role access records is editable by every member of its
	// organisation; one with records only by members of those roles with edit level,
	// organisation admins and the flag's creator. A user learns only what they may do
	// themselves, and nothing of flags of other organisations.
	EditableFlags(ctx context.Context, flagIDs []int64) (map[int64]bool, error)
}

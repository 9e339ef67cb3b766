package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flagedge/flagedge/controlplane"
)

// RoleService stores roles, memberships and flag role access.
type RoleService struct {
	db *DB
}

var _ controlplane.RoleService = (*RoleService)(nil)

// NewRoleService returns a RoleService on db.
func NewRoleService(db *DB) *RoleService { return &RoleService{db: db} }

var roleSelect = `SELECT r.id::text, r.organization_id, r.name, r.feature_flags_access_level, r.created_at, ` + userSummaryJSON("u") + `,
	ARRAY(SELECT mu.uuid::text FROM role_memberships m JOIN users mu ON mu.id = m.user_id WHERE m.role_id = r.id ORDER BY m.joined_at, m.id),
	ARRAY(SELECT a.feature_flag_id FROM feature_flag_role_access a WHERE a.role_id = r.id ORDER BY a.feature_flag_id)
	FROM roles r LEFT JOIN users u ON u.id = r.created_by`

func scanRole(row pgx.Row) (*controlplane.Role, error) {
	var r controlplane.Role
	var creator *userRow
	err := row.Scan(&r.ID, &r.OrganizationID, &r.Name, &r.FeatureFlagsAccessLevel, &r.CreatedAt, &creator, &r.MemberUUIDs, &r.FlagIDs)
	r.CreatedBy = creator.user()
	return &r, err
}

// isInvalidUUID reports whether err is Postgres refusing a malformed uuid.
func isInvalidUUID(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02"
}

// orgUser returns the user ctx acts as, when may allows them the organisation:
// ErrNotAuthenticated without a user, ErrPermissionDenied when may refuses.
func orgUser(ctx context.Context, orgID int64, may func(*controlplane.User, int64) bool) (*controlplane.User, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err == nil && !may(u, orgID) {
		err = controlplane.ErrPermissionDenied
	}
	return u, err
}

// FindRoles returns a page of the organisation's roles, oldest first, and the total, to a
// member of it.
func (s *RoleService) FindRoles(ctx context.Context, orgID int64, limit, offset int) ([]*controlplane.Role, int, error) {
	if _, err := orgUser(ctx, orgID, controlplane.CanReadOrg); err != nil {
		return nil, 0, err
	}
	var total int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM roles WHERE organization_id = $1`, orgID).Scan(&total); err != nil {
		return nil, 0, opError("count roles", err)
	}
	rows, err := s.db.Pool.Query(ctx, roleSelect+` WHERE r.organization_id = $1 ORDER BY r.created_at, r.id LIMIT $2 OFFSET $3`, orgID, limit, offset)
	if err != nil {
		return nil, 0, opError("find roles", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.Role, error) { return scanRole(r) })
	if err != nil {
		return nil, 0, opError("find roles", err)
	}
	return list, total, nil
}

// FindRoleByID returns a role of the organisation, to a member of it.
func (s *RoleService) FindRoleByID(ctx context.Context, orgID int64, id string) (*controlplane.Role, error) {
	if _, err := orgUser(ctx, orgID, controlplane.CanReadOrg); err != nil {
		return nil, err
	}
	r, err := scanRole(s.db.Pool.QueryRow(ctx, roleSelect+` WHERE r.organization_id = $1 AND r.id::text = $2`, orgID, id))
	if err != nil {
		return nil, opError("find role", notFoundIfNoRows(err))
	}
	return r, nil
}

// CreateRole creates a role in the organisation of the user, who administers it.
func (s *RoleService) CreateRole(ctx context.Context, upd controlplane.RoleUpdate) (*controlplane.Role, error) {
	actor, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if !controlplane.CanAdminOrg(actor, actor.OrganizationID) {
		return nil, controlplane.ErrPermissionDenied
	}
	if err := upd.Validate(true); err != nil {
		return nil, err
	}
	level := controlplane.AccessLevelEdit
	if upd.FeatureFlagsAccessLevel != nil {
		level = *upd.FeatureFlagsAccessLevel
	}
	var id string
	err = s.db.Pool.QueryRow(ctx, `INSERT INTO roles (organization_id, name, feature_flags_access_level, created_by)
		VALUES ($1, $2, $3, $4) RETURNING id::text`, actor.OrganizationID, *upd.Name, level, actor.ID).Scan(&id)
	if isUniqueViolation(err, "roles_organization_id_name_key") {
		return nil, controlplane.FieldError("name", "unique", "There is already a role with this name.")
	}
	if err != nil {
		return nil, opError("create role", err)
	}
	return s.FindRoleByID(ctx, actor.OrganizationID, id)
}

// UpdateRole renames a role or changes its access level, for an admin of the organisation.
func (s *RoleService) UpdateRole(ctx context.Context, orgID int64, id string, upd controlplane.RoleUpdate) (*controlplane.Role, error) {
	if _, err := orgUser(ctx, orgID, controlplane.CanAdminOrg); err != nil {
		return nil, err
	}
	if err := upd.Validate(false); err != nil {
		return nil, err
	}
	tag, err := s.db.Pool.Exec(ctx, `UPDATE roles SET name = COALESCE($3, name),
		feature_flags_access_level = COALESCE($4, feature_flags_access_level) WHERE organization_id = $1 AND id::text = $2`,
		orgID, id, upd.Name, upd.FeatureFlagsAccessLevel)
	if isUniqueViolation(err, "roles_organization_id_name_key") {
		return nil, controlplane.FieldError("name", "unique", "There is already a role with this name.")
	}
	if err != nil {
		return nil, opError("update role", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, controlplane.ErrNotFound
	}
	return s.FindRoleByID(ctx, orgID, id)
}

// DeleteRole deletes a role with its memberships and flag access, for an admin of the
// organisation.
func (s *RoleService) DeleteRole(ctx context.Context, orgID int64, id string) error {
	if _, err := orgUser(ctx, orgID, controlplane.CanAdminOrg); err != nil {
		return err
	}
	tag, err := s.db.Pool.Exec(ctx, `DELETE FROM roles WHERE organization_id = $1 AND id::text = $2`, orgID, id)
	if err != nil {
		return opError("delete role", err)
	}
	if tag.RowsAffected() == 0 {
		return controlplane.ErrNotFound
	}
	return nil
}

var membershipSelect = `SELECT m.id::text, m.role_id::text, m.joined_at, ` + userColumns + `
	FROM role_memberships m JOIN roles r ON r.id = m.role_id JOIN users u ON u.id = m.user_id`

func scanMembership(row pgx.Row) (*controlplane.RoleMembership, error) {
	var m controlplane.RoleMembership
	err := row.Scan(append([]any{&m.ID, &m.RoleID, &m.JoinedAt}, scanUserInto(&m.User)...)...)
	return &m, err
}

// FindMemberships returns a page of a role's members, to a member of the organisation.
func (s *RoleService) FindMemberships(ctx context.Context, orgID int64, roleID string, limit, offset int) ([]*controlplane.RoleMembership, int, error) {
	if _, err := s.FindRoleByID(ctx, orgID, roleID); err != nil {
		return nil, 0, err
	}
	var total int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM role_memberships WHERE role_id::text = $1`, roleID).Scan(&total); err != nil {
		return nil, 0, opError("count members", err)
	}
	rows, err := s.db.Pool.Query(ctx, membershipSelect+` WHERE r.organization_id = $1 AND m.role_id::text = $2 ORDER BY m.joined_at, m.id
		LIMIT $3 OFFSET $4`, orgID, roleID, limit, offset)
	if err != nil {
		return nil, 0, opError("find members", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.RoleMembership, error) { return scanMembership(r) })
	if err != nil {
		return nil, 0, opError("find members", err)
	}
	return list, total, nil
}

// AddMember adds a user of the organisation to a role, for an admin of the organisation.
func (s *RoleService) AddMember(ctx context.Context, orgID int64, roleID, userUUID string) (*controlplane.RoleMembership, error) {
	if _, err := orgUser(ctx, orgID, controlplane.CanAdminOrg); err != nil {
		return nil, err
	}
	if _, err := s.FindRoleByID(ctx, orgID, roleID); err != nil {
		return nil, err
	}
	var id string
	err := s.db.Pool.QueryRow(ctx, `INSERT INTO role_memberships (role_id, user_id)
		SELECT $2::uuid, u.id FROM users u WHERE u.uuid::text = $3 AND u.organization_id = $1 RETURNING id::text`,
		orgID, roleID, userUUID).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || isInvalidUUID(err):
		return nil, controlplane.FieldError("user_uuid", "invalid_input", "No user of this organisation has this uuid.")
	case isUniqueViolation(err, "role_memberships_role_id_user_id_key"):
		return nil, controlplane.FieldError("user_uuid", "unique", "The user is already a member of this role.")
	case err != nil:
		return nil, opError("add member", err)
	}
	m, err := scanMembership(s.db.Pool.QueryRow(ctx, membershipSelect+` WHERE m.id::text = $1`, id))
	if err != nil {
		return nil, opError("add member", err)
	}
	return m, nil
}

// RemoveMember removes a membership of a role, for an admin of the organisation.
func (s *RoleService) RemoveMember(ctx context.Context, orgID int64, roleID, membershipID string) error {
	if _, err := orgUser(ctx, orgID, controlplane.CanAdminOrg); err != nil {
		return err
	}
	tag, err := s.db.Pool.Exec(ctx, `DELETE FROM role_memberships m USING roles r
		WHERE r.id = m.role_id AND r.organization_id = $1 AND m.role_id::text = $2 AND m.id::text = $3`, orgID, roleID, membershipID)
	if err != nil {
		return opError("remove member", err)
	}
	if tag.RowsAffected() == 0 {
		return controlplane.ErrNotFound
	}
	return nil
}

// roleAccessSelect reads role access with its role; the role's members and flags are those
// of the role at the time.
var roleAccessSelect = `SELECT a.id, a.feature_flag_id, a.added_at, a.updated_at, r.id::text, r.organization_id, r.name,
	r.feature_flags_access_level, r.created_at, ` + userSummaryJSON("u") + `,
	ARRAY(SELECT mu.uuid::text FROM role_memberships m JOIN users mu ON mu.id = m.user_id WHERE m.role_id = r.id ORDER BY m.joined_at, m.id),
	ARRAY(SELECT x.feature_flag_id FROM feature_flag_role_access x WHERE x.role_id = r.id ORDER BY x.feature_flag_id)
	FROM feature_flag_role_access a JOIN roles r ON r.id = a.role_id LEFT JOIN users u ON u.id = r.created_by`

func scanRoleAccess(row pgx.Row) (*controlplane.RoleAccess, error) {
	var a controlplane.RoleAccess
	var creator *userRow
	r := &a.Role
	err := row.Scan(&a.ID, &a.FeatureFlagID, &a.AddedAt, &a.UpdatedAt, &r.ID, &r.OrganizationID, &r.Name, &r.FeatureFlagsAccessLevel,
		&r.CreatedAt, &creator, &r.MemberUUIDs, &r.FlagIDs)
	r.CreatedBy = creator.user()
	return &a, err
}

// flagOfProject restricts role access records to those of flag $1 when it is a flag of
// project $2.
const flagOfProject = `a.feature_flag_id = $1 AND EXISTS (SELECT 1 FROM feature_flags f WHERE f.id = $1 AND f.project_id = $2)`

// FindRoleAccess returns a page of the role access records of a flag of the project, to a
// member of the project's organisation: the count is read from the project's row of the
// organisation, whose absence is the project out of reach.
func (s *RoleService) FindRoleAccess(ctx context.Context, projectID, flagID int64, limit, offset int) ([]*controlplane.RoleAccess, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	total, err := countInReach(ctx, s.db.Pool, u, controlplane.CanReadOrg, projectID, `SELECT count(*) FROM feature_flag_role_access a WHERE `+flagOfProject, flagID, projectID)
	if err != nil {
		return nil, 0, opError("count role access", err)
	}
	rows, err := s.db.Pool.Query(ctx, roleAccessSelect+` WHERE `+flagOfProject+` ORDER BY a.id DESC LIMIT $3 OFFSET $4`, flagID, projectID, limit, offset)
	if err != nil {
		return nil, 0, opError("find role access", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.RoleAccess, error) { return scanRoleAccess(r) })
	if err != nil {
		return nil, 0, opError("find role access", err)
	}
	return list, total, nil
}

// FindRoleAccessByID returns one role access record of a flag of the project, to a member of
// the project's organisation.
func (s *RoleService) FindRoleAccessByID(ctx context.Context, projectID, flagID, id int64) (*controlplane.RoleAccess, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	a, err := findRoleAccess(ctx, s.db.Pool, u, projectID, flagID, id)
	if err != nil {
		return nil, opError("find role access", err)
	}
	return a, nil
}

// findRoleAccess reads a role access record of a flag of the project, scoped by u's
// organisation.
func findRoleAccess(ctx context.Context, q querier, u *controlplane.User, projectID, flagID, id int64) (*controlplane.RoleAccess, error) {
	a, err := scanRoleAccess(q.QueryRow(ctx, roleAccessSelect+` JOIN projects p ON p.id = $2
		WHERE `+flagOfProject+` AND a.id = $3 AND p.organization_id = $4`, flagID, projectID, id, u.OrganizationID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, missingInProject(ctx, q, u, projectID)
	}
	return a, err
}

// CreateRoleAccess grants a role of the project's organisation access to a flag of the
// project, once, when the user may change the flag.
func (s *RoleService) CreateRoleAccess(ctx context.Context, projectID, flagID int64, roleID string) (*controlplane.RoleAccess, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	var created *controlplane.RoleAccess
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		if err := lockEditableFlag(ctx, tx, u, projectID, flagID); err != nil {
			return err
		}
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO feature_flag_role_access (feature_flag_id, role_id)
			SELECT f.id, r.id FROM feature_flags f JOIN projects p ON p.id = f.project_id
			JOIN roles r ON r.organization_id = p.organization_id
			WHERE f.id = $1 AND f.project_id = $2 AND r.id::text = $3 RETURNING id`, flagID, projectID, roleID).Scan(&id)
		switch {
		case errors.Is(err, pgx.ErrNoRows) || isInvalidUUID(err):
			return controlplane.FieldError("role_id", "invalid_input", "No role of this organisation has this id.")
		case isUniqueViolation(err, "feature_flag_role_access_feature_flag_id_role_id_key"):
			return controlplane.FieldError("role_id", "unique", "This role already has access to this feature flag.")
		case err != nil:
			return err
		}
		created, err = findRoleAccess(ctx, tx, u, projectID, flagID, id)
		return err
	})
	if err != nil {
		return nil, opError("create role access", err)
	}
	return created, nil
}

// DeleteRoleAccess removes a role access record of a flag of the project, when the user may
// change the flag.
func (s *RoleService) DeleteRoleAccess(ctx context.Context, projectID, flagID, id int64) error {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		if err := lockEditableFlag(ctx, tx, u, projectID, flagID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM feature_flag_role_access a WHERE `+flagOfProject+` AND a.id = $3`, flagID, projectID, id)
		if err == nil && tag.RowsAffected() == 0 {
			err = controlplane.ErrNotFound
		}
		return err
	})
	if err != nil {
		return opError("delete role access", err)
	}
	return nil
}

// EditableFlags reports which of the flags of the user's organisation the user may change
// (CanEditFlag), from their role access facts read with them. An admin may change every
// flag of the organisation: that is answered without a query, true for any id, which tells
// nothing about flags of other organisations.
func (s *RoleService) EditableFlags(ctx context.Context, flagIDs []int64) (map[int64]bool, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]bool, len(flagIDs))
	if u.IsAdmin() {
		for _, id := range flagIDs {
			out[id] = true
		}
		return out, nil
	}
	rows, err := s.db.conn(ctx).Query(ctx, `SELECT f.id, f.created_by, `+flagRoleAccessColumns+`
		FROM feature_flags f JOIN projects p ON p.id = f.project_id
		WHERE f.id = ANY($1) AND p.organization_id = $2`, flagIDs, u.OrganizationID, u.ID, controlplane.AccessLevelEdit)
	if err != nil {
		return nil, opError("editable flags", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var creatorID *int64
		var access controlplane.FlagRoleAccess
		if err := rows.Scan(&id, &creatorID, &access.Restricted, &access.Editor); err != nil {
			return nil, opError("editable flags", err)
		}
		out[id] = controlplane.CanEditFlag(u, u.OrganizationID, createdBy(creatorID), access)
	}
	return out, rows.Err()
}

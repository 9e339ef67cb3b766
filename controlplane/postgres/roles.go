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

// FindRoles returns a page of the organisation's roles, oldest first, and the total.
func (s *RoleService) FindRoles(ctx context.Context, orgID int64, limit, offset int) ([]*controlplane.Role, int, error) {
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

// FindRoleByID returns a role of the organisation.
func (s *RoleService) FindRoleByID(ctx context.Context, orgID int64, id string) (*controlplane.Role, error) {
	r, err := scanRole(s.db.Pool.QueryRow(ctx, roleSelect+` WHERE r.organization_id = $1 AND r.id::text = $2`, orgID, id))
	if err != nil {
		return nil, opError("find role", notFoundIfNoRows(err))
	}
	return r, nil
}

// CreateRole creates a role in the actor's organisation.
func (s *RoleService) CreateRole(ctx context.Context, actor *controlplane.User, upd controlplane.RoleUpdate) (*controlplane.Role, error) {
	if err := upd.Validate(true); err != nil {
		return nil, err
	}
	level := controlplane.AccessLevelEdit
	if upd.FeatureFlagsAccessLevel != nil {
		level = *upd.FeatureFlagsAccessLevel
	}
	var id string
	err := s.db.Pool.QueryRow(ctx, `INSERT INTO roles (organization_id, name, feature_flags_access_level, created_by)
		VALUES ($1, $2, $3, $4) RETURNING id::text`, actor.OrganizationID, *upd.Name, level, actor.ID).Scan(&id)
	if isUniqueViolation(err, "roles_organization_id_name_key") {
		return nil, controlplane.FieldError("name", "unique", "There is already a role with this name.")
	}
	if err != nil {
		return nil, opError("create role", err)
	}
	return s.FindRoleByID(ctx, actor.OrganizationID, id)
}

// UpdateRole renames a role or changes its access level.
func (s *RoleService) UpdateRole(ctx context.Context, orgID int64, id string, upd controlplane.RoleUpdate) (*controlplane.Role, error) {
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

// DeleteRole deletes a role with its memberships and flag access.
func (s *RoleService) DeleteRole(ctx context.Context, orgID int64, id string) error {
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

// FindMemberships returns a page of a role's members.
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

// AddMember adds a user of the organisation to a role.
func (s *RoleService) AddMember(ctx context.Context, orgID int64, roleID, userUUID string) (*controlplane.RoleMembership, error) {
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

// RemoveMember removes a membership of a role.
func (s *RoleService) RemoveMember(ctx context.Context, orgID int64, roleID, membershipID string) error {
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

// FindRoleAccess returns a page of the role access records of a flag of the project.
func (s *RoleService) FindRoleAccess(ctx context.Context, projectID, flagID int64, limit, offset int) ([]*controlplane.RoleAccess, int, error) {
	var total int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM feature_flag_role_access a WHERE `+flagOfProject, flagID, projectID).Scan(&total); err != nil {
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

// FindRoleAccessByID returns one role access record of a flag of the project.
func (s *RoleService) FindRoleAccessByID(ctx context.Context, projectID, flagID, id int64) (*controlplane.RoleAccess, error) {
	a, err := scanRoleAccess(s.db.Pool.QueryRow(ctx, roleAccessSelect+` WHERE `+flagOfProject+` AND a.id = $3`, flagID, projectID, id))
	if err != nil {
		return nil, opError("find role access", notFoundIfNoRows(err))
	}
	return a, nil
}

// CreateRoleAccess grants a role of the project's organisation access to a flag of the
// project, once.
func (s *RoleService) CreateRoleAccess(ctx context.Context, projectID, flagID int64, roleID string) (*controlplane.RoleAccess, error) {
	var id int64
	err := s.db.Pool.QueryRow(ctx, `INSERT INTO feature_flag_role_access (feature_flag_id, role_id)
		SELECT f.id, r.id FROM feature_flags f JOIN projects p ON p.id = f.project_id
		JOIN roles r ON r.organization_id = p.organization_id
		WHERE f.id = $1 AND f.project_id = $2 AND r.id::text = $3 RETURNING id`, flagID, projectID, roleID).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || isInvalidUUID(err):
		return nil, controlplane.FieldError("role_id", "invalid_input", "No role of this organisation has this id.")
	case isUniqueViolation(err, "feature_flag_role_access_feature_flag_id_role_id_key"):
		return nil, controlplane.FieldError("role_id", "unique", "This role already has access to this feature flag.")
	case err != nil:
		return nil, opError("create role access", err)
	}
	return s.FindRoleAccessByID(ctx, projectID, flagID, id)
}

// DeleteRoleAccess removes a role access record of a flag of the project.
func (s *RoleService) DeleteRoleAccess(ctx context.Context, projectID, flagID, id int64) error {
	tag, err := s.db.Pool.Exec(ctx, `DELETE FROM feature_flag_role_access a WHERE `+flagOfProject+` AND a.id = $3`, flagID, projectID, id)
	if err != nil {
		return opError("delete role access", err)
	}
	if tag.RowsAffected() == 0 {
		return controlplane.ErrNotFound
	}
	return nil
}

// EditableFlags reports which flags the user may change.
func (s *RoleService) EditableFlags(ctx context.Context, user *controlplane.User, flagIDs []int64) (map[int64]bool, error) {
	out := make(map[int64]bool, len(flagIDs))
	if user.IsAdmin() {
		for _, id := range flagIDs {
			out[id] = true
		}
		return out, nil
	}
	rows, err := s.db.conn(ctx).Query(ctx, `
		SELECT f.id,
			NOT EXISTS (SELECT 1 FROM feature_flag_role_access a WHERE a.feature_flag_id = f.id)
			OR f.created_by = $2
			OR EXISTS (SELECT 1 FROM feature_flag_role_access a JOIN roles r ON r.id = a.role_id
				JOIN role_memberships m ON m.role_id = r.id
				WHERE a.feature_flag_id = f.id AND r.feature_flags_access_level = $3 AND m.user_id = $2)
		FROM feature_flags f WHERE f.id = ANY($1)`, flagIDs, user.ID, controlplane.AccessLevelEdit)
	if err != nil {
		return nil, opError("editable flags", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var ok bool
		if err := rows.Scan(&id, &ok); err != nil {
			return nil, opError("editable flags", err)
		}
		out[id] = ok
	}
	return out, rows.Err()
}

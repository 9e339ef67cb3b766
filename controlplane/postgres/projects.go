package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// ProjectService stores projects.
type ProjectService struct {
	db *DB
}

var _ controlplane.ProjectService = (*ProjectService)(nil)

// NewProjectService returns a ProjectService on db.
func NewProjectService(db *DB) *ProjectService { return &ProjectService{db: db} }

const projectColumns = `p.id, p.uuid::text, p.organization_id, (SELECT o.uuid::text FROM organizations o WHERE o.id = p.organization_id), p.name, p.api_token, p.secret_api_token, p.timezone, p.created_at,
	COALESCE((SELECT json_agg(json_build_object('group_type', g.group_type, 'group_type_index', g.group_type_index)
		ORDER BY g.group_type_index) FROM group_type_mappings g WHERE g.project_id = p.id), '[]'),
	p.autocapture_opt_out, p.session_recording_opt_in, p.heatmaps_opt_in, p.capture_console_log_opt_in,
	p.capture_performance_opt_in, p.autocapture_exceptions_opt_in, p.store_events`

func scanProject(row pgx.Row) (*controlplane.Project, error) {
	var p controlplane.Project
	c := &p.ClientConfig
	err := row.Scan(&p.ID, &p.UUID, &p.OrganizationID, &p.OrganizationUUID, &p.Name, &p.APIToken, &p.SecretAPIToken, &p.Timezone, &p.CreatedAt, &p.GroupTypes,
		&c.AutocaptureOptOut, &c.SessionRecordingOptIn, &c.HeatmapsOptIn, &c.CaptureConsoleLogOptIn, &c.CapturePerformanceOptIn, &c.AutocaptureExceptionsOptIn, &p.StoreEvents)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// FindProjectByID returns the project with the given id, when the user ctx acts as reaches
// it; a project the user does not reach is ErrPermissionDenied, whether it exists or not.
func (s *ProjectService) FindProjectByID(ctx context.Context, id int64) (*controlplane.Project, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	p, err := scanProject(s.db.conn(ctx).QueryRow(ctx, `SELECT `+projectColumns+` FROM projects p WHERE p.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !controlplane.CanReadOrg(u, p.OrganizationID)) {
		return nil, controlplane.ErrPermissionDenied
	}
	if err != nil {
		return nil, opError("find project", err)
	}
	return p, nil
}

// FindProjectByToken returns the project with the public token, to whoever holds it.
func (s *ProjectService) FindProjectByToken(ctx context.Context, token string) (*controlplane.Project, error) {
	p, err := scanProject(s.db.Pool.QueryRow(ctx, `SELECT `+projectColumns+` FROM projects p WHERE p.api_token = $1`, token))
	if err != nil {
		return nil, opError("find project", notFoundIfNoRows(err))
	}
	return p, nil
}

// FindProjects returns a page of an organisation's projects, oldest first, and the total, to
// the organisation's members.
func (s *ProjectService) FindProjects(ctx context.Context, f controlplane.ProjectFilter) ([]*controlplane.Project, int, error) {
	if _, err := actingMemberOf(ctx, f.OrganizationID); err != nil {
		return nil, 0, err
	}
	var total int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM projects p
		WHERE p.organization_id = $1 AND ($2::bigint[] IS NULL OR p.id = ANY($2))`, f.OrganizationID, f.IDs).Scan(&total); err != nil {
		return nil, 0, opError("count projects", err)
	}
	rows, err := s.db.Pool.Query(ctx, `SELECT `+projectColumns+` FROM projects p
		WHERE p.organization_id = $1 AND ($2::bigint[] IS NULL OR p.id = ANY($2))
		ORDER BY p.id LIMIT $3 OFFSET $4`, f.OrganizationID, f.IDs, f.Limit, f.Offset)
	if err != nil {
		return nil, 0, opError("find projects", err)
	}
	projects, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.Project, error) { return scanProject(r) })
	if err != nil {
		return nil, 0, opError("find projects", err)
	}
	return projects, total, nil
}

// CreateProject creates a project with fresh tokens in the organisation, for a member of it.
func (s *ProjectService) CreateProject(ctx context.Context, orgID int64, name string) (*controlplane.Project, error) {
	if _, err := actingMemberOf(ctx, orgID); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, controlplane.FieldError("name", "required", "This field is required.")
	}
	var id int64
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO projects (organization_id, name, api_token, secret_api_token)
			VALUES ($1, $2, $3, $4) RETURNING id`, orgID, name, newToken(ProjectTokenPrefix), newToken(SecretKeyPrefix)).Scan(&id)
		if err != nil {
			return err
		}
		return bumpSnapshot(ctx, tx, id)
	})
	if err != nil {
		return nil, opError("create project", err)
	}
	return s.FindProjectByID(ctx, id)
}

// UpdateProject changes a project's name, time zone or client configuration, and bumps its
// snapshot (edges serve all three), or whether its events are stored (admins only). The
// update is scoped to the organisation of the user ctx acts as: a project the user does not
// reach is ErrPermissionDenied, whether it exists or not.
func (s *ProjectService) UpdateProject(ctx context.Context, id int64, upd controlplane.ProjectUpdate) (*controlplane.Project, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if upd.Name != nil && *upd.Name == "" {
		return nil, controlplane.FieldError("name", "blank", "This field may not be blank.")
	}
	if upd.Timezone != nil {
		if _, err := time.LoadLocation(*upd.Timezone); err != nil || *upd.Timezone == "" {
			return nil, controlplane.FieldError("timezone", "invalid_choice", fmt.Sprintf("%q is not a valid time zone.", *upd.Timezone))
		}
	}
	if upd.StoreEvents != nil && !controlplane.CanAdminOrg(u, u.OrganizationID) {
		return nil, controlplane.ErrPermissionDenied // the project is checked to be in u's organisation below
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE projects SET name = COALESCE($2, name), timezone = COALESCE($3, timezone),
			autocapture_opt_out = COALESCE($4, autocapture_opt_out),
			session_recording_opt_in = COALESCE($5, session_recording_opt_in),
			heatmaps_opt_in = COALESCE($6, heatmaps_opt_in),
			capture_console_log_opt_in = COALESCE($7, capture_console_log_opt_in),
			capture_performance_opt_in = COALESCE($8, capture_performance_opt_in),
			autocapture_exceptions_opt_in = COALESCE($9, autocapture_exceptions_opt_in),
			store_events = COALESCE($11, store_events)
			WHERE id = $1 AND organization_id = $10`,
			id, upd.Name, upd.Timezone, upd.AutocaptureOptOut, upd.SessionRecordingOptIn, upd.HeatmapsOptIn,
			upd.CaptureConsoleLogOptIn, upd.CapturePerformanceOptIn, upd.AutocaptureExceptionsOptIn, u.OrganizationID, upd.StoreEvents)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return controlplane.ErrPermissionDenied
		}
		return bumpSnapshot(ctx, tx, id)
	})
	if err != nil {
		return nil, opError("update project", err)
	}
	return s.FindProjectByID(ctx, id)
}

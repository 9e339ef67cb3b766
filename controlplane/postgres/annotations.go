package postgres

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// AnnotationService stores annotations.
type AnnotationService struct {
	db *DB
}

var _ controlplane.AnnotationService = (*AnnotationService)(nil)

// NewAnnotationService returns an AnnotationService on db.
func NewAnnotationService(db *DB) *AnnotationService { return &AnnotationService{db: db} }

var annotationSelect = `SELECT a.id, a.project_id, a.organization_id, a.content, a.date_marker, a.creation_type, a.dashboard_item,
	a.dashboard_id, a.scope, a.deleted, a.created_at, a.updated_at, ` + userSummaryJSON("u") + `
	FROM annotations a LEFT JOIN users u ON u.id = a.created_by`

func scanAnnotation(row pgx.CollectableRow) (*controlplane.Annotation, error) {
	var a controlplane.Annotation
	var creator *userRow
	err := row.Scan(&a.ID, &a.ProjectID, &a.OrganizationID, &a.Content, &a.DateMarker, &a.CreationType, &a.DashboardItem,
		&a.DashboardID, &a.Scope, &a.Deleted, &a.CreatedAt, &a.UpdatedAt, &creator)
	a.CreatedBy = creator.user()
	return &a, err
}

// visible restricts to the annotations visible from the project whose id is the one
// parameter: its own and its organisation's organisation-scoped ones.
const visible = `(a.project_id = ? OR (a.scope = 'organization' AND a.organization_id = (SELECT organization_id FROM projects WHERE id = ?)))`

// FindAnnotations returns a page of annotations, latest date marker first, and the total.
func (s *AnnotationService) FindAnnotations(ctx context.Context, f controlplane.AnnotationFilter) ([]*controlplane.Annotation, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	var c conditions
	c.add(visible, f.ProjectID)
	c.add("a.deleted = ?", f.Deleted)
	if f.Search != "" {
		c.add("a.content ILIKE ?", containsPattern(f.Search))
	}
	if f.Scope != "" {
		c.add("a.scope = ?", f.Scope)
	}
	if f.DashboardItemID != nil {
		c.add("a.dashboard_item = ?", *f.DashboardItemID)
	}
	if f.After != nil {
		c.add("a.date_marker > ?", *f.After)
	}
	if f.Before != nil {
		c.add("a.date_marker < ?", *f.Before)
	}
	total, err := countInReach(ctx, s.db.Pool, u, controlplane.CanReadOrg, f.ProjectID, `SELECT count(*) FROM annotations a`+c.where(), c.args...)
	if err != nil {
		return nil, 0, opError("count annotations", err)
	}
	limit, args := c.page(f.Limit, f.Offset)
	rows, err := s.db.Pool.Query(ctx, annotationSelect+c.where()+` ORDER BY a.date_marker DESC NULLS LAST, a.id DESC`+limit, args...)
	if err != nil {
		return nil, 0, opError("find annotations", err)
	}
	list, err := pgx.CollectRows(rows, scanAnnotation)
	if err != nil {
		return nil, 0, opError("find annotations", err)
	}
	return list, total, nil
}

// FindAnnotationByID returns an annotation visible from the project.
func (s *AnnotationService) FindAnnotationByID(ctx context.Context, projectID, id int64) (*controlplane.Annotation, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	return findAnnotation(ctx, s.db.Pool, u, projectID, id, false)
}

// findAnnotation reads an annotation visible from the project, when u reaches the project.
func findAnnotation(ctx context.Context, q dbConn, u *controlplane.User, projectID, id int64, forUpdate bool) (*controlplane.Annotation, error) {
	sql := annotationSelect + ` WHERE a.id = $2 AND ` + strings.ReplaceAll(visible, "?", "$1") + ` AND ` + inReach("$1::bigint", 3)
	if forUpdate {
		sql += ` FOR UPDATE OF a`
	}
	rows, err := q.Query(ctx, sql, projectID, id, reachableOrg(u, controlplane.CanReadOrg))
	if err != nil {
		return nil, opError("find annotation", err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, scanAnnotation)
	if errors.Is(err, pgx.ErrNoRows) {
		err = notFoundIn(ctx, q, u, controlplane.CanReadOrg, projectID)
	}
	if err != nil {
		return nil, opError("find annotation", err)
	}
	return a, nil
}

// CreateAnnotation validates and stores an annotation of the project, by the user ctx acts as.
func (s *AnnotationService) CreateAnnotation(ctx context.Context, projectID int64, upd controlplane.AnnotationUpdate) (*controlplane.Annotation, error) {
	actor, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(); err != nil {
		return nil, err
	}
	a := &controlplane.Annotation{CreationType: "USR", Scope: "dashboard_item"}
	upd.Apply(a)
	var created *controlplane.Annotation
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		orgID, err := projectOrg(ctx, tx, actor, controlplane.CanReadOrg, projectID)
		if err != nil {
			return err
		}
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO annotations (project_id, organization_id, content, date_marker, creation_type,
			dashboard_item, dashboard_id, scope, deleted, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id`,
			projectID, orgID, a.Content, a.DateMarker, a.CreationType, a.DashboardItem, a.DashboardID, a.Scope,
			a.Deleted, actor.ID).Scan(&id); err != nil {
			return err
		}
		if created, err = findAnnotation(ctx, tx, actor, projectID, id, false); err != nil {
			return err
		}
		if err := recordActivity(ctx, tx, projectID, actor, controlplane.ActivityCreated, "Annotation", id, annotationName(created), nil); err != nil {
			return err
		}
		return enqueueAnnotationEvent(ctx, tx, projectID, actor, controlplane.ActivityCreated, created)
	})
	if err != nil {
		return nil, opError("create annotation", err)
	}
	return created, nil
}

// UpdateAnnotation applies a partial update, by the user ctx acts as, and records what changed.
func (s *AnnotationService) UpdateAnnotation(ctx context.Context, projectID, id int64, upd controlplane.AnnotationUpdate) (*controlplane.Annotation, error) {
	actor, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(); err != nil {
		return nil, err
	}
	var updated *controlplane.Annotation
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		before, err := findAnnotation(ctx, tx, actor, projectID, id, true)
		if err != nil {
			return err
		}
		after := *before
		upd.Apply(&after)
		changes := annotationChanges(before, &after)
		if len(changes) == 0 {
			updated = before
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE annotations SET content = $2, date_marker = $3, creation_type = $4, dashboard_item = $5,
			dashboard_id = $6, scope = $7, deleted = $8, updated_at = now() WHERE id = $1`,
			id, after.Content, after.DateMarker, after.CreationType, after.DashboardItem, after.DashboardID, after.Scope, after.Deleted); err != nil {
			return err
		}
		activity := controlplane.ActivityUpdated
		if after.Deleted && !before.Deleted {
			activity = controlplane.ActivityDeleted
		}
		if err := recordActivity(ctx, tx, before.ProjectID, actor, activity, "Annotation", id, annotationName(&after), changes); err != nil {
			return err
		}
		if updated, err = findAnnotation(ctx, tx, actor, projectID, id, false); err != nil {
			return err
		}
		return enqueueAnnotationEvent(ctx, tx, projectID, actor, activity, updated)
	})
	if err != nil {
		return nil, opError("update annotation", err)
	}
	return updated, nil
}

// enqueueAnnotationEvent reports an annotation's creation, change or deletion to the
// webhooks of the project it was written through, in tx. Annotations are not in the snapshot
// edges serve: the version named is the project's current one.
func enqueueAnnotationEvent(ctx context.Context, tx pgx.Tx, projectID int64, actor *controlplane.User, activity string, a *controlplane.Annotation) error {
	version, err := snapshotVersion(ctx, tx, projectID)
	if err != nil {
		return err
	}
	return EnqueueWebhookEvent(ctx, tx, controlplane.WebhookEvent{ProjectID: projectID,
		Kind: controlplane.EventKind("annotation", activity), Actor: actor, SnapshotVersion: version,
		ObjectType: controlplane.ObjectAnnotation, Object: a})
}

func annotationName(a *controlplane.Annotation) string {
	if r := []rune(a.Content); len(r) > 80 {
		return string(r[:80])
	}
	return a.Content
}

func annotationChanges(b, a *controlplane.Annotation) []controlplane.Change {
	var out []controlplane.Change
	add := func(field string, before, after any, action string) {
		out = append(out, controlplane.Change{Type: "Annotation", Action: action, Field: field, Before: before, After: after})
	}
	if b.Content != a.Content {
		add("content", b.Content, a.Content, "changed")
	}
	if !timePtrEqual(b.DateMarker, a.DateMarker) {
		add("date_marker", b.DateMarker, a.DateMarker, "changed")
	}
	if b.CreationType != a.CreationType {
		add("creation_type", b.CreationType, a.CreationType, "changed")
	}
	if !int64PtrEqual(b.DashboardItem, a.DashboardItem) {
		add("dashboard_item", b.DashboardItem, a.DashboardItem, "changed")
	}
	if !int64PtrEqual(b.DashboardID, a.DashboardID) {
		add("dashboard_id", b.DashboardID, a.DashboardID, "changed")
	}
	if b.Scope != a.Scope {
		add("scope", b.Scope, a.Scope, "changed")
	}
	if b.Deleted != a.Deleted {
		action := "changed"
		if a.Deleted {
			action = "deleted"
		}
		add("deleted", b.Deleted, a.Deleted, action)
	}
	return out
}

func timePtrEqual(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

func int64PtrEqual(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

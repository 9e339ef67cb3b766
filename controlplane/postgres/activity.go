package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// ActivityService reads the activity log.
type ActivityService struct {
	db *DB
}

var _ controlplane.ActivityService = (*ActivityService)(nil)

// NewActivityService returns an ActivityService on db.
func NewActivityService(db *DB) *ActivityService { return &ActivityService{db: db} }

// FindActivity returns a page of a project's activity, newest first, and the total, when the
// project is of the user's organisation: the count is read from the project's row of the
// organisation, whose absence is the project out of reach.
func (s *ActivityService) FindActivity(ctx context.Context, f controlplane.ActivityFilter) ([]*controlplane.Activity, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	where := ` WHERE a.project_id = $1 AND a.scope = $2 AND ($3 = '' OR a.item_id = $3)`
	total, err := countInReach(ctx, s.db.Pool, u, controlplane.CanReadOrg, f.ProjectID, `SELECT count(*) FROM activity_log a`+where, f.ProjectID, f.Scope, f.ItemID)
	if err != nil {
		return nil, 0, opError("count activity", err)
	}
	rows, err := s.db.Pool.Query(ctx, `SELECT a.id::text, a.project_id, a.activity, a.scope, a.item_id, a.detail, a.created_at,
		`+userSummaryJSON("u")+` FROM activity_log a LEFT JOIN users u ON u.id = a.user_id`+where+`
		ORDER BY a.created_at DESC, a.id LIMIT $4 OFFSET $5`, f.ProjectID, f.Scope, f.ItemID, f.Limit, f.Offset)
	if err != nil {
		return nil, 0, opError("find activity", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.Activity, error) {
		var a controlplane.Activity
		var u *userRow
		if err := r.Scan(&a.ID, &a.ProjectID, &a.Activity, &a.Scope, &a.ItemID, &a.Detail, &a.CreatedAt, &u); err != nil {
			return nil, err
		}
		a.User = u.user()
		return &a, nil
	})
	if err != nil {
		return nil, 0, opError("find activity", err)
	}
	return list, total, nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// The objects of a project (annotations, early access features, events, persons, groups,
// webhooks, event destinations) are reached through the project's organisation, checked by a predicate of
// controlplane/access.go (can: CanReadOrg, or CanAdminOrg for webhooks and destinations). A read is scoped to
// the organisation in its own SQL (inReach), so that reaching the project costs no look-up;
// only when it finds nothing does notFoundIn tell a project the user does not reach, a 403
// whether it exists or not (ids of other organisations' projects cannot be probed), from a
// missing object, a 404. A list counts from its project's row of the organisation
// (countInReach), a write reads the project row it writes into (projectOrg).

// accessCheck is one of the predicates of controlplane/access.go on an organisation.
type accessCheck func(u *controlplane.User, orgID int64) bool

// reachableOrg is the organisation whose projects u may act on under can (their own), or 0,
// no organisation's, when u may not: the SQL inReach scopes then finds nothing.
func reachableOrg(u *controlplane.User, can accessCheck) int64 {
	if can(u, u.OrganizationID) {
		return u.OrganizationID
	}
	return 0
}

// inReach is the SQL condition that the project id in column col is a project of the
// organisation parameter $n names (reachableOrg).
func inReach(col string, n int) string {
	return fmt.Sprintf("%s IN (SELECT id FROM projects WHERE organization_id = $%d)", col, n)
}

// projectOrg reads, in q, the organisation of the project and checks can(u, it): a project
// u does not reach is ErrPermissionDenied, whether it exists or not.
func projectOrg(ctx context.Context, q dbConn, u *controlplane.User, can accessCheck, projectID int64) (int64, error) {
	var orgID int64
	err := q.QueryRow(ctx, `SELECT organization_id FROM projects WHERE id = $1`, projectID).Scan(&orgID)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !can(u, orgID)) {
		return 0, controlplane.ErrPermissionDenied
	}
	return orgID, err
}

// notFoundIn is the error of a read scoped by inReach that found nothing: ErrNotFound in a
// project u reaches under can, else ErrPermissionDenied.
func notFoundIn(ctx context.Context, q dbConn, u *controlplane.User, can accessCheck, projectID int64) error {
	if _, err := projectOrg(ctx, q, u, can, projectID); err != nil {
		return err
	}
	return controlplane.ErrNotFound
}

// countInReach runs countSQL, a SELECT count(…) with args, from the row of the project (aliased
// reach, its id the parameter after args) when u may act on it under can (reachableOrg): a
// project u does not reach is ErrPermissionDenied, whether it exists or not, and is not
// counted.
func countInReach(ctx context.Context, q dbConn, u *controlplane.User, can accessCheck, projectID int64, countSQL string, args ...any) (int, error) {
	var total int
	err := q.QueryRow(ctx, fmt.Sprintf(`SELECT (%s) FROM projects reach WHERE reach.id = $%d AND reach.organization_id = $%d`,
		countSQL, len(args)+1, len(args)+2), append(slices.Clone(args), projectID, reachableOrg(u, can))...).Scan(&total)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, controlplane.ErrPermissionDenied
	}
	return total, err
}

// findInReach reads the object id of the project with sel (a SELECT of the object's table
// aliased alias, rows scanned by scan), scoped by inReach to the organisation u may act in
// under can, with lock appended (empty, or a FOR … UPDATE clause): notFoundIn when it finds
// nothing.
func findInReach[T any](ctx context.Context, q dbConn, u *controlplane.User, can accessCheck, sel, alias, lock string,
	projectID, id int64, scan pgx.RowToFunc[T]) (T, error) {
	var none T
	rows, err := q.Query(ctx, sel+` WHERE `+alias+`.project_id = $1 AND `+alias+`.id = $2 AND `+inReach(alias+".project_id", 3)+lock,
		projectID, id, reachableOrg(u, can))
	if err != nil {
		return none, err
	}
	v, err := pgx.CollectExactlyOneRow(rows, scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return none, notFoundIn(ctx, q, u, can, projectID)
	}
	return v, err
}

// pageInReach returns a page of the project's objects in table, oldest (lowest id) first, read
// with sel (a SELECT of table aliased alias, rows scanned by scan), and their total, when u may
// act on the project under can (countInReach).
func pageInReach[T any](ctx context.Context, q dbConn, u *controlplane.User, can accessCheck, table, sel, alias string,
	projectID int64, limit, offset int, scan pgx.RowToFunc[T]) ([]T, int, error) {
	total, err := countInReach(ctx, q, u, can, projectID, `SELECT count(*) FROM `+table+` WHERE project_id = $1`, projectID)
	if err != nil {
		return nil, 0, err
	}
	rows, err := q.Query(ctx, sel+` WHERE `+alias+`.project_id = $1 ORDER BY `+alias+`.id LIMIT $2 OFFSET $3`, projectID, limit, offset)
	if err != nil {
		return nil, 0, err
	}
	list, err := pgx.CollectRows(rows, scan)
	return list, total, err
}

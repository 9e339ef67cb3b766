package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/flags"
)

// FlagService stores feature flags and records their activity.
type FlagService struct {
	db *DB
}

var _ controlplane.FlagService = (*FlagService)(nil)

// NewFlagService returns a FlagService on db.
func NewFlagService(db *DB) *FlagService { return &FlagService{db: db} }

// userSummaryJSON builds the API's user summary of the users row aliased a, or NULL.
func userSummaryJSON(a string) string {
	return `CASE WHEN ` + a + `.id IS NULL THEN NULL ELSE json_build_object('id', ` + a + `.id, 'uuid', ` + a + `.uuid,
		'distinct_id', ` + a + `.distinct_id, 'first_name', ` + a + `.first_name, 'last_name', ` + a + `.last_name,
		'email', ` + a + `.email, 'is_email_verified', ` + a + `.is_email_verified, 'organization_id', ` + a + `.organization_id,
		'org_role', ` + a + `.org_role) END`
}

// flagColumns are the columns of a flag (scanFlag) of the feature_flags row aliased f, its
// creator and last modifier joined by flagFrom.
var flagColumns = `f.id, f.project_id, f.key, f.name, f.filters, f.deleted, f.active, f.created_at, f.updated_at,
	f.version, f.ensure_experience_continuity, COALESCE(f.rollback_conditions, 'null'::jsonb), f.performed_rollback,
	f.tags, f.usage_dashboard, f.analytics_dashboards, f.has_enriched_analytics, f.evaluation_runtime, f.evaluation_tags,
	COALESCE(f.bucketing_identifier, ''), ` + userSummaryJSON("cu") + `, ` + userSummaryJSON("mu") + `,
	COALESCE((SELECT json_agg(json_build_object('id', e.id, 'name', e.name, 'description', e.description, 'stage', e.stage,
		'documentationUrl', e.documentation_url, 'flagKey', f.key) ORDER BY e.created_at, e.id)
		FROM early_access_features e WHERE e.feature_flag_id = f.id), '[]')`

// flagFrom reads the flags of table, aliased f, with their users for flagColumns: table is
// feature_flags, or a data-modifying query's RETURNING * of it, so that a write returns the
// flag it leaves without reading it again.
func flagFrom(table string) string {
	return ` FROM ` + table + ` f LEFT JOIN users cu ON cu.id = f.created_by LEFT JOIN users mu ON mu.id = f.last_modified_by`
}

var flagSelect = `SELECT ` + flagColumns + flagFrom("feature_flags")

// userRow is the JSON form of userSummaryJSON.
type userRow struct {
	ID              int64  `json:"id"`
	UUID            string `json:"uuid"`
	DistinctID      string `json:"distinct_id"`
	FirstName       string `json:"first_name"`
	LastName        string `json:"last_name"`
	Email           string `json:"email"`
	IsEmailVerified bool   `json:"is_email_verified"`
	OrganizationID  int64  `json:"organization_id"`
	OrgRole         string `json:"org_role"`
}

func (r *userRow) user() *controlplane.User {
	if r == nil {
		return nil
	}
	u := controlplane.User(*r)
	return &u
}

// scanFlag scans the flagColumns of row, then the columns after them into extra.
func scanFlag(row pgx.Row, extra ...any) (*controlplane.Flag, error) {
	var f controlplane.Flag
	var filters, rollback []byte
	var createdBy, modifiedBy *userRow
	err := row.Scan(append([]any{&f.ID, &f.ProjectID, &f.Key, &f.Name, &filters, &f.Deleted, &f.Active, &f.CreatedAt, &f.UpdatedAt,
		&f.Version, &f.EnsureExperienceContinuity, &rollback, &f.PerformedRollback,
		&f.Tags, &f.UsageDashboard, &f.AnalyticsDashboards, &f.HasEnrichedAnalytics, &f.EvaluationRuntime, &f.EvaluationTags, &f.BucketingIdentifier, &createdBy, &modifiedBy, &f.Features},
		extra...)...)
	if err != nil {
		return nil, err
	}
	f.Filters, f.RollbackConditions = filters, rollback
	f.CreatedBy, f.LastModifiedBy = createdBy.user(), modifiedBy.user()
	return &f, nil
}

// FindFlagByID returns a flag of the project, deleted or not, when the project is of the
// user's organisation, with whether the user may change it (CanEditFlag on the role access
// facts read with it): one statement reads it scoped by the organisation, a second one only
// tells, when there is no such flag, whether the project is out of reach.
func (s *FlagService) FindFlagByID(ctx context.Context, projectID, id int64) (*controlplane.Flag, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	q := s.db.conn(ctx)
	var access controlplane.FlagRoleAccess
	accessColumns, args := roleAccessFacts(u, projectID, id)
	args = append(args, u.OrganizationID)
	f, err := scanFlag(q.QueryRow(ctx, `SELECT `+flagColumns+`, `+accessColumns+flagFrom("feature_flags")+`
		JOIN projects p ON p.id = f.project_id WHERE f.project_id = $1 AND f.id = $2 AND p.organization_id = $`+strconv.Itoa(len(args)),
		args...), &access.Restricted, &access.Editor)
	if errors.Is(err, pgx.ErrNoRows) {
		err = missingInProject(ctx, q, u, projectID)
	}
	if err != nil {
		return nil, opError("find flag", err)
	}
	f.CanEdit = controlplane.CanEditFlag(u, u.OrganizationID, f, access)
	return f, nil
}

// reachProject checks that the project is of u's organisation: ErrPermissionDenied when it is
// not, whether it exists or not.
func reachProject(ctx context.Context, q querier, u *controlplane.User, projectID int64) error {
	var orgID int64
	err := q.QueryRow(ctx, `SELECT organization_id FROM projects WHERE id = $1`, projectID).Scan(&orgID)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !controlplane.CanReadOrg(u, orgID)) {
		return controlplane.ErrPermissionDenied
	}
	return err
}

// refusedInput is err, the refusal of what the user sent for the project, unless the project
// is out of the user's reach: that is refused first, whatever was sent.
func refusedInput(ctx context.Context, q querier, u *controlplane.User, projectID int64, err error) error {
	if reach := reachProject(ctx, q, u, projectID); reach != nil {
		return reach
	}
	return err
}

// findInProject reads the row id of the project with sel, a SELECT of the table aliased
// alias, scoped by u's organisation and locked FOR UPDATE when forUpdate: when it finds
// nothing, ErrPermissionDenied for a project out of u's reach (existing or not), else
// ErrNotFound.
func findInProject[T any](ctx context.Context, q querier, u *controlplane.User, sel, alias string, projectID, id int64,
	forUpdate bool, scan func(pgx.Row) (T, error)) (T, error) {
	sql := sel + ` JOIN projects p ON p.id = ` + alias + `.project_id
		WHERE ` + alias + `.project_id = $1 AND ` + alias + `.id = $2 AND p.organization_id = $3`
	if forUpdate {
		sql += ` FOR UPDATE OF ` + alias
	}
	v, err := scan(q.QueryRow(ctx, sql, projectID, id, u.OrganizationID))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, missingInProject(ctx, q, u, projectID)
	}
	return v, err
}

// missingInProject is the error of an object that a read scoped by u's organisation did not
// find in the project: ErrPermissionDenied when the project is out of u's reach, else
// ErrNotFound.
func missingInProject(ctx context.Context, q querier, u *controlplane.User, projectID int64) error {
	if err := reachProject(ctx, q, u, projectID); err != nil {
		return err
	}
	return controlplane.ErrNotFound
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// findFlag reads a flag of the project whoever asks: the callers have checked the project.
func findFlag(ctx context.Context, q querier, projectID, id int64, forUpdate bool) (*controlplane.Flag, error) {
	sql := flagSelect + ` WHERE f.project_id = $1 AND f.id = $2`
	if forUpdate {
		sql += ` FOR UPDATE OF f`
	}
	f, err := scanFlag(q.QueryRow(ctx, sql, projectID, id))
	if err != nil {
		return nil, opError("find flag", notFoundIfNoRows(err))
	}
	return f, nil
}

// FindFlags returns a page of the project's non-deleted flags, newest first, and the total,
// when the project is of the user's organisation: the count is read from the project's row
// of the organisation, whose absence is the project out of reach.
func (s *FlagService) FindFlags(ctx context.Context, filter controlplane.FlagFilter) ([]*controlplane.Flag, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	c := flagConditions(filter, s.db.Now().Add(-controlplane.StaleAfter))
	total, err := countInReach(ctx, s.db.Pool, u, controlplane.CanReadOrg, filter.ProjectID, `SELECT count(*) FROM feature_flags f`+c.where(), c.args...)
	if err != nil {
		return nil, 0, opError("count flags", err)
	}
	order := "f.created_at DESC, f.id DESC"
	if field, desc := strings.CutPrefix(filter.Order, "-"); slices.Contains(controlplane.FlagOrderFields, field) {
		dir := " ASC"
		if desc {
			dir = " DESC"
		}
		order = "f." + field + dir + ", f.id" + dir
	}
	page, args := c.page(filter.Limit, filter.Offset)
	rows, err := s.db.Pool.Query(ctx, flagSelect+c.where()+" ORDER BY "+order+page, args...)
	if err != nil {
		return nil, 0, opError("find flags", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.Flag, error) { return scanFlag(r) })
	if err != nil {
		return nil, 0, opError("find flags", err)
	}
	return list, total, nil
}

// staleFlag keeps the flags older than ? (now less controlplane.StaleAfter) that were not
// evaluated since, or that are active, fully rolled out and unchanged since: a condition
// without properties at 100 % (or no rollout), and either no variants or one at 100 %.
const staleFlag = `f.created_at < ? AND (
	NOT EXISTS (SELECT 1 FROM flag_last_called l WHERE l.project_id = f.project_id AND l.flag_key = f.key AND l.last_called_at >= ?)
	OR (f.active AND f.updated_at < ?
		AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(f.filters->'groups') = 'array' THEN f.filters->'groups' ELSE '[]' END) g
			WHERE (jsonb_typeof(g->'properties') IS DISTINCT FROM 'array' OR jsonb_array_length(g->'properties') = 0)
			AND (jsonb_typeof(g->'rollout_percentage') IS DISTINCT FROM 'number' OR (g->>'rollout_percentage')::numeric >= 100))
		AND (jsonb_typeof(f.filters->'multivariate'->'variants') IS DISTINCT FROM 'array'
			OR EXISTS (SELECT 1 FROM jsonb_array_elements(f.filters->'multivariate'->'variants') v
				WHERE jsonb_typeof(v->'rollout_percentage') = 'number' AND (v->>'rollout_percentage')::numeric >= 100))))`

// flagConditions are the conditions of a flag list; staleBefore is when a stale flag was last
// created, evaluated or changed at the latest.
func flagConditions(filter controlplane.FlagFilter, staleBefore time.Time) *conditions {
	var c conditions
	c.add("f.project_id = ? AND NOT f.deleted", filter.ProjectID)
	if filter.Search != "" {
		p := containsPattern(filter.Search)
		c.addPair("(f.key ILIKE ? OR f.name ILIKE ?)", p, p)
	}
	if filter.Stale {
		c.add(staleFlag, staleBefore)
	} else if filter.Active != nil {
		c.add("f.active = ?", *filter.Active)
	}
	if filter.CreatedBy != nil {
		c.add("f.created_by = ?", *filter.CreatedBy)
	}
	switch filter.Type {
	case "boolean":
		c.clauses = append(c.clauses, "COALESCE(jsonb_array_length(f.filters->'multivariate'->'variants'), 0) = 0")
	case "multivariant":
		c.clauses = append(c.clauses, "COALESCE(jsonb_array_length(f.filters->'multivariate'->'variants'), 0) > 0")
	case "experiment", "remote_config":
		c.clauses = append(c.clauses, "false")
	}
	if len(filter.Tags) > 0 {
		c.add("f.tags && ?", filter.Tags)
	}
	if len(filter.ExcludedKeys) > 0 {
		c.add("NOT (f.key = ANY(?))", filter.ExcludedKeys)
	}
	if filter.EvaluationRuntime != "" {
		c.add("f.evaluation_runtime = ?", filter.EvaluationRuntime)
	}
	if has := filter.HasEvaluationTags; has != nil {
		c.add("(cardinality(f.evaluation_tags) > 0) = ?", *has)
	}
	return &c
}

const flagKeyIndex = "feature_flags_project_key"

// CreateFlag validates and inserts a flag, records its creation and bumps the snapshot, when
// the project read in the transaction is of the user's organisation.
func (s *FlagService) CreateFlag(ctx context.Context, projectID int64, upd controlplane.FlagUpdate) (*controlplane.Flag, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	var created *controlplane.Flag
	err = s.db.inTx(ctx, func(tx pgx.Tx) (err error) {
		if err := reachProject(ctx, tx, u, projectID); err != nil {
			return err
		}
		if created, err = createFlag(ctx, tx, s.db.Now(), u, projectID, upd); err != nil {
			return err
		}
		created.SnapshotVersion, err = bumpSnapshotVersion(ctx, tx, projectID)
		return err
	})
	if err != nil {
		return nil, opError("create flag", err)
	}
	return created, nil
}

// createFlag validates and inserts a flag and records its creation, in tx, past the approval
// gate (gateFlagWrite); the caller bumps the snapshot.
func createFlag(ctx context.Context, tx pgx.Tx, now time.Time, actor *controlplane.User, projectID int64, upd controlplane.FlagUpdate) (*controlplane.Flag, error) {
	if err := upd.Validate(true); err != nil {
		return nil, err
	}
	f := &controlplane.Flag{
		ProjectID: projectID, Filters: controlplane.DefaultFilters(), Active: true, CreatedAt: now,
		RollbackConditions: json.RawMessage("null"), Tags: []string{}, AnalyticsDashboards: []int64{},
		EvaluationRuntime: "all", EvaluationTags: []string{},
	}
	upd.Apply(f)
	if err := checkReferences(ctx, tx, projectID, f.Key, upd.Filters); err != nil {
		return nil, err
	}
	if err := gateFlagWrite(ctx, tx, actor, nil, f, &upd); err != nil {
		return nil, err
	}
	created, err := scanFlag(tx.QueryRow(ctx, `WITH f AS (INSERT INTO feature_flags (project_id, key, name, filters,
		deleted, active, created_by, created_at, updated_at, last_modified_by, ensure_experience_continuity,
		rollback_conditions, performed_rollback, tags, analytics_dashboards, has_enriched_analytics, evaluation_runtime,
		evaluation_tags, bucketing_identifier)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $7, $10, NULLIF($11::jsonb, 'null'::jsonb), $12, $13, $14, $15, $16, $17,
			NULLIF($18, ''))
		RETURNING *)
		SELECT `+flagColumns+flagFrom("f"),
		projectID, f.Key, f.Name, f.Filters, f.Deleted, f.Active, actor.ID, f.CreatedAt, now,
		f.EnsureExperienceContinuity, f.RollbackConditions, f.PerformedRollback, f.Tags, f.AnalyticsDashboards,
		f.HasEnrichedAnalytics, f.EvaluationRuntime, f.EvaluationTags, f.BucketingIdentifier))
	if isUniqueViolation(err, flagKeyIndex) {
		return nil, controlplane.ErrKeyConflict
	}
	if err != nil {
		return nil, err
	}
	if err := recordActivity(ctx, tx, projectID, actor, controlplane.ActivityCreated, "FeatureFlag",
		created.ID, created.Key, nil); err != nil {
		return nil, err
	}
	version, err := nextSnapshotVersion(ctx, tx, projectID)
	if err != nil {
		return nil, err
	}
	if err := enqueueFlagEvent(ctx, tx, actor, controlplane.ActivityCreated, created, version); err != nil {
		return nil, err
	}
	return created, nil
}

// UpdateFlag validates and applies a partial update, records the changed fields and bumps
// the version of the flag and the project's snapshot, when the user may change the flag:
// CanEditFlag decides on the flag's row as the update locks it, with its project's
// organisation and its role access. An update that changes nothing is a no-op.
func (s *FlagService) UpdateFlag(ctx context.Context, projectID, id int64, upd controlplane.FlagUpdate) (*controlplane.Flag, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	var updated *controlplane.Flag
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		before, err := lockFlagForChange(ctx, tx, u, projectID, id)
		if err != nil {
			return err
		}
		updated, err = saveFlagChange(ctx, tx, s.db.Now(), u, before, upd)
		return err
	})
	if err != nil {
		return nil, opError("update flag", err)
	}
	return updated, nil
}

// lockFlagForChange locks a flag of the project that u may change (lockFlag, then CanEditFlag on
// the locked row): ErrNotFound when the project has no such flag, ErrPermissionDenied when u
// may not change it or does not reach the project.
func lockFlagForChange(ctx context.Context, tx pgx.Tx, u *controlplane.User, projectID, id int64) (*lockedFlag, error) {
	f, err := lockFlag(ctx, tx, u, projectID, id)
	if errors.Is(err, controlplane.ErrNotFound) {
		return nil, missingInProject(ctx, tx, u, projectID)
	}
	if err != nil {
		return nil, err
	}
	if !controlplane.CanEditFlag(u, f.orgID, f.Flag, f.access) {
		return nil, controlplane.ErrPermissionDenied
	}
	return f, nil
}

// saveFlagChange applies upd to the locked flag (changeFlag) and bumps the project's snapshot
// when anything changed; the flag returned names the snapshot version that holds it.
func saveFlagChange(ctx context.Context, tx pgx.Tx, now time.Time, u *controlplane.User, before *lockedFlag,
	upd controlplane.FlagUpdate) (*controlplane.Flag, error) {
	updated, changed, err := changeFlag(ctx, tx, now, u, before, upd)
	if err != nil {
		return nil, err
	}
	if !changed { // what the flag is now is in the project's current version
		updated.SnapshotVersion = before.snapshotVersion
		return updated, nil
	}
	updated.SnapshotVersion, err = bumpSnapshotVersion(ctx, tx, before.ProjectID)
	return updated, err
}

// lockedFlag is a flag locked for a change, with what deciding and making the change needs.
type lockedFlag struct {
	*controlplane.Flag
	// orgID is the organisation of the flag's project.
	orgID int64
	// snapshotVersion is the project's, whose row is locked too: the change's bump makes the
	// next one.
	snapshotVersion int64
	// access is what the flag's role access says about the user the flag was locked for.
	access controlplane.FlagRoleAccess
	// gated reports whether the project has an enabled approval policy: only then does a
	// change pass the gate's reads.
	gated bool
}

// lockFlag reads a flag of the project FOR UPDATE, in one statement with its project's
// organisation and snapshot version (the project's row locked as the snapshot bump will) and
// the facts of its role access about u; ErrNotFound when the project has no such flag.
func lockFlag(ctx context.Context, tx pgx.Tx, u *controlplane.User, projectID, id int64) (*lockedFlag, error) {
	var l lockedFlag
	var err error
	accessColumns, args := roleAccessFacts(u, projectID, id)
	l.Flag, err = scanFlag(tx.QueryRow(ctx, `SELECT `+flagColumns+`, p.organization_id, p.snapshot_version, `+accessColumns+`,
		EXISTS (SELECT 1 FROM approval_policies ap WHERE ap.project_id = f.project_id AND ap.enabled)`+
		flagFrom("feature_flags")+` JOIN projects p ON p.id = f.project_id
		WHERE f.project_id = $1 AND f.id = $2 FOR UPDATE OF f FOR NO KEY UPDATE OF p`,
		args...), &l.orgID, &l.snapshotVersion, &l.access.Restricted, &l.access.Editor, &l.gated)
	if err != nil {
		return nil, notFoundIfNoRows(err)
	}
	return &l, nil
}

// lockEditableFlag locks a flag of the project against changes when u may change it
// (CanEditFlag, decided on the locked row), for the writes that need edit access to a flag
// without changing the flag itself: its role access, its scheduled changes, the cohorts and
// dashboards made from it. ErrNotFound when the project has no such flag, ErrPermissionDenied
// when u may not change it or does not reach the project.
func lockEditableFlag(ctx context.Context, tx pgx.Tx, u *controlplane.User, projectID, id int64) error {
	var orgID int64
	var creatorID *int64
	var access controlplane.FlagRoleAccess
	accessColumns, args := roleAccessFacts(u, projectID, id)
	err := tx.QueryRow(ctx, `SELECT p.organization_id, f.created_by, `+accessColumns+`
		FROM feature_flags f JOIN projects p ON p.id = f.project_id
		WHERE f.project_id = $1 AND f.id = $2 FOR NO KEY UPDATE OF f`, args...).
		Scan(&orgID, &creatorID, &access.Restricted, &access.Editor)
	if errors.Is(err, pgx.ErrNoRows) {
		return missingInProject(ctx, tx, u, projectID)
	}
	if err != nil {
		return err
	}
	if !controlplane.CanEditFlag(u, orgID, createdBy(creatorID), access) {
		return controlplane.ErrPermissionDenied
	}
	return nil
}

// createdBy is a flag known only by its creator's id (nil when the creator is gone), as much
// of it as CanEditFlag needs.
func createdBy(creatorID *int64) *controlplane.Flag {
	if creatorID == nil {
		return &controlplane.Flag{}
	}
	return &controlplane.Flag{CreatedBy: &controlplane.User{ID: *creatorID}}
}

// roleAccessFacts returns the columns of a flag's role access facts about u and the arguments
// of a query reading the flag id of the project ($1, $2) with them. An admin may change every
// flag whatever its role access (controlplane.CanEditFlag), so for an admin the facts are
// constants and cost the query nothing.
func roleAccessFacts(u *controlplane.User, projectID, id int64) (string, []any) {
	if u.IsAdmin() {
		return `false, false`, []any{projectID, id}
	}
	return flagRoleAccessColumns, []any{projectID, id, u.ID, controlplane.AccessLevelEdit}
}

// flagRoleAccessColumns are the facts of controlplane.FlagRoleAccess about the flag f and the
// user $3: whether the flag has role access entries, and whether the user is a member of a
// role with the edit level ($4) among them.
const flagRoleAccessColumns = `EXISTS (SELECT 1 FROM feature_flag_role_access a WHERE a.feature_flag_id = f.id),
	EXISTS (SELECT 1 FROM feature_flag_role_access a JOIN roles r ON r.id = a.role_id JOIN role_memberships m ON m.role_id = r.id
		WHERE a.feature_flag_id = f.id AND r.feature_flags_access_level = $4 AND m.user_id = $3)`

// updateFlag validates and applies a partial update of a flag of the project in tx, when actor
// may change it (lockFlagForChange), and records the changed fields; it reports whether
// anything changed. The caller bumps the snapshot.
func updateFlag(ctx context.Context, tx pgx.Tx, now time.Time, actor *controlplane.User, projectID, id int64,
	upd controlplane.FlagUpdate) (*controlplane.Flag, bool, error) {
	before, err := lockFlagForChange(ctx, tx, actor, projectID, id)
	if err != nil {
		return nil, false, err
	}
	return changeFlag(ctx, tx, now, actor, before, upd)
}

// changeFlag validates and applies a partial update of the locked flag in tx, past the
// approval gate (gateFlagWrite, when the project has a policy): one statement writes the
// changed fields, records them in the activity log, marks the pending change requests about
// the flag stale and returns the flag as it now is; the change is then queued for the
// project's webhooks. It reports whether anything
// changed; the caller bumps the snapshot.
func changeFlag(ctx context.Context, tx pgx.Tx, now time.Time, actor *controlplane.User, before *lockedFlag,
	upd controlplane.FlagUpdate) (*controlplane.Flag, bool, error) {
	if err := upd.Validate(false); err != nil {
		return nil, false, err
	}
	after := *before.Flag
	upd.Apply(&after)
	if err := checkReferences(ctx, tx, after.ProjectID, after.Key, upd.Filters); err != nil {
		return nil, false, err
	}
	changes := controlplane.FlagChanges(before.Flag, &after)
	if len(changes) == 0 {
		return before.Flag, false, nil
	}
	if before.gated {
		if err := gateFlagWrite(ctx, tx, actor, before.Flag, &after, &upd); err != nil {
			return nil, false, err
		}
	}
	activity := controlplane.ActivityUpdated
	if after.Deleted && !before.Deleted {
		activity = controlplane.ActivityDeleted
	}
	detail := activityDetail(ctx, after.ID, after.Key, changes)
	updated, err := scanFlag(tx.QueryRow(ctx, `WITH f AS (UPDATE feature_flags SET key = $3, name = $4, filters = $5,
			deleted = $6, active = $7, created_at = $8, updated_at = $9, version = version + 1, last_modified_by = $10,
			ensure_experience_continuity = $11, rollback_conditions = NULLIF($12::jsonb, 'null'::jsonb),
			performed_rollback = $13, tags = $14, analytics_dashboards = $15, has_enriched_analytics = $16, usage_dashboard = $17,
			evaluation_runtime = $18, evaluation_tags = $19, bucketing_identifier = NULLIF($20, '')
			WHERE project_id = $1 AND id = $2
			RETURNING *),
		logged AS (INSERT INTO activity_log (project_id, user_id, activity, scope, item_id, detail)
			VALUES ($1, $10, $21, 'FeatureFlag', $22, $23)),
		stale AS (`+markRequestsStale+`)
		SELECT `+flagColumns+flagFrom("f"),
		after.ProjectID, after.ID, after.Key, after.Name, after.Filters, after.Deleted, after.Active, after.CreatedAt, now,
		actor.ID, after.EnsureExperienceContinuity, after.RollbackConditions, after.PerformedRollback, after.Tags,
		after.AnalyticsDashboards, after.HasEnrichedAnalytics, after.UsageDashboard, after.EvaluationRuntime, after.EvaluationTags,
		after.BucketingIdentifier, activity, detail.ID, detail))
	if isUniqueViolation(err, flagKeyIndex) {
		return nil, false, controlplane.ErrKeyConflict
	}
	if err != nil {
		return nil, false, err
	}
	if err := enqueueFlagEvent(ctx, tx, actor, activity, updated, before.snapshotVersion+1); err != nil {
		return nil, false, err
	}
	return updated, true, nil
}

// enqueueFlagEvent reports a flag's creation, change or deletion to the project's webhooks
// in tx, naming the snapshot version the caller's bump will make.
func enqueueFlagEvent(ctx context.Context, tx pgx.Tx, actor *controlplane.User, activity string, f *controlplane.Flag, version int64) error {
	return EnqueueWebhookEvent(ctx, tx, controlplane.WebhookEvent{ProjectID: f.ProjectID,
		Kind: controlplane.EventKind("feature_flag", activity), Actor: actor, SnapshotVersion: version,
		ObjectType: controlplane.ObjectFlag, Object: f})
}

// checkReferences refuses filters that name a cohort or a flag the project does not have
// (or the flag itself).
func checkReferences(ctx context.Context, tx pgx.Tx, projectID int64, key string, filters json.RawMessage) error {
	if filters == nil {
		return nil
	}
	parsed, err := flags.ParseFilters(filters)
	if err != nil {
		return nil // Validate reported it
	}
	cohorts, flagRefs := parsed.References()
	if len(cohorts) > 0 {
		var found []int64
		rows, err := tx.Query(ctx, `SELECT id FROM cohorts WHERE project_id = $1 AND id = ANY($2) AND NOT deleted`, projectID, cohorts)
		if err != nil {
			return err
		}
		if found, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		for _, id := range cohorts {
			if !slices.Contains(found, id) {
				return controlplane.FieldError("filters", "invalid_input", fmt.Sprintf("Cohort %d does not exist in this project.", id))
			}
		}
	}
	for _, ref := range flagRefs {
		if ref == key {
			return controlplane.FieldError("filters", "invalid_input", fmt.Sprintf("Feature flag '%s' cannot depend on itself", key))
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM feature_flags WHERE project_id = $1 AND NOT deleted
			AND (key = $2 OR id::text = $2))`, projectID, ref).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return controlplane.FieldError("filters", "invalid_input", fmt.Sprintf("Flag %q, which this flag depends on, does not exist.", ref))
		}
	}
	if len(flagRefs) > 0 {
		return checkCycles(ctx, tx, projectID, key, flagRefs)
	}
	return nil
}

// checkCycles refuses a flag whose dependencies lead back to it, with PostHog's message
// naming the cycle ("Circular dependency detected: a → b → a"). The flag's new references
// stand in for its stored ones.
func checkCycles(ctx context.Context, tx pgx.Tx, projectID int64, key string, refs []string) error {
	rows, err := tx.Query(ctx, `SELECT id, key, filters FROM feature_flags WHERE project_id = $1 AND NOT deleted`, projectID)
	if err != nil {
		return err
	}
	type stored struct {
		id      int64
		key     string
		filters json.RawMessage
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stored, error) {
		var f stored
		err := r.Scan(&f.id, &f.key, &f.filters)
		return f, err
	})
	if err != nil {
		return err
	}
	keyOf := map[string]string{} // a reference (key or id) → key
	for _, f := range all {
		keyOf[f.key], keyOf[strconv.FormatInt(f.id, 10)] = f.key, f.key
	}
	resolve := func(list []string) []string {
		var out []string
		for _, r := range list {
			if k, ok := keyOf[r]; ok {
				out = append(out, k)
			} else if r == key {
				out = append(out, key)
			}
		}
		return out
	}
	deps := map[string][]string{}
	for _, f := range all {
		if parsed, err := flags.ParseFilters(f.filters); err == nil {
			_, r := parsed.References()
			deps[f.key] = resolve(r)
		}
	}
	deps[key] = resolve(refs)
	done := map[string]bool{}
	var visit func(k string, path []string) error
	visit = func(k string, path []string) error {
		if i := slices.Index(path, k); i >= 0 {
			cycle := append(slices.Clone(path[i:]), k)
			return controlplane.FieldError("filters", "invalid_input", "Circular dependency detected: "+strings.Join(cycle, " → "))
		}
		if done[k] {
			return nil
		}
		path = append(path, k)
		for _, d := range deps[k] {
			if err := visit(d, path); err != nil {
				return err
			}
		}
		done[k] = true
		return nil
	}
	return visit(key, nil)
}

// recordActivity appends an entry to the activity log; a write made by a trigger (the
// scheduler, controlplane.NewContextWithTrigger) names it in detail.trigger.
func recordActivity(ctx context.Context, tx pgx.Tx, projectID int64, actor *controlplane.User, activity, scope string,
	itemID int64, name string, changes []controlplane.Change) error {
	detail := activityDetail(ctx, itemID, name, changes)
	var userID *int64
	if actor != nil {
		userID = &actor.ID
	}
	_, err := tx.Exec(ctx, `INSERT INTO activity_log (project_id, user_id, activity, scope, item_id, detail)
		VALUES ($1, $2, $3, $4, $5, $6)`, projectID, userID, activity, scope, detail.ID, detail)
	if err != nil {
		return opError("record activity", err)
	}
	return nil
}

// activityDetail is the detail of an activity log entry about the item; a write made by a
// trigger (the scheduler, controlplane.NewContextWithTrigger) names it.
func activityDetail(ctx context.Context, itemID int64, name string, changes []controlplane.Change) controlplane.ActivityDetail {
	detail := controlplane.ActivityDetail{ID: strconv.FormatInt(itemID, 10), Name: name, Changes: changes}
	if t := controlplane.TriggerFromContext(ctx); t != nil {
		detail.Trigger = t
	}
	return detail
}

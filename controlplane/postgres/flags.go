package postgres

import (
	"context"
	"encoding/json"
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

var flagSelect = `SELECT f.id, f.project_id, f.key, f.name, f.filters, f.deleted, f.active, f.created_at, f.updated_at,
	f.version, f.ensure_experience_continuity, COALESCE(f.rollback_conditions, 'null'::jsonb), f.performed_rollback,
	f.tags, f.usage_dashboard, f.analytics_dashboards, f.has_enriched_analytics, f.evaluation_runtime, f.evaluation_tags,
	COALESCE(f.bucketing_identifier, ''), ` + userSummaryJSON("cu") + `, ` + userSummaryJSON("mu") + `,
	COALESCE((SELECT json_agg(json_build_object('id', e.id, 'name', e.name, 'description', e.description, 'stage', e.stage,
		'documentationUrl', e.documentation_url, 'flagKey', f.key) ORDER BY e.created_at, e.id)
		FROM early_access_features e WHERE e.feature_flag_id = f.id), '[]')
	FROM feature_flags f
	LEFT JOIN users cu ON cu.id = f.created_by
	LEFT JOIN users mu ON mu.id = f.last_modified_by`

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

func scanFlag(row pgx.Row) (*controlplane.Flag, error) {
	var f controlplane.Flag
	var filters, rollback []byte
	var createdBy, modifiedBy *userRow
	err := row.Scan(&f.ID, &f.ProjectID, &f.Key, &f.Name, &filters, &f.Deleted, &f.Active, &f.CreatedAt, &f.UpdatedAt,
		&f.Version, &f.EnsureExperienceContinuity, &rollback, &f.PerformedRollback,
		&f.Tags, &f.UsageDashboard, &f.AnalyticsDashboards, &f.HasEnrichedAnalytics, &f.EvaluationRuntime, &f.EvaluationTags, &f.BucketingIdentifier, &createdBy, &modifiedBy, &f.Features)
	if err != nil {
		return nil, err
	}
	f.Filters, f.RollbackConditions = filters, rollback
	f.CreatedBy, f.LastModifiedBy = createdBy.user(), modifiedBy.user()
	return &f, nil
}

// FindFlagByID returns a flag of the project, deleted or not.
func (s *FlagService) FindFlagByID(ctx context.Context, projectID, id int64) (*controlplane.Flag, error) {
	return findFlag(ctx, s.db.conn(ctx), projectID, id, false)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

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

// FindFlags returns a page of the project's non-deleted flags, newest first, and the total.
func (s *FlagService) FindFlags(ctx context.Context, filter controlplane.FlagFilter) ([]*controlplane.Flag, int, error) {
	c := flagConditions(filter, s.db.Now().Add(-controlplane.StaleAfter))
	var total int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM feature_flags f`+c.where(), c.args...).Scan(&total); err != nil {
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

// CreateFlag validates and inserts a flag, records its creation and bumps the snapshot.
func (s *FlagService) CreateFlag(ctx context.Context, actor *controlplane.User, projectID int64, upd controlplane.FlagUpdate) (*controlplane.Flag, error) {
	var created *controlplane.Flag
	err := s.db.inTx(ctx, func(tx pgx.Tx) (err error) {
		if created, err = createFlag(ctx, tx, s.db.Now(), actor, projectID, upd); err != nil {
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

// createFlag validates and inserts a flag and records its creation, in tx; the caller bumps
// the snapshot.
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
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO feature_flags (project_id, key, name, filters, deleted, active, created_by,
		created_at, updated_at, last_modified_by, ensure_experience_continuity, rollback_conditions, performed_rollback,
		tags, analytics_dashboards, has_enriched_analytics, evaluation_runtime, evaluation_tags, bucketing_identifier)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $7, $10, NULLIF($11::jsonb, 'null'::jsonb), $12, $13, $14, $15, $16, $17,
			NULLIF($18, ''))
		RETURNING id`,
		projectID, f.Key, f.Name, f.Filters, f.Deleted, f.Active, actor.ID, f.CreatedAt, now,
		f.EnsureExperienceContinuity, f.RollbackConditions, f.PerformedRollback, f.Tags, f.AnalyticsDashboards,
		f.HasEnrichedAnalytics, f.EvaluationRuntime, f.EvaluationTags, f.BucketingIdentifier).Scan(&id)
	if isUniqueViolation(err, flagKeyIndex) {
		return nil, controlplane.ErrKeyConflict
	}
	if err != nil {
		return nil, err
	}
	created, err := findFlag(ctx, tx, projectID, id, false)
	if err != nil {
		return nil, err
	}
	if err := recordActivity(ctx, tx, projectID, actor, controlplane.ActivityCreated, "FeatureFlag",
		created.ID, created.Key, nil); err != nil {
		return nil, err
	}
	if err := enqueueFlagEvent(ctx, tx, actor, controlplane.ActivityCreated, created); err != nil {
		return nil, err
	}
	return created, nil
}

// UpdateFlag validates and applies a partial update, records the changed fields and bumps
// the version of the flag and the project's snapshot. An update that changes nothing is a
// no-op.
func (s *FlagService) UpdateFlag(ctx context.Context, actor *controlplane.User, projectID, id int64, upd controlplane.FlagUpdate) (*controlplane.Flag, error) {
	var updated *controlplane.Flag
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		var changed bool
		var err error
		if updated, changed, err = updateFlag(ctx, tx, s.db.Now(), actor, projectID, id, upd); err != nil {
			return err
		}
		if !changed { // what the flag is now is in the project's current version
			updated.SnapshotVersion, err = snapshotVersion(ctx, tx, projectID)
			return err
		}
		updated.SnapshotVersion, err = bumpSnapshotVersion(ctx, tx, projectID)
		return err
	})
	if err != nil {
		return nil, opError("update flag", err)
	}
	return updated, nil
}

// updateFlag validates and applies a partial update in tx and records the changed fields; it
// reports whether anything changed. The caller bumps the snapshot.
func updateFlag(ctx context.Context, tx pgx.Tx, now time.Time, actor *controlplane.User, projectID, id int64,
	upd controlplane.FlagUpdate) (*controlplane.Flag, bool, error) {
	if err := upd.Validate(false); err != nil {
		return nil, false, err
	}
	before, err := findFlag(ctx, tx, projectID, id, true)
	if err != nil {
		return nil, false, err
	}
	after := *before
	upd.Apply(&after)
	if err := checkReferences(ctx, tx, projectID, after.Key, upd.Filters); err != nil {
		return nil, false, err
	}
	changes := controlplane.FlagChanges(before, &after)
	if len(changes) == 0 {
		return before, false, nil
	}
	_, err = tx.Exec(ctx, `UPDATE feature_flags SET key = $3, name = $4, filters = $5, deleted = $6, active = $7,
		created_at = $8, updated_at = $9, version = version + 1, last_modified_by = $10,
		ensure_experience_continuity = $11, rollback_conditions = NULLIF($12::jsonb, 'null'::jsonb),
		performed_rollback = $13, tags = $14, analytics_dashboards = $15, has_enriched_analytics = $16, usage_dashboard = $17,
		evaluation_runtime = $18, evaluation_tags = $19, bucketing_identifier = NULLIF($20, '')
		WHERE project_id = $1 AND id = $2`,
		projectID, id, after.Key, after.Name, after.Filters, after.Deleted, after.Active, after.CreatedAt, now,
		actor.ID, after.EnsureExperienceContinuity, after.RollbackConditions, after.PerformedRollback, after.Tags,
		after.AnalyticsDashboards, after.HasEnrichedAnalytics, after.UsageDashboard, after.EvaluationRuntime, after.EvaluationTags, after.BucketingIdentifier)
	if isUniqueViolation(err, flagKeyIndex) {
		return nil, false, controlplane.ErrKeyConflict
	}
	if err != nil {
		return nil, false, err
	}
	activity := controlplane.ActivityUpdated
	if after.Deleted && !before.Deleted {
		activity = controlplane.ActivityDeleted
	}
	if err := recordActivity(ctx, tx, projectID, actor, activity, "FeatureFlag", id, after.Key, changes); err != nil {
		return nil, false, err
	}
	updated, err := findFlag(ctx, tx, projectID, id, false)
	if err != nil {
		return nil, false, err
	}
	if err := enqueueFlagEvent(ctx, tx, actor, activity, updated); err != nil {
		return nil, false, err
	}
	return updated, true, nil
}

// enqueueFlagEvent reports a flag's creation, change or deletion to the project's webhooks
// in tx, naming the snapshot version the caller's bump will make.
func enqueueFlagEvent(ctx context.Context, tx pgx.Tx, actor *controlplane.User, activity string, f *controlplane.Flag) error {
	version, err := nextSnapshotVersion(ctx, tx, f.ProjectID)
	if err != nil {
		return err
	}
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
	detail := controlplane.ActivityDetail{ID: strconv.FormatInt(itemID, 10), Name: name, Changes: changes}
	if t := controlplane.TriggerFromContext(ctx); t != nil {
		detail.Trigger = t
	}
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

package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/flags"
)

// SnapshotStore builds project snapshots for the edges.
type SnapshotStore struct {
	db *DB
}

var _ controlplane.SnapshotStore = (*SnapshotStore)(nil)

// NewSnapshotStore returns a SnapshotStore on db.
func NewSnapshotStore(db *DB) *SnapshotStore { return &SnapshotStore{db: db} }

// DatabaseID returns the identity of the database, made once by its migrations.
func (s *SnapshotStore) DatabaseID(ctx context.Context) (string, error) {
	var id string
	if err := s.db.Pool.QueryRow(ctx, `SELECT id::text FROM database_identity`).Scan(&id); err != nil {
		return "", opError("database identity", err)
	}
	return id, nil
}

// ProjectVersions returns the snapshot version of every project.
func (s *SnapshotStore) ProjectVersion(ctx context.Context, projectID int64) (int64, error) {
	var v int64
	if err := s.db.Pool.QueryRow(ctx, `SELECT snapshot_version FROM projects WHERE id = $1`, projectID).Scan(&v); err != nil {
		return 0, opError("project version", notFoundIfNoRows(err))
	}
	return v, nil
}

func (s *SnapshotStore) ProjectVersions(ctx context.Context) (map[int64]int64, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT id, snapshot_version FROM projects`)
	if err != nil {
		return nil, opError("project versions", err)
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var id, v int64
		if err := rows.Scan(&id, &v); err != nil {
			return nil, opError("project versions", err)
		}
		out[id] = v
	}
	return out, rows.Err()
}

// readScopes are the scopes that allow reading flag definitions.
var readScopes = []string{string(controlplane.ScopeAll), string(controlplane.ScopeFlagRead), string(controlplane.ScopeFlagWrite)}

// BuildSnapshot reads one project in a repeatable-read transaction, so that the version and
// the contents agree.
func (s *SnapshotStore) BuildSnapshot(ctx context.Context, projectID int64) (*controlplane.ProjectSnapshot, error) {
	snap := &controlplane.ProjectSnapshot{ProjectID: projectID, BuiltAt: s.db.Now()}
	tx, err := s.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, opError("build snapshot", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	var secret string
	var orgID int64
	c := &snap.ClientConfig
	err = tx.QueryRow(ctx, `SELECT snapshot_version, name, api_token, secret_api_token, organization_id,
		autocapture_opt_out, session_recording_opt_in, heatmaps_opt_in, capture_console_log_opt_in,
		capture_performance_opt_in, autocapture_exceptions_opt_in FROM projects WHERE id = $1`,
		projectID).Scan(&snap.Version, &snap.Name, &snap.APIToken, &secret, &orgID,
		&c.AutocaptureOptOut, &c.SessionRecordingOptIn, &c.HeatmapsOptIn, &c.CaptureConsoleLogOptIn,
		&c.CapturePerformanceOptIn, &c.AutocaptureExceptionsOptIn)
	if err != nil {
		return nil, opError("build snapshot", notFoundIfNoRows(err))
	}
	snap.SecretTokenSHA256 = HashKey(secret)

	rows, err := tx.Query(ctx, `SELECT k.secure_value, k.scopes && $3 FROM personal_api_keys k JOIN users u ON u.id = k.user_id
		WHERE u.organization_id = $1 AND (k.scoped_projects IS NULL OR $2 = ANY(k.scoped_projects))
		ORDER BY k.id`, orgID, projectID, readScopes)
	if err != nil {
		return nil, opError("build snapshot: keys", err)
	}
	for rows.Next() {
		var hash []byte
		var canRead bool
		if err := rows.Scan(&hash, &canRead); err != nil {
			rows.Close()
			return nil, opError("build snapshot: keys", err)
		}
		if canRead {
			snap.ReadKeySHA256 = append(snap.ReadKeySHA256, hash)
		} else {
			snap.OtherKeySHA256 = append(snap.OtherKeySHA256, hash)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, opError("build snapshot: keys", err)
	}

	rows, err = tx.Query(ctx, `SELECT id, key, name, active, version, ensure_experience_continuity, filters,
		evaluation_runtime, evaluation_tags, COALESCE(bucketing_identifier, '') FROM feature_flags WHERE project_id = $1 AND NOT deleted ORDER BY id`, projectID)
	if err != nil {
		return nil, opError("build snapshot: flags", err)
	}
	snap.Flags, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (flags.FlagDefinition, error) {
		var f flags.FlagDefinition
		err := r.Scan(&f.ID, &f.Key, &f.Name, &f.Active, &f.Version, &f.EnsureExperienceContinuity, &f.Filters,
			&f.EvaluationRuntime, &f.EvaluationTags, &f.BucketingIdentifier)
		return f, err
	})
	if err != nil {
		return nil, opError("build snapshot: flags", err)
	}

	rows, err = tx.Query(ctx, `SELECT id, is_static, filters FROM cohorts WHERE project_id = $1 AND NOT deleted ORDER BY id`, projectID)
	if err != nil {
		return nil, opError("build snapshot: cohorts", err)
	}
	snap.Cohorts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (flags.CohortDefinition, error) {
		var c flags.CohortDefinition
		err := r.Scan(&c.ID, &c.Static, &c.Filters)
		return c, err
	})
	if err != nil {
		return nil, opError("build snapshot: cohorts", err)
	}

	rows, err = tx.Query(ctx, `SELECT group_type, group_type_index FROM group_type_mappings WHERE project_id = $1 ORDER BY group_type_index`, projectID)
	if err != nil {
		return nil, opError("build snapshot: group types", err)
	}
	snap.GroupTypes, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (controlplane.GroupType, error) {
		var g controlplane.GroupType
		err := r.Scan(&g.GroupType, &g.Index)
		return g, err
	})
	if err != nil {
		return nil, opError("build snapshot: group types", err)
	}

	rows, err = tx.Query(ctx, `SELECT e.id::text, e.name, e.description, e.stage, e.documentation_url, COALESCE(f.key, ''), e.created_at
		FROM early_access_features e LEFT JOIN feature_flags f ON f.id = e.feature_flag_id
		WHERE e.project_id = $1 ORDER BY e.created_at, e.id`, projectID)
	if err != nil {
		return nil, opError("build snapshot: early access features", err)
	}
	snap.Features, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (controlplane.SnapshotFeature, error) {
		var f controlplane.SnapshotFeature
		err := r.Scan(&f.ID, &f.Name, &f.Description, &f.Stage, &f.DocumentationURL, &f.FlagKey, &f.CreatedAt)
		return f, err
	})
	if err != nil {
		return nil, opError("build snapshot: early access features", err)
	}
	return snap, tx.Commit(ctx)
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/flags"
)

// EarlyAccessFeatureService stores early access features and keeps their flags' enrolment
// super conditions in step with their stages.
type EarlyAccessFeatureService struct {
	db *DB
}

var _ controlplane.EarlyAccessFeatureService = (*EarlyAccessFeatureService)(nil)

// NewEarlyAccessFeatureService returns an EarlyAccessFeatureService on db.
func NewEarlyAccessFeatureService(db *DB) *EarlyAccessFeatureService {
	return &EarlyAccessFeatureService{db: db}
}

const featureSelect = `SELECT e.id::text, e.project_id, e.name, e.description, e.stage, e.documentation_url, e.created_at,
	e.feature_flag_id FROM early_access_features e`

// scanFeatures reads features and then their flags.
func scanFeatures(ctx context.Context, q dbConn, sql string, args ...any) ([]*controlplane.EarlyAccessFeature, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	var flagIDs []*int64
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.EarlyAccessFeature, error) {
		var f controlplane.EarlyAccessFeature
		var flagID *int64
		err := r.Scan(&f.ID, &f.ProjectID, &f.Name, &f.Description, &f.Stage, &f.DocumentationURL, &f.CreatedAt, &flagID)
		flagIDs = append(flagIDs, flagID)
		return &f, err
	})
	if err != nil {
		return nil, err
	}
	for i, f := range list {
		if flagIDs[i] != nil {
			if f.FeatureFlag, err = findFlag(ctx, q, f.ProjectID, *flagIDs[i], false); err != nil {
				return nil, err
			}
		}
	}
	return list, nil
}

// validUUID reports whether PostgreSQL would take id as a uuid (else the feature cannot exist).
func validUUID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i, c := range id {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F'):
			return false
		}
	}
	return true
}

// findFeature reads a feature of the project, when u reaches the project.
func findFeature(ctx context.Context, q dbConn, u *controlplane.User, projectID int64, id string, forUpdate bool) (*controlplane.EarlyAccessFeature, error) {
	if !validUUID(id) {
		return nil, notFoundIn(ctx, q, u, controlplane.CanReadOrg, projectID)
	}
	sql := featureSelect + ` WHERE e.project_id = $1 AND e.id = $2 AND ` + inReach("e.project_id", 3)
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	list, err := scanFeatures(ctx, q, sql, projectID, id, reachableOrg(u, controlplane.CanReadOrg))
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, notFoundIn(ctx, q, u, controlplane.CanReadOrg, projectID)
	}
	return list[0], nil
}

// FindEarlyAccessFeatures returns a page of the project's features, newest first.
func (s *EarlyAccessFeatureService) FindEarlyAccessFeatures(ctx context.Context, projectID int64, limit, offset int) ([]*controlplane.EarlyAccessFeature, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	total, err := countInReach(ctx, s.db.Pool, u, controlplane.CanReadOrg, projectID, `SELECT count(*) FROM early_access_features WHERE project_id = $1`, projectID)
	if err != nil {
		return nil, 0, opError("count early access features", err)
	}
	list, err := scanFeatures(ctx, s.db.Pool, featureSelect+` WHERE e.project_id = $1 ORDER BY e.created_at DESC, e.id DESC LIMIT $2 OFFSET $3`,
		projectID, limit, offset)
	if err != nil {
		return nil, 0, opError("find early access features", err)
	}
	return list, total, nil
}

// FindEarlyAccessFeatureByID returns one feature of the project.
func (s *EarlyAccessFeatureService) FindEarlyAccessFeatureByID(ctx context.Context, projectID int64, id string) (*controlplane.EarlyAccessFeature, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	f, err := findFeature(ctx, s.db.Pool, u, projectID, id, false)
	if err != nil {
		return nil, opError("find early access feature", err)
	}
	return f, nil
}

// featureFlagFilters are the filters of a flag created for a feature: nobody gets it but the
// people who enrol (the super condition, while the stage is a release stage).
var featureFlagFilters = json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 0, "variant": null}]}`)

// CreateEarlyAccessFeature inserts a feature with its flag: the one FeatureFlagID names,
// checked and given the enrolment super condition in a release stage, or a new one keyed
// from the name, by the user ctx acts as.
func (s *EarlyAccessFeatureService) CreateEarlyAccessFeature(ctx context.Context, projectID int64,
	upd controlplane.EarlyAccessFeatureUpdate) (*controlplane.EarlyAccessFeature, error) {
	actor, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(true); err != nil {
		return nil, err
	}
	var created *controlplane.EarlyAccessFeature
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := projectOrg(ctx, tx, actor, controlplane.CanReadOrg, projectID); err != nil {
			return err
		}
		now := s.db.Now()
		release := controlplane.ReleaseStage(*upd.Stage)
		var flag *controlplane.Flag
		if upd.FeatureFlagID != nil {
			var err error
			if flag, err = linkableFlag(ctx, tx, projectID, *upd.FeatureFlagID); err != nil {
				return err
			}
			// Linking a flag makes the feature's stage decide its enrolment condition: it
			// takes edit access to the flag, as changing the flag does.
			if err := lockEditableFlag(ctx, tx, actor, projectID, flag.ID); err != nil {
				return err
			}
			if release {
				if err := setEnrollment(ctx, tx, now, actor, flag, true); err != nil {
					return err
				}
			}
		} else {
			key := controlplane.FeatureFlagKey(*upd.Name)
			if key == "" {
				return controlplane.FieldError("name", "invalid_input", "The name needs a letter or a digit to make the flag key from.")
			}
			filters, err := controlplane.WithEnrollment(featureFlagFilters, key, release)
			if err != nil {
				return err
			}
			name := "Feature Flag for Feature " + *upd.Name
			if flag, err = createFlag(ctx, tx, now, actor, projectID, controlplane.FlagUpdate{Key: &key, Name: &name, Filters: filters}); err != nil {
				return err
			}
		}
		var id string
		err := tx.QueryRow(ctx, `INSERT INTO early_access_features (project_id, feature_flag_id, name, description, stage,
			documentation_url, created_at) VALUES ($1, $2, $3, COALESCE($4, ''), $5, COALESCE($6, ''), $7) RETURNING id::text`,
			projectID, flag.ID, upd.Name, upd.Description, upd.Stage, upd.DocumentationURL, now).Scan(&id)
		if isUniqueViolation(err, "early_access_features_flag") {
			return errFlagHasFeature(flag.Key)
		}
		if err != nil {
			return err
		}
		if created, err = findFeature(ctx, tx, actor, projectID, id, false); err != nil {
			return err
		}
		return bumpSnapshot(ctx, tx, projectID)
	})
	if err != nil {
		return nil, opError("create early access feature", err)
	}
	return created, nil
}

func errFlagHasFeature(key string) error {
	return controlplane.FieldError("feature_flag_id", "invalid_input",
		fmt.Sprintf("Linked feature flag %s already has a feature attached to it.", key))
}

// linkableFlag returns the flag a new feature may link: a non-deleted person flag of the
// project without variants and without a feature.
func linkableFlag(ctx context.Context, tx pgx.Tx, projectID, id int64) (*controlplane.Flag, error) {
	flag, err := findFlag(ctx, tx, projectID, id, true)
	if errors.Is(err, controlplane.ErrNotFound) || (err == nil && flag.Deleted) {
		return nil, controlplane.FieldError("feature_flag_id", "invalid_input", "Feature Flag with this ID does not exist")
	}
	if err != nil {
		return nil, err
	}
	if len(flag.Features) > 0 {
		return nil, errFlagHasFeature(flag.Key)
	}
	parsed, err := flags.ParseFilters(flag.Filters)
	if err != nil {
		return nil, err
	}
	if parsed.AggregationGroupTypeIndex != nil {
		return nil, controlplane.FieldError("feature_flag_id", "invalid_input", "Group-based feature flags are not supported for Early Access Features.")
	}
	if parsed.Multivariate != nil && len(parsed.Multivariate.Variants) > 0 {
		return nil, controlplane.FieldError("feature_flag_id", "invalid_input", "Multivariate feature flags are not supported for Early Access Features.")
	}
	return flag, nil
}

// setEnrollment adds (or removes) the enrolment super condition of the flag, through the
// flag's own update path: validated, versioned, in the activity log, and only when actor may
// change the flag (its role access applies: a feature is no way around it).
func setEnrollment(ctx context.Context, tx pgx.Tx, now time.Time, actor *controlplane.User, flag *controlplane.Flag, enrol bool) error {
	filters, err := controlplane.WithEnrollment(flag.Filters, flag.Key, enrol)
	if err != nil {
		return err
	}
	_, _, err = updateFlag(ctx, tx, now, actor, flag.ProjectID, flag.ID, controlplane.FlagUpdate{Filters: filters})
	return err
}

// UpdateEarlyAccessFeature changes a feature. Moving it into a release stage from another
// stage gives its flag the enrolment super condition; moving it out of the release stages
// takes the condition away, as PostHog does. The flag is changed as the user ctx acts as.
func (s *EarlyAccessFeatureService) UpdateEarlyAccessFeature(ctx context.Context, projectID int64, id string,
	upd controlplane.EarlyAccessFeatureUpdate) (*controlplane.EarlyAccessFeature, error) {
	actor, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(false); err != nil {
		return nil, err
	}
	var updated *controlplane.EarlyAccessFeature
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		before, err := findFeature(ctx, tx, actor, projectID, id, true)
		if err != nil {
			return err
		}
		if upd.Stage != nil && before.FeatureFlag != nil {
			wasRelease, isRelease := controlplane.ReleaseStage(before.Stage), controlplane.ReleaseStage(*upd.Stage)
			if wasRelease != isRelease {
				if err := setEnrollment(ctx, tx, s.db.Now(), actor, before.FeatureFlag, isRelease); err != nil {
					return err
				}
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE early_access_features SET name = COALESCE($3, name),
			description = COALESCE($4, description), stage = COALESCE($5, stage),
			documentation_url = COALESCE($6, documentation_url) WHERE project_id = $1 AND id = $2`,
			projectID, id, upd.Name, upd.Description, upd.Stage, upd.DocumentationURL); err != nil {
			return err
		}
		if updated, err = findFeature(ctx, tx, actor, projectID, id, false); err != nil {
			return err
		}
		return bumpSnapshot(ctx, tx, projectID)
	})
	if err != nil {
		return nil, opError("update early access feature", err)
	}
	return updated, nil
}

// DeleteEarlyAccessFeature deletes a feature and takes the enrolment super condition off its
// flag, as the user ctx acts as; the flag itself stays.
func (s *EarlyAccessFeatureService) DeleteEarlyAccessFeature(ctx context.Context, projectID int64, id string) error {
	actor, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		f, err := findFeature(ctx, tx, actor, projectID, id, true)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM early_access_features WHERE project_id = $1 AND id = $2`, projectID, id); err != nil {
			return err
		}
		if f.FeatureFlag != nil {
			if err := setEnrollment(ctx, tx, s.db.Now(), actor, f.FeatureFlag, false); err != nil {
				return err
			}
		}
		return bumpSnapshot(ctx, tx, projectID)
	})
	if err != nil {
		return opError("delete early access feature", err)
	}
	return nil
}

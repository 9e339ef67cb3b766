package postgres

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// CohortService stores cohorts.
type CohortService struct {
	db *DB
}

var _ controlplane.CohortService = (*CohortService)(nil)

// NewCohortService returns a CohortService on db.
func NewCohortService(db *DB) *CohortService { return &CohortService{db: db} }

var cohortSelect = `SELECT c.id, c.project_id, c.name, c.description, c.filters, c.is_static,
	CASE WHEN c.is_static THEN (SELECT count(*)::int FROM cohort_people p WHERE p.cohort_id = c.id) ELSE c.count END,
	c.deleted, c.created_at, ` + userSummaryJSON("u") + ` FROM cohorts c LEFT JOIN users u ON u.id = c.created_by`

func scanCohort(row pgx.Row) (*controlplane.Cohort, error) {
	var c controlplane.Cohort
	var creator *userRow
	err := row.Scan(&c.ID, &c.ProjectID, &c.Name, &c.Description, &c.Filters, &c.IsStatic, &c.Count, &c.Deleted, &c.CreatedAt, &creator)
	c.CreatedBy = creator.user()
	return &c, err
}

// FindCohorts returns a page of the project's non-deleted cohorts, newest first, when the
// project is of the user's organisation: the count is read from the project's row of the
// organisation, whose absence is the project out of reach.
func (s *CohortService) FindCohorts(ctx context.Context, projectID int64, limit, offset int) ([]*controlplane.Cohort, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	total, err := countInReach(ctx, s.db.Pool, u, controlplane.CanReadOrg, projectID, `SELECT count(*) FROM cohorts c WHERE c.project_id = $1 AND NOT c.deleted`, projectID)
	if err != nil {
		return nil, 0, opError("count cohorts", err)
	}
	rows, err := s.db.Pool.Query(ctx, cohortSelect+` WHERE c.project_id = $1 AND NOT c.deleted ORDER BY c.id DESC LIMIT $2 OFFSET $3`,
		projectID, limit, offset)
	if err != nil {
		return nil, 0, opError("find cohorts", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.Cohort, error) { return scanCohort(r) })
	if err != nil {
		return nil, 0, opError("find cohorts", err)
	}
	return list, total, nil
}

// FindCohortByID returns a cohort of the project, deleted or not, when the project is of the
// user's organisation.
func (s *CohortService) FindCohortByID(ctx context.Context, projectID, id int64) (*controlplane.Cohort, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	c, err := findCohort(ctx, s.db.Pool, u, projectID, id, false)
	if err != nil {
		return nil, opError("find cohort", err)
	}
	return c, nil
}

// findCohort reads a cohort of the project scoped by u's organisation, locked for a change
// when forUpdate.
func findCohort(ctx context.Context, q querier, u *controlplane.User, projectID, id int64, forUpdate bool) (*controlplane.Cohort, error) {
	return findInProject(ctx, q, u, cohortSelect, "c", projectID, id, forUpdate, scanCohort)
}

// CreateCohort creates a cohort and re-streams the project's snapshot; the insert takes the
// project's row of the user's organisation, whose absence is the project out of reach.
func (s *CohortService) CreateCohort(ctx context.Context, projectID int64, upd controlplane.CohortUpdate) (*controlplane.Cohort, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(); err != nil {
		return nil, refusedInput(ctx, s.db.Pool, u, projectID, err)
	}
	if upd.Name == nil || *upd.Name == "" {
		return nil, refusedInput(ctx, s.db.Pool, u, projectID, controlplane.FieldError("name", "required", "This field is required."))
	}
	c := &controlplane.Cohort{Filters: json.RawMessage(`{"properties": {"type": "AND", "values": []}}`)}
	upd.Apply(c)
	var id int64
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO cohorts (project_id, name, description, filters, is_static, deleted, created_by)
			SELECT p.id, $2, $3, $4, $5, $6, $7 FROM projects p WHERE p.id = $1 AND p.organization_id = $8 RETURNING id`,
			projectID, c.Name, c.Description, c.Filters, c.IsStatic, c.Deleted, u.ID, u.OrganizationID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return controlplane.ErrPermissionDenied
		}
		if err != nil {
			return err
		}
		return bumpSnapshot(ctx, tx, projectID)
	})
	if err != nil {
		return nil, opError("create cohort", err)
	}
	return s.FindCohortByID(ctx, projectID, id)
}

// UpdateCohort changes a cohort and re-streams the project's snapshot, when the project is of
// the user's organisation.
func (s *CohortService) UpdateCohort(ctx context.Context, projectID, id int64, upd controlplane.CohortUpdate) (*controlplane.Cohort, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(); err != nil {
		return nil, refusedInput(ctx, s.db.Pool, u, projectID, err)
	}
	if upd.Name != nil && *upd.Name == "" {
		return nil, refusedInput(ctx, s.db.Pool, u, projectID, controlplane.FieldError("name", "blank", "This field may not be blank."))
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		c, err := findCohort(ctx, tx, u, projectID, id, true)
		if err != nil {
			return err
		}
		upd.Apply(c)
		if _, err := tx.Exec(ctx, `UPDATE cohorts SET name = $3, description = $4, filters = $5, is_static = $6, deleted = $7,
			count = CASE WHEN $8 THEN NULL ELSE count END, updated_at = now() WHERE project_id = $1 AND id = $2`,
			projectID, id, c.Name, c.Description, c.Filters, c.IsStatic, c.Deleted, upd.Filters != nil); err != nil {
			return err
		}
		return bumpSnapshot(ctx, tx, projectID)
	})
	if err != nil {
		return nil, opError("update cohort", err)
	}
	return s.FindCohortByID(ctx, projectID, id)
}

// CreateStaticCohort creates a static cohort and fills it batch by batch in one transaction,
// when the user may change the flag (CanEditFlag, decided on the flag's row locked there).
func (s *CohortService) CreateStaticCohort(ctx context.Context, projectID, flagID int64, name string, persons func(yield func([]int64) error) error) (*controlplane.Cohort, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	var id int64
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		if err := lockEditableFlag(ctx, tx, u, projectID, flagID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO cohorts (project_id, name, is_static, filters, created_by)
			VALUES ($1, $2, true, '{}', $3) RETURNING id`, projectID, name, u.ID).Scan(&id); err != nil {
			return err
		}
		if err := persons(func(ids []int64) error {
			_, err := tx.Exec(ctx, `INSERT INTO cohort_people (cohort_id, person_id) SELECT $1, unnest($2::bigint[]) ON CONFLICT DO NOTHING`, id, ids)
			return err
		}); err != nil {
			return err
		}
		return bumpSnapshot(ctx, tx, projectID)
	})
	if err != nil {
		return nil, opError("create static cohort", err)
	}
	return s.FindCohortByID(ctx, projectID, id)
}

// SetCount stores a property cohort's size, when the project is of the user's organisation
// (a cohort it does not have is left alone).
func (s *CohortService) SetCount(ctx context.Context, projectID, id int64, count int) error {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	tag, err := s.db.Pool.Exec(ctx, `UPDATE cohorts c SET count = $3 FROM projects p
		WHERE p.id = c.project_id AND c.project_id = $1 AND c.id = $2 AND p.organization_id = $4`, projectID, id, count, u.OrganizationID)
	if err == nil && tag.RowsAffected() == 0 {
		err = reachProject(ctx, s.db.Pool, u, projectID)
	}
	if err != nil {
		return opError("set cohort count", err)
	}
	return nil
}

// ScanPersons returns up to limit persons of the project with an id above afterID.
func (s *PersonStore) ScanPersons(ctx context.Context, projectID, afterID int64, limit int) ([]controlplane.StoredPersonRow, error) {
	rows, err := s.db.Pool.Query(ctx, `
		SELECT p.id, (SELECT min(d.distinct_id) FROM person_distinct_ids d WHERE d.person_id = p.id), p.properties,
			COALESCE((SELECT array_agg(cp.cohort_id) FROM cohort_people cp WHERE cp.person_id = p.id), '{}')
		FROM persons p WHERE p.project_id = $1 AND p.id > $2 ORDER BY p.id LIMIT $3`, projectID, afterID, limit)
	if err != nil {
		return nil, opError("scan persons", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (controlplane.StoredPersonRow, error) {
		var p controlplane.StoredPersonRow
		var distinct *string
		err := r.Scan(&p.ID, &distinct, &p.Properties, &p.StaticCohorts)
		if distinct != nil {
			p.DistinctID = *distinct
		}
		return p, err
	})
	if err != nil {
		return nil, opError("scan persons", err)
	}
	return out, nil
}

// ScanGroups returns up to limit groups of a type with a key above afterKey.
func (s *PersonStore) ScanGroups(ctx context.Context, projectID int64, typeIndex int, afterKey string, limit int) ([]controlplane.StoredGroupRow, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT group_key, properties FROM groups
		WHERE project_id = $1 AND group_type_index = $2 AND group_key > $3 ORDER BY group_key LIMIT $4`, projectID, typeIndex, afterKey, limit)
	if err != nil {
		return nil, opError("scan groups", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (controlplane.StoredGroupRow, error) {
		var g controlplane.StoredGroupRow
		err := r.Scan(&g.Key, &g.Properties)
		return g, err
	})
	if err != nil {
		return nil, opError("scan groups", err)
	}
	return out, nil
}

// EnsureUsageDashboard creates the flag's usage dashboard unless it has one, when the user
// may change the flag: in one transaction with the flag's update, on the flag's row as
// UpdateFlag locks and checks it.
func (s *FlagService) EnsureUsageDashboard(ctx context.Context, projectID, flagID int64) (*controlplane.Flag, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	var out *controlplane.Flag
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		before, err := lockFlagForChange(ctx, tx, u, projectID, flagID)
		if err != nil {
			return err
		}
		if before.UsageDashboard != nil {
			out = before.Flag
			return nil
		}
		var dashboardID int64
		if err := tx.QueryRow(ctx, `INSERT INTO dashboards (project_id, name, created_by) VALUES ($1, $2, $3) RETURNING id`,
			projectID, "Feature flag: "+before.Key+" usage", u.ID).Scan(&dashboardID); err != nil {
			return err
		}
		out, err = saveFlagChange(ctx, tx, s.db.Now(), u, before, controlplane.FlagUpdate{UsageDashboard: &dashboardID})
		return err
	})
	if err != nil {
		return nil, opError("ensure usage dashboard", err)
	}
	return out, nil
}

// errNotStatic refuses a member change or listing of a property cohort.
var errNotStatic = controlplane.FieldError("is_static", "invalid_input",
	"Only static cohorts hold a list of persons: a property cohort's members are whoever matches its filters.")

// FindCohortPersons returns a page of a static cohort's members, by person id, when the
// project is of the user's organisation.
func (s *CohortService) FindCohortPersons(ctx context.Context, projectID, id int64, limit, offset int) ([]*controlplane.Person, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	c, err := findCohort(ctx, s.db.Pool, u, projectID, id, false)
	if err != nil {
		return nil, 0, opError("find cohort persons", err)
	}
	if !c.IsStatic {
		return nil, 0, errNotStatic
	}
	var total int
	if c.Count != nil {
		total = *c.Count
	}
	rows, err := s.db.Pool.Query(ctx, personSelect+` JOIN cohort_people cp ON cp.person_id = p.id
		WHERE cp.cohort_id = $1 AND p.project_id = $2 ORDER BY cp.person_id LIMIT $3 OFFSET $4`, id, projectID, limit, offset)
	if err != nil {
		return nil, 0, opError("find cohort persons", err)
	}
	list, err := pgx.CollectRows(rows, scanPerson)
	if err != nil {
		return nil, 0, opError("find cohort persons", err)
	}
	return list, total, nil
}

// AddPersonsToStaticCohort adds members to a static cohort in one transaction, on the
// cohort's row locked and scoped by the user's organisation (CanReadOrg: any member may change
// the organisation's cohorts). Distinct ids the project lacks get a new empty person each,
// as ingestion would make them: their insertion announces them to the edges' membership
// filters (migration 011's trigger) in the same commit as the new snapshot version, which
// makes edges look the members up again. Nothing new (every person already a member) writes
// nothing, not even a snapshot.
func (s *CohortService) AddPersonsToStaticCohort(ctx context.Context, projectID, id int64, m controlplane.StaticCohortMembers) (controlplane.StaticCohortAdded, error) {
	var out controlplane.StaticCohortAdded
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return out, err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		c, err := lockCohortForMembers(ctx, tx, u, projectID, id, m.Validate)
		if err != nil {
			return err
		}
		if !c.IsStatic || c.Deleted {
			return errNotStatic
		}
		var persons []int64
		if len(m.PersonUUIDs) > 0 {
			rows, err := tx.Query(ctx, `SELECT id FROM persons WHERE project_id = $1 AND uuid = ANY($2::uuid[])`, projectID, m.PersonUUIDs)
			if err != nil {
				return err
			}
			if persons, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
				return err
			}
			out.Unknown = len(uniqueStrings(m.PersonUUIDs)) - len(persons)
			if len(persons) == 0 && len(m.DistinctIDs) == 0 {
				return controlplane.FieldError("person_ids", "invalid_input", "No valid users to add to cohort.")
			}
		}
		if len(m.DistinctIDs) > 0 {
			ids, created, err := personsBehind(ctx, tx, projectID, m.DistinctIDs)
			if err != nil {
				return err
			}
			persons, out.Created = append(persons, ids...), created
		}
		tag, err := tx.Exec(ctx, `INSERT INTO cohort_people (cohort_id, person_id) SELECT $1, unnest($2::bigint[]) ON CONFLICT DO NOTHING`, id, persons)
		if err != nil {
			return err
		}
		out.Added = int(tag.RowsAffected())
		if out.Added == 0 && out.Created == 0 {
			return nil
		}
		return bumpSnapshot(ctx, tx, projectID)
	})
	if err != nil {
		return controlplane.StaticCohortAdded{}, opError("add persons to static cohort", err)
	}
	return out, nil
}

// personsBehind returns the persons behind distinctIDs, each once, creating as ingestion does
// (createMissingPersons) a person for every distinct id the project lacks, and how many it
// created. The caller holds the project's ingest lock, so that no batch being ingested
// creates or merges one of them meanwhile.
func personsBehind(ctx context.Context, tx pgx.Tx, projectID int64, distinctIDs []string) ([]int64, int, error) {
	created, err := createMissingPersons(ctx, tx, projectID, distinctIDs)
	if err != nil {
		return nil, 0, err
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT person_id FROM person_distinct_ids WHERE project_id = $1 AND distinct_id = ANY($2::text[])`, projectID, distinctIDs)
	if err != nil {
		return nil, 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return ids, created, err
}

// uniqueStrings returns ss without repeats, in their first order.
func uniqueStrings(ss []string) []string {
	seen := make(map[string]bool, len(ss))
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// lockCohortForMembers locks a cohort whose members are about to change, after refusing a
// stranger (the cohort read unlocked first, so a stranger takes no lock) and then bad input
// (validate). The project's ingest lock comes before the cohort's row: ingestion takes that
// lock first and then, merging persons, locks persons' rows and references cohorts' rows
// (deleting a merged person removes its memberships), so an add or a removal taking them the
// other way round could deadlock with it; and distinct ids are created by one of them at a
// time.
func lockCohortForMembers(ctx context.Context, tx pgx.Tx, u *controlplane.User, projectID, id int64, validate func() error) (*controlplane.Cohort, error) {
	if _, err := findCohort(ctx, tx, u, projectID, id, false); err != nil {
		return nil, err
	}
	if err := validate(); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2::int)`, ingestLockClass, projectID); err != nil {
		return nil, err
	}
	return findCohort(ctx, tx, u, projectID, id, true)
}

// RemovePersonFromStaticCohort takes a person out of a static cohort, on the cohort's row
// locked and scoped by the user's organisation, re-streaming the snapshot when it was a member.
func (s *CohortService) RemovePersonFromStaticCohort(ctx context.Context, projectID, id int64, personUUID string) error {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		c, err := lockCohortForMembers(ctx, tx, u, projectID, id, func() error {
			if !controlplane.ValidUUID(personUUID) {
				return controlplane.FieldError("person_id", "invalid_input", "person_id must be a valid UUID.")
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !c.IsStatic || c.Deleted {
			return errNotStatic
		}
		var person int64
		err = tx.QueryRow(ctx, `SELECT id FROM persons WHERE project_id = $1 AND uuid = $2::uuid`, projectID, personUUID).Scan(&person)
		if errors.Is(err, pgx.ErrNoRows) {
			return controlplane.Errorf(controlplane.NotFound, "not_found", "No person of this project has this UUID.")
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM cohort_people WHERE cohort_id = $1 AND person_id = $2`, id, person)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		return bumpSnapshot(ctx, tx, projectID)
	})
	if err != nil {
		return opError("remove person from static cohort", err)
	}
	return nil
}

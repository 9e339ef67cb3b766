package postgres

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// PersonStore answers look-ups about persons and groups.
type PersonStore struct {
	db *DB
}

var _ controlplane.PersonStore = (*PersonStore)(nil)

// NewPersonStore returns a PersonStore on db.
func NewPersonStore(db *DB) *PersonStore { return &PersonStore{db: db} }

// LookupPerson returns the person with the distinct id, or nil when there is none.
func (s *PersonStore) LookupPerson(ctx context.Context, projectID int64, distinctID string) (*controlplane.StoredPerson, error) {
	var p controlplane.StoredPerson
	var overrides []byte
	err := s.db.Pool.QueryRow(ctx, `
		SELECT p.id, p.properties,
			COALESCE((SELECT array_agg(cp.cohort_id ORDER BY cp.cohort_id) FROM cohort_people cp
				JOIN cohorts c ON c.id = cp.cohort_id WHERE cp.person_id = p.id AND NOT c.deleted), '{}'),
			COALESCE((SELECT json_object_agg(h.feature_flag_key, h.hash_key) FROM hash_key_overrides h
				WHERE h.project_id = p.project_id AND h.person_id = p.id), '{}')
		FROM person_distinct_ids d JOIN persons p ON p.id = d.person_id
		WHERE d.project_id = $1 AND d.distinct_id = $2`, projectID, distinctID).
		Scan(&p.ID, &p.Properties, &p.StaticCohortIDs, &overrides)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, opError("lookup person", err)
	}
	if err := json.Unmarshal(overrides, &p.HashKeyOverrides); err != nil {
		return nil, opError("lookup person", err)
	}
	return &p, nil
}

// LookupGroups returns the groups among refs that exist.
func (s *PersonStore) LookupGroups(ctx context.Context, projectID int64, refs []controlplane.GroupRef) ([]controlplane.StoredGroup, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	indexes := make([]int32, len(refs))
	keys := make([]string, len(refs))
	for i, r := range refs {
		indexes[i], keys[i] = int32(r.TypeIndex), r.Key
	}
	rows, err := s.db.Pool.Query(ctx, `
		SELECT g.group_type_index, g.group_key, g.properties FROM groups g
		JOIN unnest($2::int[], $3::text[]) AS want(idx, key) ON g.group_type_index = want.idx AND g.group_key = want.key
		WHERE g.project_id = $1`, projectID, indexes, keys)
	if err != nil {
		return nil, opError("lookup groups", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (controlplane.StoredGroup, error) {
		var g controlplane.StoredGroup
		err := r.Scan(&g.TypeIndex, &g.Key, &g.Properties)
		return g, err
	})
	if err != nil {
		return nil, opError("lookup groups", err)
	}
	return out, nil
}

// SetHashKeyOverrides records hashKey for the flags that have no override yet for the
// person behind distinctID, creating the person when it is unknown, and returns the
// person's overrides.
func (s *PersonStore) SetHashKeyOverrides(ctx context.Context, projectID int64, distinctID, hashKey string, flagKeys []string) (map[string]string, error) {
	out := map[string]string{}
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		personID, err := ensurePerson(ctx, tx, projectID, distinctID)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO hash_key_overrides (project_id, person_id, feature_flag_key, hash_key)
			SELECT $1, $2, k, $3 FROM unnest($4::text[]) AS k
			ON CONFLICT DO NOTHING`, projectID, personID, hashKey, flagKeys); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT feature_flag_key, hash_key FROM hash_key_overrides WHERE project_id = $1 AND person_id = $2`,
			projectID, personID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				return err
			}
			out[k] = v
		}
		return rows.Err()
	})
	if err != nil {
		return nil, opError("set hash key overrides", err)
	}
	return out, nil
}

// ensurePerson returns the id of the person behind distinctID, creating an empty person
// when there is none. Concurrent callers agree on one person.
func ensurePerson(ctx context.Context, tx pgx.Tx, projectID int64, distinctID string) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `SELECT person_id FROM person_distinct_ids WHERE project_id = $1 AND distinct_id = $2`,
		projectID, distinctID).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, err
	}
	if err := tx.QueryRow(ctx, `INSERT INTO persons (project_id) VALUES ($1) RETURNING id`, projectID).Scan(&id); err != nil {
		return 0, err
	}
	var got int64
	err = tx.QueryRow(ctx, `
		INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) VALUES ($1, $2, $3)
		ON CONFLICT (project_id, distinct_id) DO UPDATE SET distinct_id = EXCLUDED.distinct_id
		RETURNING person_id`, projectID, distinctID, id).Scan(&got)
	if err != nil {
		return 0, err
	}
	if got != id { // another transaction won: drop the person made here
		if _, err := tx.Exec(ctx, `DELETE FROM persons WHERE id = $1`, id); err != nil {
			return 0, err
		}
	}
	return got, nil
}

package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/shared/bloomkeys"
)

// MembershipChannel is the NOTIFY channel on which every distinct id and group stored is
// announced when its transaction commits (triggers of migration 011).
const MembershipChannel = "flagedge_membership"

// MemberStore reads what the membership filters are built from: the distinct ids of persons
// and the keys of groups.
type MemberStore struct{ db *DB }

// NewMemberStore returns a member store over db.
func NewMemberStore(db *DB) *MemberStore { return &MemberStore{db: db} }

// ScanMembers reads, in one snapshot of the database, how many keys each project has (every
// project when projectID is 0, those with none too; else that one), calling sized once per
// project, then every key (shared/bloomkeys's encoding), calling key for each.
func (s *MemberStore) ScanMembers(ctx context.Context, projectID int64, sized func(projectID int64, n int), key func(projectID int64, k []byte)) error {
	tx, err := s.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("scan members: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	rows, err := tx.Query(ctx, `
		SELECT p.id, (SELECT count(*) FROM person_distinct_ids d WHERE d.project_id = p.id)
			+ (SELECT count(*) FROM groups g WHERE g.project_id = p.id)
		FROM projects p WHERE $1 = 0 OR p.id = $1`, projectID)
	if err != nil {
		return fmt.Errorf("count members: %w", err)
	}
	var id, n int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { sized(id, int(n)); return nil }); err != nil {
		return fmt.Errorf("count members: %w", err)
	}
	rows, err = tx.Query(ctx, `
		SELECT project_id, -1, distinct_id FROM person_distinct_ids WHERE $1 = 0 OR project_id = $1
		UNION ALL
		SELECT project_id, group_type_index, group_key FROM groups WHERE $1 = 0 OR project_id = $1`, projectID)
	if err != nil {
		return fmt.Errorf("scan members: %w", err)
	}
	var typeIndex int
	var raw []byte
	buf := make([]byte, 0, 256)
	_, err = pgx.ForEachRow(rows, []any{&id, &typeIndex, &raw}, func() error {
		if typeIndex < 0 {
			buf = bloomkeys.PersonKey(buf[:0], string(raw))
		} else {
			buf = bloomkeys.GroupKey(buf[:0], typeIndex, string(raw))
		}
		key(id, buf)
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan members: %w", err)
	}
	return tx.Commit(ctx)
}

// ParseMembershipNotice decodes a payload of MembershipChannel: the project, the keys it
// announces (shared/bloomkeys's encoding), or rebuild when the keys did not fit in a
// notification and the project's keys must be read from the tables.
func ParseMembershipNotice(payload string) (projectID int64, keys [][]byte, rebuild bool, err error) {
	idText, rest, _ := strings.Cut(payload, " ")
	projectID, err = strconv.ParseInt(idText, 10, 64)
	if err != nil {
		return 0, nil, false, fmt.Errorf("membership notice %.40q: bad project id", payload)
	}
	kind, list, _ := strings.Cut(rest, " ")
	switch kind {
	case "rebuild":
		return projectID, nil, true, nil
	case "p":
		var ids []string
		if err := json.Unmarshal([]byte(list), &ids); err != nil {
			return 0, nil, false, fmt.Errorf("membership notice %.40q: %w", payload, err)
		}
		for _, d := range ids {
			keys = append(keys, bloomkeys.PersonKey(nil, d))
		}
	case "g":
		var groups [][2]json.RawMessage
		if err := json.Unmarshal([]byte(list), &groups); err != nil {
			return 0, nil, false, fmt.Errorf("membership notice %.40q: %w", payload, err)
		}
		for _, g := range groups {
			var index int
			var key string
			if err := json.Unmarshal(g[0], &index); err != nil {
				return 0, nil, false, fmt.Errorf("membership notice %.40q: %w", payload, err)
			}
			if err := json.Unmarshal(g[1], &key); err != nil {
				return 0, nil, false, fmt.Errorf("membership notice %.40q: %w", payload, err)
			}
			keys = append(keys, bloomkeys.GroupKey(nil, index, key))
		}
	default:
		return 0, nil, false, fmt.Errorf("membership notice %.40q: unknown kind", payload)
	}
	return projectID, keys, false, nil
}

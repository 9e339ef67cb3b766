package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// KeyService stores users' personal API keys.
type KeyService struct {
	db *DB
}

var _ controlplane.KeyService = (*KeyService)(nil)

// NewKeyService returns a KeyService on db.
func NewKeyService(db *DB) *KeyService { return &KeyService{db: db} }

// maskKey shows a key's first and last four characters, as PostHog's mask_value does.
func maskKey(secret string) string {
	if len(secret) < 8 {
		return "..."
	}
	return secret[:4] + "..." + secret[len(secret)-4:]
}

const keyColumns = `k.id, k.user_id, k.label, COALESCE(k.mask_value, 'phx_...'), k.scopes, k.scoped_projects,
	k.scoped_organizations, k.created_at, k.last_used_at`

func scanKey(row pgx.Row) (*controlplane.PersonalKey, error) {
	var k controlplane.PersonalKey
	err := row.Scan(&k.ID, &k.UserID, &k.Label, &k.MaskValue, &k.Scopes, &k.ScopedTeams, &k.ScopedOrganizations, &k.CreatedAt, &k.LastUsedAt)
	return &k, err
}

// FindKeys returns the keys of the user ctx acts as, newest first.
func (s *KeyService) FindKeys(ctx context.Context) ([]*controlplane.PersonalKey, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Pool.Query(ctx, `SELECT `+keyColumns+` FROM personal_api_keys k WHERE k.user_id = $1 ORDER BY k.id DESC`, u.ID)
	if err != nil {
		return nil, opError("find keys", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.PersonalKey, error) { return scanKey(r) })
	if err != nil {
		return nil, opError("find keys", err)
	}
	return list, nil
}

// FindKeyByID returns one of the keys of the user ctx acts as.
func (s *KeyService) FindKeyByID(ctx context.Context, id int64) (*controlplane.PersonalKey, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	k, err := ownKey(ctx, s.db.Pool, u, `SELECT `+keyColumns+` FROM personal_api_keys k WHERE k.id = $1`, id)
	if err != nil {
		return nil, opError("find key", err)
	}
	return k, nil
}

// ownKey reads the key sql selects (by id, $1) and checks that u may manage it: another
// user's key is ErrNotFound, as a missing one, so that key ids cannot be probed.
func ownKey(ctx context.Context, q dbConn, u *controlplane.User, sql string, id int64) (*controlplane.PersonalKey, error) {
	k, err := scanKey(q.QueryRow(ctx, sql, id))
	if err != nil {
		return nil, notFoundIfNoRows(err)
	}
	if !controlplane.CanManageKey(u, k.UserID) {
		return nil, controlplane.ErrNotFound
	}
	return k, nil
}

// checkScoping refuses projects and organisations that are not the user's.
func checkScoping(ctx context.Context, tx pgx.Tx, user *controlplane.User, teams []int64, orgs []string) error {
	if len(teams) > 0 {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM projects WHERE id = ANY($1) AND organization_id = $2`,
			teams, user.OrganizationID).Scan(&n); err != nil {
			return err
		}
		if n != len(slices.Compact(slices.Sorted(slices.Values(teams)))) {
			return controlplane.FieldError("scoped_teams", "invalid_input", "You must be a member of all teams that you are scoping the key to.")
		}
	}
	for _, o := range orgs {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM organizations WHERE id = $1 AND uuid::text = lower($2))`,
			user.OrganizationID, o).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return controlplane.FieldError("scoped_organizations", "invalid_input", "You must be a member of all organizations that you are scoping the key to.")
		}
	}
	return nil
}

// CreateKey issues a key for the user ctx acts as; the snapshots of the projects it reaches are bumped
// so that edges accept it for flag definitions.
func (s *KeyService) CreateKey(ctx context.Context, upd controlplane.KeyUpdate) (*controlplane.PersonalKey, string, error) {
	user, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, "", err
	}
	if err := upd.Validate(true, nil); err != nil {
		return nil, "", err
	}
	secret := newToken(PersonalKeyPrefix)
	var teams []int64
	if upd.ScopedTeams != nil && len(*upd.ScopedTeams) > 0 {
		teams = *upd.ScopedTeams
	}
	orgs := []string{}
	if upd.ScopedOrganizations != nil {
		orgs = *upd.ScopedOrganizations
	}
	var key *controlplane.PersonalKey
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		// Lock the user's row so that concurrent creations agree on the count.
		var n int
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM personal_api_keys WHERE user_id = u.id) FROM users u
			WHERE u.id = $1 FOR UPDATE`, user.ID).Scan(&n); err != nil {
			return err
		}
		if n >= controlplane.MaxKeysPerUser {
			return controlplane.FieldError("label", "invalid_input",
				fmt.Sprintf("You can only have %d personal API keys. Remove an existing key before creating a new one.", controlplane.MaxKeysPerUser))
		}
		if err := checkScoping(ctx, tx, user, teams, orgs); err != nil {
			return err
		}
		var err error
		key, err = scanKey(tx.QueryRow(ctx, `INSERT INTO personal_api_keys AS k (user_id, label, secure_value, mask_value, scopes,
			scoped_projects, scoped_organizations) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+keyColumns,
			user.ID, *upd.Label, HashKey(secret), maskKey(secret), *upd.Scopes, teams, orgs))
		if err != nil {
			return err
		}
		return bumpKeyProjects(ctx, tx, user.OrganizationID, key.ScopedTeams)
	})
	if err != nil {
		return nil, "", opError("create key", err)
	}
	return key, secret, nil
}

// UpdateKey changes the label, scopes or scoping of a key of the user ctx acts as; the projects it reached before or
// reaches now are bumped.
func (s *KeyService) UpdateKey(ctx context.Context, id int64, upd controlplane.KeyUpdate) (*controlplane.PersonalKey, error) {
	user, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(false, nil); err != nil {
		return nil, err
	}
	var key *controlplane.PersonalKey
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		before, err := ownKey(ctx, tx, user, `SELECT `+keyColumns+` FROM personal_api_keys k WHERE k.id = $1 FOR UPDATE`, id)
		if err != nil {
			return err
		}
		after := *before
		if upd.Label != nil {
			after.Label = *upd.Label
		}
		if upd.Scopes != nil {
			after.Scopes = *upd.Scopes
		}
		if upd.ScopedTeams != nil {
			after.ScopedTeams = *upd.ScopedTeams
			if len(after.ScopedTeams) == 0 {
				after.ScopedTeams = nil
			}
		}
		if upd.ScopedOrganizations != nil {
			after.ScopedOrganizations = *upd.ScopedOrganizations
		}
		if err := checkScoping(ctx, tx, user, after.ScopedTeams, after.ScopedOrganizations); err != nil {
			return err
		}
		key, err = scanKey(tx.QueryRow(ctx, `UPDATE personal_api_keys k SET label = $3, scopes = $4, scoped_projects = $5,
			scoped_organizations = $6 WHERE k.user_id = $1 AND k.id = $2 RETURNING `+keyColumns,
			user.ID, id, after.Label, after.Scopes, after.ScopedTeams, after.ScopedOrganizations))
		if err != nil {
			return err
		}
		if slices.Equal(before.Scopes, after.Scopes) && slices.Equal(before.ScopedTeams, after.ScopedTeams) &&
			(before.ScopedTeams == nil) == (after.ScopedTeams == nil) {
			return nil // only the label changed: edges see no difference
		}
		if before.ScopedTeams == nil || after.ScopedTeams == nil {
			return bumpKeyProjects(ctx, tx, user.OrganizationID, nil)
		}
		return bumpKeyProjects(ctx, tx, user.OrganizationID, append(slices.Clone(before.ScopedTeams), after.ScopedTeams...))
	})
	if err != nil {
		return nil, opError("update key", err)
	}
	return key, nil
}

// DeleteKey deletes one of the keys of the user ctx acts as; the projects it reached are
// bumped, so every edge stops accepting it with the next snapshot.
func (s *KeyService) DeleteKey(ctx context.Context, id int64) error {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := ownKey(ctx, tx, u, `SELECT `+keyColumns+` FROM personal_api_keys k WHERE k.id = $1 FOR UPDATE`, id); err != nil {
			return err
		}
		return deleteKeys(ctx, tx, `k.id = $1`, id)
	})
	if err != nil {
		return opError("delete key", err)
	}
	return nil
}

// deleteKeys deletes the keys matching where (on personal_api_keys k) and bumps the
// snapshot of every project one of them reached.
func deleteKeys(ctx context.Context, tx pgx.Tx, where string, args ...any) error {
	rows, err := tx.Query(ctx, `SELECT DISTINCT p.id FROM personal_api_keys k JOIN users u ON u.id = k.user_id
		JOIN projects p ON p.organization_id = u.organization_id
		WHERE `+where+` AND (k.scoped_projects IS NULL OR p.id = ANY(k.scoped_projects)) ORDER BY p.id`, args...)
	if err != nil {
		return err
	}
	projects, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM personal_api_keys k WHERE `+where, args...); err != nil {
		return err
	}
	for _, id := range projects {
		if err := bumpSnapshot(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

// bumpKeyProjects bumps the given projects of the organisation, or all of them when
// projects is nil (a key not limited to projects reaches every one).
func bumpKeyProjects(ctx context.Context, tx pgx.Tx, orgID int64, projects []int64) error {
	if projects == nil {
		return bumpOrganizationSnapshots(ctx, tx, orgID)
	}
	slices.Sort(projects)
	for _, id := range slices.Compact(projects) {
		if err := bumpSnapshot(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

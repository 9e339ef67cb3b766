package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// AuthService authenticates personal API keys and issues new ones.
type AuthService struct {
	db *DB
}

var _ controlplane.AuthService = (*AuthService)(nil)

// NewAuthService returns an AuthService on db.
func NewAuthService(db *DB) *AuthService { return &AuthService{db: db} }

// ErrInvalidPersonalKey is returned for an unknown personal API key.
var ErrInvalidPersonalKey = &controlplane.Error{Kind: controlplane.BadCredentials, Code: "invalid_personal_api_key",
	Detail: "Personal API key found in request Authorization header is invalid."}

const userColumns = `u.id, u.uuid::text, u.distinct_id, u.first_name, u.last_name, u.email, u.is_email_verified, u.organization_id, u.org_role`

func scanUserInto(u *controlplane.User) []any {
	return []any{&u.ID, &u.UUID, &u.DistinctID, &u.FirstName, &u.LastName, &u.Email, &u.IsEmailVerified, &u.OrganizationID, &u.OrgRole}
}

// AuthenticatePersonalKey returns the key whose secret is given.
func (s *AuthService) AuthenticatePersonalKey(ctx context.Context, secret string) (*controlplane.APIKey, error) {
	if !strings.HasPrefix(secret, PersonalKeyPrefix) {
		return nil, ErrInvalidPersonalKey
	}
	var k controlplane.APIKey
	dest := append([]any{&k.ID, &k.Label, &k.Scopes, &k.Projects}, scanUserInto(&k.User)...)
	// last_used_at is written at most once an hour per key, so that reads stay reads.
	err := s.db.Pool.QueryRow(ctx, `
		WITH k AS (
			SELECT k.id AS key_id, k.label, k.scopes, k.scoped_projects, `+userColumns+`
			FROM personal_api_keys k JOIN users u ON u.id = k.user_id
			WHERE k.secure_value = $1 AND u.removed_at IS NULL),
		touched AS (
			UPDATE personal_api_keys t SET last_used_at = now() FROM k
			WHERE t.id = k.key_id AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 hour'))
		SELECT * FROM k`, HashKey(secret)).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrInvalidPersonalKey
	}
	if err != nil {
		return nil, opError("authenticate personal key", err)
	}
	return &k, nil
}

// CreatePersonalKey issues a key for the user with the given email. Projects limits the key
// to those projects (nil: every project of the user's organisation).
func (s *AuthService) CreatePersonalKey(ctx context.Context, email, label string, scopes []string, projects []int64) (*controlplane.NewKey, error) {
	for _, sc := range scopes {
		if !controlplane.ValidScope(sc) {
			return nil, controlplane.FieldError("scopes", "invalid_input", fmt.Sprintf("Unknown scope %q.", sc))
		}
	}
	if len(scopes) == 0 {
		return nil, controlplane.FieldError("scopes", "required", "A key needs at least one scope.")
	}
	key := &controlplane.NewKey{Secret: newToken(PersonalKeyPrefix)}
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT `+userColumns+` FROM users u WHERE u.email = $1`, email).Scan(scanUserInto(&key.User)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return controlplane.FieldError("email", "invalid_input", fmt.Sprintf("No user with email %q.", email))
		}
		if err != nil {
			return err
		}
		if projects != nil {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM projects WHERE id = ANY($1) AND organization_id = $2`,
				projects, key.User.OrganizationID).Scan(&n); err != nil {
				return err
			}
			if n != len(projects) {
				return controlplane.FieldError("projects", "invalid_input", "Every project must belong to the user's organisation.")
			}
		}
		if err := tx.QueryRow(ctx, `
			INSERT INTO personal_api_keys (user_id, label, secure_value, scopes, scoped_projects, mask_value)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
			key.User.ID, label, HashKey(key.Secret), scopes, projects, maskKey(key.Secret)).Scan(&key.ID); err != nil {
			return err
		}
		key.Label, key.Scopes, key.Projects = label, scopes, projects
		return bumpOrganizationSnapshots(ctx, tx, key.User.OrganizationID)
	})
	if err != nil {
		return nil, opError("create personal key", err)
	}
	return key, nil
}

// RevokePersonalKey deletes a key; edges stop accepting it once the new snapshots reach them.
func (s *AuthService) RevokePersonalKey(ctx context.Context, id int64) error {
	return s.db.inTx(ctx, func(tx pgx.Tx) error {
		var orgID int64
		err := tx.QueryRow(ctx, `
			DELETE FROM personal_api_keys k USING users u
			WHERE k.id = $1 AND u.id = k.user_id RETURNING u.organization_id`, id).Scan(&orgID)
		if err != nil {
			return opError("revoke personal key", notFoundIfNoRows(err))
		}
		return bumpOrganizationSnapshots(ctx, tx, orgID)
	})
}

// bumpOrganizationSnapshots bumps every project of an organisation: its keys reach them all.
func bumpOrganizationSnapshots(ctx context.Context, tx pgx.Tx, orgID int64) error {
	rows, err := tx.Query(ctx, `SELECT id FROM projects WHERE organization_id = $1`, orgID)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := bumpSnapshot(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

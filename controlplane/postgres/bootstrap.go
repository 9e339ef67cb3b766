package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// BootstrapResult is what `controlplane bootstrap` prints: the project and fresh keys for it.
type BootstrapResult struct {
	ProjectID      int64  `json:"project_id"`
	ProjectAPIKey  string `json:"project_api_key"`
	PersonalAPIKey string `json:"personal_api_key"`
	SecretAPIKey   string `json:"secret_api_key"`
	Email          string `json:"email"`
	// Password is the console password generated for a user this call created; empty (and
	// left out) when the user existed already.
	Password string `json:"password,omitempty"`
}

// Bootstrap makes sure an organisation, an admin user with the given email and a project with
// the given name exist, then issues a new personal key with scope "*" for that user. It is
// idempotent but for the new key. The password of a user it creates is hashed with
// bcryptCost: DefaultBcryptCost, or bcrypt.MinCost in tests, where a cost-12 hash takes
// seconds under the race detector.
func Bootstrap(ctx context.Context, db *DB, bcryptCost int, email, projectName string) (*BootstrapResult, error) {
	email = strings.TrimSpace(email)
	if email == "" || !strings.Contains(email, "@") {
		return nil, controlplane.FieldError("email", "invalid_input", "Enter a valid email address.")
	}
	if projectName == "" {
		projectName = "Default Project"
	}
	res := BootstrapResult{Email: email}
	var orgID int64
	createdUser := false
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		// Serialise concurrent bootstraps so that they agree on one organisation and project.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7100001)`); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT organization_id FROM users WHERE email = $1`, email).Scan(&orgID)
		if errors.Is(err, pgx.ErrNoRows) {
			createdUser = true
			if err := tx.QueryRow(ctx, `INSERT INTO organizations (name) VALUES ($1) RETURNING id`,
				strings.SplitN(email, "@", 2)[1]).Scan(&orgID); err != nil {
				return err
			}
			first, _, _ := strings.Cut(email, "@")
			_, err = tx.Exec(ctx, `INSERT INTO users (distinct_id, first_name, email, is_email_verified, organization_id, org_role)
				VALUES (gen_random_uuid()::text, $1, $2, true, $3, 'admin')`, first, email, orgID)
		}
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT id, api_token, secret_api_token FROM projects
			WHERE organization_id = $1 AND name = $2 ORDER BY id LIMIT 1`, orgID, projectName).
			Scan(&res.ProjectID, &res.ProjectAPIKey, &res.SecretAPIKey)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, `INSERT INTO projects (organization_id, name, api_token, secret_api_token)
				VALUES ($1, $2, $3, $4) RETURNING id, api_token, secret_api_token`,
				orgID, projectName, newToken(ProjectTokenPrefix), newToken(SecretKeyPrefix)).
				Scan(&res.ProjectID, &res.ProjectAPIKey, &res.SecretAPIKey)
			if err == nil {
				err = bumpSnapshot(ctx, tx, res.ProjectID)
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	key, err := NewAuthService(db).CreatePersonalKey(ctx, email, "bootstrap", []string{string(controlplane.ScopeAll)}, nil)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	res.PersonalAPIKey = key.Secret
	if createdUser {
		res.Password = NewPassword()
		if _, err := NewUserService(db, bcryptCost).SetPassword(ctx, email, res.Password); err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	return &res, nil
}

// CreateUser adds a user with the given email to the organisation of an existing user
// (orgOfEmail), as a member or an admin.
func CreateUser(ctx context.Context, db *DB, orgOfEmail, email, firstName string, admin bool) (*controlplane.User, error) {
	email = strings.TrimSpace(email)
	if email == "" || !strings.Contains(email, "@") {
		return nil, controlplane.FieldError("email", "invalid_input", "Enter a valid email address.")
	}
	role := controlplane.OrgRoleMember
	if admin {
		role = controlplane.OrgRoleAdmin
	}
	if firstName == "" {
		firstName, _, _ = strings.Cut(email, "@")
	}
	var u controlplane.User
	err := db.Pool.QueryRow(ctx, `INSERT INTO users (distinct_id, first_name, email, organization_id, org_role)
		SELECT gen_random_uuid()::text, $2, $3, o.organization_id, $4 FROM users o WHERE o.email = $1
		RETURNING `+strings.ReplaceAll(userColumns, "u.", ""), orgOfEmail, firstName, email, role).Scan(scanUserInto(&u)...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, controlplane.FieldError("organization_of", "invalid_input", fmt.Sprintf("No user with email %q.", orgOfEmail))
	case isUniqueViolation(err, "users_email_key"):
		return nil, controlplane.FieldError("email", "unique", "A user with this email exists already.")
	case err != nil:
		return nil, fmt.Errorf("create user: %w", err)
	}
	return &u, nil
}

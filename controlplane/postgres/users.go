package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
)

// UserService stores users' memberships, passwords and set-password tokens.
type UserService struct {
	db *DB
	// Cost is the bcrypt work factor of new password hashes.
	Cost int
	// dummyHash is compared against when an email is unknown, so that a failed login takes
	// as long whether or not the account exists.
	dummyHash []byte
}

var _ controlplane.UserService = (*UserService)(nil)

// DefaultBcryptCost is the work factor of password hashes: 12 takes a few hundred
// milliseconds on a server core, slow for guessing, fast enough for a login.
const DefaultBcryptCost = 12

// PasswordTokenTTL is how long an invitation's set-password link works: a week leaves time to
// pass it on by hand, since no mail is sent.
const PasswordTokenTTL = 7 * 24 * time.Hour

// NewUserService returns a UserService on db hashing new passwords with the bcrypt cost:
// DefaultBcryptCost in production, bcrypt.MinCost in tests that need no slow hashes.
func NewUserService(db *DB, cost int) *UserService {
	dummy, err := bcrypt.GenerateFromPassword([]byte("not a password of anyone"), cost)
	if err != nil {
		panic("bcrypt: " + err.Error()) // only for a cost out of range: a programming error
	}
	return &UserService{db: db, Cost: cost, dummyHash: dummy}
}

const activeUser = ` u.removed_at IS NULL`

// actingMemberOf is the user ctx acts as, when a member of the organisation orgID.
func actingMemberOf(ctx context.Context, orgID int64) (*controlplane.User, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err == nil && !controlplane.CanReadOrg(u, orgID) {
		err = controlplane.ErrPermissionDenied
	}
	return u, err
}

// actingAdmin is the user ctx acts as, when an admin of their organisation: the one whose
// members they invite and remove.
func actingAdmin(ctx context.Context) (*controlplane.User, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err == nil && !controlplane.CanAdminOrg(u, u.OrganizationID) {
		err = controlplane.ErrPermissionDenied
	}
	return u, err
}

// FindOrganization returns the organisation with the id, to its members.
func (s *UserService) FindOrganization(ctx context.Context, id int64) (*controlplane.Organization, error) {
	if _, err := actingMemberOf(ctx, id); err != nil {
		return nil, err
	}
	var o controlplane.Organization
	err := s.db.Pool.QueryRow(ctx, `SELECT id, uuid::text, name, created_at FROM organizations WHERE id = $1`, id).
		Scan(&o.ID, &o.UUID, &o.Name, &o.CreatedAt)
	if err != nil {
		return nil, opError("find organization", notFoundIfNoRows(err))
	}
	return &o, nil
}

// FindMembers returns a page of the organisation's active users, oldest first, to its members.
func (s *UserService) FindMembers(ctx context.Context, orgID int64, limit, offset int) ([]*controlplane.Member, int, error) {
	if _, err := actingMemberOf(ctx, orgID); err != nil {
		return nil, 0, err
	}
	var total int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM users u WHERE u.organization_id = $1 AND`+activeUser, orgID).Scan(&total); err != nil {
		return nil, 0, opError("count members", err)
	}
	rows, err := s.db.Pool.Query(ctx, `SELECT `+userColumns+`, u.created_at, u.password_hash IS NOT NULL
		FROM users u WHERE u.organization_id = $1 AND`+activeUser+` ORDER BY u.id LIMIT $2 OFFSET $3`, orgID, limit, offset)
	if err != nil {
		return nil, 0, opError("find members", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.Member, error) {
		var m controlplane.Member
		err := r.Scan(append(scanUserInto(&m.User), &m.JoinedAt, &m.HasPassword)...)
		return &m, err
	})
	if err != nil {
		return nil, 0, opError("find members", err)
	}
	return list, total, nil
}

// InviteMember creates the user in the organisation of the admin ctx acts as (or brings back
// one removed from that organisation) and issues a set-password token.
func (s *UserService) InviteMember(ctx context.Context, req controlplane.InviteRequest) (*controlplane.Invite, error) {
	actor, err := actingAdmin(ctx)
	if err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	inv := &controlplane.Invite{PasswordToken: newToken(""), ExpiresAt: s.db.Now().Add(PasswordTokenTTL), CreatedBy: actor}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		var orgID int64
		var removed *time.Time
		err := tx.QueryRow(ctx, `SELECT organization_id, removed_at FROM users WHERE lower(email) = lower($1) FOR UPDATE`, req.Email).Scan(&orgID, &removed)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = tx.QueryRow(ctx, `INSERT INTO users (distinct_id, first_name, email, organization_id, org_role)
				VALUES (gen_random_uuid()::text, $1, $2, $3, $4)
				RETURNING `+strings.ReplaceAll(userColumns, "u.", "")+`, created_at`,
				req.FirstName, req.Email, actor.OrganizationID, req.OrgRole).Scan(append(scanUserInto(&inv.User), &inv.JoinedAt)...)
		case err != nil:
		case removed != nil && orgID == actor.OrganizationID:
			err = tx.QueryRow(ctx, `UPDATE users u SET removed_at = NULL, org_role = $2, first_name = $3, password_hash = NULL
				WHERE lower(u.email) = lower($1) RETURNING `+userColumns+`, u.created_at`,
				req.Email, req.OrgRole, req.FirstName).Scan(append(scanUserInto(&inv.User), &inv.JoinedAt)...)
		default:
			return controlplane.FieldError("target_email", "unique", "A user with this email exists already.")
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO password_tokens (token_hash, user_id, created_by, expires_at) VALUES ($1, $2, $3, $4)`,
			HashKey(inv.PasswordToken), inv.User.ID, actor.ID, inv.ExpiresAt)
		return err
	})
	if err != nil {
		return nil, opError("invite member", err)
	}
	return inv, nil
}

// RemoveOrganizationMember marks the user removed from the organisation of the admin ctx acts
// as, deletes their keys (bumping the snapshots those keys reached), sessions, unused tokens
// and role memberships.
func (s *UserService) RemoveOrganizationMember(ctx context.Context, userUUID string) error {
	actor, err := actingAdmin(ctx)
	if err != nil {
		return err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		var id int64
		err := tx.QueryRow(ctx, `UPDATE users u SET removed_at = now(), password_hash = NULL
			WHERE u.uuid::text = lower($1) AND u.organization_id = $2 AND`+activeUser+` RETURNING u.id`,
			userUUID, actor.OrganizationID).Scan(&id)
		if err != nil {
			return notFoundIfNoRows(err)
		}
		if id == actor.ID {
			return controlplane.FieldError("user", "invalid_input", "You cannot remove yourself from the organisation.")
		}
		if err := deleteKeys(ctx, tx, `k.user_id = $1`, id); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM console_sessions WHERE user_id = $1`,
			`DELETE FROM password_tokens WHERE user_id = $1 AND used_at IS NULL`,
			`DELETE FROM role_memberships WHERE user_id = $1`,
		} {
			if _, err := tx.Exec(ctx, q, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return opError("remove member", err)
	}
	return nil
}

// SetPassword sets the password of the active user with the email.
func (s *UserService) SetPassword(ctx context.Context, email, password string) (*controlplane.User, error) {
	if err := controlplane.ValidatePassword(password); err != nil {
		return nil, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.Cost)
	if err != nil {
		return nil, opError("set password", err)
	}
	var u controlplane.User
	err = s.db.Pool.QueryRow(ctx, `UPDATE users u SET password_hash = $2 WHERE lower(u.email) = lower($1) AND`+activeUser+`
		RETURNING `+userColumns, strings.TrimSpace(email), string(hash)).Scan(scanUserInto(&u)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, controlplane.FieldError("email", "invalid_input", fmt.Sprintf("No user with email %q.", email))
	}
	if err != nil {
		return nil, opError("set password", err)
	}
	return &u, nil
}

var errBadPasswordToken = controlplane.FieldError("token", "invalid_token", "This link is invalid, used or expired. Ask an administrator for a new one.")

// SetPasswordWithToken spends a one-time token on setting its user's password.
func (s *UserService) SetPasswordWithToken(ctx context.Context, token, password string) (*controlplane.User, error) {
	if err := controlplane.ValidatePassword(password); err != nil {
		return nil, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.Cost)
	if err != nil {
		return nil, opError("set password", err)
	}
	var u controlplane.User
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		var userID int64
		err := tx.QueryRow(ctx, `UPDATE password_tokens SET used_at = now()
			WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2 RETURNING user_id`, HashKey(token), s.db.Now()).Scan(&userID)
		if errors.Is(err, pgx.ErrNoRows) {
			return errBadPasswordToken
		}
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `UPDATE users u SET password_hash = $2, is_email_verified = true WHERE u.id = $1 AND`+activeUser+`
			RETURNING `+userColumns, userID, string(hash)).Scan(scanUserInto(&u)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return errBadPasswordToken
		}
		return err
	})
	if err != nil {
		return nil, opError("set password", err)
	}
	return &u, nil
}

// CheckPassword returns the active user with the email when the password matches.
func (s *UserService) CheckPassword(ctx context.Context, email, password string) (*controlplane.User, error) {
	if !utf8.ValidString(email) || strings.ContainsRune(email, 0) {
		// Nobody's email, and text PostgreSQL refuses (SQLSTATE 22021): the same answer,
		// and the same cost, as an unknown email.
		_ = bcrypt.CompareHashAndPassword(s.dummyHash, []byte(password))
		return nil, controlplane.ErrBadLogin
	}
	var u controlplane.User
	var hash *string
	err := s.db.Pool.QueryRow(ctx, `SELECT `+userColumns+`, u.password_hash FROM users u WHERE lower(u.email) = lower($1) AND`+activeUser,
		strings.TrimSpace(email)).Scan(append(scanUserInto(&u), &hash)...)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, opError("check password", err)
	}
	if hash == nil {
		_ = bcrypt.CompareHashAndPassword(s.dummyHash, []byte(password)) // equal time for unknown accounts
		return nil, controlplane.ErrBadLogin
	}
	if bcrypt.CompareHashAndPassword([]byte(*hash), []byte(password)) != nil {
		return nil, controlplane.ErrBadLogin
	}
	return &u, nil
}

// NewPassword returns a generated password: 20 random base62 characters (about 119 bits).
func NewPassword() string { return newToken("")[:20] }

package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// SessionService keeps console sessions in Postgres, so that every control plane replica
// knows them and logging out ends a session everywhere.
type SessionService struct {
	db *DB
	// TTL is how long a session lives after login.
	TTL time.Duration
}

var _ controlplane.SessionService = (*SessionService)(nil)

// DefaultSessionTTL is a working week plus a weekend: long enough not to nag, short enough
// that a forgotten session on a shared machine expires.
const DefaultSessionTTL = 9 * 24 * time.Hour

// NewSessionService returns a SessionService on db.
func NewSessionService(db *DB) *SessionService {
	return &SessionService{db: db, TTL: DefaultSessionTTL}
}

// ErrNoSession is returned for a missing, unknown or expired session.
var ErrNoSession = &controlplane.Error{Kind: controlplane.NotAuthenticated, Code: "not_authenticated", Detail: "Log in to continue."}

// CreateSession starts a session for an active user; expired sessions are swept on the way.
func (s *SessionService) CreateSession(ctx context.Context, userID int64) (*controlplane.Session, string, error) {
	token := newToken("")
	sess := &controlplane.Session{CSRFToken: newToken(""), ExpiresAt: s.db.Now().Add(s.TTL)}
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at < $1`, s.db.Now()); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT `+userColumns+` FROM users u WHERE u.id = $1 AND`+activeUser, userID).Scan(scanUserInto(&sess.User)...)
		if err != nil {
			return notFoundIfNoRows(err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO console_sessions (token_hash, user_id, csrf_token, expires_at) VALUES ($1, $2, $3, $4)`,
			HashKey(token), userID, sess.CSRFToken, sess.ExpiresAt)
		return err
	})
	if err != nil {
		return nil, "", opError("create session", err)
	}
	return sess, token, nil
}

// FindSession returns the live session of a cookie token with its (active) user.
func (s *SessionService) FindSession(ctx context.Context, token string) (*controlplane.Session, error) {
	if token == "" {
		return nil, ErrNoSession
	}
	var sess controlplane.Session
	err := s.db.Pool.QueryRow(ctx, `SELECT `+userColumns+`, s.csrf_token, s.expires_at
		FROM console_sessions s JOIN users u ON u.id = s.user_id
		WHERE s.token_hash = $1 AND s.expires_at > $2 AND`+activeUser, HashKey(token), s.db.Now()).
		Scan(append(scanUserInto(&sess.User), &sess.CSRFToken, &sess.ExpiresAt)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNoSession
	}
	if err != nil {
		return nil, opError("find session", err)
	}
	return &sess, nil
}

// DeleteSession ends the session of a cookie token.
func (s *SessionService) DeleteSession(ctx context.Context, token string) error {
	if _, err := s.db.Pool.Exec(ctx, `DELETE FROM console_sessions WHERE token_hash = $1`, HashKey(token)); err != nil {
		return opError("delete session", err)
	}
	return nil
}

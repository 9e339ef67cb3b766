package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane/loginlimit"
)

// LoginFailureStore counts failed console logins for every replica (table login_failures), so
// that spreading guesses over replicas does not multiply the limit.
type LoginFailureStore struct {
	db *DB
}

var _ loginlimit.Store = (*LoginFailureStore)(nil)

// NewLoginFailureStore returns a LoginFailureStore on db.
func NewLoginFailureStore(db *DB) *LoginFailureStore { return &LoginFailureStore{db: db} }

// expiredPerFailure bounds the expired counts a failure deletes: a failure adds at most two
// rows, so a flood's rows go several times faster than they came, and no failure pays for a
// large deletion.
const expiredPerFailure = 16

// Failures reads the keys' counts of the windows starting at since or later, through the
// primary key.
func (s *LoginFailureStore) Failures(ctx context.Context, since time.Time, keys ...loginlimit.Key) ([]loginlimit.Count, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT key, window_start, failures FROM login_failures
		WHERE key = ANY($1::bigint[]) AND window_start >= $2`, int64s(keys), since)
	if err != nil {
		return nil, opError("read login failures", err)
	}
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (loginlimit.Count, error) {
		var c loginlimit.Count
		var key int64
		err := row.Scan(&key, &c.Window, &c.Failures)
		c.Key = loginlimit.Key(key)
		return c, err
	})
	if err != nil {
		return nil, opError("read login failures", err)
	}
	return counts, nil
}

// Fail adds a failure to each key's count of window, and deletes up to expiredPerFailure
// counts of windows before expired, skipping those another replica is deleting. Keys are
// locked in the order given (an address, then an email), so concurrent failures cannot
// deadlock.
func (s *LoginFailureStore) Fail(ctx context.Context, window, expired time.Time, keys ...loginlimit.Key) error {
	_, err := s.db.Pool.Exec(ctx, `WITH expired AS (
			DELETE FROM login_failures WHERE (key, window_start) IN (
				SELECT key, window_start FROM login_failures WHERE window_start < $3 ORDER BY window_start LIMIT $4 FOR UPDATE SKIP LOCKED))
		INSERT INTO login_failures (key, window_start, failures) SELECT unnest($1::bigint[]), $2, 1
		ON CONFLICT (key, window_start) DO UPDATE SET failures = login_failures.failures + 1`,
		int64s(keys), window, expired, expiredPerFailure)
	if err != nil {
		return opError("count login failure", err)
	}
	return nil
}

// Forget deletes every count of key.
func (s *LoginFailureStore) Forget(ctx context.Context, key loginlimit.Key) error {
	if _, err := s.db.Pool.Exec(ctx, `DELETE FROM login_failures WHERE key = $1`, int64(key)); err != nil {
		return opError("forget login failures", err)
	}
	return nil
}

func int64s(keys []loginlimit.Key) []int64 {
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = int64(k)
	}
	return out
}

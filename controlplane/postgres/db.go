// Package postgres implements the control plane's services on PostgreSQL with pgx: the
// schema and its embedded migrations (applied under an advisory lock); bootstrap and users;
// projects; personal API keys and tokens; flags, usage dashboards and the activity log;
// copying flags between projects (flagcopy.go);
// cohorts; annotations; roles, memberships and flag role access; the snapshots edges serve
// and the database's identity; person and group look-ups and hash-key overrides; event
// ingestion (persons, distinct ids, groups) with its dead letters; the read API over events,
// persons and groups; scheduled changes and the queue the scheduler claims them from
// (schedules.go); the failed console logins every replica counts (loginfailures.go); and
// the LISTEN loop that tells the sync service of changes. Every write that changes what
// edges serve bumps the project's snapshot version and sends a NOTIFY in the same
// transaction.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/flagedge/flagedge/controlplane"
)

// SnapshotChannel is the NOTIFY channel on which a project id is sent whenever what the
// edges serve for that project changes.
const SnapshotChannel = "flagedge_snapshot"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// DB is a connection pool with the clock the services use.
type DB struct {
	Pool *pgxpool.Pool
	// Now returns the current time; tests may replace it.
	Now func() time.Time
}

// Open connects to the database at url and checks that it answers.
func Open(ctx context.Context, url string) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return &DB{Pool: pool, Now: time.Now}, nil
}

// Close closes every connection of the pool.
func (db *DB) Close() { db.Pool.Close() }

// Ping reports whether the database answers.
func (db *DB) Ping(ctx context.Context) error { return db.Pool.Ping(ctx) }

// Migrate applies every pending migration to the database at url. Concurrent callers are
// serialised by the migration library's advisory lock.
func Migrate(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close(ctx)
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := m.LoadMigrations(sub); err != nil {
		return fmt.Errorf("migrate: load: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// inTx runs fn in a transaction, committing when it returns nil or an
// *controlplane.ApprovalRequiredError (a gated write keeps the change request it filed). When ctx carries a
// transaction (withTx: the scheduler applies a change inside the transaction that claims
// it), fn runs in a savepoint of that one instead, so that the write commits or rolls back
// with the claim and a failed write leaves the claim usable.
func (db *DB) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	var tx pgx.Tx
	var err error
	if outer, ok := ctx.Value(txKey{}).(pgx.Tx); ok {
		tx, err = outer.Begin(ctx)
	} else {
		tx, err = db.Pool.Begin(ctx)
	}
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	if err := fn(tx); err != nil {
		var gated *controlplane.ApprovalRequiredError
		if errors.As(err, &gated) { // the change request the gate filed is kept (gate.go)
			if cerr := tx.Commit(ctx); cerr != nil {
				return cerr
			}
		}
		return err
	}
	return tx.Commit(ctx)
}

type txKey struct{}

// withTx returns ctx whose service writes run inside tx (see inTx), and the reads the
// permission checks make (see conn).
func withTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// dbConn is what both a pool and a transaction run queries on.
type dbConn interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// conn is what a read runs on: the transaction ctx carries, else the pool. The reads of the
// permission checks use it, so that the scheduler, which holds its claim and the flag's row
// lock in one connection while it applies a change, never waits for a second connection of
// the pool: requests waiting on that lock could hold all the others.
func (db *DB) conn(ctx context.Context) dbConn {
	if tx, ok := ctx.Value(txKey{}).(pgx.Tx); ok {
		return tx
	}
	return db.Pool
}

// bumpSnapshot increments the project's snapshot version and notifies listeners; the
// notification is delivered when the transaction commits.
func bumpSnapshot(ctx context.Context, tx pgx.Tx, projectID int64) error {
	_, err := bumpSnapshotVersion(ctx, tx, projectID)
	return err
}

// bumpSnapshotVersion is bumpSnapshot that returns the new version: the first version of the
// project that contains what tx writes, which the API tells the writer so that it can wait for
// its change to reach the edges.
func bumpSnapshotVersion(ctx context.Context, tx pgx.Tx, projectID int64) (int64, error) {
	var version int64
	err := tx.QueryRow(ctx, `
		WITH bumped AS (
			UPDATE projects SET snapshot_version = snapshot_version + 1 WHERE id = $1
			RETURNING id, snapshot_version)
		SELECT snapshot_version, pg_notify($2, id::text || ':' || snapshot_version::text) FROM bumped`,
		projectID, SnapshotChannel).Scan(&version, nil)
	if err != nil {
		return 0, fmt.Errorf("bump snapshot: %w", err)
	}
	return version, nil
}

// snapshotVersion reads the project's current snapshot version in tx: the version a write
// that does not bump it names (a flag update that changes nothing, an annotation, a scheduled
// change's outcome), as that version holds what the write leaves.
func snapshotVersion(ctx context.Context, tx pgx.Tx, projectID int64) (int64, error) {
	var version int64
	if err := tx.QueryRow(ctx, `SELECT snapshot_version FROM projects WHERE id = $1`, projectID).Scan(&version); err != nil {
		return 0, fmt.Errorf("read snapshot version: %w", err)
	}
	return version, nil
}

const uniqueViolation = "23505"

// isUniqueViolation reports whether err is a unique violation of the named constraint.
func isUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == uniqueViolation && pgErr.ConstraintName == constraint
}

// notFoundIfNoRows maps pgx.ErrNoRows to controlplane.ErrNotFound.
func notFoundIfNoRows(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return controlplane.ErrNotFound
	}
	return err
}

// opError wraps err with the operation's name, and as controlplane.ErrUnstorable when
// PostgreSQL refused a value for what it is (SQLSTATE class 22, data exception, or 54,
// program limit exceeded): the request's input, not the database, is at fault. The cause
// stays in the chain for the logs.
func opError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "54")) {
		return fmt.Errorf("%s: %w: %w", op, controlplane.ErrUnstorable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

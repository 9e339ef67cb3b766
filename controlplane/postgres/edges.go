package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flagedge/flagedge/controlplane"
)

// EdgeService stores the edges' credentials.
type EdgeService struct {
	db *DB
}

var _ controlplane.EdgeService = (*EdgeService)(nil)

// NewEdgeService returns an EdgeService on db.
func NewEdgeService(db *DB) *EdgeService { return &EdgeService{db: db} }

// edgeTokenPrefix marks edge tokens, as phx_ marks personal keys, so a leaked one is
// recognisable.
const edgeTokenPrefix = "fle_"

// maxEdgeProjects bounds the projects one edge is scoped to: the scope is checked on every
// sync call by a linear search, and an edge serving more projects than this is better
// unscoped.
const maxEdgeProjects = 1000

// CreateEdge issues a credential to a new edge, scoped to projects unless nil.
func (s *EdgeService) CreateEdge(ctx context.Context, name string, projects []int64) (*controlplane.Edge, string, error) {
	if name == "" || len(name) > 200 {
		return nil, "", controlplane.FieldError("name", "invalid_input", "An edge name is 1 to 200 characters.")
	}
	if projects != nil {
		projects = slices.Compact(slices.Sorted(slices.Values(projects)))
		if len(projects) == 0 || len(projects) > maxEdgeProjects {
			return nil, "", controlplane.FieldError("projects", "invalid_input", fmt.Sprintf("An edge is scoped to 1 to %d projects.", maxEdgeProjects))
		}
		var missing []int64
		err := s.db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(u.id ORDER BY u.id), '{}') FROM unnest($1::bigint[]) AS u(id)
			WHERE NOT EXISTS (SELECT 1 FROM projects p WHERE p.id = u.id)`, projects).Scan(&missing)
		if err != nil {
			return nil, "", fmt.Errorf("create edge: %w", err)
		}
		if len(missing) > 0 {
			return nil, "", controlplane.FieldError("projects", "invalid_input", fmt.Sprintf("There is no project %d.", missing[0]))
		}
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, "", err
	}
	token := edgeTokenPrefix + fmt.Sprintf("%x", secret)
	sum := sha256.Sum256([]byte(token))
	e := &controlplane.Edge{Name: name, Projects: projects}
	err := s.db.Pool.QueryRow(ctx, `INSERT INTO edges (name, token_sha256, project_ids) VALUES ($1, $2, $3) RETURNING id::text, created_at`,
		name, sum[:], projects).Scan(&e.ID, &e.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return nil, "", controlplane.FieldError("name", "unique", "There is already a live edge with this name; revoke it first.")
	}
	if err != nil {
		return nil, "", fmt.Errorf("create edge: %w", err)
	}
	return e, token, nil
}

// FindEdges lists every edge, oldest first.
func (s *EdgeService) FindEdges(ctx context.Context) ([]*controlplane.Edge, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT id::text, name, project_ids, created_at, revoked_at FROM edges ORDER BY created_at, name`)
	if err != nil {
		return nil, fmt.Errorf("find edges: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*controlplane.Edge, error) {
		e := &controlplane.Edge{}
		return e, row.Scan(&e.ID, &e.Name, &e.Projects, &e.CreatedAt, &e.RevokedAt)
	})
}

// RevokeEdge revokes the live edge named name. Control-plane replicas notice within their
// refresh interval and close its streams.
func (s *EdgeService) RevokeEdge(ctx context.Context, name string) error {
	tag, err := s.db.Pool.Exec(ctx, `UPDATE edges SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL`, name)
	if err != nil {
		return fmt.Errorf("revoke edge: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return controlplane.ErrNotFound
	}
	return nil
}

// LiveEdgeTokens returns the live edges by the hash of their token.
func (s *EdgeService) LiveEdgeTokens(ctx context.Context) (map[[sha256.Size]byte]*controlplane.Edge, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT token_sha256, id::text, name, project_ids, created_at FROM edges WHERE revoked_at IS NULL`)
	if err != nil {
		return nil, fmt.Errorf("live edges: %w", err)
	}
	defer rows.Close()
	out := map[[sha256.Size]byte]*controlplane.Edge{}
	for rows.Next() {
		var sum []byte
		e := &controlplane.Edge{}
		if err := rows.Scan(&sum, &e.ID, &e.Name, &e.Projects, &e.CreatedAt); err != nil {
			return nil, fmt.Errorf("live edges: %w", err)
		}
		if len(sum) != sha256.Size {
			continue // not a hash this code wrote: it matches no token
		}
		out[[sha256.Size]byte(sum)] = e
	}
	return out, rows.Err()
}

package controlplane

import (
	"context"
	"crypto/sha256"
	"slices"
	"time"
)

// Edge is an edge the control plane knows, by the credential it was issued.
type Edge struct {
	ID   string // uuid
	Name string
	// Projects are the only projects the edge is served (snapshots, membership filters,
	// look-ups, ingestion), so that a credential handed to one tenant's edge reveals nothing
	// of the others; nil serves every project.
	Projects  []int64
	CreatedAt time.Time
	RevokedAt *time.Time
}

// Serves reports whether the edge is served the project.
func (e *Edge) Serves(projectID int64) bool {
	return e.Projects == nil || slices.Contains(e.Projects, projectID)
}

// EdgeService issues and revokes the edges' credentials. A token is shown once, when it is
// created; only its SHA-256 is stored.
type EdgeService interface {
	// CreateEdge issues a credential to a new edge named name (unique among live edges),
	// served only the projects given (which must exist), or every project when nil.
	CreateEdge(ctx context.Context, name string, projects []int64) (edge *Edge, token string, err error)
	// FindEdges lists every edge, live and revoked, oldest first.
	FindEdges(ctx context.Context) ([]*Edge, error)
	// RevokeEdge revokes the live edge named name; NotFound when there is none.
	RevokeEdge(ctx context.Context, name string) error
	// LiveEdgeTokens returns the live edges by the SHA-256 of their token.
	LiveEdgeTokens(ctx context.Context) (map[[sha256.Size]byte]*Edge, error)
}

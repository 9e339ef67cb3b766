package controlplane

import (
	"context"
	"crypto/sha256"
	"time"
)

// Edge is an edge the control plane knows, by the credential it was issued.
type Edge struct {
	ID        string // uuid
	Name      string
	CreatedAt time.Time
	RevokedAt *time.Time
}

// EdgeService issues and revokes the edges' credentials. A token is shown once, when it is
// created; only its SHA-256 is stored.
type EdgeService interface {
	// CreateEdge issues a credential to a new edge named name (unique among live edges).
	CreateEdge(ctx context.Context, name string) (edge *Edge, token string, err error)
	// FindEdges lists every edge, live and revoked, oldest first.
	FindEdges(ctx context.Context) ([]*Edge, error)
	// RevokeEdge revokes the live edge named name; NotFound when there is none.
	RevokeEdge(ctx context.Context, name string) error
	// LiveEdgeTokens returns the live edges by the SHA-256 of their token.
	LiveEdgeTokens(ctx context.Context) (map[[sha256.Size]byte]*Edge, error)
}

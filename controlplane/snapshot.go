package controlplane

import (
	"context"
	"encoding/json"
	"time"

	"github.com/flagedge/flagedge/shared/flags"
)

// ProjectSnapshot is everything an edge needs to serve one project, at one version.
type ProjectSnapshot struct {
	ProjectID         int64
	Version           int64
	Name              string
	APIToken          string
	SecretTokenSHA256 []byte
	// ReadKeySHA256 are the hashes of the personal keys that may read flag definitions.
	ReadKeySHA256 [][]byte
	// OtherKeySHA256 are the hashes of the personal keys that reach the project without
	// the right to read flag definitions.
	OtherKeySHA256 [][]byte
	Flags          []flags.FlagDefinition
	Cohorts        []flags.CohortDefinition
	GroupTypes     []GroupType
	BuiltAt        time.Time
	ClientConfig   ClientConfig
	// Features are the project's early access features, oldest first.
	Features []SnapshotFeature
}

// SnapshotFeature is an early access feature as edges serve it.
type SnapshotFeature struct {
	ID, Name, Description, Stage, DocumentationURL string
	FlagKey                                        string // "" when it has no flag
	CreatedAt                                      time.Time
}

// SnapshotStore reads what edges serve.
type SnapshotStore interface {
	// DatabaseID returns the identity of the database: versions are comparable only within
	// one database.
	DatabaseID(ctx context.Context) (string, error)
	// ProjectVersions returns the snapshot version of every project.
	ProjectVersions(ctx context.Context) (map[int64]int64, error)
	// ProjectVersion returns one project's current snapshot version; NotFound when it does
	// not exist.
	ProjectVersion(ctx context.Context, projectID int64) (int64, error)
	// BuildSnapshot reads one project consistently; NotFound when it does not exist.
	BuildSnapshot(ctx context.Context, projectID int64) (*ProjectSnapshot, error)
}

// StoredPerson is what is stored about the person behind a distinct id.
type StoredPerson struct {
	ID               int64
	Properties       json.RawMessage
	StaticCohortIDs  []int64
	HashKeyOverrides map[string]string
}

// GroupRef names one group.
type GroupRef struct {
	TypeIndex int
	Key       string
}

// StoredGroup is a group's stored properties.
type StoredGroup struct {
	GroupRef
	Properties json.RawMessage
}

// PersonStore answers the edges' look-ups about persons and groups.
type PersonStore interface {
	// LookupPerson returns the person with the distinct id, or nil when there is none.
	LookupPerson(ctx context.Context, projectID int64, distinctID string) (*StoredPerson, error)
	// LookupGroups returns the groups among refs that exist.
	LookupGroups(ctx context.Context, projectID int64, refs []GroupRef) ([]StoredGroup, error)
	// SetHashKeyOverrides records hashKey for each flag that has no override yet for the
	// person (created when unknown) and returns the person's overrides.
	SetHashKeyOverrides(ctx context.Context, projectID int64, distinctID, hashKey string, flagKeys []string) (map[string]string, error)
}

package controlplane

import (
	"context"
	"encoding/json"
	"time"
)

// Event is a captured event as stored.
type Event struct {
	UUID       string
	ProjectID  int64
	Name       string
	DistinctID string
	Properties json.RawMessage
	Timestamp  time.Time
	ReceivedAt time.Time
	// Raw is the event as its transport encoded it (the sync protocol's CapturedEvent), or
	// nil when it did not come over the wire. It is what the dead-letter table keeps of an
	// event that cannot be stored, byte for byte.
	Raw []byte
	// Undecodable, when set, says why the transport could not decode the event: only Raw is
	// meaningful, and the event is dead-lettered as it is.
	Undecodable string
}

// EventBatch is the events of one project that arrived together.
type EventBatch struct {
	ProjectID           int64
	Events              []Event
	HistoricalMigration bool
	// EdgeID names the edge that forwarded the batch, recorded with its dead letters.
	EdgeID string
}

// IngestResult counts what an ingestion stored.
type IngestResult struct {
	Stored, Duplicates int
	// DeadLetters are the events refused for their content in this call and written to the
	// dead-letter table instead (not those already dead-lettered by an earlier delivery).
	DeadLetters []DeadLetter
}

// DeadLetter is an event that could not be stored because of what it contains.
type DeadLetter struct {
	ProjectID int64
	UUID      string
	// Code is PostgreSQL's SQLSTATE for the refusal, or "undecodable".
	Code   string
	Reason string
}

// EventStore stores captured events and applies them to persons and groups.
type EventStore interface {
	// Ingest stores the events (each uuid once per project) in one transaction and applies
	// the newly stored ones to persons and groups in order. An event refused for its
	// content (PostgreSQL cannot hold it) does not hold up the others: it is dead-lettered
	// and reported in the result, and the call succeeds. An error means nothing was stored
	// and the same batches may be sent again (the database was unavailable, say).
	Ingest(ctx context.Context, batches []EventBatch) (IngestResult, error)
}

// Person is a person as the read API shows it.
type Person struct {
	ID          int64
	UUID        string
	DistinctIDs []string
	Properties  json.RawMessage
	CreatedAt   time.Time
}

// Group is a group as the read API shows it.
type Group struct {
	TypeIndex  int
	Key        string
	Properties json.RawMessage
	CreatedAt  time.Time
}

// EventFilter selects events of a project, newest first.
type EventFilter struct {
	ProjectID     int64
	Event         string
	DistinctID    string
	After, Before *time.Time
	Limit, Offset int
}

// PersonFilter selects persons of a project.
type PersonFilter struct {
	ProjectID     int64
	DistinctID    string
	Search        string // in properties (email, name) and distinct ids
	Limit, Offset int
}

// GroupFilter selects groups of a project.
type GroupFilter struct {
	ProjectID     int64
	TypeIndex     *int
	Search        string
	Limit, Offset int
}

// EventReader reads what ingestion stored: events, persons and groups. Every call acts as
// the user of the context (CurrentUser), NotAuthenticated without one, and names a project
// the user must reach (CanReadOrg): PermissionDenied otherwise, whether it exists or not.
type EventReader interface {
	FindEvents(ctx context.Context, f EventFilter) ([]*Event, int, error)
	FindEventByUUID(ctx context.Context, projectID int64, uuid string) (*Event, error)
	FindPersons(ctx context.Context, f PersonFilter) ([]*Person, int, error)
	FindPersonByID(ctx context.Context, projectID, id int64) (*Person, error)
	FindGroups(ctx context.Context, f GroupFilter) ([]*Group, int, error)
}

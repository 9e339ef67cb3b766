package controlplane

import (
	"context"
	"encoding/json"
	"time"
	"unicode/utf8"
)

// Limits of an event destination's fields, checked before anything is stored.
const (
	MaxDestinationAPIKey = 256
	// MaxDestinationsPerProject bounds the copies of each event ingestion queues.
	MaxDestinationsPerProject = 10
)

// EventDestination is where a project's events are forwarded: a PostHog capture host (its
// /batch/ endpoint) and the key of the PostHog project that receives them. Every event an
// edge accepts for the project is queued for each enabled destination in the transaction
// that ingests it, and sent in order, in batches, keeping its uuid. The key is written, never
// read back through the API.
type EventDestination struct {
	ID        int64
	ProjectID int64
	URL       string
	APIKey    string
	Enabled   bool
	// PausedReason says why sending stopped until the destination is changed (the
	// destination refused the key); empty while sending. Events are still queued meanwhile.
	PausedReason string
	// LastError is the last failed attempt's error, empty after a success.
	LastError  string
	SentEvents int64
	LastSentAt *time.Time
	// Queued is how many events wait to be sent, and OldestQueuedAt when the oldest was
	// queued (nil when none).
	Queued         int64
	OldestQueuedAt *time.Time
	CreatedBy      *User
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// APIKeyHint is what the API and the console show of the key: its first and last four
// characters, or nothing of a key too short to hide anything.
func (d *EventDestination) APIKeyHint() string {
	r := []rune(d.APIKey)
	if len(r) < 12 {
		return "…"
	}
	return string(r[:4]) + "…" + string(r[len(r)-4:])
}

// EventDestinationUpdate holds the writable fields; nil means unchanged. Any update resumes a
// paused destination: changing its key or URL is how an operator answers a refusal.
type EventDestinationUpdate struct {
	URL     *string
	APIKey  *string
	Enabled *bool
}

// Validate checks the update's values: create requires url and api_key.
func (u *EventDestinationUpdate) Validate(create bool) error {
	if create {
		switch {
		case u.URL == nil:
			return FieldError("url", "required", "This field is required.")
		case u.APIKey == nil:
			return FieldError("api_key", "required", "This field is required.")
		}
	}
	if u.URL != nil {
		if _, err := WebhookTarget(*u.URL); err != nil {
			return err
		}
	}
	if u.APIKey != nil {
		if n := utf8.RuneCountInString(*u.APIKey); n == 0 || n > MaxDestinationAPIKey || TextProblem(*u.APIKey) != "" {
			return FieldError("api_key", "invalid_input", "The key must be text of 1 to 256 characters: the receiving PostHog project's key (phc_…).")
		}
	}
	return nil
}

// Apply writes the update onto d.
func (u *EventDestinationUpdate) Apply(d *EventDestination) {
	setIf(&d.URL, u.URL)
	setIf(&d.APIKey, u.APIKey)
	setIf(&d.Enabled, u.Enabled)
}

// ForwardDeadLetter is an event a destination refused for good (400 on it alone, or 413 on it
// alone), kept for an operator with the answer that refused it.
type ForwardDeadLetter struct {
	ID            int64
	DestinationID int64
	UUID          string
	// Event is the event as it was sent ({event, distinct_id, properties, timestamp, uuid}).
	Event      json.RawMessage
	StatusCode int
	Error      string
	CreatedAt  time.Time
}

// EventDestinationService manages a project's event destinations and reads the events they
// refused. Only an admin of the project's organisation (CanAdminOrg) reads or changes them,
// since a destination sends every event of the project to any address: every call acts as the
// user of the context (CurrentUser), NotAuthenticated without one, PermissionDenied for anyone
// else, whether the project exists or not.
type EventDestinationService interface {
	FindEventDestinations(ctx context.Context, projectID int64, limit, offset int) ([]*EventDestination, int, error)
	FindEventDestinationByID(ctx context.Context, projectID, id int64) (*EventDestination, error)
	// CreateEventDestination creates a destination of the project, made by the user ctx acts
	// as; it receives the events ingested from then on.
	CreateEventDestination(ctx context.Context, projectID int64, upd EventDestinationUpdate) (*EventDestination, error)
	UpdateEventDestination(ctx context.Context, projectID, id int64, upd EventDestinationUpdate) (*EventDestination, error)
	// DeleteEventDestination deletes a destination with the events still queued for it.
	DeleteEventDestination(ctx context.Context, projectID, id int64) error
	// FindForwardDeadLetters returns a page of the events the destination refused, newest
	// first, and the total.
	FindForwardDeadLetters(ctx context.Context, projectID, destinationID int64, limit, offset int) ([]*ForwardDeadLetter, int, error)
}

// ForwardEvent is a queued event, as it is sent.
type ForwardEvent struct {
	Seq        int64
	UUID       string
	Name       string
	DistinctID string
	Properties json.RawMessage
	Timestamp  time.Time
}

// ForwardBatch is a destination a dispatcher has leased, with its oldest queued events.
type ForwardBatch struct {
	DestinationID int64
	ProjectID     int64
	URL           string
	APIKey        string
	// Attempts is how many attempts failed since the destination's last success.
	Attempts int
	// Lease names the claim: only its holder records the outcome.
	Lease  string
	Events []*ForwardEvent
}

// ForwardOutcome is what became of a leased batch.
type ForwardOutcome struct {
	// Done are the events that are no longer to be sent: delivered, or refused for good and
	// kept in DeadLetters.
	Done        []int64 // their Seq
	DeadLetters []ForwardDeadLetter
	// Error is why the rest was not delivered; empty when everything was done.
	Error string
	// RetryAt is when to try the rest again (zero: at once).
	RetryAt time.Time
	// Pause, when not empty, stops the destination until it is changed (its key refused).
	Pause string
}

// SystemForwardQueue is the durable queue of events to forward that the dispatchers of every
// replica share: a destination is leased to one dispatcher at a time, so each batch is sent
// by one replica, in order. It is system-level, unchecked access: it acts for no user and
// hands out every project's events with the destinations' keys. Only the forwarding
// dispatcher (controlplane/forward), a system actor, holds it.
type SystemForwardQueue interface {
	// Claim leases, for lease, a due destination (enabled, not paused, not retrying, not
	// leased) that has events queued, and returns up to n of its oldest; nil when none.
	Claim(ctx context.Context, n int, lease time.Duration) (*ForwardBatch, error)
	// Extend moves the lease's end to lease from now, before another request of the same
	// claim; false when the claim no longer holds it (it ran out and another claim took it).
	Extend(ctx context.Context, b *ForwardBatch, lease time.Duration) (bool, error)
	// Finish records the outcome and ends the lease; an outcome whose lease ran out and was
	// taken by another claim records only the events done.
	Finish(ctx context.Context, b *ForwardBatch, o ForwardOutcome) error
	// NextDue is when Claim may next find a destination (zero time: no event queued).
	NextDue(ctx context.Context) (time.Time, error)
	// Backlog returns, per destination with events queued, how many and the age of the
	// oldest: the forwarding lag.
	Backlog(ctx context.Context) ([]ForwardBacklog, error)
}

// ForwardBacklog is one destination's queue.
type ForwardBacklog struct {
	DestinationID int64
	Events        int64
	OldestAge     time.Duration
}

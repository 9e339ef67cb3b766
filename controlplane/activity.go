package controlplane

import (
	"context"
	"time"
)

// Activity kinds.
const (
	ActivityCreated = "created"
	ActivityUpdated = "updated"
	ActivityDeleted = "deleted"
)

// Activity is one entry of a project's activity log.
type Activity struct {
	ID        string
	ProjectID int64
	User      *User // nil for changes made by the system
	Activity  string
	Scope     string // "FeatureFlag", "Annotation", …
	ItemID    string
	Detail    ActivityDetail
	CreatedAt time.Time
}

// ActivityDetail describes what changed; its JSON form is the API's.
type ActivityDetail struct {
	ID      string   `json:"id"`
	Name    string   `json:"name"`
	Changes []Change `json:"changes"`
	Merge   any      `json:"merge"`
	Trigger any      `json:"trigger"`
	ShortID *string  `json:"short_id"`
	Type    *string  `json:"type"`
}

// Change is one changed field.
type Change struct {
	Type   string `json:"type"`
	Action string `json:"action"`
	Field  string `json:"field,omitempty"`
	Before any    `json:"before"`
	After  any    `json:"after"`
}

// ActivityFilter selects activity entries of a project, newest first.
type ActivityFilter struct {
	ProjectID     int64
	Scope         string
	ItemID        string // empty means every item of the scope
	Limit, Offset int
}

// ActivityService reads the activity log.
type ActivityService interface {
	// FindActivity returns a page of a project's activity, to any member of the project's
	// organisation, as the context says (NewContextWithUser): ErrNotAuthenticated without a
	// user, ErrPermissionDenied for a project out of reach, whether it exists or not.
	FindActivity(ctx context.Context, filter ActivityFilter) ([]*Activity, int, error)
}

// Trigger says what made a change when it was not its user's own request: PostHog's
// detail.trigger of an activity entry (job_type JobScheduledChange for the scheduler).
type Trigger struct {
	JobType string `json:"job_type"`
	JobID   string `json:"job_id"`
	Payload any    `json:"payload"`
}

type triggerKey struct{}

// NewContextWithTrigger returns ctx whose writes are recorded in the activity log as made by
// the trigger (on behalf of the context's user).
func NewContextWithTrigger(ctx context.Context, t *Trigger) context.Context {
	return context.WithValue(ctx, triggerKey{}, t)
}

// TriggerFromContext returns the trigger of ctx's writes, or nil for a user's own request.
func TriggerFromContext(ctx context.Context) *Trigger {
	t, _ := ctx.Value(triggerKey{}).(*Trigger)
	return t
}

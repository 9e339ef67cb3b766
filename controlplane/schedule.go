package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// ModelFeatureFlag is the one model_name a scheduled change may name, as PostHog spells it.
const ModelFeatureFlag = "FeatureFlag"

// The operations of a scheduled change (PostHog's names).
const (
	// OpUpdateStatus enables (value true) or disables (value false) the flag.
	OpUpdateStatus = "update_status"
	// OpAddReleaseCondition appends the conditions of value.groups to the flag's.
	OpAddReleaseCondition = "add_release_condition"
	// OpUpdateVariants replaces the flag's variants (value.variants) and payloads (value.payloads).
	OpUpdateVariants = "update_variants"
)

// MaxScheduledFailures is how many transient failures (the database or a bug, not the
// change itself) a scheduled change survives: the next one marks it failed for good.
const MaxScheduledFailures = 5

// ScheduledChange is a change to a flag to be made at ScheduledAt, on behalf of the user who
// scheduled it and subject to that user's access then. ExecutedAt is set once it has been
// made or has failed for good (FailureReason says why); while it is nil, FailureReason may
// hold the last transient failure, which will be retried.
type ScheduledChange struct {
	ID            int64
	ProjectID     int64
	RecordID      string
	ModelName     string
	Payload       json.RawMessage
	ScheduledAt   time.Time
	ExecutedAt    *time.Time
	FailureReason string
	FailureCount  int
	// CreatedBy is the user who scheduled the change; nil once that user has left the
	// organisation.
	CreatedBy *User
	CreatedAt time.Time
	UpdatedAt time.Time
	// ChangeRequestID is the change request the approval gate filed when the change fell
	// due: the change waits for it, and is made (or fails) with it. "" when none.
	ChangeRequestID string
}

// AwaitsApproval reports whether the change waits for its change request.
func (c *ScheduledChange) AwaitsApproval() bool { return c.Pending() && c.ChangeRequestID != "" }

// Pending reports whether the change has still to be made.
func (c *ScheduledChange) Pending() bool { return c.ExecutedAt == nil }

// Failed reports whether the change failed for good.
func (c *ScheduledChange) Failed() bool { return c.ExecutedAt != nil && c.FailureReason != "" }

// FlagID is the id of the flag the change is for (0 when RecordID is not one).
func (c *ScheduledChange) FlagID() int64 { return flagRecordID(c.RecordID) }

// FlagID is the id of the flag the change would be for (0 when RecordID is not one).
func (n *NewScheduledChange) FlagID() int64 { return flagRecordID(n.RecordID) }

// flagRecordID reads a record_id as a flag's id: a positive integer, else 0.
func flagRecordID(recordID string) int64 {
	id, err := strconv.ParseInt(recordID, 10, 64)
	if err != nil || id <= 0 {
		return 0
	}
	return id
}

// ErrFlagNotFound is PostHog's answer to a scheduled change whose record_id is no flag of
// the project (a 400, not a 404: the change is what is addressed).
var ErrFlagNotFound = &Error{Kind: Invalid, Code: "invalid_input", Detail: "Feature flag not found"}

// JobScheduledChange is the job_type of the activity entries the scheduler writes.
const JobScheduledChange = "scheduled_change"

// Trigger is what the activity log records of a change the scheduler made, as PostHog marks
// it: the entry's user is the change's creator, its detail.trigger names the job.
func (c *ScheduledChange) Trigger() *Trigger {
	return &Trigger{JobType: JobScheduledChange, JobID: strconv.FormatInt(c.ID, 10),
		Payload: map[string]any{"scheduled_change_id": c.ID}}
}

// NewScheduledChange holds what a user gives to schedule a change.
type NewScheduledChange struct {
	RecordID    string
	ModelName   string
	Payload     json.RawMessage
	ScheduledAt *time.Time
}

// Validate checks the fields and the payload's shape; whether the flag exists and the user
// may change it is checked when it is stored.
func (n *NewScheduledChange) Validate() error {
	switch {
	case n.RecordID == "":
		return FieldError("record_id", "required", "This field is required.")
	case len(n.RecordID) > 200:
		return FieldError("record_id", "max_length", "Ensure this field has no more than 200 characters.")
	case n.ModelName == "":
		return FieldError("model_name", "required", "This field is required.")
	case n.ModelName != ModelFeatureFlag:
		return FieldError("model_name", "invalid_choice", fmt.Sprintf("%q is not a valid choice.", n.ModelName))
	case n.Payload == nil:
		return FieldError("payload", "required", "This field is required.")
	case n.ScheduledAt == nil:
		return FieldError("scheduled_at", "required", "This field is required.")
	}
	if n.FlagID() == 0 {
		return ErrFlagNotFound
	}
	_, err := ParseScheduledPayload(n.Payload)
	return err
}

// ScheduledPayload is a scheduled change's payload: an operation and its value.
type ScheduledPayload struct {
	Operation string          `json:"operation"`
	Value     json.RawMessage `json:"value"`
}

// releaseValue is the value of add_release_condition and update_variants.
type releaseValue struct {
	Groups   []json.RawMessage          `json:"groups"`
	Variants []json.RawMessage          `json:"variants"`
	Payloads map[string]json.RawMessage `json:"payloads"`
}

func payloadError(detail string) error { return FieldError("payload", "invalid_input", detail) }

// ParseScheduledPayload checks a payload's shape: a known operation and a value of its type
// (whether the result is a valid flag is known only when it is applied).
func ParseScheduledPayload(raw json.RawMessage) (*ScheduledPayload, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, payloadError("Must be a JSON object with 'operation' and 'value'.")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, payloadError("Must be a JSON object with 'operation' and 'value'.")
	}
	var p ScheduledPayload
	if err := json.Unmarshal(fields["operation"], &p.Operation); err != nil || p.Operation == "" {
		return nil, payloadError("Invalid payload: 'operation' must be one of update_status, add_release_condition, update_variants.")
	}
	value, ok := fields["value"]
	if !ok {
		return nil, payloadError("Invalid payload: 'value' is required.")
	}
	p.Value = value
	switch p.Operation {
	case OpUpdateStatus:
		var b bool
		if err := json.Unmarshal(value, &b); err != nil {
			return nil, payloadError("Invalid payload: update_status takes a boolean value.")
		}
	case OpAddReleaseCondition:
		v, err := decodeReleaseValue(value)
		if err != nil {
			return nil, err
		}
		if len(v.Groups) == 0 {
			return nil, payloadError("Invalid payload: add_release_condition takes a value with a non-empty 'groups' list.")
		}
	case OpUpdateVariants:
		v, err := decodeReleaseValue(value)
		if err != nil {
			return nil, err
		}
		if err := checkVariantSum(v.Variants); err != nil {
			return nil, err
		}
	default:
		return nil, payloadError(fmt.Sprintf("Unrecognized operation: %s", p.Operation))
	}
	return &p, nil
}

func decodeReleaseValue(raw json.RawMessage) (*releaseValue, error) {
	var v releaseValue
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(raw, &v) != nil {
		return nil, payloadError("Invalid payload: the value must be an object ('groups'; 'variants' and 'payloads').")
	}
	return &v, nil
}

// checkVariantSum refuses variants whose rollout percentages do not sum to 100, as PostHog
// does before applying update_variants.
func checkVariantSum(variants []json.RawMessage) error {
	if len(variants) == 0 {
		return nil
	}
	var sum float64
	for _, raw := range variants {
		var v struct {
			RolloutPercentage float64 `json:"rollout_percentage"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return payloadError("Invalid payload: each variant must be an object with a numeric rollout_percentage.")
		}
		sum += v.RolloutPercentage
	}
	if math.Abs(sum-100) > 1e-9 {
		return payloadError(fmt.Sprintf("Invalid variant rollout percentages: sum is %g, must be 100", sum))
	}
	return nil
}

// Update is the flag update that applies the payload to the flag as it is now: the status,
// or its filters with the conditions appended or the variants and payloads replaced (the
// other keys of the filters kept). The store validates the resulting filters as for any
// update, so a change that no longer fits the flag fails with the usual field error.
func (p *ScheduledPayload) Update(f *Flag) (FlagUpdate, error) {
	if p.Operation == OpUpdateStatus {
		var active bool
		if err := json.Unmarshal(p.Value, &active); err != nil {
			return FlagUpdate{}, payloadError("Invalid payload: update_status takes a boolean value.")
		}
		return FlagUpdate{Active: &active}, nil
	}
	v, err := decodeReleaseValue(p.Value)
	if err != nil {
		return FlagUpdate{}, err
	}
	filters := map[string]json.RawMessage{}
	if err := json.Unmarshal(f.Filters, &filters); err != nil || filters == nil {
		filters = map[string]json.RawMessage{}
	}
	switch p.Operation {
	case OpAddReleaseCondition:
		var groups []json.RawMessage
		_ = json.Unmarshal(filters["groups"], &groups) // absent or null: no conditions yet
		groups = append(groups, v.Groups...)
		if filters["groups"], err = json.Marshal(groups); err != nil {
			return FlagUpdate{}, err
		}
	case OpUpdateVariants:
		multivariate := map[string]json.RawMessage{}
		_ = json.Unmarshal(filters["multivariate"], &multivariate) // absent or null: a new one
		if multivariate == nil {
			multivariate = map[string]json.RawMessage{}
		}
		variants := v.Variants
		if variants == nil {
			variants = []json.RawMessage{}
		}
		payloads := v.Payloads
		if payloads == nil {
			payloads = map[string]json.RawMessage{}
		}
		if multivariate["variants"], err = json.Marshal(variants); err != nil {
			return FlagUpdate{}, err
		}
		if filters["multivariate"], err = json.Marshal(multivariate); err != nil {
			return FlagUpdate{}, err
		}
		if filters["payloads"], err = json.Marshal(payloads); err != nil {
			return FlagUpdate{}, err
		}
	default:
		return FlagUpdate{}, payloadError(fmt.Sprintf("Unrecognized operation: %s", p.Operation))
	}
	out, err := json.Marshal(filters)
	if err != nil {
		return FlagUpdate{}, err
	}
	return FlagUpdate{Filters: out}, nil
}

// ScheduledChangeUpdate holds the fields of a pending change that may change; nil means
// unchanged. Its flag and model never change (PostHog refuses that too).
type ScheduledChangeUpdate struct {
	Payload     json.RawMessage
	ScheduledAt *time.Time
}

// Validate checks the new payload's shape.
func (u *ScheduledChangeUpdate) Validate() error {
	if u.Payload == nil {
		return nil
	}
	_, err := ParseScheduledPayload(u.Payload)
	return err
}

// ErrScheduledChangeDone refuses to change a change that has run (PostHog's message).
var ErrScheduledChangeDone = &Error{Kind: Invalid, Code: "invalid_input", Detail: "Cannot modify a scheduled change that has already executed."}

// ScheduledChangeFilter selects a project's scheduled changes, newest scheduled_at first.
type ScheduledChangeFilter struct {
	ProjectID int64
	// ModelName and RecordID keep the changes of that model and record; nil keeps all.
	ModelName, RecordID *string
	Limit, Offset       int
}

// ScheduledChangeService manages scheduled changes for users. Creating or deleting one wakes
// the scheduler of every replica. The user is the one the context acts as
// (NewContextWithUser): every call fails with ErrNotAuthenticated without one, and with
// ErrPermissionDenied for a project that is not of the user's organisation, whether it
// exists or not.
type ScheduledChangeService interface {
	// FindScheduledChanges and FindScheduledChangeByID read the project's changes, for any
	// member of its organisation.
	FindScheduledChanges(ctx context.Context, filter ScheduledChangeFilter) ([]*ScheduledChange, int, error)
	FindScheduledChangeByID(ctx context.Context, projectID, id int64) (*ScheduledChange, error)
	// CreateScheduledChange stores a change of a flag of the project, scheduled by the user,
	// who must be allowed to change the flag (CanEditFlag); a record that is not a flag of
	// the project is an Invalid error (ErrFlagNotFound).
	CreateScheduledChange(ctx context.Context, projectID int64, n NewScheduledChange) (*ScheduledChange, error)
	// UpdateScheduledChange changes the payload or time of a pending change
	// (ErrScheduledChangeDone once it has run), for a user who may change its flag.
	UpdateScheduledChange(ctx context.Context, projectID, id int64, upd ScheduledChangeUpdate) (*ScheduledChange, error)
	// DeleteScheduledChange deletes the change: a pending one is cancelled and never runs; an
	// executed one leaves the flag as it is and only its record goes (as PostHog does). Only
	// a user who may change its flag may, unless the flag is gone.
	DeleteScheduledChange(ctx context.Context, projectID, id int64) error
}

// ScheduledChangeQueue is the scheduler's side of the stored changes: what is due, and
// running one due change at a time under a claim that no other replica can take.
type ScheduledChangeQueue interface {
	// NextDue returns how long until the earliest pending change is due (zero or less: it is
	// due), measured on the database's clock; ok is false when none is pending.
	NextDue(ctx context.Context) (wait time.Duration, ok bool, err error)
	// RunDue claims the earliest due pending change, if any, and calls apply with it in the
	// claiming transaction (writes apply makes through the services join it). When apply
	// succeeds the change is marked executed; when it fails with a domain error (not
	// Internal: the flag is gone, the payload no longer fits, the creator lost access) it is
	// marked failed for good; both commit with apply's writes. An Internal error rolls
	// everything back and is recorded as a transient failure, retried later until
	// MaxScheduledFailures. It returns the change as it now is (nil when none was due).
	RunDue(ctx context.Context, apply func(ctx context.Context, c *ScheduledChange) error) (*ScheduledChange, error)
}

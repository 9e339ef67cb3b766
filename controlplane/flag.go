package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/flagedge/flagedge/shared/flags"
)

// defaultFilters is what a flag created without filters gets: everyone, as PostHog does.
const defaultFilters = `{"groups": [{"properties": [], "rollout_percentage": null}]}`

// DefaultFilters returns the filters of a flag created without any (a new slice each time:
// the stored flag owns it).
func DefaultFilters() json.RawMessage { return json.RawMessage(defaultFilters) }

// Flag is a feature flag of a project.
type Flag struct {
	ID                         int64
	ProjectID                  int64
	Key                        string
	Name                       string
	Filters                    json.RawMessage
	Deleted                    bool
	Active                     bool
	CreatedBy                  *User
	CreatedAt                  time.Time
	UpdatedAt                  time.Time
	Version                    int
	LastModifiedBy             *User
	EnsureExperienceContinuity bool
	RollbackConditions         json.RawMessage // JSON null when unset
	PerformedRollback          bool
	Tags                       []string
	UsageDashboard             *int64
	AnalyticsDashboards        []int64
	HasEnrichedAnalytics       bool
	// EvaluationRuntime is where the flag is evaluated: "all", "client" or "server"
	// (PostHog's evaluation_runtime); edges leave it out of requests from another runtime.
	EvaluationRuntime string
	// EvaluationTags are those of the flag's tags (lower-cased) that also restrict it to
	// requests naming one of them in evaluation_contexts.
	EvaluationTags []string
	// BucketingIdentifier is how persons are bucketed: "" (PostHog's null) or "distinct_id"
	// on the distinct id, "device_id" on the request's device id.
	BucketingIdentifier string
	// Features are the flag's early access features (read-only).
	Features []FeatureSummary
	// SnapshotVersion is, after a write, the project's snapshot version that contains it (0
	// when the flag was only read): edges answering from that version or a later one serve
	// the write.
	SnapshotVersion int64
	// CanEdit is, on a flag read by FlagService.FindFlagByID, whether the user who read it may
	// change it (CanEditFlag), decided on the row read, so that showing the flag costs no
	// second look-up; false on flags read otherwise.
	CanEdit bool
}

// Simple reports whether the flag is a plain rollout to persons (one condition, no
// properties) and, if so, its rollout percentage (nil when it rolls out to everyone).
func (f *Flag) Simple() (simple bool, rollout *float64) {
	parsed, err := flags.ParseFilters(f.Filters)
	if err != nil || !parsed.IsSimple() {
		return false, nil
	}
	return true, parsed.Groups[0].RolloutPercentage
}

// FlagUpdate holds the writable fields of a flag; a nil field is left unchanged. Its JSON
// form, with the API's field names, is how a change request keeps the change it asks for.
type FlagUpdate struct {
	Name                       *string         `json:"name,omitempty"`
	Key                        *string         `json:"key,omitempty"`
	Filters                    json.RawMessage `json:"filters,omitempty"`
	Deleted                    *bool           `json:"deleted,omitempty"`
	Active                     *bool           `json:"active,omitempty"`
	CreatedAt                  *time.Time      `json:"created_at,omitempty"`
	EnsureExperienceContinuity *bool           `json:"ensure_experience_continuity,omitempty"`
	RollbackConditions         json.RawMessage `json:"rollback_conditions,omitempty"`
	PerformedRollback          *bool           `json:"performed_rollback,omitempty"`
	Tags                       *[]string       `json:"tags,omitempty"`
	AnalyticsDashboards        *[]int64        `json:"analytics_dashboards,omitempty"`
	HasEnrichedAnalytics       *bool           `json:"has_enriched_analytics,omitempty"`
	EvaluationRuntime          *string         `json:"evaluation_runtime,omitempty"`
	EvaluationTags             *[]string       `json:"evaluation_tags,omitempty"`
	BucketingIdentifier        *string         `json:"bucketing_identifier,omitempty"`
	// UsageDashboard is set by the dashboard action, never from a request body.
	UsageDashboard *int64 `json:"usage_dashboard,omitempty"`
}

var flagKeyPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// MaxFlagKeyLength is the longest key a flag may have.
const MaxFlagKeyLength = 400

// Validate checks the update; creating requires a key.
func (u *FlagUpdate) Validate(creating bool) error {
	if u.Key == nil {
		if creating {
			return FieldError("key", "required", "This field is required.")
		}
	} else {
		switch {
		case *u.Key == "":
			return FieldError("key", "blank", "This field may not be blank.")
		case len(*u.Key) > MaxFlagKeyLength:
			return FieldError("key", "max_length", "Ensure this field has no more than 400 characters.")
		case !flagKeyPattern.MatchString(*u.Key):
			return FieldError("key", "invalid_key", "Only letters, numbers, hyphens (-) & underscores (_) are allowed.")
		}
	}
	if u.Filters != nil {
		if _, err := flags.ParseFilters(u.Filters); err != nil {
			var de *flags.DefinitionError
			if errors.As(err, &de) {
				return FieldError("filters", "invalid_input", de.Msg)
			}
			return err
		}
	}
	if u.Tags != nil {
		for _, t := range *u.Tags {
			if t == "" {
				return FieldError("tags", "invalid_input", "Tags may not be blank.")
			}
		}
	}
	if r := u.EvaluationRuntime; r != nil && !slices.Contains(EvaluationRuntimes, *r) {
		return FieldError("evaluation_runtime", "invalid_choice", `"`+*r+`" is not a valid choice.`)
	}
	if b := u.BucketingIdentifier; b != nil && *b != "" && *b != "distinct_id" && *b != "device_id" {
		return FieldError("bucketing_identifier", "invalid_choice", `"`+*b+`" is not a valid choice.`)
	}
	return u.validateEvaluationTags()
}

// EvaluationRuntimes are the values of a flag's evaluation_runtime.
var EvaluationRuntimes = []string{"all", "client", "server"}

// validateEvaluationTags checks, as PostHog does, that the evaluation tags of the update are
// among the tags it sends (both compared lower-cased and trimmed): an update setting
// evaluation tags sends the tags too. It normalizes them to that form, without duplicates.
func (u *FlagUpdate) validateEvaluationTags() error {
	if u.EvaluationTags == nil {
		return nil
	}
	tags := map[string]bool{}
	if u.Tags != nil {
		for _, t := range *u.Tags {
			tags[tagify(t)] = true
		}
	}
	var invalid []string
	normalized := []string{}
	for _, t := range *u.EvaluationTags {
		t = tagify(t)
		if !tags[t] && !slices.Contains(invalid, t) {
			invalid = append(invalid, t)
		}
		if !slices.Contains(normalized, t) {
			normalized = append(normalized, t)
		}
	}
	if len(invalid) > 0 {
		slices.Sort(invalid)
		return FieldError("evaluation_tags", "invalid_input",
			"Evaluation tags must be a subset of tags. Invalid evaluation tags: "+strings.Join(invalid, ", "))
	}
	slices.Sort(normalized)
	*u.EvaluationTags = normalized
	return nil
}

// tagify is PostHog's form of a tag name for comparisons: trimmed and lower-cased.
func tagify(t string) string { return strings.ToLower(strings.TrimSpace(t)) }

// Apply writes the update onto f.
func (u *FlagUpdate) Apply(f *Flag) {
	setIf(&f.Name, u.Name)
	setIf(&f.Key, u.Key)
	if u.Filters != nil {
		f.Filters = u.Filters
	}
	setIf(&f.Deleted, u.Deleted)
	setIf(&f.Active, u.Active)
	setIf(&f.CreatedAt, u.CreatedAt)
	setIf(&f.EnsureExperienceContinuity, u.EnsureExperienceContinuity)
	if u.RollbackConditions != nil {
		f.RollbackConditions = u.RollbackConditions
	}
	setIf(&f.PerformedRollback, u.PerformedRollback)
	setIf(&f.Tags, u.Tags)
	setIf(&f.AnalyticsDashboards, u.AnalyticsDashboards)
	setIf(&f.HasEnrichedAnalytics, u.HasEnrichedAnalytics)
	setIf(&f.EvaluationRuntime, u.EvaluationRuntime)
	setIf(&f.EvaluationTags, u.EvaluationTags)
	setIf(&f.BucketingIdentifier, u.BucketingIdentifier)
	if u.UsageDashboard != nil {
		f.UsageDashboard = u.UsageDashboard
	}
}

func setIf[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// FlagFilter selects the non-deleted flags of a project, with PostHog's list filters.
type FlagFilter struct {
	ProjectID     int64
	Limit, Offset int
	// Search keeps flags whose key or name contains it, ignoring case.
	Search string
	// Active keeps only active (true) or inactive (false) flags; nil keeps both.
	Active *bool
	// Stale keeps only stale flags (?stale=true, or PostHog's ?active=STALE): older than
	// StaleAfter, and either not evaluated within it or active, fully rolled out to everyone
	// and unchanged within it.
	Stale bool
	// CreatedBy keeps the flags the user created.
	CreatedBy *int64
	// Type is "boolean" (no variants), "multivariant", "experiment" or "remote_config"
	// (flagedge has neither: none match); "" keeps all.
	Type string
	// Tags keeps flags with any of them; ExcludedKeys drops flags with those keys.
	Tags, ExcludedKeys []string
	// EvaluationRuntime keeps the flags whose evaluation_runtime is exactly it (as PostHog's
	// list does: "all" keeps only flags for all runtimes, an unknown value none).
	EvaluationRuntime string
	// HasEvaluationTags keeps flags with (true) or without (false) evaluation tags.
	HasEvaluationTags *bool
	// Order is a field to sort by (FlagOrderFields), "-" first for descending; "" is newest
	// first.
	Order string
}

// FlagOrderFields are the fields a flag list can be ordered by.
var FlagOrderFields = []string{"id", "key", "name", "active", "created_at", "updated_at", "version", "created_by"}

// FlagService manages feature flags. Every change records activity and bumps the project's
// snapshot version. The user is the one the context acts as (NewContextWithUser): every call
// fails with ErrNotAuthenticated without one, and with ErrPermissionDenied for a project that
// is not of the user's organisation, whether it exists or not, so that other organisations'
// ids cannot be probed.
type FlagService interface {
	// FindFlagByID returns a flag of the project, deleted or not, to any member of the
	// project's organisation, with whether that member may change it (Flag.CanEdit);
	// ErrNotFound when the project has no such flag.
	FindFlagByID(ctx context.Context, projectID, id int64) (*Flag, error)
	// FindFlags returns a page of the project's non-deleted flags that pass the filter, in its
	// order (newest first by default), and how many pass, to any member of the project's
	// organisation.
	FindFlags(ctx context.Context, filter FlagFilter) ([]*Flag, int, error)
	// CreateFlag creates a flag in the project, created by the user, who may then change it
	// (CanEditFlag); any member of the project's organisation may.
	CreateFlag(ctx context.Context, projectID int64, upd FlagUpdate) (*Flag, error)
	// UpdateFlag applies upd and returns the flag as it now is. Only a user who may change
	// the flag (CanEditFlag, decided on the row the update locks) may: ErrPermissionDenied
	// otherwise, ErrNotFound when the project has no such flag.
	UpdateFlag(ctx context.Context, projectID, id int64, upd FlagUpdate) (*Flag, error)
}

// FlagChanges lists the fields that differ between two versions of a flag, for the activity
// log.
func FlagChanges(before, after *Flag) []Change {
	var changes []Change
	add := func(field string, b, a any) {
		changes = append(changes, Change{Type: "FeatureFlag", Action: "changed", Field: field, Before: b, After: a})
	}
	if before.Name != after.Name {
		add("name", before.Name, after.Name)
	}
	if before.Key != after.Key {
		add("key", before.Key, after.Key)
	}
	if !jsonEqual(before.Filters, after.Filters) {
		add("filters", before.Filters, after.Filters)
	}
	if before.Deleted != after.Deleted {
		action := "changed"
		if after.Deleted {
			action = "deleted"
		}
		changes = append(changes, Change{Type: "FeatureFlag", Action: action, Field: "deleted", Before: before.Deleted, After: after.Deleted})
	}
	if before.Active != after.Active {
		add("active", before.Active, after.Active)
	}
	if !before.CreatedAt.Equal(after.CreatedAt) {
		add("created_at", before.CreatedAt, after.CreatedAt)
	}
	if before.EnsureExperienceContinuity != after.EnsureExperienceContinuity {
		add("ensure_experience_continuity", before.EnsureExperienceContinuity, after.EnsureExperienceContinuity)
	}
	if !jsonEqual(before.RollbackConditions, after.RollbackConditions) {
		add("rollback_conditions", before.RollbackConditions, after.RollbackConditions)
	}
	if before.PerformedRollback != after.PerformedRollback {
		add("performed_rollback", before.PerformedRollback, after.PerformedRollback)
	}
	if !slices.Equal(before.Tags, after.Tags) {
		add("tags", before.Tags, after.Tags)
	}
	if !slices.Equal(before.AnalyticsDashboards, after.AnalyticsDashboards) {
		add("analytics_dashboards", before.AnalyticsDashboards, after.AnalyticsDashboards)
	}
	if before.HasEnrichedAnalytics != after.HasEnrichedAnalytics {
		add("has_enriched_analytics", before.HasEnrichedAnalytics, after.HasEnrichedAnalytics)
	}
	if before.EvaluationRuntime != after.EvaluationRuntime {
		add("evaluation_runtime", before.EvaluationRuntime, after.EvaluationRuntime)
	}
	if !slices.Equal(before.EvaluationTags, after.EvaluationTags) {
		add("evaluation_tags", before.EvaluationTags, after.EvaluationTags)
	}
	if before.BucketingIdentifier != after.BucketingIdentifier {
		add("bucketing_identifier", before.BucketingIdentifier, after.BucketingIdentifier)
	}
	if (before.UsageDashboard == nil) != (after.UsageDashboard == nil) ||
		(before.UsageDashboard != nil && *before.UsageDashboard != *after.UsageDashboard) {
		add("usage_dashboard", before.UsageDashboard, after.UsageDashboard)
	}
	return changes
}

// jsonEqual reports whether two JSON documents are equal as values (key order ignored).
func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

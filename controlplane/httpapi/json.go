package httpapi

import (
	"encoding/json"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// userJSON is the API's user summary (created_by, last_modified_by, a membership's user).
type userJSON struct {
	ID              int64  `json:"id"`
	UUID            string `json:"uuid"`
	DistinctID      string `json:"distinct_id"`
	FirstName       string `json:"first_name"`
	LastName        string `json:"last_name"`
	Email           string `json:"email"`
	IsEmailVerified bool   `json:"is_email_verified"`
}

func newUserJSON(u *controlplane.User) *userJSON {
	if u == nil {
		return nil
	}
	return &userJSON{ID: u.ID, UUID: u.UUID, DistinctID: u.DistinctID, FirstName: u.FirstName, LastName: u.LastName,
		Email: u.Email, IsEmailVerified: u.IsEmailVerified}
}

// timeJSON formats times as ISO 8601 in UTC with microseconds, as PostHog does.
type timeJSON time.Time

func (t timeJSON) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(controlplane.TimeLayout) + `"`), nil
}

// optTime is t as an optional timeJSON: nil (null) when t is nil.
func optTime(t *time.Time) *timeJSON {
	if t == nil {
		return nil
	}
	j := timeJSON(*t)
	return &j
}

// flagJSON is the API's feature flag object.
type flagJSON struct {
	ID                         int64                         `json:"id"`
	Name                       string                        `json:"name"`
	Key                        string                        `json:"key"`
	Filters                    json.RawMessage               `json:"filters"`
	Deleted                    bool                          `json:"deleted"`
	Active                     bool                          `json:"active"`
	CreatedBy                  *userJSON                     `json:"created_by"`
	CreatedAt                  timeJSON                      `json:"created_at"`
	UpdatedAt                  timeJSON                      `json:"updated_at"`
	Version                    int                           `json:"version"`
	LastModifiedBy             *userJSON                     `json:"last_modified_by"`
	IsSimpleFlag               bool                          `json:"is_simple_flag"`
	RolloutPercentage          *float64                      `json:"rollout_percentage"`
	EnsureExperienceContinuity bool                          `json:"ensure_experience_continuity"`
	ExperimentSet              []int64                       `json:"experiment_set"`
	Surveys                    struct{}                      `json:"surveys"`
	Features                   []controlplane.FeatureSummary `json:"features"`
	RollbackConditions         json.RawMessage               `json:"rollback_conditions"`
	PerformedRollback          bool                          `json:"performed_rollback"`
	CanEdit                    bool                          `json:"can_edit"`
	Tags                       []string                      `json:"tags"`
	UsageDashboard             *int64                        `json:"usage_dashboard"`
	AnalyticsDashboards        []int64                       `json:"analytics_dashboards"`
	HasEnrichedAnalytics       bool                          `json:"has_enriched_analytics"`
	EvaluationRuntime          string                        `json:"evaluation_runtime"`
	EvaluationTags             []string                      `json:"evaluation_tags"`
	EvaluationContexts         []string                      `json:"evaluation_contexts"`
	BucketingIdentifier        *string                       `json:"bucketing_identifier"`
	// LastCalledAt, EvaluationCounts and Stale say how much edges evaluate the flag.
	LastCalledAt     *timeJSON        `json:"last_called_at"`
	EvaluationCounts evaluationCounts `json:"evaluation_counts"`
	Stale            bool             `json:"stale"`
}

// evaluationCounts are a flag's evaluations over the last 1, 7 and 30 days.
type evaluationCounts struct {
	Day   int64 `json:"1d"`
	Week  int64 `json:"7d"`
	Month int64 `json:"30d"`
}

func newFlagJSON(f *controlplane.Flag, canEdit bool) flagJSON {
	simple, rollout := f.Simple()
	out := flagJSON{
		ID: f.ID, Name: f.Name, Key: f.Key, Filters: f.Filters, Deleted: f.Deleted, Active: f.Active,
		CreatedBy: newUserJSON(f.CreatedBy), CreatedAt: timeJSON(f.CreatedAt), UpdatedAt: timeJSON(f.UpdatedAt),
		Version: f.Version, LastModifiedBy: newUserJSON(f.LastModifiedBy),
		IsSimpleFlag: simple, RolloutPercentage: rollout,
		EnsureExperienceContinuity: f.EnsureExperienceContinuity, ExperimentSet: []int64{},
		RollbackConditions: f.RollbackConditions, PerformedRollback: f.PerformedRollback, CanEdit: canEdit,
		Tags: nonNil(f.Tags), UsageDashboard: f.UsageDashboard, AnalyticsDashboards: nonNil(f.AnalyticsDashboards),
		HasEnrichedAnalytics: f.HasEnrichedAnalytics, Features: nonNil(f.Features),
		EvaluationRuntime: f.EvaluationRuntime, EvaluationTags: nonNil(f.EvaluationTags),
		EvaluationContexts: nonNil(f.EvaluationTags),
	}
	if f.BucketingIdentifier != "" {
		out.BucketingIdentifier = &f.BucketingIdentifier
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// projectJSON is a project as the API shows it; the secret token only to admins.
type projectJSON struct {
	ID             int64                    `json:"id"`
	UUID           string                   `json:"uuid"`
	Organization   string                   `json:"organization"`
	Name           string                   `json:"name"`
	APIToken       string                   `json:"api_token"`
	SecretAPIToken *string                  `json:"secret_api_token"`
	Timezone       string                   `json:"timezone"`
	CreatedAt      timeJSON                 `json:"created_at"`
	GroupTypes     []controlplane.GroupType `json:"group_types"`
	StoreEvents    bool                     `json:"store_events"`
	controlplane.ClientConfig
}

func newProjectJSON(p *controlplane.Project, viewer *controlplane.User) projectJSON {
	out := projectJSON{ID: p.ID, UUID: p.UUID, Organization: p.OrganizationUUID, Name: p.Name, APIToken: p.APIToken,
		Timezone: p.Timezone, CreatedAt: timeJSON(p.CreatedAt), GroupTypes: nonNil(p.GroupTypes), StoreEvents: p.StoreEvents, ClientConfig: p.ClientConfig}
	if viewer.IsAdmin() {
		out.SecretAPIToken = &p.SecretAPIToken
	}
	return out
}

// activityJSON is one activity log entry.
type activityJSON struct {
	ID        string                      `json:"id"`
	User      *activityUserJSON           `json:"user"`
	Activity  string                      `json:"activity"`
	Scope     string                      `json:"scope"`
	ItemID    string                      `json:"item_id"`
	Detail    controlplane.ActivityDetail `json:"detail"`
	CreatedAt timeJSON                    `json:"created_at"`
}

type activityUserJSON struct {
	FirstName string `json:"first_name"`
	Email     string `json:"email"`
}

func newActivityJSON(a *controlplane.Activity) activityJSON {
	out := activityJSON{ID: a.ID, Activity: a.Activity, Scope: a.Scope, ItemID: a.ItemID, Detail: a.Detail, CreatedAt: timeJSON(a.CreatedAt)}
	if a.User != nil {
		out.User = &activityUserJSON{FirstName: a.User.FirstName, Email: a.User.Email}
	}
	return out
}

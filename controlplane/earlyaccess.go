package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Stages of an early access feature, as PostHog names them.
const (
	StageDraft               = "draft"
	StageConcept             = "concept"
	StageAlpha               = "alpha"
	StageBeta                = "beta"
	StageGeneralAvailability = "general-availability"
	StageArchived            = "archived"
)

// Stages lists every stage of an early access feature.
var Stages = []string{StageDraft, StageConcept, StageAlpha, StageBeta, StageGeneralAvailability, StageArchived}

// ReleaseStage reports whether people may enrol in a feature at this stage: then its flag
// carries the enrolment super condition.
func ReleaseStage(stage string) bool {
	return stage == StageAlpha || stage == StageBeta || stage == StageGeneralAvailability
}

// EarlyAccessFeature is a feature people can opt into before it is released: posthog-js lists
// the project's features and enrols a person by setting the person property
// $feature_enrollment/<flag key>, which the feature's flag matches in its super condition.
type EarlyAccessFeature struct {
	ID               string // uuid
	ProjectID        int64
	Name             string
	Description      string
	Stage            string
	DocumentationURL string
	// FeatureFlag is the flag that enrols people; nil when it has none.
	FeatureFlag *Flag
	CreatedAt   time.Time
}

// FeatureSummary is an early access feature as a flag's "features" field lists it.
type FeatureSummary struct {
	ID               string  `json:"id"`
	Name             string  `json:"name"`
	Description      string  `json:"description"`
	Stage            string  `json:"stage"`
	DocumentationURL string  `json:"documentationUrl"`
	FlagKey          *string `json:"flagKey"`
}

// EarlyAccessFeatureUpdate holds the writable fields of a feature; nil means unchanged.
// FeatureFlagID is read on create only: the flag to link instead of creating one.
type EarlyAccessFeatureUpdate struct {
	Name             *string
	Description      *string
	Stage            *string
	DocumentationURL *string
	FeatureFlagID    *int64
}

// MaxFeatureNameLength and MaxDocumentationURLLength bound a feature's name and link.
const (
	MaxFeatureNameLength      = 200
	MaxDocumentationURLLength = 800
)

// Validate checks the update; creating requires a name and a stage.
func (u *EarlyAccessFeatureUpdate) Validate(creating bool) error {
	if creating && u.Name == nil {
		return FieldError("name", "required", "This field is required.")
	}
	if creating && u.Stage == nil {
		return FieldError("stage", "required", "This field is required.")
	}
	if u.Name != nil {
		switch {
		case strings.TrimSpace(*u.Name) == "":
			return FieldError("name", "blank", "This field may not be blank.")
		case utf8.RuneCountInString(*u.Name) > MaxFeatureNameLength:
			return FieldError("name", "max_length", fmt.Sprintf("Ensure this field has no more than %d characters.", MaxFeatureNameLength))
		}
	}
	if u.Stage != nil && !slices.Contains(Stages, *u.Stage) {
		return FieldError("stage", "invalid_choice", fmt.Sprintf("%q is not a valid choice.", *u.Stage))
	}
	if u.DocumentationURL != nil && *u.DocumentationURL != "" {
		if utf8.RuneCountInString(*u.DocumentationURL) > MaxDocumentationURLLength {
			return FieldError("documentation_url", "max_length",
				fmt.Sprintf("Ensure this field has no more than %d characters.", MaxDocumentationURLLength))
		}
		if p, err := url.Parse(*u.DocumentationURL); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return FieldError("documentation_url", "invalid", "Enter a valid URL.")
		}
	}
	return nil
}

// FeatureFlagKey derives the key of the flag a feature creates from its name, as PostHog's
// slugify does for ASCII: lower case, runs of spaces and hyphens become one hyphen, other
// characters but letters, digits and underscores are dropped, and hyphens and underscores
// are trimmed from the ends.
func FeatureFlagKey(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		case r == ' ' || r == '-' || r == '\t' || r == '\n':
			dash = true
		}
	}
	return strings.Trim(b.String(), "-_")
}

// EnrollmentProperty is the person property posthog-js sets when a person opts into (or out
// of) the feature behind the flag.
func EnrollmentProperty(flagKey string) string { return "$feature_enrollment/" + flagKey }

// WithEnrollment returns filters with the enrolment super condition on flagKey (enrolled
// people get the flag whatever the other conditions say), or without any super condition
// when enrol is false. Other members are kept as they are.
func WithEnrollment(filters json.RawMessage, flagKey string, enrol bool) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(filters) > 0 && string(filters) != "null" {
		if err := json.Unmarshal(filters, &m); err != nil {
			return nil, fmt.Errorf("flag filters: %w", err)
		}
	}
	if enrol {
		super, err := json.Marshal([]map[string]any{{
			"properties": []map[string]any{{"key": EnrollmentProperty(flagKey), "type": "person", "operator": "exact",
				"value": []string{"true"}}},
			"rollout_percentage": 100,
		}})
		if err != nil {
			return nil, err
		}
		m["super_groups"] = super
	} else {
		m["super_groups"] = json.RawMessage("null")
	}
	return json.Marshal(m)
}

// EarlyAccessFeatureService manages early access features. Creating, changing the stage of
// or deleting a feature changes its flag's super condition in the same transaction, as the
// user the context acts as (CurrentUser), NotAuthenticated without one. Every call names a
// project the user must reach (CanReadOrg): PermissionDenied otherwise, whether it exists or
// not.
type EarlyAccessFeatureService interface {
	// FindEarlyAccessFeatures returns a page of the project's features, newest first, and
	// the total.
	FindEarlyAccessFeatures(ctx context.Context, projectID int64, limit, offset int) ([]*EarlyAccessFeature, int, error)
	FindEarlyAccessFeatureByID(ctx context.Context, projectID int64, id string) (*EarlyAccessFeature, error)
	// CreateEarlyAccessFeature links the flag FeatureFlagID names (a person flag without
	// variants and without another feature) or creates one keyed from the name.
	CreateEarlyAccessFeature(ctx context.Context, projectID int64, upd EarlyAccessFeatureUpdate) (*EarlyAccessFeature, error)
	UpdateEarlyAccessFeature(ctx context.Context, projectID int64, id string, upd EarlyAccessFeatureUpdate) (*EarlyAccessFeature, error)
	// DeleteEarlyAccessFeature deletes the feature and removes the super condition from its
	// flag (the flag stays).
	DeleteEarlyAccessFeature(ctx context.Context, projectID int64, id string) error
}

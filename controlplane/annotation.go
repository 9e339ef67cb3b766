package controlplane

import (
	"context"
	"slices"
	"time"
	"unicode/utf8"
)

// Annotation scopes and creation types.
var (
	AnnotationScopes        = []string{"dashboard_item", "dashboard", "project", "organization"}
	AnnotationCreationTypes = []string{"USR", "GIT"}
)

// MaxAnnotationContent is the longest content, in characters.
const MaxAnnotationContent = 400

// Annotation is a note attached to a date, and optionally to a dashboard item.
type Annotation struct {
	ID             int64
	ProjectID      int64
	OrganizationID int64
	Content        string
	DateMarker     *time.Time
	CreationType   string
	DashboardItem  *int64
	DashboardID    *int64
	Scope          string
	Deleted        bool
	CreatedBy      *User
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// AnnotationUpdate holds the writable fields; nil means unchanged. The Set flags mark
// nullable fields that are set (possibly to null).
type AnnotationUpdate struct {
	Content          *string
	DateMarker       *time.Time
	DateMarkerSet    bool
	CreationType     *string
	DashboardItem    *int64
	DashboardItemSet bool
	DashboardID      *int64
	DashboardIDSet   bool
	Scope            *string
	Deleted          *bool
}

// Validate checks the update's values.
func (u *AnnotationUpdate) Validate() error {
	if u.Content != nil && utf8.RuneCountInString(*u.Content) > MaxAnnotationContent {
		return FieldError("content", "max_length", "Ensure this field has no more than 400 characters.")
	}
	if u.CreationType != nil && !slices.Contains(AnnotationCreationTypes, *u.CreationType) {
		return FieldError("creation_type", "invalid_choice", `"`+*u.CreationType+`" is not a valid choice: use USR or GIT.`)
	}
	if u.Scope != nil && !slices.Contains(AnnotationScopes, *u.Scope) {
		return FieldError("scope", "invalid_choice", `"`+*u.Scope+`" is not a valid choice: use dashboard_item, dashboard, project or organization.`)
	}
	return nil
}

// AnnotationFilter selects annotations visible from a project: its own and its
// organisation's organisation-scoped ones.
type AnnotationFilter struct {
	ProjectID       int64
	Search          string
	Scope           string
	DashboardItemID *int64
	After, Before   *time.Time
	Deleted         bool
	Limit, Offset   int
}

// AnnotationService manages annotations; changes are recorded in the activity log as the
// user the context acts as (CurrentUser), NotAuthenticated without one. Every call is made
// through a project, which the user must reach (CanReadOrg): PermissionDenied otherwise,
// whether it exists or not; from it are seen its own annotations and its organisation's
// organisation-scoped ones.
type AnnotationService interface {
	FindAnnotations(ctx context.Context, f AnnotationFilter) ([]*Annotation, int, error)
	// FindAnnotationByID returns an annotation visible from the project, deleted or not.
	FindAnnotationByID(ctx context.Context, projectID, id int64) (*Annotation, error)
	CreateAnnotation(ctx context.Context, projectID int64, upd AnnotationUpdate) (*Annotation, error)
	// UpdateAnnotation changes an annotation visible from the project.
	UpdateAnnotation(ctx context.Context, projectID, id int64, upd AnnotationUpdate) (*Annotation, error)
}

// Apply writes the update onto a.
func (u *AnnotationUpdate) Apply(a *Annotation) {
	setIf(&a.Content, u.Content)
	if u.DateMarkerSet {
		a.DateMarker = u.DateMarker
	}
	setIf(&a.CreationType, u.CreationType)
	if u.DashboardItemSet {
		a.DashboardItem = u.DashboardItem
	}
	if u.DashboardIDSet {
		a.DashboardID = u.DashboardID
	}
	setIf(&a.Scope, u.Scope)
	setIf(&a.Deleted, u.Deleted)
}

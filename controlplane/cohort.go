package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/flagedge/flagedge/shared/flags"
)

// Cohort is a set of persons: static (a list) or defined by a property group.
type Cohort struct {
	ID          int64
	ProjectID   int64
	Name        string
	Description string
	Filters     json.RawMessage // {"properties": <property group>}
	IsStatic    bool
	Count       *int
	Deleted     bool
	CreatedBy   *User
	CreatedAt   time.Time
}

// CohortUpdate holds a cohort's writable fields; nil means unchanged.
type CohortUpdate struct {
	Name        *string
	Description *string
	Filters     json.RawMessage
	IsStatic    *bool
	Deleted     *bool
}

// Apply writes the update onto c.
func (u *CohortUpdate) Apply(c *Cohort) {
	setIf(&c.Name, u.Name)
	setIf(&c.Description, u.Description)
	if u.Filters != nil {
		c.Filters = u.Filters
	}
	setIf(&c.IsStatic, u.IsStatic)
	setIf(&c.Deleted, u.Deleted)
}

// Validate checks the filters: a property group of person properties and cohort references.
func (u *CohortUpdate) Validate() error {
	if u.Filters == nil {
		return nil
	}
	var body struct {
		Properties *flags.PropertyGroup `json:"properties"`
	}
	if err := json.Unmarshal(u.Filters, &body); err != nil || body.Properties == nil {
		return FieldError("filters", "invalid_input", `Filters must be {"properties": {"type": "AND"|"OR", "values": [...]}}.`)
	}
	if err := validateGroup(body.Properties); err != nil {
		return FieldError("filters", "invalid_input", err.Error())
	}
	return nil
}

func validateGroup(g *flags.PropertyGroup) error {
	if g.Type != "AND" && g.Type != "OR" {
		return errors.New(`a property group's type is "AND" or "OR"`)
	}
	for _, v := range g.Values {
		switch {
		case v.Group != nil:
			if err := validateGroup(v.Group); err != nil {
				return err
			}
		case v.Property != nil:
			typ := v.Property.Type
			if typ == "" {
				typ = flags.TypePerson
			}
			if typ != flags.TypePerson && typ != flags.TypeCohort {
				return errors.New("cohorts use person properties and other cohorts only")
			}
			if v.Property.Key == "" {
				return errors.New("every property filter needs a key")
			}
			if err := flags.ValidateOperator(typ, v.Property.Operator, v.Property.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

// CohortService manages cohorts. Changes re-stream the project's snapshot.
//
// The user is the one the context acts as (NewContextWithUser): every call fails with
// ErrNotAuthenticated without one, and with ErrPermissionDenied for a project that is not of
// the user's organisation, whether it exists or not. Any member of the organisation may
// read, create and change its projects' cohorts.
type CohortService interface {
	FindCohorts(ctx context.Context, projectID int64, limit, offset int) ([]*Cohort, int, error)
	FindCohortByID(ctx context.Context, projectID, id int64) (*Cohort, error)
	// CreateCohort creates a cohort in the project, created by the user.
	CreateCohort(ctx context.Context, projectID int64, upd CohortUpdate) (*Cohort, error)
	UpdateCohort(ctx context.Context, projectID, id int64, upd CohortUpdate) (*Cohort, error)
	// CreateStaticCohort creates a static cohort holding the persons ids yields, batch by
	// batch: those for whom flag flagID of the project is enabled (changing what the flag's
	// cohorts hold takes the right to change the flag, CanEditFlag; ErrNotFound when the
	// project has no such flag).
	CreateStaticCohort(ctx context.Context, projectID, flagID int64, name string, persons func(yield func([]int64) error) error) (*Cohort, error)
	// SetCount stores a property cohort's size.
	SetCount(ctx context.Context, projectID, id int64, count int) error
}

// StoredPersonRow is one person as the flag actions scan them.
type StoredPersonRow struct {
	ID int64
	// DistinctID is the person's first distinct id (the lowest), the one hashed for rollouts.
	DistinctID    string
	Properties    json.RawMessage
	StaticCohorts []int64
}

// StoredGroupRow is one group as the flag actions scan them.
type StoredGroupRow struct {
	Key        string
	Properties json.RawMessage
}

// PersonScanner reads all persons or groups of a project in id order, batch by batch, so
// that large projects are never held in memory at once.
type PersonScanner interface {
	// ScanPersons returns up to limit persons with an id above afterID.
	ScanPersons(ctx context.Context, projectID, afterID int64, limit int) ([]StoredPersonRow, error)
	// ScanGroups returns up to limit groups of a type with a key above afterKey.
	ScanGroups(ctx context.Context, projectID int64, typeIndex int, afterKey string, limit int) ([]StoredGroupRow, error)
}

// DashboardService creates dashboards.
type DashboardService interface {
	// EnsureUsageDashboard creates the flag's usage dashboard unless it has one, and returns
	// the flag as it then is. Only a user who may change the flag may (CanEditFlag), as the
	// context says (NewContextWithUser): ErrNotAuthenticated without a user,
	// ErrPermissionDenied for a flag the user may not change or a project out of reach,
	// ErrNotFound when the project has no such flag.
	EnsureUsageDashboard(ctx context.Context, projectID, flagID int64) (*Flag, error)
}

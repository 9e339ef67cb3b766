package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

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
	// FindCohortPersons returns a page of a static cohort's members, in the order of their
	// person ids (when each person was created, not when it joined), and how many it holds; a property cohort is refused (its members are whoever
	// matches its filters now: its count says how many).
	FindCohortPersons(ctx context.Context, projectID, id int64, limit, offset int) ([]*Person, int, error)
	// AddPersonsToStaticCohort makes the persons m names members of a static cohort: the
	// persons of the project with those uuids, and the persons behind those distinct ids,
	// created (empty, as ingestion creates them) when the project has none, so that a
	// membership can be given before the user is first seen. Adding a member twice changes
	// nothing. A property cohort and a deleted one are refused, and so are person uuids
	// none of which names a person of the project (with no distinct ids), as PostHog does.
	AddPersonsToStaticCohort(ctx context.Context, projectID, id int64, m StaticCohortMembers) (StaticCohortAdded, error)
	// RemovePersonFromStaticCohort takes the person with the uuid out of a static cohort;
	// removing one that is not a member changes nothing, ErrNotFound when the project has no
	// such person.
	RemovePersonFromStaticCohort(ctx context.Context, projectID, id int64, personUUID string) error
}

// MaxStaticCohortAdd bounds the ids one request may add to a static cohort, uuids and distinct
// ids together: 10,000 distinct ids of the longest length capture keeps (200 characters) fit
// in the API's body limit, and one transaction of that size commits in well under a second.
const MaxStaticCohortAdd = 10_000

// maxDistinctIDLength is the longest distinct id stored: capture and /decide cut longer ones
// to it, so a longer one given here could never be looked up.
const maxDistinctIDLength = 200

// StaticCohortMembers names persons to add to a static cohort.
type StaticCohortMembers struct {
	// PersonUUIDs are persons of the project (PostHog's person_ids); unknown ones are left out.
	PersonUUIDs []string
	// DistinctIDs are users by their distinct id (flagedge's extension): the person behind
	// each, created when the project has none.
	DistinctIDs []string
}

// Validate checks the ids: at least one, at most MaxStaticCohortAdd, uuids well formed,
// distinct ids neither empty nor longer than capture keeps them.
func (m StaticCohortMembers) Validate() error {
	n := len(m.PersonUUIDs) + len(m.DistinctIDs)
	if n == 0 {
		return FieldError("person_ids", "required", "person_ids or distinct_ids must name at least one person.")
	}
	if n > MaxStaticCohortAdd {
		return FieldError("person_ids", "max_length", fmt.Sprintf("At most %d persons can be added at once.", MaxStaticCohortAdd))
	}
	for _, id := range m.PersonUUIDs {
		if !ValidUUID(id) {
			return FieldError("person_ids", "invalid_input", fmt.Sprintf("%.60q is not a valid UUID.", id))
		}
	}
	for _, id := range m.DistinctIDs {
		if id == "" || utf8.RuneCountInString(id) > maxDistinctIDLength {
			return FieldError("distinct_ids", "invalid_input", fmt.Sprintf("A distinct id is 1 to %d characters.", maxDistinctIDLength))
		}
	}
	return nil
}

// StaticCohortAdded is what AddPersonsToStaticCohort did.
type StaticCohortAdded struct {
	// Added counts the persons that became members (those already members are not counted).
	Added int
	// Created counts the persons created for distinct ids the project did not have.
	Created int
	// Unknown counts the person uuids that name no person of the project.
	Unknown int
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

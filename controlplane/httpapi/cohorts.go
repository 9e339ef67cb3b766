package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/flagedge/flagedge/controlplane"
)

// cohortJSON is a cohort as the API shows it.
type cohortJSON struct {
	ID          int64           `json:"id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Filters     json.RawMessage `json:"filters"`
	IsStatic    bool            `json:"is_static"`
	Count       *int            `json:"count"`
	Deleted     bool            `json:"deleted"`
	CreatedBy   *userJSON       `json:"created_by"`
	CreatedAt   timeJSON        `json:"created_at"`
}

func newCohortJSON(c *controlplane.Cohort) cohortJSON {
	return cohortJSON{ID: c.ID, Name: c.Name, Description: c.Description, Filters: c.Filters, IsStatic: c.IsStatic,
		Count: c.Count, Deleted: c.Deleted, CreatedBy: newUserJSON(c.CreatedBy), CreatedAt: timeJSON(c.CreatedAt)}
}

func (s *Server) handleListCohorts(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Cohorts.FindCohorts(r.Context(), c.project.ID, limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]cohortJSON, len(list))
	for i, co := range list {
		out[i] = newCohortJSON(co)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func decodeCohortUpdate(r *http.Request) (controlplane.CohortUpdate, error) {
	var u controlplane.CohortUpdate
	f, err := decodeObject(r)
	if err != nil {
		return u, err
	}
	for _, step := range []error{
		f.str("name", &u.Name), f.str("description", &u.Description), f.object("filters", &u.Filters),
		f.boolean("is_static", &u.IsStatic), f.boolean("deleted", &u.Deleted),
	} {
		if step != nil {
			return u, step
		}
	}
	return u, nil
}

func (s *Server) cohortID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, controlplane.ErrNotFound
	}
	return id, nil
}

func (s *Server) handleCreateCohort(r *http.Request, c *call) (answer, error) {
	upd, err := decodeCohortUpdate(r)
	if err != nil {
		return answer{}, err
	}
	co, err := s.cfg.Cohorts.CreateCohort(r.Context(), c.project.ID, upd)
	if err != nil {
		return answer{}, err
	}
	if co, err = s.withCount(r, co); err != nil {
		return answer{}, err
	}
	return created(newCohortJSON(co)), nil
}

func (s *Server) handleGetCohort(r *http.Request, c *call) (answer, error) {
	id, err := s.cohortID(r)
	if err != nil {
		return answer{}, err
	}
	co, err := s.cfg.Cohorts.FindCohortByID(r.Context(), c.project.ID, id)
	if err != nil {
		return answer{}, err
	}
	return ok(newCohortJSON(co)), nil
}

func (s *Server) handlePatchCohort(r *http.Request, c *call) (answer, error) {
	id, err := s.cohortID(r)
	if err != nil {
		return answer{}, err
	}
	upd, err := decodeCohortUpdate(r)
	if err != nil {
		return answer{}, err
	}
	co, err := s.cfg.Cohorts.UpdateCohort(r.Context(), c.project.ID, id, upd)
	if err != nil {
		return answer{}, err
	}
	if upd.Filters != nil {
		if co, err = s.withCount(r, co); err != nil {
			return answer{}, err
		}
	}
	return ok(newCohortJSON(co)), nil
}

// withCount computes and stores a property cohort's size (static cohorts count their members).
func (s *Server) withCount(r *http.Request, co *controlplane.Cohort) (*controlplane.Cohort, error) {
	if co.IsStatic || co.Deleted {
		return co, nil
	}
	p, err := s.cfg.Evaluator.Compile(r.Context(), co.ProjectID)
	if err != nil {
		return nil, err
	}
	n, err := s.cfg.Evaluator.CohortSize(r.Context(), p, co.ID)
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Cohorts.SetCount(r.Context(), co.ProjectID, co.ID, n); err != nil {
		return nil, err
	}
	co.Count = &n
	return co, nil
}

func (s *Server) handleListCohortPersons(r *http.Request, c *call) (answer, error) {
	id, err := s.cohortID(r)
	if err != nil {
		return answer{}, err
	}
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Cohorts.FindCohortPersons(r.Context(), c.project.ID, id, limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]personJSON, len(list))
	for i, p := range list {
		out[i] = newPersonJSON(p)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

// staticCohortAddedJSON is the answer of add_persons_to_static_cohort: PostHog's success, and
// what was done (flagedge's extension).
type staticCohortAddedJSON struct {
	Success        bool `json:"success"`
	PersonsAdded   int  `json:"persons_added"`
	PersonsCreated int  `json:"persons_created"`
	UnknownPersons int  `json:"unknown_person_ids"`
}

func (s *Server) handleAddPersonsToStaticCohort(r *http.Request, c *call) (answer, error) {
	id, err := s.cohortID(r)
	if err != nil {
		return answer{}, err
	}
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var m controlplane.StaticCohortMembers
	left := controlplane.MaxStaticCohortAdd
	if m.PersonUUIDs, err = f.memberIDs("person_ids", &left); err != nil {
		return answer{}, err
	}
	if m.DistinctIDs, err = f.memberIDs("distinct_ids", &left); err != nil {
		return answer{}, err
	}
	added, err := s.cfg.Cohorts.AddPersonsToStaticCohort(r.Context(), c.project.ID, id, m)
	if err != nil {
		return answer{}, err
	}
	return ok(staticCohortAddedJSON{Success: true, PersonsAdded: added.Added, PersonsCreated: added.Created, UnknownPersons: added.Unknown}), nil
}

func (s *Server) handleRemovePersonFromStaticCohort(r *http.Request, c *call) (answer, error) {
	id, err := s.cohortID(r)
	if err != nil {
		return answer{}, err
	}
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var person *string
	if err := f.str("person_id", &person); err != nil {
		return answer{}, err
	}
	if person == nil || *person == "" {
		return answer{}, controlplane.FieldError("person_id", "required", "person_id is required.")
	}
	if err := s.cfg.Cohorts.RemovePersonFromStaticCohort(r.Context(), c.project.ID, id, *person); err != nil {
		return answer{}, err
	}
	return ok(map[string]bool{"success": true}), nil
}

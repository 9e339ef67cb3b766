package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// eventJSON is a stored event.
type eventJSON struct {
	ID         string          `json:"id"`
	UUID       string          `json:"uuid"`
	Event      string          `json:"event"`
	DistinctID string          `json:"distinct_id"`
	Properties json.RawMessage `json:"properties"`
	Timestamp  timeJSON        `json:"timestamp"`
	CreatedAt  timeJSON        `json:"created_at"`
}

func newEventJSON(e *controlplane.Event) eventJSON {
	return eventJSON{ID: e.UUID, UUID: e.UUID, Event: e.Name, DistinctID: e.DistinctID, Properties: e.Properties,
		Timestamp: timeJSON(e.Timestamp), CreatedAt: timeJSON(e.ReceivedAt)}
}

// personJSON is a stored person.
type personJSON struct {
	ID          int64           `json:"id"`
	UUID        string          `json:"uuid"`
	DistinctIDs []string        `json:"distinct_ids"`
	Properties  json.RawMessage `json:"properties"`
	CreatedAt   timeJSON        `json:"created_at"`
}

func newPersonJSON(p *controlplane.Person) personJSON {
	return personJSON{ID: p.ID, UUID: p.UUID, DistinctIDs: nonNil(p.DistinctIDs), Properties: p.Properties, CreatedAt: timeJSON(p.CreatedAt)}
}

// groupJSON is a stored group.
type groupJSON struct {
	GroupTypeIndex int             `json:"group_type_index"`
	GroupKey       string          `json:"group_key"`
	GroupProps     json.RawMessage `json:"group_properties"`
	CreatedAt      timeJSON        `json:"created_at"`
}

// timeParam reads an optional ISO 8601 query parameter.
func timeParam(r *http.Request, name string) (*time.Time, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return nil, nil
	}
	t, err := parseISOTime(raw)
	if err != nil {
		return nil, controlplane.FieldError(name, "invalid_date", "Datetime has wrong format. Use ISO 8601.")
	}
	return &t, nil
}

func (s *Server) handleListEvents(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	f := controlplane.EventFilter{ProjectID: c.project.ID, Event: r.URL.Query().Get("event"),
		DistinctID: r.URL.Query().Get("distinct_id"), Limit: limit, Offset: offset}
	if f.After, err = timeParam(r, "after"); err != nil {
		return answer{}, err
	}
	if f.Before, err = timeParam(r, "before"); err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Analytics.FindEvents(r.Context(), f)
	if err != nil {
		return answer{}, err
	}
	out := make([]eventJSON, len(list))
	for i, e := range list {
		out[i] = newEventJSON(e)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func (s *Server) handleGetEvent(r *http.Request, c *call) (answer, error) {
	e, err := s.cfg.Analytics.FindEventByUUID(r.Context(), c.project.ID, r.PathValue("id"))
	if err != nil {
		return answer{}, err
	}
	return ok(newEventJSON(e)), nil
}

func (s *Server) handleListPersons(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Analytics.FindPersons(r.Context(), controlplane.PersonFilter{ProjectID: c.project.ID,
		DistinctID: r.URL.Query().Get("distinct_id"), Search: r.URL.Query().Get("search"), Limit: limit, Offset: offset})
	if err != nil {
		return answer{}, err
	}
	out := make([]personJSON, len(list))
	for i, p := range list {
		out[i] = newPersonJSON(p)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func (s *Server) handleGetPerson(r *http.Request, c *call) (answer, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return answer{}, controlplane.ErrNotFound
	}
	p, err := s.cfg.Analytics.FindPersonByID(r.Context(), c.project.ID, id)
	if err != nil {
		return answer{}, err
	}
	return ok(newPersonJSON(p)), nil
}

func (s *Server) handleListGroups(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	f := controlplane.GroupFilter{ProjectID: c.project.ID, Search: r.URL.Query().Get("search"), Limit: limit, Offset: offset}
	if raw := r.URL.Query().Get("group_type_index"); raw != "" {
		i, err := strconv.Atoi(raw)
		if err != nil || i < 0 || i > 4 {
			return answer{}, controlplane.FieldError("group_type_index", "invalid_input", "A group type index is 0 to 4.")
		}
		f.TypeIndex = &i
	}
	list, total, err := s.cfg.Analytics.FindGroups(r.Context(), f)
	if err != nil {
		return answer{}, err
	}
	out := make([]groupJSON, len(list))
	for i, g := range list {
		out[i] = groupJSON{GroupTypeIndex: g.TypeIndex, GroupKey: g.Key, GroupProps: g.Properties, CreatedAt: timeJSON(g.CreatedAt)}
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/flagedge/flagedge/controlplane"
)

// destinationJSON is the API's event destination. The key is write-only: api_key_hint shows
// enough of it (its first and last four characters) to tell which key is stored.
type destinationJSON struct {
	ID             int64     `json:"id"`
	URL            string    `json:"url"`
	APIKeyHint     string    `json:"api_key_hint"`
	Enabled        bool      `json:"enabled"`
	PausedReason   string    `json:"paused_reason"`
	LastError      string    `json:"last_error"`
	SentEvents     int64     `json:"sent_events"`
	LastSentAt     *timeJSON `json:"last_sent_at"`
	QueuedEvents   int64     `json:"queued_events"`
	OldestQueuedAt *timeJSON `json:"oldest_queued_at"`
	CreatedBy      *userJSON `json:"created_by"`
	CreatedAt      timeJSON  `json:"created_at"`
	UpdatedAt      timeJSON  `json:"updated_at"`
}

func newDestinationJSON(d *controlplane.EventDestination) destinationJSON {
	return destinationJSON{ID: d.ID, URL: d.URL, APIKeyHint: d.APIKeyHint(), Enabled: d.Enabled,
		PausedReason: d.PausedReason, LastError: d.LastError, SentEvents: d.SentEvents, LastSentAt: optTime(d.LastSentAt),
		QueuedEvents: d.Queued, OldestQueuedAt: optTime(d.OldestQueuedAt), CreatedBy: newUserJSON(d.CreatedBy),
		CreatedAt: timeJSON(d.CreatedAt), UpdatedAt: timeJSON(d.UpdatedAt)}
}

// forwardDeadLetterJSON is an event a destination refused for good.
type forwardDeadLetterJSON struct {
	ID         int64           `json:"id"`
	UUID       string          `json:"uuid"`
	Event      json.RawMessage `json:"event"`
	StatusCode int             `json:"status_code"`
	Error      string          `json:"error"`
	CreatedAt  timeJSON        `json:"created_at"`
}

func (s *Server) handleListDestinations(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.EventDestinations.FindEventDestinations(r.Context(), c.project.ID, limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]destinationJSON, len(list))
	for i, d := range list {
		out[i] = newDestinationJSON(d)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func decodeDestinationUpdate(r *http.Request) (controlplane.EventDestinationUpdate, error) {
	var u controlplane.EventDestinationUpdate
	f, err := decodeObject(r)
	if err != nil {
		return u, err
	}
	for _, step := range []error{
		f.str("url", &u.URL),
		f.str("api_key", &u.APIKey),
		f.boolean("enabled", &u.Enabled),
	} {
		if step != nil {
			return u, step
		}
	}
	return u, nil
}

func (s *Server) handleCreateDestination(r *http.Request, c *call) (answer, error) {
	upd, err := decodeDestinationUpdate(r)
	if err != nil {
		return answer{}, err
	}
	d, err := s.cfg.EventDestinations.CreateEventDestination(r.Context(), c.project.ID, upd)
	if err != nil {
		return answer{}, err
	}
	return created(newDestinationJSON(d)), nil
}

func (s *Server) handleGetDestination(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	d, err := s.cfg.EventDestinations.FindEventDestinationByID(r.Context(), c.project.ID, id)
	if err != nil {
		return answer{}, err
	}
	return ok(newDestinationJSON(d)), nil
}

func (s *Server) handlePatchDestination(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	upd, err := decodeDestinationUpdate(r)
	if err != nil {
		return answer{}, err
	}
	d, err := s.cfg.EventDestinations.UpdateEventDestination(r.Context(), c.project.ID, id, upd)
	if err != nil {
		return answer{}, err
	}
	return ok(newDestinationJSON(d)), nil
}

func (s *Server) handleDeleteDestination(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	if err := s.cfg.EventDestinations.DeleteEventDestination(r.Context(), c.project.ID, id); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

func (s *Server) handleListForwardDeadLetters(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.EventDestinations.FindForwardDeadLetters(r.Context(), c.project.ID, id, limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]forwardDeadLetterJSON, len(list))
	for i, l := range list {
		out[i] = forwardDeadLetterJSON{ID: l.ID, UUID: l.UUID, Event: l.Event, StatusCode: l.StatusCode, Error: l.Error,
			CreatedAt: timeJSON(l.CreatedAt)}
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/flagedge/flagedge/controlplane"
)

// scheduledChangeJSON is the API's scheduled change, with PostHog's fields; the recurring
// ones are always off (flagedge has one-time changes only).
type scheduledChangeJSON struct {
	ID                 int64           `json:"id"`
	TeamID             int64           `json:"team_id"`
	RecordID           string          `json:"record_id"`
	ModelName          string          `json:"model_name"`
	Payload            json.RawMessage `json:"payload"`
	ScheduledAt        timeJSON        `json:"scheduled_at"`
	ExecutedAt         *timeJSON       `json:"executed_at"`
	FailureReason      *string         `json:"failure_reason"`
	CreatedAt          timeJSON        `json:"created_at"`
	CreatedBy          *userJSON       `json:"created_by"`
	UpdatedAt          timeJSON        `json:"updated_at"`
	IsRecurring        bool            `json:"is_recurring"`
	RecurrenceInterval *string         `json:"recurrence_interval"`
	CronExpression     *string         `json:"cron_expression"`
	LastExecutedAt     *timeJSON       `json:"last_executed_at"`
	EndDate            *timeJSON       `json:"end_date"`
}

func newScheduledChangeJSON(c *controlplane.ScheduledChange) scheduledChangeJSON {
	out := scheduledChangeJSON{ID: c.ID, TeamID: c.ProjectID, RecordID: c.RecordID, ModelName: c.ModelName, Payload: c.Payload,
		ScheduledAt: timeJSON(c.ScheduledAt), CreatedAt: timeJSON(c.CreatedAt), CreatedBy: newUserJSON(c.CreatedBy),
		UpdatedAt: timeJSON(c.UpdatedAt)}
	out.ExecutedAt = optTime(c.ExecutedAt)
	if c.FailureReason != "" {
		out.FailureReason = &c.FailureReason
	}
	return out
}

func (s *Server) handleListScheduledChanges(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	q := r.URL.Query()
	f := controlplane.ScheduledChangeFilter{ProjectID: c.project.ID, Limit: limit, Offset: offset}
	if q.Has("model_name") {
		v := q.Get("model_name")
		f.ModelName = &v
	}
	if q.Has("record_id") {
		v := q.Get("record_id")
		f.RecordID = &v
	}
	list, total, err := s.cfg.Schedules.FindScheduledChanges(r.Context(), f)
	if err != nil {
		return answer{}, err
	}
	out := make([]scheduledChangeJSON, len(list))
	for i, sc := range list {
		out[i] = newScheduledChangeJSON(sc)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func (s *Server) handleCreateScheduledChange(r *http.Request, c *call) (answer, error) {
	n, err := decodeNewScheduledChange(r)
	if err != nil {
		return answer{}, err
	}
	sc, err := s.cfg.Schedules.CreateScheduledChange(r.Context(), c.project.ID, n)
	if err != nil {
		return answer{}, err
	}
	return created(newScheduledChangeJSON(sc)), nil
}

func (s *Server) handleGetScheduledChange(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	sc, err := s.cfg.Schedules.FindScheduledChangeByID(r.Context(), c.project.ID, id)
	if err != nil {
		return answer{}, err
	}
	return ok(newScheduledChangeJSON(sc)), nil
}

func (s *Server) handlePatchScheduledChange(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var upd controlplane.ScheduledChangeUpdate
	for _, step := range []error{f.object("payload", &upd.Payload), f.datetime("scheduled_at", &upd.ScheduledAt)} {
		if step != nil {
			return answer{}, step
		}
	}
	sc, err := s.cfg.Schedules.FindScheduledChangeByID(r.Context(), c.project.ID, id)
	if err != nil {
		return answer{}, err
	}
	var record, model *string
	for _, step := range []error{f.str("model_name", &model), f.recordID(&record)} {
		if step != nil {
			return answer{}, step
		}
	}
	if record != nil && *record != sc.RecordID {
		return answer{}, controlplane.FieldError("record_id", "invalid_input", "Cannot change the target record of an existing scheduled change.")
	}
	if model != nil && *model != sc.ModelName {
		return answer{}, controlplane.FieldError("model_name", "invalid_input", "Cannot change the model type of an existing scheduled change.")
	}
	sc, err = s.cfg.Schedules.UpdateScheduledChange(r.Context(), c.project.ID, id, upd)
	if err != nil {
		return answer{}, err
	}
	return ok(newScheduledChangeJSON(sc)), nil
}

func (s *Server) handleDeleteScheduledChange(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	if err := s.cfg.Schedules.DeleteScheduledChange(r.Context(), c.project.ID, id); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

// recordID reads record_id, the changed flag's id, on create and on PATCH alike: a string or
// a number, read as its text (PostHog's CharField takes both); null reads as "", no record.
func (f fields) recordID(dst **string) error {
	raw, ok := f["record_id"]
	if !ok {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return typeError("record_id", "Not a valid string.")
		}
		s = n.String()
	}
	*dst = &s
	return nil
}

// decodeNewScheduledChange reads a scheduled change to create; recurring schedules are
// refused.
func decodeNewScheduledChange(r *http.Request) (controlplane.NewScheduledChange, error) {
	var n controlplane.NewScheduledChange
	f, err := decodeObject(r)
	if err != nil {
		return n, err
	}
	var record, model *string
	var recurring *bool
	for _, step := range []error{
		f.recordID(&record),
		f.str("model_name", &model),
		f.object("payload", &n.Payload),
		f.datetime("scheduled_at", &n.ScheduledAt),
		f.boolean("is_recurring", &recurring),
	} {
		if step != nil {
			return n, step
		}
	}
	if record != nil {
		n.RecordID = *record
	}
	if model != nil {
		n.ModelName = *model
	}
	if recurring != nil && *recurring {
		return n, controlplane.FieldError("is_recurring", "invalid_input", "Recurring schedules are not supported: schedule each change.")
	}
	for _, name := range []string{"recurrence_interval", "cron_expression", "end_date"} {
		if raw, ok := f[name]; ok && !isNull(raw) {
			return n, controlplane.FieldError(name, "invalid_input", "Recurring schedules are not supported: schedule each change.")
		}
	}
	return n, nil
}

package console

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// scheduleView is one scheduled change of a flag as its page lists it.
type scheduleView struct {
	*controlplane.ScheduledChange
	Change string // what it does, in words
}

// Status is the change's state in words: pending, executed, failed, or retrying.
func (v scheduleView) Status() string {
	switch {
	case v.Failed():
		return "Failed"
	case v.Pending() && v.FailureReason != "":
		return "Retrying"
	case v.Pending():
		return "Pending"
	}
	return "Executed"
}

// describeSchedule says what a payload does.
func describeSchedule(raw json.RawMessage) string {
	p, err := controlplane.ParseScheduledPayload(raw)
	if err != nil {
		return "Unreadable change"
	}
	switch p.Operation {
	case controlplane.OpUpdateStatus:
		if string(p.Value) == "true" {
			return "Enable the flag"
		}
		return "Disable the flag"
	case controlplane.OpAddReleaseCondition:
		var v struct {
			Groups []struct {
				Properties        []json.RawMessage `json:"properties"`
				RolloutPercentage *float64          `json:"rollout_percentage"`
			} `json:"groups"`
		}
		_ = json.Unmarshal(p.Value, &v)
		var parts []string
		for _, g := range v.Groups {
			pct := "100%"
			if g.RolloutPercentage != nil {
				pct = strconv.FormatFloat(*g.RolloutPercentage, 'f', -1, 64) + "%"
			}
			if n := len(g.Properties); n > 0 {
				pct += fmt.Sprintf(" of those matching %d properties", n)
			} else {
				pct += " of everyone"
			}
			parts = append(parts, pct)
		}
		return "Add a release condition: " + strings.Join(parts, "; ")
	}
	return "Replace the variants"
}

// flagSchedules lists the flag's scheduled changes for its page.
func flagSchedules(q *request, f *flagView) []scheduleView {
	record := strconv.FormatInt(f.ID, 10)
	model := controlplane.ModelFeatureFlag
	list, _, err := q.c.cfg.Schedules.FindScheduledChanges(q.ctx, controlplane.ScheduledChangeFilter{ProjectID: f.ProjectID,
		ModelName: &model, RecordID: &record, Limit: maxListed})
	if err != nil {
		return nil
	}
	views := make([]scheduleView, len(list))
	for i, c := range list {
		views[i] = scheduleView{ScheduledChange: c, Change: describeSchedule(c.Payload)}
	}
	return views
}

// scheduleTime reads the form's time: datetime-local (with or without seconds), taken as
// UTC, or RFC 3339.
func scheduleTime(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04:05", dateLocal, time.RFC3339} {
		if t, err := time.Parse(layout, strings.TrimSpace(s)); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, controlplane.FieldError("scheduled_at", "invalid_date", "Give a date and time (UTC).")
}

// schedulePayload builds the payload of the form's change: enable, disable, or add a
// condition for a rollout percentage of everyone.
func schedulePayload(operation, rollout string) (json.RawMessage, error) {
	var p any
	switch operation {
	case "enable", "disable":
		p = map[string]any{"operation": controlplane.OpUpdateStatus, "value": operation == "enable"}
	case "condition":
		pct, err := strconv.ParseFloat(strings.TrimSpace(rollout), 64)
		if err != nil || !(pct >= 0 && pct <= 100) {
			return nil, controlplane.FieldError("rollout_percentage", "invalid_input", "Give a rollout between 0 and 100.")
		}
		p = map[string]any{"operation": controlplane.OpAddReleaseCondition,
			"value": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": pct}}}}
	default:
		return nil, controlplane.FieldError("operation", "invalid_choice", "Choose a change.")
	}
	return json.Marshal(p)
}

func (c *Console) handleScheduleChange(q *request) error {
	f, err := q.findFlag()
	if err != nil {
		return err
	}
	back := q.projectPath("/feature_flags/%d#schedule", f.ID)
	at, err := scheduleTime(q.r.PostFormValue("scheduled_at"))
	var payload json.RawMessage
	if err == nil {
		payload, err = schedulePayload(q.r.PostFormValue("operation"), q.r.PostFormValue("rollout_percentage"))
	}
	if err == nil {
		_, err = q.c.cfg.Schedules.CreateScheduledChange(q.ctx, f.ProjectID, controlplane.NewScheduledChange{
			RecordID: strconv.FormatInt(f.ID, 10), ModelName: controlplane.ModelFeatureFlag, Payload: payload, ScheduledAt: &at})
	}
	if e := invalid(err); e != nil {
		return q.redirect(back, "error", e.Detail)
	}
	if err != nil {
		return err
	}
	return q.redirect(back, "success", "Change scheduled for "+at.Format("2 Jan 2006 15:04:05")+" UTC.")
}

func (c *Console) handleCancelScheduledChange(q *request) error {
	f, err := q.findFlag()
	if err != nil {
		return err
	}
	sid, err := pathID(q.r, "sid")
	if err != nil {
		return err
	}
	sc, err := q.c.cfg.Schedules.FindScheduledChangeByID(q.ctx, f.ProjectID, sid)
	if err != nil {
		return err
	}
	if sc.RecordID != strconv.FormatInt(f.ID, 10) {
		return controlplane.ErrNotFound
	}
	back := q.projectPath("/feature_flags/%d#schedule", f.ID)
	if !sc.Pending() {
		return q.redirect(back, "error", "That change has already run.")
	}
	if err := q.c.cfg.Schedules.DeleteScheduledChange(q.ctx, f.ProjectID, sid); err != nil {
		return err
	}
	return q.redirect(back, "success", "Scheduled change cancelled.")
}

package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// addUsage fills the evaluation fields of the answers out of flags (same order).
func (s *Server) addUsage(r *http.Request, projectID int64, flags []*controlplane.Flag, out []flagJSON) error {
	if s.cfg.Usage == nil || len(flags) == 0 {
		return nil
	}
	keys := make([]string, len(flags))
	for i, f := range flags {
		keys[i] = f.Key
	}
	usage, err := s.cfg.Usage.FlagUsage(r.Context(), projectID, keys)
	if err != nil {
		return err
	}
	now := time.Now()
	for i, f := range flags {
		u := usage[f.Key]
		out[i].LastCalledAt = optTime(u.LastCalledAt)
		out[i].EvaluationCounts = evaluationCounts{Day: u.Last1d, Week: u.Last7d, Month: u.Last30d}
		out[i].Stale = !f.Deleted && f.Stale(u, now)
	}
	return nil
}

// maxEvaluationDays bounds ?days= of a flag's daily evaluations: buckets are kept 31 days.
const maxEvaluationDays = 30

// handleFlagEvaluations answers a flag's evaluations per day (UTC), oldest first, for its
// sparkline: {"results": [{"date", "count"}]}.
func (s *Server) handleFlagEvaluations(r *http.Request, c *call) (answer, error) {
	f, err := s.flagFromPath(r, c)
	if err != nil {
		return answer{}, err
	}
	days := maxEvaluationDays
	if d := r.URL.Query().Get("days"); d != "" {
		days, err = strconv.Atoi(d)
		if err != nil || days < 1 || days > maxEvaluationDays {
			return answer{}, controlplane.FieldError("days", "invalid_input", "days must be a whole number from 1 to 30.")
		}
	}
	list, err := s.cfg.Usage.DailyEvaluations(r.Context(), c.project.ID, f.Key, days)
	if err != nil {
		return answer{}, err
	}
	type day struct {
		Date  string `json:"date"`
		Count int64  `json:"count"`
	}
	out := make([]day, len(list))
	for i, d := range list {
		out[i] = day{Date: d.Date.Format(time.DateOnly), Count: d.Count}
	}
	return ok(map[string]any{"results": out}), nil
}

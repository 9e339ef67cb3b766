package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// edgeView is a connected edge as the API lists it.
type edgeView struct {
	Name               string    `json:"name"`
	EdgeID             string    `json:"edge_id"`
	Replica            string    `json:"replica"`
	ConnectedAt        time.Time `json:"connected_at"`
	Version            int64     `json:"version"`
	Lag                int64     `json:"lag"`
	LastAcknowledgedAt time.Time `json:"last_acknowledged_at"` // zero: never
}

// rolloutView is rollout_status's answer: how many of the connected edges serve a version.
type rolloutView struct {
	Version  int64      `json:"version"`
	Done     bool       `json:"done"`
	Live     int        `json:"live"`
	Total    int        `json:"total"`
	Laggards []edgeView `json:"laggards"`
}

// rolloutWait is how long a page shown after a save waits for the edges to serve it.
const rolloutWait = 3 * time.Second

// rollout answers, on a page the console redirected to after a save (?live=<the write's
// version>), how many edges serve the save; nil without one.
func (q *request) rollout(projectID int64) *rolloutView {
	version, err := strconv.ParseInt(q.r.URL.Query().Get("live"), 10, 64)
	if err != nil || version <= 0 {
		return nil
	}
	var out rolloutView
	path := fmt.Sprintf("/api/projects/%d/rollout_status/?version=%d&timeout=%s", projectID, version, rolloutWait)
	if _, err := q.apiCall("GET", path, nil, &out, http.StatusRequestTimeout); err != nil {
		return nil
	}
	return &out
}

// livePath adds to a console path the version a write answered, so that the page it leads to
// says how many edges serve it.
func livePath(path string, header http.Header) string {
	v := header.Get("X-Flagedge-Snapshot-Version")
	if v == "" {
		return path
	}
	if strings.Contains(path, "?") {
		return path + "&live=" + v
	}
	return path + "?live=" + v
}

// handleEdges lists the connected edges and the version of the project each serves.
func (c *Console) handleEdges(q *request) error {
	var out struct {
		CurrentVersion int64      `json:"current_version"`
		Results        []edgeView `json:"results"`
	}
	if err := q.api("GET", q.apiProject("/edges/"), nil, &out); err != nil {
		return err
	}
	p, err := q.page("Edges", "edges")
	if err != nil {
		return err
	}
	p.Data = out
	c.render(q.w, http.StatusOK, "edges", p)
	return nil
}

// usageView is a flag's evaluations at the edges over the last 30 days.
type usageView struct {
	LastCalledAt time.Time
	Day, Week    int64
	Month        int64
	Stale        bool
	// Bars are the sparkline's days, oldest first.
	Bars []sparkBar
}

// sparkBar is one day's bar of the sparkline, in the SVG's coordinates (a 300 by 40 box).
type sparkBar struct {
	X, Y, W, H float64
	Date       string
	Count      int64
}

// usage reads a flag's daily evaluations for its sparkline; nil when they cannot be read.
func (q *request) usage(f *flagView) *usageView {
	var out struct {
		Results []struct {
			Date  string `json:"date"`
			Count int64  `json:"count"`
		} `json:"results"`
	}
	if err := q.api("GET", q.apiProject("/feature_flags/%d/evaluations/", f.ID), nil, &out); err != nil || len(out.Results) == 0 {
		return nil
	}
	u := &usageView{LastCalledAt: f.LastCalledAt, Day: f.EvaluationCounts.Day, Week: f.EvaluationCounts.Week,
		Month: f.EvaluationCounts.Month, Stale: f.Stale}
	peak := int64(1)
	for _, d := range out.Results {
		peak = max(peak, d.Count)
	}
	w := 300 / float64(len(out.Results))
	for i, d := range out.Results {
		h := 40 * float64(d.Count) / float64(peak)
		if d.Count > 0 {
			h = max(h, 1) // a day with any evaluation shows
		}
		u.Bars = append(u.Bars, sparkBar{X: float64(i) * w, Y: 40 - h, W: w * 0.8, H: h, Date: d.Date, Count: d.Count})
	}
	return u
}

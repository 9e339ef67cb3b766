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

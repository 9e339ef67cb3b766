package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// edgeJSON is one connected edge as the project sees it.
type edgeJSON struct {
	Name               string     `json:"name"`
	EdgeID             string     `json:"edge_id"`
	Path               string     `json:"path"`
	Replica            string     `json:"replica"`
	ConnectedAt        time.Time  `json:"connected_at"`
	Version            int64      `json:"version"`
	Lag                int64      `json:"lag"`
	LastAcknowledgedAt *time.Time `json:"last_acknowledged_at"`
}

func newEdgesJSON(list []controlplane.EdgeProjectStatus) []edgeJSON {
	out := make([]edgeJSON, len(list))
	for i, e := range list {
		out[i] = edgeJSON{Name: e.Name, EdgeID: e.EdgeID, Path: e.Path, Replica: e.Replica, ConnectedAt: e.ConnectedAt, Version: e.Version,
			Lag: e.Lag, LastAcknowledgedAt: e.AckedAt}
	}
	return out
}

// handleListEdges lists the connected edges with the project's version each serves.
func (s *Server) handleListEdges(r *http.Request, c *call) (answer, error) {
	edges, err := s.cfg.EdgeSessions.FindProjectEdges(r.Context(), c.project.ID)
	if err != nil {
		return answer{}, err
	}
	return ok(map[string]any{"current_version": edges.Current, "count": len(edges.Edges),
		"results": newEdgesJSON(edges.Edges)}), nil
}

// Bounds of rollout_status's timeout.
const (
	defaultRolloutTimeout = 10 * time.Second
	maxRolloutTimeout     = 60 * time.Second
)

// handleRolloutStatus answers once every connected edge serves ?version= or later (200), or
// at ?timeout= with the edges that do not yet (408).
func (s *Server) handleRolloutStatus(r *http.Request, c *call) (answer, error) {
	q := r.URL.Query()
	version, err := strconv.ParseInt(q.Get("version"), 10, 64)
	if err != nil || version <= 0 {
		return answer{}, controlplane.FieldError("version", "invalid_input", "version must be a positive integer: the X-Flagedge-Snapshot-Version of a write.")
	}
	timeout := defaultRolloutTimeout
	if t := q.Get("timeout"); t != "" {
		timeout, err = time.ParseDuration(t)
		if secs, serr := strconv.ParseFloat(t, 64); err != nil && serr == nil {
			timeout, err = time.Duration(secs*float64(time.Second)), nil
		}
		if err != nil || timeout < 0 || timeout > maxRolloutTimeout {
			return answer{}, controlplane.FieldError("timeout", "invalid_input", "timeout must be a duration (10s, 500ms) or seconds, at most 60s.")
		}
	}
	edges, done, err := s.cfg.Rollout.Wait(r.Context(), c.project.ID, version, timeout)
	if err != nil {
		return answer{}, err
	}
	laggards := edges.Laggards(version)
	status := http.StatusOK
	if !done {
		status = http.StatusRequestTimeout
	}
	return answer{status: status, value: map[string]any{"version": version, "current_version": edges.Current, "done": done,
		"live": len(edges.Edges) - len(laggards), "total": len(edges.Edges),
		"edges": newEdgesJSON(edges.Edges), "laggards": newEdgesJSON(laggards)}}, nil
}

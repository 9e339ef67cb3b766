package console

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// Rollout waits until the connected edges serve a project's snapshot version
// (rollout.Watcher).
type Rollout interface {
	Wait(ctx context.Context, projectID, version int64, timeout time.Duration) (edges *controlplane.ProjectEdges, done bool, err error)
}

// rolloutView is how many of the connected edges serve a version.
type rolloutView struct {
	Version  int64
	Done     bool
	Live     int
	Total    int
	Laggards []controlplane.EdgeProjectStatus
}

// rolloutWait is how long a page shown after a save waits for the edges to serve it.
const rolloutWait = 3 * time.Second

// rollout answers, on a page the console redirected to after a save (?live=<the write's
// version>), how many edges serve the save; nil without one. The project is one the page
// has already found the user reaches.
func (q *request) rollout(projectID int64) *rolloutView {
	version, err := strconv.ParseInt(q.r.URL.Query().Get("live"), 10, 64)
	if err != nil || version <= 0 || q.c.cfg.Rollout == nil {
		return nil
	}
	edges, done, err := q.c.cfg.Rollout.Wait(q.ctx, projectID, version, rolloutWait)
	if err != nil {
		return nil
	}
	laggards := edges.Laggards(version)
	return &rolloutView{Version: version, Done: done, Live: len(edges.Edges) - len(laggards), Total: len(edges.Edges), Laggards: laggards}
}

// livePath adds to a console path the snapshot version a write made (0: none), so that the
// page it leads to says how many edges serve it.
func livePath(path string, version int64) string {
	if version <= 0 {
		return path
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "live=" + strconv.FormatInt(version, 10)
}

// edgesPage is the connected edges and the project's current version.
type edgesPage struct {
	CurrentVersion int64
	Results        []controlplane.EdgeProjectStatus
}

// handleEdges lists the connected edges and the version of the project each serves.
func (c *Console) handleEdges(q *request) error {
	p, err := q.page("Edges", "edges")
	if err != nil {
		return err
	}
	edges, err := q.c.cfg.EdgeSessions.FindProjectEdges(q.ctx, p.Project.ID)
	if err != nil {
		return err
	}
	p.Data = &edgesPage{CurrentVersion: edges.Current, Results: edges.Edges}
	c.render(q.w, http.StatusOK, "edges", p)
	return nil
}

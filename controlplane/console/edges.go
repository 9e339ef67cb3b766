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
	if q.c.cfg.Usage == nil {
		return nil
	}
	days, err := q.c.cfg.Usage.DailyEvaluations(q.ctx, f.ProjectID, f.Key, usageDays)
	if err != nil || len(days) == 0 {
		return nil
	}
	u := &usageView{LastCalledAt: f.LastCalledAt, Day: f.EvaluationCounts.Day, Week: f.EvaluationCounts.Week,
		Month: f.EvaluationCounts.Month, Stale: f.Stale}
	peak := int64(1)
	for _, d := range days {
		peak = max(peak, d.Count)
	}
	w := 300 / float64(len(days))
	for i, d := range days {
		h := 40 * float64(d.Count) / float64(peak)
		if d.Count > 0 {
			h = max(h, 1) // a day with any evaluation shows
		}
		u.Bars = append(u.Bars, sparkBar{X: float64(i) * w, Y: 40 - h, W: w * 0.8, H: h, Date: d.Date.Format(time.DateOnly), Count: d.Count})
	}
	return u
}

// usageDays is the sparkline's span: the evaluation buckets are kept 31 days.
const usageDays = 30

// evaluationCounts are a flag's evaluations over the last day, week and month.
type evaluationCounts struct{ Day, Week, Month int64 }

// addUsage fills the usage fields of the flags of a project (nil Usage: none).
func (q *request) addUsage(projectID int64, views []flagView) error {
	if q.c.cfg.Usage == nil || len(views) == 0 {
		return nil
	}
	keys := make([]string, len(views))
	for i, f := range views {
		keys[i] = f.Key
	}
	usage, err := q.c.cfg.Usage.FlagUsage(q.ctx, projectID, keys)
	if err != nil {
		return err
	}
	now := time.Now()
	for i := range views {
		f := &views[i]
		u := usage[f.Key]
		if u.LastCalledAt != nil {
			f.LastCalledAt = *u.LastCalledAt
		}
		f.EvaluationCounts = evaluationCounts{Day: u.Last1d, Week: u.Last7d, Month: u.Last30d}
		f.Stale = !f.Deleted && f.Flag.Stale(u, now)
	}
	return nil
}

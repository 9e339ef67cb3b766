package console

import (
	"bytes"
	"context"
	"html/template"
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
	ProjectID int64
	Version   int64
	Done      bool
	Live      int
	Total     int
	Laggards  []controlplane.EdgeProjectStatus
}

// rolloutWait is how long the rollout line waits for the edges to serve a save.
const rolloutWait = 3 * time.Second

// pendingRollout is, on a page the console redirected to after a save (?live=<the write's
// version>), the version whose rollout line the page loads after it has rendered (the
// layout's data-rollout, filled by console.js from handleRollout); nil without one. The page
// does not wait for the edges itself: its handler answers at once.
func (q *request) pendingRollout(projectID int64) *rolloutView {
	version, err := strconv.ParseInt(q.r.URL.Query().Get("live"), 10, 64)
	if err != nil || version <= 0 || q.c.cfg.Rollout == nil {
		return nil
	}
	return &rolloutView{ProjectID: projectID, Version: version}
}

// handleRollout answers the rollout line of a save, the HTML fragment that replaces a page's
// data-rollout placeholder: how many of the connected edges serve ?version=, waiting up to
// rolloutWait for them. The project is read through the services, so the user must reach it.
func (c *Console) handleRollout(q *request) error {
	project, err := q.project()
	if err != nil {
		return err
	}
	version, err := strconv.ParseInt(q.r.URL.Query().Get("version"), 10, 64)
	if err != nil || version <= 0 || c.cfg.Rollout == nil {
		return controlplane.ErrNotFound
	}
	edges, done, err := c.cfg.Rollout.Wait(q.ctx, project.ID, version, rolloutWait)
	if err != nil {
		return err
	}
	laggards := edges.Laggards(version)
	view := &rolloutView{ProjectID: project.ID, Version: version, Done: done, Live: len(edges.Edges) - len(laggards),
		Total: len(edges.Edges), Laggards: laggards}
	var buf bytes.Buffer
	if err := rolloutLine.Execute(&buf, view); err != nil {
		return err
	}
	h := q.w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	_, _ = q.w.Write(buf.Bytes()) // the client went away; nothing to do
	return nil
}

// rolloutLine is the fragment handleRollout answers.
var rolloutLine = template.Must(template.New("rollout").Parse(`<div class="flash flash-{{if .Done}}success{{else}}error{{end}}" role="status" data-rollout-done>` +
	`Live on {{.Live}} of {{.Total}} edges (version {{.Version}}){{if not .Done}}: not yet on {{range $i, $e := .Laggards}}{{if $i}}, {{end}}{{$e.Name}}{{end}}` +
	` — see <a href="/project/{{.ProjectID}}/edges">Edges</a>{{end}}.</div>`))

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

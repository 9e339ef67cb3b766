package console

import (
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// TestHistoryChart places a guardrail's history in the chart's box: time runs from the
// first point at the left edge to the last at the right; the arms' lines have a vertex per
// point, the higher mean at the top; the interval's band and the estimate cover the points
// that had an interval, a bound far beyond the latest interval's is drawn at the panel's
// edge, and the latest interval is drawn at its point too; a step the plan moved to is
// marked.
func TestHistoryChart(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	points := []controlplane.PlanPoint{
		{At: at, Control: controlplane.ArmSummary{Users: 10, Mean: 0.1}, Treatment: controlplane.ArmSummary{Users: 10, Mean: 0.2}},
		{At: at.Add(time.Minute), Control: controlplane.ArmSummary{Users: 200, Mean: 0.05}, Treatment: controlplane.ArmSummary{Users: 200, Mean: 0.1},
			Ready: true, Relative: true, Estimate: 1, Lower: -40, Upper: 42},
		{At: at.Add(2 * time.Minute), Step: 1, Control: controlplane.ArmSummary{Users: 400, Mean: 0.05}, Treatment: controlplane.ArmSummary{Users: 400, Mean: 0.15},
			Ready: true, Relative: true, Estimate: 2, Lower: 0.5, Upper: 3.5, Regression: true},
	}
	c := newHistoryChart(points)
	if c.Points != 3 || c.Control != "40.0,36.0 167.5,50.0 295.0,50.0" || c.Treatment != "40.0,8.0 167.5,36.0 295.0,22.0" {
		t.Errorf("arms: %d points, control %q, treatment %q", c.Points, c.Control, c.Treatment)
	}
	// The axis spans ±14 (4 times the latest bound of 3.5): -40 and 42 sit at the edges.
	if c.Band != "167.5,82.0 295.0,103.0 295.0,109.0 167.5,138.0" || c.Estimate != "167.5,108.0 295.0,106.0" || c.SpanLabel != "+1400%" {
		t.Errorf("interval: band %q, estimate %q, span %q", c.Band, c.Estimate, c.SpanLabel)
	}
	if c.Latest == nil || *c.Latest != (historyWhisker{X: 295, LowY: 109, HighY: 103, EstY: 106}) {
		t.Errorf("the latest interval: %+v", c.Latest)
	}
	if len(c.Steps) != 1 || c.Steps[0] != (historyStep{X: 295, Label: "step 2"}) {
		t.Errorf("steps: %+v", c.Steps)
	}
	if c.From != "Nov 27 10:00" || c.To != "Nov 27 10:02" || c.TopLabel != "0.2" {
		t.Errorf("labels: %q to %q, top %q", c.From, c.To, c.TopLabel)
	}

	one := newHistoryChart(points[:1])
	if one.Control != "167.5,36.0" || one.Band != "" || one.Estimate != "" || one.Latest != nil || one.SpanLabel != "+0.01" {
		t.Errorf("a single point without an interval: %+v", one)
	}
	if empty := newHistoryChart(nil); empty.Points != 0 || empty.Control != "" {
		t.Errorf("no points: %+v", empty)
	}
}

package console

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// historyChart is a guardrail's history drawn as an SVG of 300 by 150 (releaseplan.html
// draws the same box): above, each arm's metric over time; below, the estimated change with
// its always-valid interval as a band around it, on an axis centred on zero. Time runs from
// the first point to the last; a dashed line marks each step the plan advanced to.
type historyChart struct {
	Points int
	// Control and Treatment are the arms' polylines ("x,y x,y …"), TopLabel the metric at
	// the top of their panel.
	Control, Treatment string
	TopLabel           string
	// Band is the interval's polygon and Estimate the estimate's polyline, over the points
	// that had an interval; ZeroY places no change and SpanLabel the change at the panel's
	// top (and, negated, its bottom).
	Band, Estimate string
	ZeroY          float64
	SpanLabel      string
	// Latest is the latest interval as a whisker at its point (a band of one point has no
	// width), when there is one.
	Latest   *historyWhisker
	Steps    []historyStep
	From, To string
}

// historyWhisker is an interval at one point: its bounds and estimate on the change axis.
type historyWhisker struct{ X, LowY, HighY, EstY float64 }

// historyStep marks where the plan moved to a step.
type historyStep struct {
	X     float64
	Label string
}

// The history chart's geometry: the x axis from histLeft over histWidth; the arms' panel
// from armTop over panelHeight, the change's from changeTop.
const (
	histLeft    = 40.0
	histWidth   = 255.0
	armTop      = 8.0
	changeTop   = 82.0
	panelHeight = 56.0
)

// maxSpanGrowth bounds the change axis: at most this many times the latest interval's
// widest bound, so that the wide intervals of the first few users do not flatten the
// narrow ones the plan decides on; bounds beyond it are drawn at the panel's edge.
const maxSpanGrowth = 4

func newHistoryChart(points []controlplane.PlanPoint) historyChart {
	c := historyChart{Points: len(points), ZeroY: changeTop + panelHeight/2}
	if len(points) == 0 {
		return c
	}
	first, last := points[0].At, points[len(points)-1].At
	c.From, c.To = first.UTC().Format("Jan 2 15:04"), last.UTC().Format("Jan 2 15:04")
	x := func(at time.Time) float64 {
		if !last.After(first) {
			return histLeft + histWidth/2
		}
		return histLeft + histWidth*float64(at.Sub(first))/float64(last.Sub(first))
	}
	top := 0.0
	var latestSpan, span float64
	relative := false
	for _, p := range points {
		top = math.Max(top, math.Max(p.Control.Mean, p.Treatment.Mean))
		if p.Ready {
			latestSpan = math.Max(math.Abs(p.Lower), math.Abs(p.Upper))
			span, relative = math.Max(span, latestSpan), p.Relative
		}
	}
	span = math.Max(math.Min(span, maxSpanGrowth*latestSpan), 0.01)
	c.TopLabel = fmt.Sprintf("%.3g", top)
	c.SpanLabel = changeAxisLabel(relative, span)
	armY := func(v float64) float64 {
		if top <= 0 {
			return armTop + panelHeight
		}
		return armTop + panelHeight*(1-v/top)
	}
	changeY := func(v float64) float64 {
		v = math.Max(-span, math.Min(span, v))
		return c.ZeroY - panelHeight/2*v/span
	}
	var control, treatment, upper, lower, estimate []string
	for i, p := range points {
		px := x(p.At)
		control = append(control, coord(px, armY(p.Control.Mean)))
		treatment = append(treatment, coord(px, armY(p.Treatment.Mean)))
		if p.Ready {
			upper = append(upper, coord(px, changeY(p.Upper)))
			lower = append(lower, coord(px, changeY(p.Lower)))
			estimate = append(estimate, coord(px, changeY(p.Estimate)))
			c.Latest = &historyWhisker{X: px, LowY: changeY(p.Lower), HighY: changeY(p.Upper), EstY: changeY(p.Estimate)}
		}
		if i > 0 && p.Step != points[i-1].Step {
			c.Steps = append(c.Steps, historyStep{X: px, Label: fmt.Sprintf("step %d", p.Step+1)})
		}
	}
	for i, j := 0, len(lower)-1; i < j; i, j = i+1, j-1 {
		lower[i], lower[j] = lower[j], lower[i]
	}
	c.Control, c.Treatment = strings.Join(control, " "), strings.Join(treatment, " ")
	c.Band, c.Estimate = strings.Join(append(upper, lower...), " "), strings.Join(estimate, " ")
	return c
}

// changeAxisLabel labels a change axis: a relative change in percent, else per user.
func changeAxisLabel(relative bool, v float64) string {
	if relative {
		return fmt.Sprintf("%+.4g%%", 100*v)
	}
	return fmt.Sprintf("%+.4g", v)
}

func coord(x, y float64) string { return fmt.Sprintf("%.1f,%.1f", x, y) }

package console

import (
	"math"
	"testing"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/confseq"
)

// TestGuardrailChart places a guardrail's arms and interval in the chart's box: the larger
// arm fills the bar width, an interval wholly above zero lies right of the no-change line
// with its upper bound at the edge, and a guardrail without a verdict draws no interval.
func TestGuardrailChart(t *testing.T) {
	r := controlplane.GuardrailResult{
		Arms: controlplane.ArmPair{Control: confseq.Arm{N: 800, Sum: 40}, Treatment: confseq.Arm{N: 800, Sum: 120}},
		Verdict: confseq.Verdict{Ready: true, Effect: confseq.Effect{Relative: true, Estimate: 2}, Lower: 0.5, Upper: 4,
			Regression: true},
	}
	c := newGuardrailChart(r)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !c.Ready || !near(c.TreatmentW, chartWidth) || !near(c.ControlW, chartWidth/3) {
		t.Errorf("bars: ready %v, control %v, treatment %v", c.Ready, c.ControlW, c.TreatmentW)
	}
	if !near(c.HighX, chartLeft+chartWidth) || !(c.LowX > c.ZeroX && c.EstX > c.LowX && c.EstX < c.HighX) {
		t.Errorf("interval: low %v, estimate %v, high %v, zero %v", c.LowX, c.EstX, c.HighX, c.ZeroX)
	}
	if c.Interval != "+200.0% (sequence +50.0% to +400.0%)" {
		t.Errorf("interval text %q", c.Interval)
	}

	waiting := newGuardrailChart(controlplane.GuardrailResult{})
	if waiting.Ready || waiting.ControlW != 0 || waiting.TreatmentW != 0 || waiting.Interval != "not enough users yet" {
		t.Errorf("a guardrail without users: %+v", waiting)
	}
	if got := waiting.ControlText(); got != "no users" {
		t.Errorf("an empty arm says %q", got)
	}
}

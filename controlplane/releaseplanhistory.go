package controlplane

import (
	"math"
	"time"
)

// MaxPlanPoints bounds each guardrail's history, so that a plan's rows stay bounded however
// long it runs: a guardrail keeps the points whose number is a multiple of a stride, and its
// latest; the stride doubles (1, 2, 4, …) whenever more would be kept. The chart keeps
// covering the whole plan with points evenly spaced, between half this many and this many
// (postgres.recordPlanPoints).
const MaxPlanPoints = 500

// PlanStride is the stride of a guardrail's history once its latest point is number seq
// (from 0): the least power of two that keeps the multiples of it up to seq, and seq, within
// MaxPlanPoints.
func PlanStride(seq int64) int64 {
	stride := int64(1)
	for seq/stride+2 > MaxPlanPoints {
		stride *= 2
	}
	return stride
}

// PlanPoint is a guardrail's state at one evaluation of its plan: a point of the chart of the
// two arms and the interval over time.
type PlanPoint struct {
	Seq                int64 // numbered from 0 over the guardrail's points, kept or not
	At                 time.Time
	Step               int
	Control, Treatment ArmSummary
	// Ready reports whether the interval exists; then Estimate, Lower and Upper hold it,
	// relative ((t-c)/c) when Relative, else the absolute difference per user.
	Ready                  bool
	Relative               bool
	Estimate, Lower, Upper float64
	Regression             bool
}

// ArmSummary is an arm as a chart draws it: its users and their mean value.
type ArmSummary struct {
	Users int64
	Mean  float64
}

// NewPlanPoint is guardrail result r at step, at time at. An interval with a bound that is
// not finite (no variance to speak of yet) is not drawn.
func NewPlanPoint(at time.Time, step int, r GuardrailResult) PlanPoint {
	p := PlanPoint{At: at, Step: step, Regression: r.Verdict.Regression,
		Control:   ArmSummary{Users: r.Arms.Control.N, Mean: r.Arms.Control.Mean()},
		Treatment: ArmSummary{Users: r.Arms.Treatment.N, Mean: r.Arms.Treatment.Mean()}}
	if v := r.Verdict; v.Ready && finite(v.Lower) && finite(v.Upper) && finite(v.Effect.Estimate) {
		p.Ready, p.Relative, p.Estimate, p.Lower, p.Upper = true, v.Effect.Relative, v.Effect.Estimate, v.Lower, v.Upper
	}
	return p
}

func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }

// SameAs reports whether p shows what q does, whatever their times and numbers: an
// evaluation that changed nothing adds no point.
func (p PlanPoint) SameAs(q PlanPoint) bool {
	p.At, p.Seq = q.At, q.Seq
	return p == q
}

// Package confseq decides whether a guarded rollout's treatment is worse than its control
// while the data is still coming in, with statistics that stay valid however often they are
// looked at: asymptotic confidence sequences (Waudby-Smith, Arnold, Wu and Ramdas,
// "Time-uniform central limit theory and asymptotic confidence sequences", Annals of
// Statistics 2024, arXiv:2103.06476), the method GrowthBook uses for its safe rollouts.
//
// A fixed-sample confidence interval covers the true effect with probability 1-α at one
// sample size chosen in advance; recomputed after every new user it will, sooner or later,
// exclude zero by chance, and a release re-evaluated every few seconds would be rolled back
// for nothing. A confidence sequence covers the true effect at every sample size at once
// with probability 1-α, so a plan may decide the moment it excludes zero. It pays for this
// with a wider interval, tightest around the tuning sample size N* (TuningN).
//
// The package also checks the split itself (SampleRatioMismatch): when the arms' sizes are
// far from what the rollout percentage predicts, the data is broken and no verdict on it
// should be trusted. It is pure: no I/O, no clock.
package confseq

import (
	"fmt"
	"math"
)

// Arm summarises one arm's per-user metric: how many users, and the sum and sum of squares of
// their values (a count of events per user, or a mean of a property per user). The sums are
// all an arm needs to be kept current as events arrive.
type Arm struct {
	N          int64
	Sum        float64
	SumSquares float64
}

// Mean is the arm's mean value per user (0 for an empty arm).
func (a Arm) Mean() float64 {
	if a.N == 0 {
		return 0
	}
	return a.Sum / float64(a.N)
}

// Variance is the arm's sample variance (denominator N-1), 0 below two users.
func (a Arm) Variance() float64 {
	if a.N < 2 {
		return 0
	}
	n := float64(a.N)
	return math.Max(0, (a.SumSquares-a.Sum*a.Sum/n)/(n-1))
}

// DefaultTuningN is N*, the combined sample size at which the sequence is tightest, as
// GrowthBook's safe rollouts set it: a rollout step sees thousands of users, not millions.
const DefaultTuningN = 5000

// rho is the mixing parameter that makes the sequence tightest at n = tuningN (eq. 161 of
// the paper): ρ = sqrt((-2 ln α + ln(1 - 2 ln α)) / N*).
func rho(alpha, tuningN float64) float64 {
	l := math.Log(alpha)
	return math.Sqrt((-2*l + math.Log(-2*l+1)) / tuningN)
}

// HalfWidth is the half-width of the two-sided asymptotic confidence sequence at level 1-α
// after n observations of variance s2 per observation (eq. 9 of the paper):
//
//	sqrt(s2) · sqrt( 2(nρ²+1)/(nρ)² · ln( sqrt(nρ²+1)/α ) )
//
// with ρ from rho(α, tuningN).
func HalfWidth(s2 float64, n int64, tuningN, alpha float64) float64 {
	r := rho(alpha, tuningN)
	nr2 := float64(n)*r*r + 1
	return math.Sqrt(s2) * math.Sqrt(2*nr2/math.Pow(float64(n)*r, 2)*math.Log(math.Sqrt(nr2)/alpha))
}

// OneSidedHalfWidth is the distance from the estimate to the one bound of the one-sided
// asymptotic confidence sequence at level 1-α (the paper's one-sided boundary, ρ tuned at
// 2α, as gbstats' sequential one-sided tests compute it):
//
//	sqrt(s2) · sqrt( 2(nρ²+1)/(nρ)² · ln( 1 + sqrt(nρ²+1)/(2α) ) )
func OneSidedHalfWidth(s2 float64, n int64, tuningN, alpha float64) float64 {
	r := rho(2*alpha, tuningN)
	nr2 := float64(n)*r*r + 1
	return math.Sqrt(s2) * math.Sqrt(2*nr2/math.Pow(float64(n)*r, 2)*math.Log(1+math.Sqrt(nr2)/(2*alpha)))
}

// Effect is an estimate of how the treatment's mean differs from the control's, with the
// standard error of that estimate.
type Effect struct {
	// Relative reports whether Estimate is a relative change ((t-c)/c) rather than an
	// absolute difference (t-c).
	Relative bool
	Estimate float64
	StdErr   float64
}

// Compare estimates the treatment's change over the control: the relative change by the delta
// method, as gbstats does, when the control's mean is positive; the absolute difference when
// it is zero (a guardrail event no control user has sent yet), where a relative change does
// not exist but a difference still tests the same null hypothesis of equal means.
func Compare(control, treatment Arm) Effect {
	mc, mt := control.Mean(), treatment.Mean()
	vc, vt := control.Variance()/float64(control.N), treatment.Variance()/float64(treatment.N)
	if mc > 0 {
		return Effect{Relative: true, Estimate: (mt - mc) / mc,
			StdErr: math.Sqrt(vt/(mc*mc) + vc*mt*mt/(mc*mc*mc*mc))}
	}
	return Effect{Estimate: mt - mc, StdErr: math.Sqrt(vt + vc)}
}

// Direction says which way a guardrail's metric gets worse.
type Direction int

const (
	// HigherIsWorse is a metric such as errors per user: a rise is a regression.
	HigherIsWorse Direction = iota
	// LowerIsWorse is a metric such as purchases per user: a fall is a regression.
	LowerIsWorse
)

// Config holds a decision's parameters.
type Config struct {
	Alpha     float64 // the chance of rolling back a healthy release, over the whole plan
	TuningN   float64 // N*; DefaultTuningN when 0
	MinPerArm int64   // no verdict before each arm has this many users
}

// Verdict is what the data says about one guardrail now.
type Verdict struct {
	// Ready reports whether both arms have MinPerArm users and the metric varies, so the
	// sequence exists; when false the other fields are zero.
	Ready  bool
	Effect Effect
	// Lower and Upper bound the two-sided 1-α confidence sequence on the effect: what the
	// plan shows.
	Lower, Upper float64
	// Regression reports whether the one-sided 1-α confidence sequence lies wholly on the
	// worse side of zero: the treatment is worse, with the chance of saying so wrongly at
	// any time during the plan at most α.
	Regression bool
}

// Decide compares treatment to control for a guardrail that gets worse in direction dir.
func Decide(control, treatment Arm, dir Direction, cfg Config) Verdict {
	if cfg.TuningN == 0 {
		cfg.TuningN = DefaultTuningN
	}
	if control.N < max(cfg.MinPerArm, 2) || treatment.N < max(cfg.MinPerArm, 2) {
		return Verdict{}
	}
	e := Compare(control, treatment)
	if e.StdErr == 0 || math.IsNaN(e.StdErr) {
		return Verdict{} // no variation yet (no user has sent the event): nothing to test
	}
	n := control.N + treatment.N
	s2 := e.StdErr * e.StdErr * float64(n) // the per-observation analogue the paper's n scales
	h := HalfWidth(s2, n, cfg.TuningN, cfg.Alpha)
	h1 := OneSidedHalfWidth(s2, n, cfg.TuningN, cfg.Alpha)
	v := Verdict{Ready: true, Effect: e, Lower: e.Estimate - h, Upper: e.Estimate + h}
	if dir == HigherIsWorse {
		v.Regression = e.Estimate-h1 > 0
	} else {
		v.Regression = e.Estimate+h1 < 0
	}
	return v
}

// SRMAlpha is the p-value below which the split is declared broken: GrowthBook's threshold,
// strict because the check runs continuously and a false alarm pauses a healthy release.
const SRMAlpha = 0.001

// SRMMinPerArm is the least number of users in each arm before the split is checked, as
// GrowthBook does: below it the chi-square approximation is not trustworthy.
const SRMMinPerArm = 8

// SampleRatioMismatch tests whether control and treatment users split as expected, where
// expectedTreatment is the expected number of treatment users (the rollout share of each
// user's step, summed): Pearson's chi-square test with one degree of freedom. It returns the
// p-value and whether it is below SRMAlpha with both arms at SRMMinPerArm or more.
func SampleRatioMismatch(control, treatment int64, expectedTreatment float64) (p float64, mismatch bool) {
	total := float64(control + treatment)
	expectedControl := total - expectedTreatment
	if total == 0 || expectedTreatment <= 0 || expectedControl <= 0 {
		return 1, false
	}
	dt, dc := float64(treatment)-expectedTreatment, float64(control)-expectedControl
	chi2 := dt*dt/expectedTreatment + dc*dc/expectedControl
	p = math.Erfc(math.Sqrt(chi2 / 2)) // survival function of chi-square with 1 df
	return p, p < SRMAlpha && control >= SRMMinPerArm && treatment >= SRMMinPerArm
}

// Describe says what the verdict estimates, for a plan's decisions: "+210.0% (sequence
// +88.1% to +332.0%)", or the absolute difference per user while the control mean is zero.
func (v Verdict) Describe() string {
	if !v.Ready {
		return "not enough users yet"
	}
	if v.Effect.Relative {
		return fmt.Sprintf("%+.1f%% (sequence %+.1f%% to %+.1f%%)", 100*v.Effect.Estimate, 100*v.Lower, 100*v.Upper)
	}
	return fmt.Sprintf("%+.4g per user (sequence %+.4g to %+.4g)", v.Effect.Estimate, v.Lower, v.Upper)
}

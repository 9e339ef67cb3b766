package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/shared/confseq"
	"github.com/flagedge/flagedge/shared/flags"
)

// A release plan (a guarded rollout) moves a flag's rollout through steps while guardrail
// metrics hold, and rolls it back on its own when one regresses. The arms are the users who
// were shown the flag ($feature_flag_called): treatment answered true, control answered
// false; a user counts in the arm of their first exposure, and a guardrail's events count
// from that exposure on. Counting happens as events are stored (postgres.EventStore), the
// verdict is shared/confseq's always-valid one, and every change the plan makes to the
// flag is a flag write like any other, made as the user who started the plan.

// The states of a release plan.
const (
	PlanRunning    = "running"
	PlanPaused     = "paused"
	PlanRolledBack = "rolled_back"
	PlanCompleted  = "completed"
	PlanCancelled  = "cancelled"
)

// What a plan does when a guardrail regresses.
const (
	OnRegressionRollback = "rollback" // every condition group returns to its rollout from before the plan; the plan ends
	OnRegressionPause    = "pause"    // the plan stops advancing and waits for a person
)

// Guardrail statistics and directions.
const (
	StatCount = "count" // events per exposed user
	StatMean  = "mean"  // mean of a numeric property per user who sent the event

	DirectionIncrease = "increase" // higher is worse (the default)
	DirectionDecrease = "decrease" // lower is worse
)

// Bounds of a plan, which bound what counting it costs.
const (
	MaxPlanSteps      = 20
	MaxPlanGuardrails = 10
	// MaxPlanUnits is the most users a plan counts: past it, new exposures are not counted
	// (the verdict rests on those already in), so a plan's rows and each evaluation's work
	// stay bounded whatever the traffic.
	MaxPlanUnits = 200_000
	// DefaultMinExposuresPerArm is how many users each arm needs before any verdict: below
	// it the normal approximation the confidence sequence rests on is not trustworthy.
	DefaultMinExposuresPerArm = 100
)

// ReleaseStep is one step of a plan: the rollout every condition group gets, and how long
// and for how many new exposures it holds before the next.
type ReleaseStep struct {
	RolloutPercentage  float64 `json:"rollout_percentage"`
	MinDurationSeconds int64   `json:"min_duration_seconds"`
	MinExposures       int64   `json:"min_exposures"`
}

// Guardrail is a metric that must not get worse: the count of Event per exposed user, or the
// mean of its numeric Property (Stat mean).
type Guardrail struct {
	Event     string `json:"event"`
	Property  string `json:"property,omitempty"`
	Stat      string `json:"stat"`
	Direction string `json:"direction"`
}

// NewReleasePlan holds what a user gives to start a plan; a change request that asks to
// start one keeps it in its intent (FlagIntent.ReleasePlan), hence the JSON names.
type NewReleasePlan struct {
	Steps              []ReleaseStep `json:"steps"`
	Guardrails         []Guardrail   `json:"guardrails"`
	Alpha              float64       `json:"alpha"`
	OnRegression       string        `json:"on_regression"`
	MinExposuresPerArm int64         `json:"min_exposures_per_arm"`
}

// Describe summarises the plan for the reviewers of a change request that asks to start it.
func (n *NewReleasePlan) Describe(flagKey string) string {
	steps := make([]string, len(n.Steps))
	for i, s := range n.Steps {
		steps[i] = strconv.FormatFloat(s.RolloutPercentage, 'f', -1, 64) + "%"
	}
	guardrails := make([]string, len(n.Guardrails))
	for i, g := range n.Guardrails {
		guardrails[i] = g.Describe()
	}
	return fmt.Sprintf("Start a release plan on feature flag '%s': rollout %s; guardrails %s (alpha %g); on regression %s",
		flagKey, strings.Join(steps, " -> "), strings.Join(guardrails, ", "), n.Alpha, n.OnRegression)
}

// Validate checks the plan and fills its defaults (alpha 0.05, rollback, count, increase,
// DefaultMinExposuresPerArm).
func (n *NewReleasePlan) Validate() error {
	if n.Alpha == 0 {
		n.Alpha = 0.05
	}
	if n.OnRegression == "" {
		n.OnRegression = OnRegressionRollback
	}
	if n.MinExposuresPerArm == 0 {
		n.MinExposuresPerArm = DefaultMinExposuresPerArm
	}
	switch {
	case len(n.Steps) == 0:
		return FieldError("steps", "required", "A plan needs at least one step.")
	case len(n.Steps) > MaxPlanSteps:
		return FieldError("steps", "max_length", fmt.Sprintf("A plan has at most %d steps.", MaxPlanSteps))
	case len(n.Guardrails) == 0:
		return FieldError("guardrails", "required", "A plan needs at least one guardrail.")
	case len(n.Guardrails) > MaxPlanGuardrails:
		return FieldError("guardrails", "max_length", fmt.Sprintf("A plan has at most %d guardrails.", MaxPlanGuardrails))
	case !(n.Alpha > 0 && n.Alpha <= 0.2):
		return FieldError("alpha", "invalid_input", "alpha must be above 0 and at most 0.2.")
	case n.OnRegression != OnRegressionRollback && n.OnRegression != OnRegressionPause:
		return FieldError("on_regression", "invalid_choice", fmt.Sprintf("%q is not a valid choice: rollback or pause.", n.OnRegression))
	case n.MinExposuresPerArm < 30:
		return FieldError("min_exposures_per_arm", "invalid_input", "min_exposures_per_arm must be at least 30.")
	}
	prev := -1.0
	for i, s := range n.Steps {
		attr := "steps." + strconv.Itoa(i)
		switch {
		case math.IsNaN(s.RolloutPercentage) || s.RolloutPercentage <= 0 || s.RolloutPercentage > 100:
			return FieldError(attr+".rollout_percentage", "invalid_input", "rollout_percentage must be above 0 and at most 100.")
		case s.RolloutPercentage <= prev:
			return FieldError(attr+".rollout_percentage", "invalid_input", "Each step must roll out to more users than the one before.")
		case s.MinDurationSeconds < 0:
			return FieldError(attr+".min_duration_seconds", "invalid_input", "min_duration_seconds must not be negative.")
		case s.MinExposures < 0:
			return FieldError(attr+".min_exposures", "invalid_input", "min_exposures must not be negative.")
		}
		prev = s.RolloutPercentage
	}
	for i := range n.Guardrails {
		g := &n.Guardrails[i]
		attr := "guardrails." + strconv.Itoa(i)
		if g.Stat == "" {
			g.Stat = StatCount
		}
		if g.Direction == "" {
			g.Direction = DirectionIncrease
		}
		switch {
		case g.Event == "" || len(g.Event) > 400:
			return FieldError(attr+".event", "invalid_input", "event must be an event name of 1 to 400 characters.")
		case g.Stat != StatCount && g.Stat != StatMean:
			return FieldError(attr+".stat", "invalid_choice", fmt.Sprintf("%q is not a valid choice: count or mean.", g.Stat))
		case g.Stat == StatMean && g.Property == "":
			return FieldError(attr+".property", "required", "A mean needs the numeric property it averages.")
		case g.Stat == StatCount && g.Property != "":
			return FieldError(attr+".property", "invalid_input", "A count takes no property; use stat mean to average one.")
		case len(g.Property) > 400:
			return FieldError(attr+".property", "max_length", "property has at most 400 characters.")
		case g.Direction != DirectionIncrease && g.Direction != DirectionDecrease:
			return FieldError(attr+".direction", "invalid_choice", fmt.Sprintf("%q is not a valid choice: increase or decrease.", g.Direction))
		}
	}
	return nil
}

// ErrPlanFlagShape refuses a plan on a flag whose exposures cannot be put in arms by the
// distinct id: a flag aggregated by groups (its unit is the group), with early access
// (super) conditions or a holdout (users outside the rollout for another reason than it),
// or without condition groups to roll out.
var ErrPlanFlagShape = FieldError("feature_flag", "invalid_input",
	"A release plan needs a flag of persons with condition groups, and without early access conditions, holdout or group aggregation.")

// ErrPlanActive refuses a second plan on a flag while one is running or paused.
var ErrPlanActive = FieldError("feature_flag", "invalid_input", "The flag already has a running or paused release plan: cancel it first.")

// CheckPlanFlag reports ErrPlanFlagShape unless the flag's filters suit a plan. Property
// filters and variants do: the arms then follow ClassifyExposure (planarm.go).
func CheckPlanFlag(filters json.RawMessage) error {
	f, err := flags.ParseFilters(filters)
	if err != nil || len(f.Groups) == 0 || len(f.SuperGroups) > 0 || len(f.HoldoutGroups) > 0 || f.AggregationGroupTypeIndex != nil {
		return ErrPlanFlagShape
	}
	for _, g := range f.Groups {
		if g.AggregationGroupTypeIndex.Index != nil {
			return ErrPlanFlagShape
		}
	}
	var doc struct {
		Holdout json.RawMessage `json:"holdout"`
	}
	if json.Unmarshal(filters, &doc) == nil && len(doc.Holdout) > 0 && string(doc.Holdout) != "null" {
		return ErrPlanFlagShape
	}
	return nil
}

// WithRollouts returns filters whose condition groups have the rollouts given: one for all
// (len 1) or one per group by position; nil sets a group's to null (everyone). Every other
// field is kept as it is.
func WithRollouts(filters json.RawMessage, rollouts []*float64) (json.RawMessage, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(filters, &doc); err != nil {
		return nil, err
	}
	var groups []map[string]json.RawMessage
	if err := json.Unmarshal(doc["groups"], &groups); err != nil {
		return nil, err
	}
	for i, g := range groups {
		r := rollouts[min(i, len(rollouts)-1)]
		raw, _ := json.Marshal(r)
		g["rollout_percentage"] = raw
	}
	raw, err := json.Marshal(groups)
	if err != nil {
		return nil, err
	}
	doc["groups"] = raw
	return json.Marshal(doc)
}

// GroupRollouts returns the rollout of each condition group (nil for everyone).
func GroupRollouts(filters json.RawMessage) ([]*float64, error) {
	f, err := flags.ParseFilters(filters)
	if err != nil {
		return nil, err
	}
	out := make([]*float64, len(f.Groups))
	for i, g := range f.Groups {
		out[i] = g.RolloutPercentage
	}
	return out, nil
}

// ReleasePlan is a plan and its live state.
type ReleasePlan struct {
	ID                 int64
	ProjectID          int64
	FlagID             int64
	FlagKey            string
	Steps              []ReleaseStep
	Guardrails         []Guardrail
	Alpha              float64
	OnRegression       string
	MinExposuresPerArm int64
	State              string
	Step               int // index into Steps
	StepStartedAt      time.Time
	// Before holds each condition group's rollout from before the plan: what a rollback
	// restores.
	Before []*float64
	// CreatedBy is the user who started the plan, as whom its flag writes are made; nil once
	// that user has left the organisation (the plan then cannot change the flag).
	CreatedBy *User
	CreatedAt time.Time
	UpdatedAt time.Time
	// EndedSnapshotVersion is, once the plan rolled back or completed, the project's snapshot
	// version holding that last write: edges serving it or a later one serve the result
	// (rollout_status says which do).
	EndedSnapshotVersion int64
	// ApprovedChangeRequest is the change request whose approval started the plan ("" when
	// its start needed none): under a policy that allows approved plans
	// (ApprovalPolicy.AllowApprovedReleasePlans) its advances need no further review.
	ApprovedChangeRequest string
	// WaitingChangeRequest is the change request an advance of the plan waits for ("" when
	// none): the plan advances when it is applied, and pauses when it is rejected, expires
	// or fails. Guardrails are still watched meanwhile, and a regression still rolls back.
	WaitingChangeRequest string

	Tally     PlanTally
	Decisions []ReleaseDecision
}

// Trigger is what the activity log records of the plan's flag writes.
func (p *ReleasePlan) Trigger() *Trigger {
	return &Trigger{JobType: "release_plan", JobID: strconv.FormatInt(p.ID, 10),
		Payload: map[string]any{"release_plan_id": p.ID, "step": p.Step}}
}

// Active reports whether the plan may still change the flag.
func (p *ReleasePlan) Active() bool { return p.State == PlanRunning || p.State == PlanPaused }

// PlanTally is what ingestion counted for a plan: users by arm and by the step of their
// first exposure, and each guardrail's per-user sums by arm.
type PlanTally struct {
	// Exposed[s] is the number of users first exposed during step s, by arm.
	Exposed []ArmCounts
	// Metrics[g] are guardrail g's arms; for a count, N is the arm's exposed users.
	Metrics []ArmPair
	// Undecided counts the false exposures of users in no arm yet that could not be placed:
	// no reason said whether they were eligible, and their stored properties could not
	// either (ClassifyExposure). They are in neither arm. It counts exposures of users not
	// decided, once per user per batch of ingested events: a user undecided in several
	// batches counts in each.
	Undecided int64
}

// ArmCounts counts users by arm.
type ArmCounts struct{ Control, Treatment int64 }

// ArmPair is a guardrail metric in both arms.
type ArmPair struct{ Control, Treatment confseq.Arm }

// Totals returns the users of each arm over all steps, and how many treatment users the
// steps' rollouts predict.
func (p *ReleasePlan) Totals() (control, treatment int64, expectedTreatment float64) {
	for s, c := range p.Tally.Exposed {
		control += c.Control
		treatment += c.Treatment
		if s < len(p.Steps) {
			expectedTreatment += float64(c.Control+c.Treatment) * p.Steps[s].RolloutPercentage / 100
		}
	}
	return control, treatment, expectedTreatment
}

// GuardrailResult is a guardrail's verdict now.
type GuardrailResult struct {
	Guardrail
	Arms    ArmPair
	Verdict confseq.Verdict
}

// Results evaluates every guardrail on the plan's tally.
func (p *ReleasePlan) Results() []GuardrailResult {
	out := make([]GuardrailResult, len(p.Guardrails))
	for i, g := range p.Guardrails {
		out[i].Guardrail = g
		if i < len(p.Tally.Metrics) {
			out[i].Arms = p.Tally.Metrics[i]
		}
		dir := confseq.HigherIsWorse
		if g.Direction == DirectionDecrease {
			dir = confseq.LowerIsWorse
		}
		out[i].Verdict = confseq.Decide(out[i].Arms.Control, out[i].Arms.Treatment, dir,
			confseq.Config{Alpha: p.Alpha, MinPerArm: p.MinExposuresPerArm})
	}
	return out
}

// The kinds of a plan's decisions.
const (
	DecisionStarted    = "started"
	DecisionAdvanced   = "advanced"
	DecisionCompleted  = "completed"
	DecisionRolledBack = "rolled_back"
	DecisionPaused     = "paused"
	DecisionResumed    = "resumed"
	DecisionCancelled  = "cancelled"
	DecisionFailed     = "failed" // a flag write the plan tried was refused; it tries again
	// DecisionAwaitingApproval: the approvals gate stopped an advance and filed a change
	// request, which the decision's reason names; the plan advances once it is applied.
	DecisionAwaitingApproval = "awaiting_approval"
)

// ReleaseDecision is one thing the plan, or a person, decided.
type ReleaseDecision struct {
	At     time.Time
	Kind   string
	Step   int
	Reason string
}

// Next decides what a running plan does now, from its tally: a decision of kind paused (a
// sample-ratio mismatch, or a regression with on_regression pause), rolled_back, advanced or
// completed, or nil to wait. A step at 100% has no control arm of its own: the control users
// of the earlier steps keep being counted, so guardrails keep their verdict, and the step
// completes on its minimum duration and exposures unless that verdict turns to regression
// (flagedge keeps no holdout). A plan waiting for the change request of an advance
// (WaitingChangeRequest) decides nothing more than a pause or a rollback.
func (p *ReleasePlan) Next(now time.Time) *ReleaseDecision {
	if p.State != PlanRunning {
		return nil
	}
	d := &ReleaseDecision{At: now, Step: p.Step}
	control, treatment, expected := p.Totals()
	if pv, mismatch := confseq.SampleRatioMismatch(control, treatment, expected); mismatch {
		d.Kind = DecisionPaused
		d.Reason = fmt.Sprintf("Sample ratio mismatch: %d control and %d treatment users where the rollouts predict %.0f treatment (p = %.2g < %g). The data is not trusted until a person resumes the plan.",
			control, treatment, expected, pv, confseq.SRMAlpha)
		return d
	}
	for _, r := range p.Results() {
		if !r.Verdict.Regression {
			continue
		}
		d.Kind = DecisionRolledBack
		if p.OnRegression == OnRegressionPause {
			d.Kind = DecisionPaused
		}
		d.Reason = fmt.Sprintf("Guardrail %s regressed: %s (control %.4g over %d users, treatment %.4g over %d).",
			r.Describe(), r.Verdict.Describe(), r.Arms.Control.Mean(), r.Arms.Control.N, r.Arms.Treatment.Mean(), r.Arms.Treatment.N)
		return d
	}
	if p.WaitingChangeRequest != "" { // the advance is decided; its change request is not
		return nil
	}
	step := p.Steps[p.Step]
	var exposed int64
	if p.Step < len(p.Tally.Exposed) {
		exposed = p.Tally.Exposed[p.Step].Control + p.Tally.Exposed[p.Step].Treatment
	}
	if now.Sub(p.StepStartedAt) < time.Duration(step.MinDurationSeconds)*time.Second || exposed < step.MinExposures {
		return nil
	}
	reason := fmt.Sprintf("Step %d (%g%%) held for %s with %d new exposed users and no guardrail regressing.",
		p.Step+1, step.RolloutPercentage, now.Sub(p.StepStartedAt).Round(time.Second), exposed)
	if p.Step == len(p.Steps)-1 {
		d.Kind, d.Reason = DecisionCompleted, reason
		return d
	}
	d.Kind, d.Step = DecisionAdvanced, p.Step+1
	d.Reason = reason + fmt.Sprintf(" Advancing to %g%%.", p.Steps[p.Step+1].RolloutPercentage)
	return d
}

// Describe names the guardrail for people: "$exception per user", "mean $pageview.$duration".
func (g Guardrail) Describe() string {
	if g.Stat == StatMean {
		return "mean " + g.Event + "." + g.Property
	}
	return g.Event + " per user"
}

// ReleasePlanService starts, reads and steers a flag's release plan, as the user of the
// context: reading needs membership of the project's organisation, everything else the
// right to change the flag (CanEditFlag).
type ReleasePlanService interface {
	// CreateReleasePlan starts a plan on the flag: its first step's rollout is written to
	// the flag at once.
	CreateReleasePlan(ctx context.Context, projectID, flagID int64, n NewReleasePlan) (*ReleasePlan, error)
	// FindReleasePlan returns the flag's latest plan with its tally and decisions.
	FindReleasePlan(ctx context.Context, projectID, flagID int64) (*ReleasePlan, error)
	// SetReleasePlanState pauses (PlanPaused), resumes (PlanRunning) or cancels
	// (PlanCancelled) the flag's active plan; cancelling leaves the rollout where it is.
	SetReleasePlanState(ctx context.Context, projectID, flagID int64, state string) (*ReleasePlan, error)
	// FindReleasePlanHistory returns the points of each of the plan's guardrails, oldest
	// first: one slice per guardrail, in the plan's order (releaseplanhistory.go).
	FindReleasePlanHistory(ctx context.Context, projectID, planID int64) ([][]PlanPoint, error)
}

// ReleasePlanRunner is the system side of release plans, held only by the plan evaluator
// (controlplane/releaser): it evaluates every running plan and carries out what it decides,
// each plan claimed under a row lock so that one replica acts on it at a time. Its flag
// writes are made as each plan's creator, checked as theirs.
type ReleasePlanRunner interface {
	// EvaluatePlans evaluates the running plans and returns the decisions taken.
	EvaluatePlans(ctx context.Context) ([]ReleaseDecision, error)
}

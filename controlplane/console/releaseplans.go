package console

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/confseq"
)

// The plan form's rows: enough for a usual ramp (1%, 5%, 25%, 50%, 100%) and a few
// guardrails; the API takes up to controlplane.MaxPlanSteps and MaxPlanGuardrails.
const (
	planFormSteps      = 5
	planFormGuardrails = 3
)

// planPage is a flag's release plan page: the latest plan with its guardrails' charts and
// decisions, and the form that starts one when none is active.
type planPage struct {
	Flag    *flagView
	Plan    *controlplane.ReleasePlan
	Charts  []guardrailChart
	CanEdit bool
	// Form is the start form's values (as given, after a refused attempt).
	Form  planForm
	Error string
	// ErrorAttr names the field the error is about ("steps.1.rollout_percentage").
	ErrorAttr string
}

// planForm holds the start form's fields as text, so a refused attempt shows what was typed.
type planForm struct {
	Steps        []planFormStep
	Guardrails   []planFormGuardrail
	Alpha        string
	OnRegression string
}

type planFormStep struct{ Rollout, Duration, Exposures string }

type planFormGuardrail struct{ Event, Stat, Property, Direction string }

// defaultPlanForm is the form as first shown: a 5% then 100% ramp guarded by $exception.
func defaultPlanForm() planForm {
	f := planForm{Steps: make([]planFormStep, planFormSteps), Guardrails: make([]planFormGuardrail, planFormGuardrails),
		Alpha: "0.05", OnRegression: controlplane.OnRegressionRollback}
	f.Steps[0] = planFormStep{Rollout: "5", Duration: "3600", Exposures: "1000"}
	f.Steps[1] = planFormStep{Rollout: "100", Duration: "3600", Exposures: "1000"}
	f.Guardrails[0] = planFormGuardrail{Event: "$exception", Stat: controlplane.StatCount, Direction: controlplane.DirectionIncrease}
	return f
}

// readPlanForm reads the posted form; rows left blank are skipped.
func readPlanForm(r *http.Request) planForm {
	f := planForm{Alpha: r.PostFormValue("alpha"), OnRegression: r.PostFormValue("on_regression")}
	for i := range planFormSteps {
		p := "step" + strconv.Itoa(i) + "_"
		f.Steps = append(f.Steps, planFormStep{Rollout: r.PostFormValue(p + "rollout"),
			Duration: r.PostFormValue(p + "duration"), Exposures: r.PostFormValue(p + "exposures")})
	}
	for i := range planFormGuardrails {
		p := "guard" + strconv.Itoa(i) + "_"
		f.Guardrails = append(f.Guardrails, planFormGuardrail{Event: r.PostFormValue(p + "event"), Stat: r.PostFormValue(p + "stat"),
			Property: r.PostFormValue(p + "property"), Direction: r.PostFormValue(p + "direction")})
	}
	return f
}

// plan turns the form into a plan to start; controlplane.NewReleasePlan.Validate judges the
// rest. Numbers that are not numbers are refused here, naming the field as the API would.
func (f planForm) plan() (controlplane.NewReleasePlan, error) {
	var n controlplane.NewReleasePlan
	var err error
	if n.Alpha, err = strconv.ParseFloat(strings.TrimSpace(f.Alpha), 64); err != nil {
		return n, controlplane.FieldError("alpha", "invalid_input", "alpha must be a number above 0 and at most 0.2.")
	}
	n.OnRegression = f.OnRegression
	for _, s := range f.Steps {
		if strings.TrimSpace(s.Rollout) == "" {
			continue
		}
		attr := "steps." + strconv.Itoa(len(n.Steps)) + "."
		var st controlplane.ReleaseStep
		if st.RolloutPercentage, err = strconv.ParseFloat(strings.TrimSpace(s.Rollout), 64); err != nil || math.IsInf(st.RolloutPercentage, 0) {
			return n, controlplane.FieldError(attr+"rollout_percentage", "invalid_input", "rollout_percentage must be above 0 and at most 100.")
		}
		if st.MinDurationSeconds, err = optionalInt(s.Duration); err != nil {
			return n, controlplane.FieldError(attr+"min_duration_seconds", "invalid_input", "min_duration_seconds must be a whole number of seconds.")
		}
		if st.MinExposures, err = optionalInt(s.Exposures); err != nil {
			return n, controlplane.FieldError(attr+"min_exposures", "invalid_input", "min_exposures must be a whole number.")
		}
		n.Steps = append(n.Steps, st)
	}
	for _, g := range f.Guardrails {
		if strings.TrimSpace(g.Event) == "" {
			continue
		}
		n.Guardrails = append(n.Guardrails, controlplane.Guardrail{Event: strings.TrimSpace(g.Event), Stat: g.Stat,
			Property: strings.TrimSpace(g.Property), Direction: g.Direction})
	}
	return n, n.Validate()
}

// optionalInt reads a whole number; blank is zero.
func optionalInt(s string) (int64, error) {
	if s = strings.TrimSpace(s); s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// guardrailChart is a guardrail's live verdict drawn as an SVG of 300 by 70: the two arms'
// metric as bars, and the relative change's confidence sequence on an axis centred on zero.
type guardrailChart struct {
	controlplane.GuardrailResult
	ControlW, TreatmentW float64 // bar widths
	// Ready reports whether the interval exists; then LowX, HighX and EstX place it and
	// ZeroX the no-change line.
	Ready             bool
	LowX, HighX, EstX float64
	ZeroX             float64
	Interval          string
	// History draws the arms and the interval over time (releaseplanhistory.go).
	History historyChart
}

// Chart geometry (releaseplan.html draws the same box): bars and the interval axis run from
// chartLeft over chartWidth; the axis is centred on zero and spans the larger bound either way.
const (
	chartLeft  = 80.0
	chartWidth = 210.0
)

func newGuardrailChart(r controlplane.GuardrailResult) guardrailChart {
	c := guardrailChart{GuardrailResult: r, ZeroX: chartLeft + chartWidth/2}
	mc, mt := r.Arms.Control.Mean(), r.Arms.Treatment.Mean()
	if top := math.Max(mc, mt); top > 0 && !math.IsNaN(top) {
		c.ControlW, c.TreatmentW = chartWidth*mc/top, chartWidth*mt/top
	}
	v := r.Verdict
	if !v.Ready {
		c.Interval = v.Describe()
		return c
	}
	c.Ready = true
	span := math.Max(math.Max(math.Abs(v.Lower), math.Abs(v.Upper)), 0.01)
	x := func(e float64) float64 { return chartLeft + chartWidth/2 + chartWidth/2*e/span }
	c.LowX, c.HighX, c.EstX = x(v.Lower), x(v.Upper), x(v.Effect.Estimate)
	c.Interval = v.Describe()
	return c
}

// planStates are the states a person may set from the page, by the button's path.
var planStates = map[string]string{"pause": controlplane.PlanPaused, "resume": controlplane.PlanRunning, "cancel": controlplane.PlanCancelled}

func (c *Console) handleReleasePlan(q *request) error {
	f, err := q.loadFlag()
	if err != nil {
		return err
	}
	data := &planPage{Flag: f, CanEdit: f.CanEdit && !f.Deleted, Form: defaultPlanForm()}
	return c.renderPlan(q, data, http.StatusOK)
}

// renderPlan shows the plan page, reading the flag's latest plan.
func (c *Console) renderPlan(q *request, data *planPage, status int) error {
	plan, err := q.c.cfg.ReleasePlans.FindReleasePlan(q.ctx, data.Flag.ProjectID, data.Flag.ID)
	if err != nil && controlplane.ErrorKind(err) != controlplane.NotFound {
		return err
	}
	data.Plan = plan
	if plan != nil {
		history, err := q.c.cfg.ReleasePlans.FindReleasePlanHistory(q.ctx, plan.ProjectID, plan.ID)
		if err != nil {
			return err
		}
		for i, r := range plan.Results() {
			c := newGuardrailChart(r)
			if i < len(history) {
				c.History = newHistoryChart(history[i])
			}
			data.Charts = append(data.Charts, c)
		}
	}
	p, err := q.page("Release plan · "+data.Flag.Key, "flags")
	if err != nil {
		return err
	}
	p.Data = data
	c.render(q.w, status, "releaseplan", p)
	return nil
}

func (c *Console) handleStartReleasePlan(q *request) error {
	f, err := q.loadFlag()
	if err != nil {
		return err
	}
	form := readPlanForm(q.r)
	n, err := form.plan()
	if err == nil {
		_, err = q.c.cfg.ReleasePlans.CreateReleasePlan(q.ctx, f.ProjectID, f.ID, n)
	}
	if q.heldForReview(err) { // a gated flag: the plan starts once its change request is approved
		return nil
	}
	if e := invalid(err); e != nil {
		data := &planPage{Flag: f, CanEdit: f.CanEdit && !f.Deleted, Form: form, Error: e.Detail, ErrorAttr: e.Attr}
		return c.renderPlan(q, data, http.StatusBadRequest)
	}
	if err != nil {
		return err
	}
	return q.redirect(q.projectPath("/feature_flags/%d/release_plan", f.ID), "success",
		fmt.Sprintf("Release plan started: the flag is rolled out to %g%%.", n.Steps[0].RolloutPercentage))
}

func (c *Console) handleSetReleasePlanState(q *request) error {
	state, ok := planStates[q.r.PathValue("action")]
	if !ok {
		return controlplane.ErrNotFound
	}
	f, err := q.findFlag() // a flag out of reach is not found, before any plan is looked for
	if err != nil {
		return err
	}
	back := q.projectPath("/feature_flags/%d/release_plan", f.ID)
	_, err = q.c.cfg.ReleasePlans.SetReleasePlanState(q.ctx, f.ProjectID, f.ID, state)
	if controlplane.ErrorKind(err) == controlplane.NotFound {
		return q.redirect(back, "error", "The flag has no running or paused release plan.")
	}
	if e := invalid(err); e != nil {
		return q.redirect(back, "error", e.Detail)
	}
	if err != nil {
		return err
	}
	return q.redirect(back, "success", map[string]string{controlplane.PlanPaused: "Release plan paused.",
		controlplane.PlanRunning: "Release plan resumed.", controlplane.PlanCancelled: "Release plan cancelled: the rollout stays where it is."}[state])
}

// ControlText and TreatmentText label the arms' bars.
func (c guardrailChart) ControlText() string   { return armMean(c.Arms.Control) }
func (c guardrailChart) TreatmentText() string { return armMean(c.Arms.Treatment) }

// armMean says an arm's metric and its users.
func armMean(a confseq.Arm) string {
	if a.N == 0 {
		return "no users"
	}
	return fmt.Sprintf("%.4g over %d users", a.Mean(), a.N)
}

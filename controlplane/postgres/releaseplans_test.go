package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// planFixture is a project with a flag rolled out to 20% and the stores a plan needs.
type planFixture struct {
	db     *postgres.DB
	ctx    context.Context // as the project's admin
	plans  *postgres.ReleasePlanStore
	flags  *postgres.FlagService
	events *postgres.EventStore
	pid    int64
	flag   *controlplane.Flag
}

func newPlanFixture(t testing.TB) *planFixture {
	t.Helper()
	db, res, _ := mustOpen(t)
	fx := &planFixture{db: db, ctx: controlplane.NewContextWithUser(t.Context(), &mustKey(t, db, res.PersonalAPIKey).User),
		plans: postgres.NewReleasePlanStore(db), flags: postgres.NewFlagService(db),
		events: postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil))), pid: res.ProjectID}
	var err error
	fx.flag, err = fx.flags.CreateFlag(fx.ctx, fx.pid, controlplane.FlagUpdate{Key: ptr("checkout-v2"),
		Filters: json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 20}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

func (fx *planFixture) start(t testing.TB, n controlplane.NewReleasePlan) *controlplane.ReleasePlan {
	t.Helper()
	p, err := fx.plans.CreateReleasePlan(fx.ctx, fx.pid, fx.flag.ID, n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// traffic stores, for users[from:to] of an arm, a first exposure answering treatment and,
// for every k-th of them, one event named metric a second later.
func (fx *planFixture) traffic(t *testing.T, arm string, from, to, every int, metric string, treatment bool) {
	t.Helper()
	now := time.Now()
	var evs []controlplane.Event
	for i := from; i < to; i++ {
		d := fmt.Sprintf("%s-%d", arm, i)
		props, _ := json.Marshal(map[string]any{"$feature_flag": fx.flag.Key, "$feature_flag_response": treatment})
		evs = append(evs, controlplane.Event{UUID: uuid.NewString(), ProjectID: fx.pid, Name: "$feature_flag_called",
			DistinctID: d, Properties: props, Timestamp: now, ReceivedAt: now})
		if every > 0 && i%every == 0 {
			evs = append(evs, controlplane.Event{UUID: uuid.NewString(), ProjectID: fx.pid, Name: metric, DistinctID: d,
				Properties: json.RawMessage(`{"$duration": 120}`), Timestamp: now.Add(time.Second), ReceivedAt: now})
		}
	}
	if _, err := fx.events.Ingest(t.Context(), []controlplane.EventBatch{{ProjectID: fx.pid, Events: evs}}); err != nil {
		t.Fatal(err)
	}
}

func (fx *planFixture) rollout(t *testing.T) any {
	t.Helper()
	f, err := fx.flags.FindFlagByID(fx.ctx, fx.pid, fx.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rollout any `json:"rollout_percentage"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(f.Filters, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Groups[0].Rollout
}

func twoSteps() controlplane.NewReleasePlan {
	return controlplane.NewReleasePlan{
		Steps:      []controlplane.ReleaseStep{{RolloutPercentage: 50}, {RolloutPercentage: 100}},
		Guardrails: []controlplane.Guardrail{{Event: "$exception"}, {Event: "$pageview", Property: "$duration", Stat: controlplane.StatMean}}}
}

func TestReleasePlanStartsAndValidates(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	for _, c := range []struct {
		attr string
		plan controlplane.NewReleasePlan
	}{
		{"steps", controlplane.NewReleasePlan{Guardrails: twoSteps().Guardrails}},
		{"guardrails", controlplane.NewReleasePlan{Steps: twoSteps().Steps}},
		{"steps.1.rollout_percentage", controlplane.NewReleasePlan{Guardrails: twoSteps().Guardrails,
			Steps: []controlplane.ReleaseStep{{RolloutPercentage: 50}, {RolloutPercentage: 40}}}},
		{"guardrails.0.property", controlplane.NewReleasePlan{Steps: twoSteps().Steps,
			Guardrails: []controlplane.Guardrail{{Event: "$pageview", Stat: controlplane.StatMean}}}},
		{"alpha", controlplane.NewReleasePlan{Steps: twoSteps().Steps, Guardrails: twoSteps().Guardrails, Alpha: 0.5}},
		{"on_regression", controlplane.NewReleasePlan{Steps: twoSteps().Steps, Guardrails: twoSteps().Guardrails, OnRegression: "panic"}},
	} {
		_, err := fx.plans.CreateReleasePlan(fx.ctx, fx.pid, fx.flag.ID, c.plan)
		var e *controlplane.Error
		if !errors.As(err, &e) || e.Kind != controlplane.Invalid || e.Attr != c.attr {
			t.Errorf("plan %+v: got %v, want a field error on %s", c.plan, err, c.attr)
		}
	}
	if got := fx.rollout(t); got != 20.0 {
		t.Fatalf("a refused plan changed the rollout to %v", got)
	}

	p := fx.start(t, twoSteps())
	if p.State != controlplane.PlanRunning || p.Step != 0 || len(p.Decisions) != 1 || p.Decisions[0].Kind != controlplane.DecisionStarted {
		t.Errorf("new plan: %+v", p)
	}
	if p.Guardrails[0].Stat != controlplane.StatCount || p.Guardrails[0].Direction != controlplane.DirectionIncrease || p.Alpha != 0.05 {
		t.Errorf("defaults not filled: %+v alpha %v", p.Guardrails[0], p.Alpha)
	}
	if got := fx.rollout(t); got != 50.0 {
		t.Errorf("rollout after start = %v, want the first step's 50", got)
	}
	if _, err := fx.plans.CreateReleasePlan(fx.ctx, fx.pid, fx.flag.ID, twoSteps()); !errors.Is(err, controlplane.ErrPlanActive) {
		t.Errorf("a second plan on the flag: %v", err)
	}
	// The start is a flag write like any other: in the activity log as the user, marked as the plan's.
	var n int
	if err := fx.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM activity_log WHERE item_id = $1
		AND detail->'trigger'->>'job_type' = 'release_plan'`, fmt.Sprint(fx.flag.ID)).Scan(&n); err != nil || n != 1 {
		t.Errorf("activity entries of the plan: %d, %v", n, err)
	}

	held, err := fx.flags.CreateFlag(fx.ctx, fx.pid, controlplane.FlagUpdate{Key: ptr("held-out"),
		Filters: json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 20}], "holdout": {"id": 1, "exclusion_percentage": 10}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.plans.CreateReleasePlan(fx.ctx, fx.pid, held.ID, twoSteps()); !errors.Is(err, controlplane.ErrPlanFlagShape) {
		t.Errorf("a plan on a flag with a holdout: %v", err)
	}
}

func TestReleasePlanPauseResumeCancel(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	fx.start(t, twoSteps())
	for _, c := range []struct {
		state, want string
		ok          bool
	}{
		{controlplane.PlanRunning, "", false}, // running already
		{controlplane.PlanPaused, controlplane.PlanPaused, true},
		{"completed", "", false}, // not a person's to set
		{controlplane.PlanRunning, controlplane.PlanRunning, true},
		{controlplane.PlanCancelled, controlplane.PlanCancelled, true},
	} {
		p, err := fx.plans.SetReleasePlanState(fx.ctx, fx.pid, fx.flag.ID, c.state)
		if !c.ok {
			if controlplane.ErrorKind(err) != controlplane.Invalid {
				t.Errorf("set %s: %v, want a field error", c.state, err)
			}
			continue
		}
		if err != nil || p.State != c.want {
			t.Fatalf("set %s: %+v, %v", c.state, p, err)
		}
	}
	if _, err := fx.plans.SetReleasePlanState(fx.ctx, fx.pid, fx.flag.ID, controlplane.PlanPaused); controlplane.ErrorKind(err) != controlplane.NotFound {
		t.Errorf("pausing a cancelled plan: %v, want not found (no active plan)", err)
	}
	p, err := fx.plans.FindReleasePlan(fx.ctx, fx.pid, fx.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, d := range p.Decisions {
		kinds = append(kinds, d.Kind)
	}
	if got := strings.Join(kinds, ","); got != "started,paused,resumed,cancelled" {
		t.Errorf("decisions: %s", got)
	}
	if got := fx.rollout(t); got != 50.0 {
		t.Errorf("cancelling moved the rollout to %v; it stays where the plan left it", got)
	}
	// A new plan may start once the last one ended.
	fx.start(t, twoSteps())
}

// TestReleasePlanCounting: arms and metrics are counted as events are stored; an event
// before the user's exposure, a user's second exposure and a redelivered event count nothing.
func TestReleasePlanCounting(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	fx.start(t, twoSteps())
	now := time.Now()
	ev := func(name, d string, at time.Time, props string) controlplane.Event {
		return controlplane.Event{UUID: uuid.NewString(), ProjectID: fx.pid, Name: name, DistinctID: d,
			Properties: json.RawMessage(props), Timestamp: at, ReceivedAt: now}
	}
	exposed := func(resp string) string {
		return `{"$feature_flag": "checkout-v2", "$feature_flag_response": ` + resp + `}`
	}
	batch := []controlplane.Event{
		ev("$exception", "a", now.Add(-time.Minute), `{}`), // before a's exposure
		ev("$feature_flag_called", "a", now, exposed("true")),
		ev("$feature_flag_called", "a", now.Add(time.Second), exposed("false")), // a stays treatment
		ev("$feature_flag_called", "b", now, exposed("false")),
		ev("$feature_flag_called", "c", now, `{"$feature_flag": "other", "$feature_flag_response": true}`),
		ev("$exception", "a", now.Add(time.Second), `{}`),
		ev("$exception", "a", now.Add(2*time.Second), `{}`),
		ev("$exception", "b", now.Add(time.Second), `{}`),
		ev("$exception", "nobody", now.Add(time.Second), `{}`),
		ev("$pageview", "a", now.Add(time.Second), `{"$duration": 100}`),
		ev("$pageview", "a", now.Add(time.Second), `{"$duration": 300}`),
		ev("$pageview", "b", now.Add(time.Second), `{"$duration": "slow"}`), // not a number: no value
	}
	for range 2 { // the second delivery is all duplicates
		if _, err := fx.events.Ingest(t.Context(), []controlplane.EventBatch{{ProjectID: fx.pid, Events: batch}}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := fx.plans.FindReleasePlan(fx.ctx, fx.pid, fx.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Tally.Exposed[0]; got != (controlplane.ArmCounts{Control: 1, Treatment: 1}) {
		t.Errorf("arms: %+v", got)
	}
	exc, dur := p.Tally.Metrics[0], p.Tally.Metrics[1]
	if exc.Treatment.N != 1 || exc.Treatment.Sum != 2 || exc.Treatment.SumSquares != 4 || exc.Control.Sum != 1 {
		t.Errorf("$exception per user: %+v", exc)
	}
	if dur.Treatment.N != 1 || dur.Treatment.Sum != 200 || dur.Control.N != 0 {
		t.Errorf("mean $duration: %+v", dur)
	}
}

func TestReleasePlanRollsBackOnRegression(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	fx.start(t, twoSteps())
	fx.traffic(t, "c", 0, 600, 20, "$exception", false) // 5%
	fx.traffic(t, "t", 0, 600, 3, "$exception", true)   // 33%
	decided, err := fx.plans.EvaluatePlans(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(decided) != 1 || decided[0].Kind != controlplane.DecisionRolledBack {
		t.Fatalf("decisions: %+v", decided)
	}
	if got := fx.rollout(t); got != 20.0 {
		t.Errorf("rollout after the rollback = %v, want the 20 from before the plan", got)
	}
	p, err := fx.plans.FindReleasePlan(fx.ctx, fx.pid, fx.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	results := p.Results()
	if p.State != controlplane.PlanRolledBack || !results[0].Verdict.Regression || p.EndedSnapshotVersion == 0 {
		t.Errorf("plan after rollback: state %s, %+v, version %d", p.State, results[0].Verdict, p.EndedSnapshotVersion)
	}
	if !strings.Contains(p.Decisions[len(p.Decisions)-1].Reason, "$exception per user regressed") {
		t.Errorf("reason: %q", p.Decisions[len(p.Decisions)-1].Reason)
	}
	var user int64
	if err := fx.db.Pool.QueryRow(t.Context(), `SELECT user_id FROM activity_log WHERE item_id = $1
		AND detail->'trigger'->'payload'->>'decision' = 'rolled_back'`, fmt.Sprint(fx.flag.ID)).Scan(&user); err != nil || user != p.CreatedBy.ID {
		t.Errorf("the rollback's activity entry: user %d, %v; want the plan's creator %d", user, err, p.CreatedBy.ID)
	}
	if again, _ := fx.plans.EvaluatePlans(t.Context()); len(again) != 0 {
		t.Errorf("an ended plan decided again: %+v", again)
	}
}

func TestReleasePlanAdvancesAndCompletes(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	n := twoSteps()
	n.Steps[0].MinExposures = 1000
	fx.start(t, n)
	fx.traffic(t, "c", 0, 300, 10, "$exception", false)
	fx.traffic(t, "t", 0, 300, 10, "$exception", true)
	if decided, err := fx.plans.EvaluatePlans(t.Context()); err != nil || len(decided) != 0 {
		t.Fatalf("600 of 1,000 exposures: %+v, %v", decided, err)
	}
	fx.traffic(t, "c", 300, 500, 10, "$exception", false)
	fx.traffic(t, "t", 300, 500, 10, "$exception", true)
	decided, err := fx.plans.EvaluatePlans(t.Context())
	if err != nil || len(decided) != 1 || decided[0].Kind != controlplane.DecisionAdvanced || decided[0].Step != 1 {
		t.Fatalf("decisions: %+v, %v", decided, err)
	}
	if got := fx.rollout(t); got != 100.0 {
		t.Errorf("rollout = %v, want 100", got)
	}
	decided, err = fx.plans.EvaluatePlans(t.Context())
	if err != nil || len(decided) != 1 || decided[0].Kind != controlplane.DecisionCompleted {
		t.Fatalf("decisions at 100%%: %+v, %v", decided, err)
	}
	p, err := fx.plans.FindReleasePlan(fx.ctx, fx.pid, fx.flag.ID)
	if err != nil || p.State != controlplane.PlanCompleted {
		t.Fatalf("plan: %+v, %v", p, err)
	}
}

func TestReleasePlanPausesOnSampleRatioMismatch(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	fx.start(t, twoSteps())
	fx.traffic(t, "c", 0, 200, 20, "$exception", false)
	fx.traffic(t, "t", 0, 400, 20, "$exception", true) // a 50% step split 1:2
	decided, err := fx.plans.EvaluatePlans(t.Context())
	if err != nil || len(decided) != 1 || decided[0].Kind != controlplane.DecisionPaused ||
		!strings.Contains(decided[0].Reason, "Sample ratio mismatch") {
		t.Fatalf("decisions: %+v, %v", decided, err)
	}
	if got := fx.rollout(t); got != 50.0 {
		t.Errorf("a pause moved the rollout to %v", got)
	}
}

// TestReleasePlanCreatorGone: a plan whose creator may no longer change the flag cannot
// change it either: the write is refused as theirs would be, and the plan pauses saying why.
func TestReleasePlanCreatorGone(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	p := fx.start(t, twoSteps())
	fx.traffic(t, "c", 0, 100, 0, "", false)
	fx.traffic(t, "t", 0, 100, 0, "", true)
	if _, err := fx.db.Pool.Exec(t.Context(), `UPDATE users SET removed_at = now() WHERE id = $1`, p.CreatedBy.ID); err != nil {
		t.Fatal(err)
	}
	decided, err := fx.plans.EvaluatePlans(t.Context())
	if err != nil || len(decided) != 1 || decided[0].Kind != controlplane.DecisionFailed {
		t.Fatalf("decisions: %+v, %v", decided, err)
	}
	if got := fx.rollout(t); got != 50.0 {
		t.Errorf("rollout = %v: a removed user's plan changed the flag", got)
	}
}

// TestReleasePlanUnitsBounded: a plan counts at most MaxPlanUnits users; past that, new
// exposures are not counted (and cost no row).
func TestReleasePlanUnitsBounded(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	p := fx.start(t, twoSteps())
	if _, err := fx.db.Pool.Exec(t.Context(), `UPDATE release_plan_tallies SET units = $2 WHERE plan_id = $1`,
		p.ID, controlplane.MaxPlanUnits-2); err != nil {
		t.Fatal(err)
	}
	fx.traffic(t, "c", 0, 5, 0, "", false)
	fx.traffic(t, "t", 0, 5, 0, "", true) // the plan is full: nothing counted
	var rows, units int64
	if err := fx.db.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM release_plan_units WHERE plan_id = $1),
		(SELECT units FROM release_plan_tallies WHERE plan_id = $1)`, p.ID).Scan(&rows, &units); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || units != controlplane.MaxPlanUnits {
		t.Errorf("%d rows, tally %d; want 2 rows and the tally at the bound %d", rows, units, controlplane.MaxPlanUnits)
	}
}

// TestReleasePlansCountedTogether checks that one batch is counted for each of a project's
// plans on its own terms: each plan's flag, guardrails and room, from the same events.
func TestReleasePlansCountedTogether(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	first := fx.start(t, twoSteps()) // $exception per user, mean $pageview $duration
	search, err := fx.flags.CreateFlag(fx.ctx, fx.pid, controlplane.FlagUpdate{Key: ptr("search-v2"),
		Filters: json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 20}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	second, err := fx.plans.CreateReleasePlan(fx.ctx, fx.pid, search.ID, controlplane.NewReleasePlan{
		Steps:      []controlplane.ReleaseStep{{RolloutPercentage: 50}},
		Guardrails: []controlplane.Guardrail{{Event: "$pageview"}, {Event: "$pageview", Property: "$load", Stat: controlplane.StatMean}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.db.Pool.Exec(t.Context(), `UPDATE release_plan_tallies SET units = $2 WHERE plan_id = $1`,
		second.ID, controlplane.MaxPlanUnits-1); err != nil { // room for one user
		t.Fatal(err)
	}
	now := time.Now()
	ev := func(name, d string, at time.Time, props string) controlplane.Event {
		return controlplane.Event{UUID: uuid.NewString(), ProjectID: fx.pid, Name: name, DistinctID: d,
			Properties: json.RawMessage(props), Timestamp: at, ReceivedAt: now}
	}
	later := now.Add(time.Second)
	batch := []controlplane.Event{
		ev("$feature_flag_called", "a", now, `{"$feature_flag": "checkout-v2", "$feature_flag_response": true}`),
		ev("$feature_flag_called", "b", now, `{"$feature_flag": "checkout-v2", "$feature_flag_response": false}`), // no reason: eligible, no filters
		ev("$feature_flag_called", "c", now, `{"$feature_flag": "search-v2", "$feature_flag_response": true}`),
		ev("$feature_flag_called", "a", now, `{"$feature_flag": "search-v2", "$feature_flag_response": true}`), // a before c by id
		ev("$exception", "a", later, `{}`),
		ev("$pageview", "a", later, `{"$duration": 100, "$load": 2}`),
		ev("$pageview", "b", later, `{"$duration": 300, "$duration": 500}`), // the last key counts
		ev("$pageview", "c", later, `{"$load": 4}`),                         // c found no room
	}
	if _, err := fx.events.Ingest(t.Context(), []controlplane.EventBatch{{ProjectID: fx.pid, Events: batch}}); err != nil {
		t.Fatal(err)
	}
	p, err := fx.plans.FindReleasePlan(fx.ctx, fx.pid, fx.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != first.ID || p.Tally.Exposed[0] != (controlplane.ArmCounts{Control: 1, Treatment: 1}) {
		t.Errorf("checkout-v2 arms: %+v", p.Tally.Exposed)
	}
	exc, dur := p.Tally.Metrics[0], p.Tally.Metrics[1]
	if exc.Treatment.N != 1 || exc.Treatment.Sum != 1 || exc.Control.N != 1 || exc.Control.Sum != 0 {
		t.Errorf("checkout-v2 $exception per user: %+v", exc)
	}
	if dur.Treatment.N != 1 || dur.Treatment.Sum != 100 || dur.Control.N != 1 || dur.Control.Sum != 500 {
		t.Errorf("checkout-v2 mean $duration: %+v", dur)
	}
	q, err := fx.plans.FindReleasePlan(fx.ctx, fx.pid, search.ID)
	if err != nil {
		t.Fatal(err)
	}
	if q.ID != second.ID || q.Tally.Exposed[0] != (controlplane.ArmCounts{Treatment: 1}) {
		t.Errorf("search-v2 arms: %+v", q.Tally.Exposed)
	}
	views, load := q.Tally.Metrics[0], q.Tally.Metrics[1]
	if views.Treatment.N != 1 || views.Treatment.Sum != 1 || load.Treatment.N != 1 || load.Treatment.Sum != 2 {
		t.Errorf("search-v2 $pageviews %+v, mean $load %+v", views, load)
	}
	var units int64
	if err := fx.db.Pool.QueryRow(t.Context(), `SELECT units FROM release_plan_tallies WHERE plan_id = $1`, second.ID).Scan(&units); err != nil {
		t.Fatal(err)
	}
	if units != controlplane.MaxPlanUnits {
		t.Errorf("search-v2 tally %d, want the bound %d", units, controlplane.MaxPlanUnits)
	}
}

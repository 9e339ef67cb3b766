package postgres_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestReleasePlanEligibility: on a multivariate flag with property filters, a plan counts in
// treatment every answer that is a variant, and in control only the false answers of users
// known to match the conditions: by the SDK's reason (description or code) or, without a
// telling reason, by evaluating the flag for the user's stored properties. A false answer
// that neither decides is in no arm and counted as undecided; an ineligible one is dropped.
func TestReleasePlanEligibility(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t)
	var err error
	fx.flag, err = fx.flags.CreateFlag(fx.ctx, fx.pid, controlplane.FlagUpdate{Key: ptr("targeted"), Active: ptr(true),
		Filters: json.RawMessage(`{"groups": [{"properties": [{"key": "email", "value": "@acme.com", "operator": "icontains", "type": "person"}],
			"rollout_percentage": 20}],
			"multivariate": {"variants": [{"key": "blue", "rollout_percentage": 50}, {"key": "green", "rollout_percentage": 50}]}}`)})
	if err != nil {
		t.Fatal(err)
	}
	fx.start(t, twoSteps())

	now := time.Now()
	ev := func(name, d string, at time.Time, props map[string]any) controlplane.Event {
		raw, _ := json.Marshal(props)
		return controlplane.Event{UUID: uuid.NewString(), ProjectID: fx.pid, Name: name, DistinctID: d, Properties: raw,
			Timestamp: at, ReceivedAt: now}
	}
	ingest := func(evs ...controlplane.Event) {
		t.Helper()
		if _, err := fx.events.Ingest(t.Context(), []controlplane.EventBatch{{ProjectID: fx.pid, Events: evs}}); err != nil {
			t.Fatal(err)
		}
	}
	// Stored properties first: matching, not matching, and a person without the property.
	ingest(ev("$identify", "eval-in", now.Add(-time.Hour), map[string]any{"$set": map[string]any{"email": "ada@acme.com"}}),
		ev("$identify", "eval-out", now.Add(-time.Hour), map[string]any{"$set": map[string]any{"email": "bob@other.org"}}),
		ev("$identify", "eval-none", now.Add(-time.Hour), map[string]any{"$set": map[string]any{"plan": "pro"}}))

	exposed := func(d string, response any, reason string) controlplane.Event {
		props := map[string]any{"$feature_flag": "targeted", "$feature_flag_response": response}
		if reason != "" {
			props["$feature_flag_reason"] = reason
		}
		return ev("$feature_flag_called", d, now, props)
	}
	ingest(
		exposed("blue-user", "blue", "Matched condition set 1"),
		exposed("green-user", "green", ""),
		exposed("reason-out-of-bound", false, "Out of rollout bound"),
		exposed("code-out-of-bound", false, "out_of_rollout_bound"),
		exposed("reason-no-match", false, "No matching condition set"),
		exposed("eval-in", false, "Evaluated locally"), // a local evaluation's reason says nothing: evaluated
		exposed("eval-out", false, ""),
		exposed("eval-none", false, ""),     // the person has no email: undecided
		exposed("nobody-stored", false, ""), // a person made by this event, without properties: undecided
		exposed("missing", nil, ""),         // the flag was missing: no answer
	)
	p, err := fx.plans.FindReleasePlan(fx.ctx, fx.pid, fx.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Tally.Exposed[0]; got != (controlplane.ArmCounts{Control: 3, Treatment: 2}) {
		t.Errorf("arms: %+v, want 3 control (two by reason, eval-in) and 2 treatment (the variants)", got)
	}
	if p.Tally.Undecided != 2 {
		t.Errorf("undecided: %d, want 2 (eval-none, nobody-stored)", p.Tally.Undecided)
	}
	var units []string
	rows, err := fx.db.Pool.Query(t.Context(), `SELECT distinct_id || ':' || treatment FROM release_plan_units WHERE plan_id = $1 ORDER BY 1`, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		units = append(units, u)
	}
	want := []string{"blue-user:true", "code-out-of-bound:false", "eval-in:false", "green-user:true", "reason-out-of-bound:false"}
	if len(units) != len(want) {
		t.Fatalf("units %v, want %v", units, want)
	}
	for i := range want {
		if units[i] != want[i] {
			t.Errorf("units %v, want %v", units, want)
			break
		}
	}

	// A user an arm holds is not evaluated again, though their stored person matches (eval-in,
	// in control): only eval-out and eval-none, in no arm, have their person read.
	toEvaluate, err := postgres.PersonsToEvaluate(t.Context(), fx.db, fx.pid, p.ID, []string{"eval-in", "eval-out", "eval-none", "blue-user"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(toEvaluate) != "[eval-none eval-out]" {
		t.Errorf("persons evaluated: %v, want [eval-none eval-out]", toEvaluate)
	}

	// An undecided user whose later exposure decides joins that arm, and is no longer counted
	// undecided when exposed again undecided.
	ingest(exposed("eval-none", "green", ""), exposed("eval-none", false, ""))
	p, err = fx.plans.FindReleasePlan(fx.ctx, fx.pid, fx.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Tally.Exposed[0]; got.Treatment != 3 || p.Tally.Undecided != 2 {
		t.Errorf("after a deciding exposure: %+v, undecided %d", got, p.Tally.Undecided)
	}
}

// BenchmarkIngestTargetedPlan stores batches of 1,000 events (200 users with stored emails,
// one event in five an exposure answering false) for a project with a release plan on a flag
// filtered by email: with the SDK's reason, and without one, when the control plane
// evaluates the flag for each exposed user's stored properties.
func BenchmarkIngestTargetedPlan(b *testing.B) {
	for _, reason := range []string{"Out of rollout bound", ""} {
		name := "sdk-reason"
		if reason == "" {
			name = "evaluated"
		}
		b.Run(name, func(b *testing.B) {
			fx := newPlanFixture(b)
			var err error
			fx.flag, err = fx.flags.CreateFlag(fx.ctx, fx.pid, controlplane.FlagUpdate{Key: ptr("targeted"), Active: ptr(true),
				Filters: json.RawMessage(`{"groups": [{"properties": [{"key": "email", "value": "@acme.com", "operator": "icontains", "type": "person"}], "rollout_percentage": 20}]}`)})
			if err != nil {
				b.Fatal(err)
			}
			fx.start(b, twoSteps())
			now := time.Now()
			ingest := func(evs []controlplane.Event) {
				if _, err := fx.events.Ingest(b.Context(), []controlplane.EventBatch{{ProjectID: fx.pid, Events: evs}}); err != nil {
					b.Fatal(err)
				}
			}
			var seed []controlplane.Event
			for u := range 200 {
				email := "u@acme.com"
				if u%2 == 1 {
					email = "u@other.org"
				}
				raw, _ := json.Marshal(map[string]any{"$set": map[string]any{"email": email}})
				seed = append(seed, controlplane.Event{UUID: uuid.NewString(), ProjectID: fx.pid, Name: "$identify",
					DistinctID: fmt.Sprintf("user-%d", u), Properties: raw, Timestamp: now, ReceivedAt: now})
			}
			ingest(seed)
			batches := make([][]controlplane.Event, b.N)
			for i := range batches {
				for j := range 1000 {
					props := map[string]any{"$current_url": "https://shop.example.com/p/42"}
					name := "$pageview"
					if j%5 == 0 {
						name, props = "$feature_flag_called", map[string]any{"$feature_flag": "targeted", "$feature_flag_response": false}
						if reason != "" {
							props["$feature_flag_reason"] = reason
						}
					}
					raw, _ := json.Marshal(props)
					batches[i] = append(batches[i], controlplane.Event{UUID: uuid.NewString(), ProjectID: fx.pid, Name: name,
						DistinctID: fmt.Sprintf("user-%d", j%200), Properties: raw, Timestamp: now, ReceivedAt: now})
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ingest(batches[i])
			}
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
		})
	}
}

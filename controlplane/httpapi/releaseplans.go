package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/confseq"
)

// armJSON is one arm of a guardrail: its users and their mean value.
type armJSON struct {
	Users int64   `json:"users"`
	Mean  float64 `json:"mean"`
}

// changeJSON is the estimated change of a guardrail's metric, treatment over control, with
// its always-valid interval: relative ((t-c)/c) while the control mean is positive, else the
// absolute difference per user.
type changeJSON struct {
	Relative bool    `json:"relative"`
	Estimate float64 `json:"estimate"`
	Lower    float64 `json:"lower"`
	Upper    float64 `json:"upper"`
}

type guardrailJSON struct {
	controlplane.Guardrail
	Control    armJSON     `json:"control"`
	Treatment  armJSON     `json:"treatment"`
	Change     *changeJSON `json:"change"`
	Regression bool        `json:"regression"`
	// History is the guardrail's points over time, with ?history=true (releaseplanhistory.go).
	History *[]planPointJSON `json:"history,omitempty"`
}

type exposuresJSON struct {
	Control           int64   `json:"control"`
	Treatment         int64   `json:"treatment"`
	ExpectedTreatment float64 `json:"expected_treatment"`
	SRMPValue         float64 `json:"srm_p_value"`
	// Undecided counts the false exposures put in neither arm: nothing said whether their
	// users were eligible for the flag's conditions. Exposures of users not decided are
	// counted once per user per batch of ingested events, again in later batches.
	Undecided int64 `json:"undecided"`
}

// endedJSON says where the write that ended the plan (a rollback) is live: the snapshot
// version that holds it and whether every connected edge serves it now.
type endedJSON struct {
	SnapshotVersion int64 `json:"snapshot_version"`
	LiveEverywhere  bool  `json:"live_everywhere"`
	Live            int   `json:"live"`
	Total           int   `json:"total"`
}

// planDecisionJSON is one decision of a plan, its time written as the API writes times.
type planDecisionJSON struct {
	At     timeJSON `json:"at"`
	Kind   string   `json:"kind"`
	Step   int      `json:"step"`
	Reason string   `json:"reason"`
}

type releasePlanJSON struct {
	ID                 int64                      `json:"id"`
	FeatureFlag        int64                      `json:"feature_flag"`
	FlagKey            string                     `json:"flag_key"`
	State              string                     `json:"state"`
	Step               int                        `json:"step"`
	RolloutPercentage  float64                    `json:"rollout_percentage"`
	StepStartedAt      timeJSON                   `json:"step_started_at"`
	Steps              []controlplane.ReleaseStep `json:"steps"`
	Alpha              float64                    `json:"alpha"`
	OnRegression       string                     `json:"on_regression"`
	MinExposuresPerArm int64                      `json:"min_exposures_per_arm"`
	Exposures          exposuresJSON              `json:"exposures"`
	Guardrails         []guardrailJSON            `json:"guardrails"`
	Decisions          []planDecisionJSON         `json:"decisions"`
	RolledBack         *endedJSON                 `json:"rollback"`
	// ApprovedChangeRequest is the change request whose approval started the plan, and
	// WaitingChangeRequest the one its next step waits for (null when none).
	ApprovedChangeRequest *string   `json:"approved_change_request_id"`
	WaitingChangeRequest  *string   `json:"waiting_change_request_id"`
	CreatedBy             *userJSON `json:"created_by"`
	CreatedAt             timeJSON  `json:"created_at"`
	UpdatedAt             timeJSON  `json:"updated_at"`
}

func (s *Server) newReleasePlanJSON(r *http.Request, p *controlplane.ReleasePlan) (releasePlanJSON, error) {
	out := releasePlanJSON{ID: p.ID, FeatureFlag: p.FlagID, FlagKey: p.FlagKey, State: p.State, Step: p.Step,
		RolloutPercentage: p.Steps[p.Step].RolloutPercentage, StepStartedAt: timeJSON(p.StepStartedAt), Steps: p.Steps,
		Alpha: p.Alpha, OnRegression: p.OnRegression, MinExposuresPerArm: p.MinExposuresPerArm, Decisions: []planDecisionJSON{},
		CreatedBy: newUserJSON(p.CreatedBy), CreatedAt: timeJSON(p.CreatedAt), UpdatedAt: timeJSON(p.UpdatedAt),
		ApprovedChangeRequest: nonEmpty(p.ApprovedChangeRequest), WaitingChangeRequest: nonEmpty(p.WaitingChangeRequest)}
	for _, d := range p.Decisions {
		out.Decisions = append(out.Decisions, planDecisionJSON{At: timeJSON(d.At), Kind: d.Kind, Step: d.Step, Reason: d.Reason})
	}
	control, treatment, expected := p.Totals()
	pv, _ := confseq.SampleRatioMismatch(control, treatment, expected)
	out.Exposures = exposuresJSON{Control: control, Treatment: treatment, ExpectedTreatment: expected, SRMPValue: pv,
		Undecided: p.Tally.Undecided}
	for _, g := range p.Results() {
		gj := guardrailJSON{Guardrail: g.Guardrail, Regression: g.Verdict.Regression,
			Control:   armJSON{Users: g.Arms.Control.N, Mean: g.Arms.Control.Mean()},
			Treatment: armJSON{Users: g.Arms.Treatment.N, Mean: g.Arms.Treatment.Mean()}}
		if v := g.Verdict; v.Ready && !math.IsInf(v.Lower, 0) && !math.IsNaN(v.Lower) {
			gj.Change = &changeJSON{Relative: v.Effect.Relative, Estimate: v.Effect.Estimate, Lower: v.Lower, Upper: v.Upper}
		}
		out.Guardrails = append(out.Guardrails, gj)
	}
	if p.State == controlplane.PlanRolledBack && p.EndedSnapshotVersion > 0 && s.cfg.Rollout != nil {
		edges, done, err := s.cfg.Rollout.Wait(r.Context(), p.ProjectID, p.EndedSnapshotVersion, 0)
		if err != nil {
			return out, err
		}
		out.RolledBack = &endedJSON{SnapshotVersion: p.EndedSnapshotVersion, LiveEverywhere: done,
			Live: len(edges.Edges) - len(edges.Laggards(p.EndedSnapshotVersion)), Total: len(edges.Edges)}
	}
	return out, nil
}

func (s *Server) handleGetReleasePlan(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	history, err := wantsHistory(r)
	if err != nil {
		return answer{}, err
	}
	p, err := s.cfg.ReleasePlans.FindReleasePlan(r.Context(), c.project.ID, id)
	if err != nil {
		return answer{}, err
	}
	out, err := s.newReleasePlanJSON(r, p)
	if err == nil && history {
		err = s.addHistory(r, p, &out)
	}
	return ok(out), err
}

func (s *Server) handleCreateReleasePlan(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	n, err := decodeNewReleasePlan(r)
	if err != nil {
		return answer{}, err
	}
	p, err := s.cfg.ReleasePlans.CreateReleasePlan(r.Context(), c.project.ID, id, n)
	if err != nil {
		return answer{}, err
	}
	out, err := s.newReleasePlanJSON(r, p)
	return created(out), err
}

// handleSetReleasePlanState returns the handler of …/pause/, …/resume/ or …/cancel/.
func (s *Server) handleSetReleasePlanState(state string) func(r *http.Request, c *call) (answer, error) {
	return func(r *http.Request, c *call) (answer, error) {
		id, err := pathID(r)
		if err != nil {
			return answer{}, err
		}
		p, err := s.cfg.ReleasePlans.SetReleasePlanState(r.Context(), c.project.ID, id, state)
		if err != nil {
			return answer{}, err
		}
		out, err := s.newReleasePlanJSON(r, p)
		return ok(out), err
	}
}

// releasePlanBody is the body that starts a plan; unknown fields are refused, so a misspelt
// guardrail field is not silently a different guardrail.
type releasePlanBody struct {
	Steps              *[]controlplane.ReleaseStep `json:"steps"`
	Guardrails         *[]controlplane.Guardrail   `json:"guardrails"`
	Alpha              *float64                    `json:"alpha"`
	OnRegression       *string                     `json:"on_regression"`
	MinExposuresPerArm *int64                      `json:"min_exposures_per_arm"`
}

// decodeNewReleasePlan reads a plan to start: field by field, so that a wrongly typed field
// is reported with its name, then each step and guardrail strictly.
func decodeNewReleasePlan(r *http.Request) (controlplane.NewReleasePlan, error) {
	var n controlplane.NewReleasePlan
	f, err := decodeObject(r)
	if err != nil {
		return n, err
	}
	for name := range f {
		switch name {
		case "steps", "guardrails", "alpha", "on_regression", "min_exposures_per_arm":
		default:
			return n, controlplane.FieldError(name, "invalid_input", "Unknown field.")
		}
	}
	var b releasePlanBody
	for _, step := range []error{
		strictList(f, "steps", &b.Steps, "a list of steps: {rollout_percentage, min_duration_seconds, min_exposures}"),
		strictList(f, "guardrails", &b.Guardrails, "a list of guardrails: {event, property, stat, direction}"),
		decode(f, "alpha", &b.Alpha, "a number"),
		f.str("on_regression", &b.OnRegression),
		decode(f, "min_exposures_per_arm", &b.MinExposuresPerArm, "an integer"),
	} {
		if step != nil {
			return n, step
		}
	}
	if b.Steps != nil {
		n.Steps = *b.Steps
	}
	if b.Guardrails != nil {
		n.Guardrails = *b.Guardrails
	}
	if b.Alpha != nil {
		n.Alpha = *b.Alpha
	}
	if b.OnRegression != nil {
		n.OnRegression = *b.OnRegression
	}
	if b.MinExposuresPerArm != nil {
		n.MinExposuresPerArm = *b.MinExposuresPerArm
	}
	return n, n.Validate()
}

// strictList reads field name, a list of objects, refusing unknown keys in them.
func strictList[T any](f fields, name string, dst **[]T, what string) error {
	raw, ok := f[name]
	if !ok {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	v := new([]T)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		detail := "Must be " + what + "."
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			detail = "Unknown " + strings.TrimPrefix(err.Error(), "json: unknown ") + " in " + name + ": must be " + what + "."
		}
		return typeError(name, detail)
	}
	if isNull(raw) {
		return typeError(name, "This field may not be null.")
	}
	*dst = v
	return nil
}

// nonEmpty is s, or nil (JSON null) when it is empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

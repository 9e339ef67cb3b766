package flagsascode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// NewPlan reads the project and returns the changes that would make it match want (see
// Plan); prune adds the deletions.
func NewPlan(ctx context.Context, c *Client, want *State, prune bool) (*Plan, error) {
	l, err := readLive(ctx, c)
	if err != nil {
		return nil, err
	}
	return newPlan(want, l, prune)
}

// Result is what Apply did.
type Result struct {
	// Plan is the plan Apply carried out.
	Plan *Plan
	// Applied are the changes made.
	Applied []Change
	// Gated are the changes held for approval, each in its change request.
	Gated []GatedChange
	// Version is the latest snapshot version a flag write named (0 when no flag was
	// written). Cohort and feature writes name none: Client.CurrentVersion
	// covers them too.
	Version int64
}

// GatedChange is a change the project's approval policy held: it waits in a change request.
type GatedChange struct {
	Change          Change
	ChangeRequestID string
	Detail          string
}

// Apply makes the project match want: it plans (see NewPlan) and makes the plan's writes in
// its order, so a project that already matches gets no write at all (and no activity). A
// change the approval policy holds is reported in Result.Gated and the rest go on; any other
// refusal stops Apply, with the Result of what it did. want comes from Parse or an importer:
// both are checked before this point, so a refusal here is the server's (permissions, a
// change made meanwhile).
func Apply(ctx context.Context, c *Client, want *State, prune bool) (*Result, error) {
	l, err := readLive(ctx, c)
	if err != nil {
		return nil, err
	}
	plan, err := newPlan(want, l, prune)
	if err != nil {
		return nil, err
	}
	a := &applier{c: c, want: want, live: l, res: &Result{Plan: plan}}
	for _, ch := range plan.Changes {
		version, err := a.apply(ctx, ch)
		var apiErr *APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.Gated():
			a.res.Gated = append(a.res.Gated, GatedChange{Change: ch, ChangeRequestID: apiErr.ChangeRequestID, Detail: apiErr.Detail})
		case err != nil:
			return a.res, fmt.Errorf("%s %s %q: %w", ch.Action, ch.Kind, ch.Name, err)
		default:
			a.res.Applied = append(a.res.Applied, ch)
			a.res.Version = max(a.res.Version, version)
		}
	}
	return a.res, nil
}

// applier makes a plan's writes, keeping the ids of what it creates.
type applier struct {
	c    *Client
	want *State
	live *live
	res  *Result
}

func (a *applier) apply(ctx context.Context, ch Change) (int64, error) {
	switch ch.Kind {
	case KindCohort:
		return 0, a.applyCohort(ctx, ch)
	case KindFlag:
		return a.applyFlag(ctx, ch)
	default:
		return 0, a.applyFeature(ctx, ch)
	}
}

// cohortIDs maps a cohort reference (a name) to the id of the project's cohort.
func (a *applier) cohortIDs(filters map[string]any) (any, error) {
	var missing error
	out := mapReferences(filters, func(v any) any {
		name, _ := v.(string)
		id, ok := a.live.cohortIDs[name]
		if !ok {
			missing = fmt.Errorf("cohort %q does not exist (its creation is waiting for approval?)", name)
		}
		return id
	}, nil)
	return out, missing
}

func (a *applier) applyCohort(ctx context.Context, ch Change) error {
	co := a.want.Cohorts[ch.Name]
	values := map[string]any{"name": ch.Name, "description": co.Description, "is_static": co.IsStatic}
	if co.Filters != nil {
		filters, err := a.cohortIDs(co.Filters)
		if err != nil {
			return err
		}
		values["filters"] = filters
	}
	if ch.Action == Update {
		_, err := a.c.do(ctx, http.MethodPatch, cohortsPath+strconv.FormatInt(a.live.cohortIDs[ch.Name], 10)+"/", pick(values, ch.fields), nil)
		return err
	}
	var out created
	if _, err := a.c.do(ctx, http.MethodPost, cohortsPath, values, &out); err != nil {
		return err
	}
	id, err := strconv.ParseInt(string(out.ID), 10, 64)
	if err != nil {
		return fmt.Errorf("the created cohort's id %s: %w", out.ID, err)
	}
	a.live.cohortIDs[ch.Name] = id
	return nil
}

func (a *applier) applyFlag(ctx context.Context, ch Change) (int64, error) {
	if ch.Action == Delete {
		return a.c.do(ctx, http.MethodPatch, flagsPath+strconv.FormatInt(a.live.flagIDs[ch.Name], 10)+"/", map[string]any{"deleted": true}, nil)
	}
	f := a.want.Flags[ch.Name]
	filters, err := a.cohortIDs(f.Filters)
	if err != nil {
		return 0, err
	}
	values := map[string]any{"key": ch.Name, "name": f.Name, "active": f.Active, "filters": filters,
		"tags": sortedSet(f.Tags), "evaluation_tags": sortedSet(f.EvaluationContexts), "evaluation_runtime": f.EvaluationRuntime,
		"ensure_experience_continuity": f.EnsureExperienceContinuity, "bucketing_identifier": nil}
	if f.BucketingIdentifier != "" {
		values["bucketing_identifier"] = f.BucketingIdentifier
	}
	if ch.Action == Update {
		fields := ch.fields
		for _, field := range ch.fields {
			if field == "evaluation_contexts" { // the server checks them against the tags sent
				fields = append(fields, "evaluation_tags", "tags")
			}
		}
		return a.c.do(ctx, http.MethodPatch, flagsPath+strconv.FormatInt(a.live.flagIDs[ch.Name], 10)+"/", pick(values, fields), nil)
	}
	var out created
	version, err := a.c.do(ctx, http.MethodPost, flagsPath, values, &out)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseInt(string(out.ID), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the created flag's id %s: %w", out.ID, err)
	}
	a.live.flagIDs[ch.Name] = id
	return version, nil
}

func (a *applier) applyFeature(ctx context.Context, ch Change) error {
	path := featuresPath + url.PathEscape(a.live.featureIDs[ch.Name]) + "/"
	switch ch.Action {
	case Delete:
		_, err := a.c.do(ctx, http.MethodDelete, path, nil, nil)
		return err
	case Update:
		f := a.want.Features[ch.Name]
		values := map[string]any{"description": f.Description, "stage": f.Stage, "documentation_url": f.DocumentationURL}
		_, err := a.c.do(ctx, http.MethodPatch, path, pick(values, ch.fields), nil)
		return err
	}
	f := a.want.Features[ch.Name]
	flagID, ok := a.live.flagIDs[f.Flag]
	if !ok {
		return fmt.Errorf("flag %q does not exist (its creation is waiting for approval?)", f.Flag)
	}
	var out created
	_, err := a.c.do(ctx, http.MethodPost, featuresPath, map[string]any{"name": ch.Name, "description": f.Description,
		"stage": f.Stage, "documentation_url": f.DocumentationURL, "feature_flag_id": flagID}, &out)
	if err == nil {
		var id string
		if json.Unmarshal(out.ID, &id) == nil {
			a.live.featureIDs[ch.Name] = id
		}
	}
	return err
}

// pick returns the fields of values named.
func pick(values map[string]any, fields []string) map[string]any {
	out := map[string]any{}
	for _, f := range fields {
		if v, ok := values[f]; ok {
			out[f] = v
		}
	}
	return out
}

package flagsascode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// live is a project as its API shows it: its State (every flag, cohort and feature, cohorts
// referred to by name where the name is unique) and the ids needed to change it.
type live struct {
	state      *State
	flagIDs    map[string]int64
	cohortIDs  map[string]int64
	featureIDs map[string]string
	// ambiguous lists the names several cohorts or features share (values: what shares it),
	// which the file cannot tell apart.
	ambiguousCohorts  map[string][]int64
	ambiguousFeatures map[string]int
	// unknownCohorts are the ids flags use of cohorts the project does not have (deleted).
	unknownCohorts map[string][]int64
}

// readLive reads the project's flags, cohorts and early access features.
func readLive(ctx context.Context, c *Client) (*live, error) {
	flags, err := list[apiFlag](ctx, c, flagsPath)
	if err != nil {
		return nil, fmt.Errorf("read flags: %w", err)
	}
	cohorts, err := list[apiCohort](ctx, c, cohortsPath)
	if err != nil {
		return nil, fmt.Errorf("read cohorts: %w", err)
	}
	features, err := list[apiFeature](ctx, c, featuresPath)
	if err != nil {
		return nil, fmt.Errorf("read early access features: %w", err)
	}
	l := &live{state: NewState(), flagIDs: map[string]int64{}, cohortIDs: map[string]int64{}, featureIDs: map[string]string{},
		ambiguousCohorts: map[string][]int64{}, ambiguousFeatures: map[string]int{}, unknownCohorts: map[string][]int64{}}
	cohortName := map[int64]string{}
	for _, co := range cohorts {
		if co.Deleted {
			continue
		}
		if id, ok := l.cohortIDs[co.Name]; ok {
			if l.ambiguousCohorts[co.Name] == nil {
				l.ambiguousCohorts[co.Name] = []int64{id}
			}
			l.ambiguousCohorts[co.Name] = append(l.ambiguousCohorts[co.Name], co.ID)
			continue
		}
		l.cohortIDs[co.Name], cohortName[co.ID] = co.ID, co.Name
	}
	flagKey := map[string]string{}
	for _, f := range flags {
		flagKey[strconv.FormatInt(f.ID, 10)] = f.Key
	}
	var unknown []int64
	byName := func(v any) any {
		id, ok := cohortRefID(v)
		if !ok {
			return v
		}
		if name, ok := cohortName[id]; ok {
			return name
		}
		unknown = append(unknown, id)
		return v
	}
	byKey := func(k string) string {
		if key, ok := flagKey[k]; ok {
			return key
		}
		return k
	}
	for _, co := range cohorts {
		if co.Deleted || cohortName[co.ID] != co.Name {
			continue
		}
		filters, err := decodeFilters(co.Filters)
		if err != nil {
			return nil, fmt.Errorf("cohort %q: %w", co.Name, err)
		}
		out := &Cohort{Description: co.Description, IsStatic: co.IsStatic}
		if !co.IsStatic { // a static cohort is its members: its filters say nothing
			out.Filters = mapReferences(filters, byName, nil).(map[string]any)
		}
		l.state.Cohorts[co.Name] = out
	}
	for _, f := range flags {
		filters, err := decodeFilters(f.Filters)
		if err != nil {
			return nil, fmt.Errorf("flag %q: %w", f.Key, err)
		}
		unknown = nil
		out := &Flag{Name: f.Name, Active: f.Active, Filters: mapReferences(filters, byName, byKey).(map[string]any),
			Tags: sortedSet(f.Tags), EvaluationRuntime: f.EvaluationRuntime, EvaluationContexts: sortedSet(f.EvaluationTags),
			EnsureExperienceContinuity: f.EnsureExperienceContinuity}
		if f.BucketingIdentifier != nil {
			out.BucketingIdentifier = *f.BucketingIdentifier
		}
		if len(unknown) > 0 {
			l.unknownCohorts[f.Key] = unknown
		}
		l.state.Flags[f.Key], l.flagIDs[f.Key] = out, f.ID
	}
	for _, f := range features {
		if _, ok := l.featureIDs[f.Name]; ok {
			l.ambiguousFeatures[f.Name]++
			continue
		}
		out := &Feature{Description: f.Description, Stage: f.Stage, DocumentationURL: f.DocumentationURL}
		if f.FeatureFlag != nil {
			out.Flag = f.FeatureFlag.Key
		}
		l.state.Features[f.Name], l.featureIDs[f.Name] = out, f.ID
	}
	return l, nil
}

// decodeFilters decodes stored filters into the form they are compared in; null is {}.
func decodeFilters(raw json.RawMessage) (map[string]any, error) {
	var v map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("filters: %w", err)
		}
	}
	if v == nil {
		v = map[string]any{}
	}
	return normalize(v).(map[string]any), nil
}

// cohortRefID reads a cohort property's value as the API stores it: an id, as a number or
// a string of digits.
func cohortRefID(v any) (int64, bool) {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && x > 0 {
			return int64(x), true
		}
	case string:
		id, err := strconv.ParseInt(x, 10, 64)
		return id, err == nil && id > 0
	}
	return 0, false
}

// Export reads the project into a State: every flag, the cohorts they use (and those use),
// and every early access feature. Cohorts named alike or flags using a deleted cohort cannot
// be written by name: Export refuses them, naming them.
func Export(ctx context.Context, c *Client) (*State, error) {
	l, err := readLive(ctx, c)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, key := range sortedKeys(l.unknownCohorts) {
		problems = append(problems, fmt.Sprintf("flag %q uses cohorts the project does not have: %v", key, l.unknownCohorts[key]))
	}
	s := NewState()
	var use func(v any)
	use = func(v any) {
		for _, ref := range cohortRefs(v) {
			name, ok := ref.(string)
			if !ok || s.Cohorts[name] != nil {
				continue
			}
			if ids := l.ambiguousCohorts[name]; ids != nil {
				problems = append(problems, fmt.Sprintf("cohorts %v share the name %q: rename all but one", ids, name))
				continue
			}
			if co := l.state.Cohorts[name]; co != nil {
				s.Cohorts[name] = co
				use(co.Filters)
			}
		}
	}
	for _, key := range sortedKeys(l.state.Flags) {
		s.Flags[key] = l.state.Flags[key]
		use(s.Flags[key].Filters)
	}
	for _, name := range sortedKeys(l.state.Features) {
		if n := l.ambiguousFeatures[name]; n > 0 {
			problems = append(problems, fmt.Sprintf("%d early access features share the name %q: rename all but one", n+1, name))
		}
		s.Features[name] = l.state.Features[name]
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return nil, errors.New("export: " + strings.Join(slices.Compact(problems), "; "))
	}
	return s, nil
}

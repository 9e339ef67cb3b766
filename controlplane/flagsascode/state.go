// Package flagsascode keeps a project's feature flags in one reviewable YAML file, so flag
// changes go through code review and CI: Export writes a project as a file, Parse reads one
// back (refusing bad input with its file, line and field), NewPlan compares it with the
// project, and Apply makes the project match it, all over the control plane's REST API with
// a personal key, from wherever the CI job runs.
package flagsascode

import "slices"

// State is the desired (or live) configuration of a project as the file holds it: nothing
// the server generates (ids, timestamps, authors, versions), cohorts and flags referred to by
// name and key rather than by id, so one file applies to any project. An importer builds one
// and hands it to Apply.
type State struct {
	// Flags by key.
	Flags map[string]*Flag
	// Cohorts by name: those the flags (and the cohorts) use.
	Cohorts map[string]*Cohort
	// Features are the early access features, by name.
	Features map[string]*Feature
}

// Flag is a feature flag's configuration.
type Flag struct {
	Name   string
	Active bool
	// Filters are the flag's targeting (conditions, variants, payloads, super and holdout
	// groups), as JSON values (numbers float64), with cohort property values naming a cohort
	// of the State instead of its id.
	Filters                    map[string]any
	Tags                       []string
	EvaluationRuntime          string
	EvaluationContexts         []string
	EnsureExperienceContinuity bool
	// BucketingIdentifier is "" (the distinct id, PostHog's null), "distinct_id" or
	// "device_id".
	BucketingIdentifier string
}

// Cohort is a cohort's definition. A static cohort's members are data, not configuration:
// the file holds the cohort, not who is in it.
type Cohort struct {
	Description string
	IsStatic    bool
	// Filters are the cohort's property groups, cohort references by name as in Flag.
	Filters map[string]any
}

// Feature is an early access feature.
type Feature struct {
	Description      string
	Stage            string
	DocumentationURL string
	// Flag is the key of the flag the feature enrols people in.
	Flag string
}

// NewState returns an empty State.
func NewState() *State {
	return &State{Flags: map[string]*Flag{}, Cohorts: map[string]*Cohort{}, Features: map[string]*Feature{}}
}

// normalize puts a decoded JSON value, or a YAML scalar, in the form values are compared in:
// every number a float64.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return v
}

// Property types whose value refers to another object, and the key of a cohort property.
const (
	typeCohort = "cohort"
	typeFlag   = "flag"
)

// mapReferences returns a copy of filters with each cohort property's value passed through
// cohort and each flag property's key through flag. A property is any object whose "type" is
// "cohort" or "flag", wherever it sits (conditions, super groups, cohort property groups).
func mapReferences(v any, cohort func(any) any, flag func(string) string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = mapReferences(e, cohort, flag)
		}
		switch x["type"] {
		case typeCohort:
			if val, ok := x["value"]; ok && cohort != nil {
				out["value"] = cohort(val)
			}
		case typeFlag:
			if key, ok := x["key"].(string); ok && flag != nil {
				out["key"] = flag(key)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = mapReferences(e, cohort, flag)
		}
		return out
	}
	return v
}

// cohortRefs returns the cohort values (names in a State) that v refers to.
func cohortRefs(v any) []any {
	var refs []any
	mapReferences(v, func(val any) any { refs = append(refs, val); return val }, nil)
	return refs
}

// flagRefs returns the flag keys that v refers to.
func flagRefs(v any) []string {
	var refs []string
	mapReferences(v, nil, func(k string) string { refs = append(refs, k); return k })
	return refs
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// sortedSet returns the strings sorted and without duplicates, never nil.
func sortedSet(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	return out
}

package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Copying a flag between projects (PostHog's copy_flags): the promotion of a flag from one
// environment's project to others. The copy carries the flag's key, name, filters (payloads
// included), whether it is active, experience continuity, evaluation runtime and bucketing
// identifier; the cohorts its filters use (matched by name in the target, else created, static
// ones with their members, nested ones first); its flag-on-flag conditions (remapped by key to
// a flag of the target, or dropped with a warning, the copy then inactive), and with
// CopyDependencies the flags it depends on, copied first; with CopySchedule its pending
// scheduled changes.

// MaxCopyTargets is how many projects one copy may name, as PostHog.
const MaxCopyTargets = 50

// MaxCopyDependencies is how many flags a copy with dependencies may bring along, as PostHog.
const MaxCopyDependencies = 50

// FlagCopyRequest is the body of a copy (and of its preview, which reads the first three
// fields only).
type FlagCopyRequest struct {
	FeatureFlagKey string
	// SourceProjectID is PostHog's from_project.
	SourceProjectID  int64
	TargetProjectIDs []int64
	// CopySchedule copies the flag's pending scheduled changes too.
	CopySchedule bool
	// DisableCopiedFlag makes the copies inactive whatever the source is.
	DisableCopiedFlag bool
	// CopyDependencies copies first the flags the flag depends on that a target lacks.
	CopyDependencies bool
}

// Validate checks the request's shape, with PostHog's messages.
func (r *FlagCopyRequest) Validate() error {
	switch {
	case r.FeatureFlagKey == "":
		return FieldError("feature_flag_key", "required", "This field is required.")
	case r.SourceProjectID == 0:
		return FieldError("from_project", "required", "This field is required.")
	case len(r.TargetProjectIDs) == 0:
		return FieldError("target_project_ids", "min_length", "Ensure this field has at least 1 elements.")
	case len(r.TargetProjectIDs) > MaxCopyTargets:
		return FieldError("target_project_ids", "max_length", fmt.Sprintf("Ensure this field has no more than %d elements.", MaxCopyTargets))
	}
	return nil
}

// FlagCopy is the flag a copy left in one target project, with what the copy could not carry
// as it was (PostHog's warning fields; empty when none).
type FlagCopy struct {
	Flag *Flag
	// FlagDependencyWarnings name the flag-on-flag conditions dropped from the copy (which is
	// then inactive, for review).
	FlagDependencyWarnings []string
	// ScheduleCopyWarning says which scheduled changes were not copied, and why.
	ScheduleCopyWarning string
	// CopiedDependencyKeys are the flags copied before this one (CopyDependencies).
	CopiedDependencyKeys []string
	// DependencyCopyWarnings are the warnings of copying those.
	DependencyCopyWarnings []string
}

// FlagCopyFailure is a target project the copy was refused in, and why; nothing of the copy
// is stored there.
type FlagCopyFailure struct {
	ProjectID    int64
	ErrorMessage string
	// ChangeRequestID is, when the target's approval policy held the copy for review, the
	// change request that holds it (what was copied before the flag, such as its cohorts, is
	// stored; the flag changes when the request is approved).
	ChangeRequestID string
}

// FlagCopyResult is what a copy did in each target project.
type FlagCopyResult struct {
	Success []FlagCopy
	Failed  []FlagCopyFailure
}

// CopyRequirements is the preview of a copy with dependencies: which of the flags the flag
// depends on (transitively) would be copied and which are already active in every target.
type CopyRequirements struct {
	CanCopyDependencies  bool
	DependencyCount      int
	CopiedDependencyKeys []string
	ReusedDependencyKeys []string
	Warnings             []string
	// Reason is the preview's verdict in a sentence.
	Reason string
}

// CopyUnavailable is the preview of a copy whose dependencies cannot be copied at all (a
// cycle, too many, one the user may not change), for the reason.
func CopyUnavailable(reason string) *CopyRequirements {
	return &CopyRequirements{CopiedDependencyKeys: []string{}, ReusedDependencyKeys: []string{}, Warnings: []string{reason}, Reason: reason}
}

// NewCopyRequirements words the preview of a copy with dependencies as PostHog does:
// dependencies are the keys of the flags the flag depends on, each after its own; copied are
// those some target lacks and reused those active in every target; warnings say why some
// cannot be copied; with a target out of reach (unreachable) nothing is copied.
func NewCopyRequirements(dependencies []string, copied, reused map[string]bool, warnings []string, unreachable bool) *CopyRequirements {
	out := &CopyRequirements{DependencyCount: len(dependencies), CopiedDependencyKeys: []string{}, ReusedDependencyKeys: []string{},
		Warnings: dedupe(warnings)}
	switch {
	case len(dependencies) == 0:
		out.Reason = "This feature flag doesn't have dependencies to copy."
		return out
	case unreachable:
		out.Reason = CopyProjectNotFound
		return out
	}
	for _, k := range dependencies {
		switch {
		case copied[k]:
			out.CopiedDependencyKeys = append(out.CopiedDependencyKeys, k)
		case reused[k]:
			out.ReusedDependencyKeys = append(out.ReusedDependencyKeys, k)
		}
	}
	switch n := len(out.CopiedDependencyKeys); {
	case n == 1:
		out.CanCopyDependencies, out.Reason = true, "1 dependency flag can be copied."
	case n > 1:
		out.CanCopyDependencies, out.Reason = true, fmt.Sprintf("%d dependency flags can be copied.", n)
	case len(out.Warnings) > 0:
		out.Reason = out.Warnings[0]
	default:
		out.Reason = "No dependency flags need to be copied because existing active target flags satisfy this flag's dependencies."
	}
	if out.CanCopyDependencies && len(out.Warnings) > 0 {
		out.Reason += " Some dependencies will be left unchanged."
	}
	return out
}

// FlagCopyService copies flags between the projects of an organisation. The user is the one
// the context acts as (NewContextWithUser): ErrNotAuthenticated without one,
// ErrPermissionDenied for an organisation that is not the user's. The user must be allowed to
// change the source flag (CanEditFlag; ErrCopyForbidden) and, to copy with dependencies, every
// flag it depends on (ErrCopyDependencyForbidden).
type FlagCopyService interface {
	// CreateFlagCopies copies the flag into each target project in a transaction of its own,
	// through the flag service's own writes (so with their checks, activity log and webhooks):
	// an existing flag of the same key is updated (when the user may change it), else a flag
	// is created. A target outside the organisation, or a copy refused there, is a failure of
	// that target alone. ErrCopySourceMissing when the source project has no flag of the key.
	CreateFlagCopies(ctx context.Context, orgID int64, req FlagCopyRequest) (*FlagCopyResult, error)
	// FindCopyRequirements previews which dependencies a copy with dependencies would copy
	// into the targets. It writes nothing.
	FindCopyRequirements(ctx context.Context, orgID int64, req FlagCopyRequest) (*CopyRequirements, error)
}

// The refusals of a copy, with PostHog's messages.
var (
	ErrCopySourceMissing       = &Error{Kind: Invalid, Code: "invalid_input", Detail: "Feature flag to copy does not exist."}
	ErrCopyForbidden           = &Error{Kind: Forbidden, Code: "permission_denied", Detail: "You do not have permission to copy this flag."}
	ErrCopyDependencyForbidden = &Error{Kind: Forbidden, Code: "permission_denied", Detail: "You do not have permission to copy one or more dependency flags."}
	ErrCopyDependencyCycle     = &Error{Kind: Invalid, Code: "invalid_input",
		Detail: "A circular flag dependency was detected, so dependencies can't be copied automatically. Copy the flag without dependencies or remove the cycle first."}
	ErrCopyTooManyDependencies = &Error{Kind: Invalid, Code: "invalid_input",
		Detail: "This flag depends on more than 50 flags, so dependencies can't be copied automatically. Copy the flag without dependencies or reduce the dependency chain."}
)

// The messages of a copy's failures and warnings in one target, as PostHog words them.
const (
	CopyProjectNotFound         = "Project not found."
	CopyTargetForbidden         = "You do not have permission to copy flags to this project."
	copyUngatedGroupWarning     = "A condition group now has no remaining constraints and will match all users at its rollout percentage — review and re-gate it before re-enabling this flag."
	CopyExistingScheduleWarning = "Pending scheduled changes already attached to the target flag were left unchanged and may change this copied flag later."
	CopySkippedSchedulesWarning = "Skipped scheduled changes because one or more current flag dependencies could not be safely remapped."
	CopySkippedScheduleWarning  = "Skipped scheduled change because one or more flag dependencies could not be safely remapped."
)

// ErrCopyUnresolvedDependency refuses a copy with dependencies whose flag names a flag the
// source project does not have (PostHog's message).
func ErrCopyUnresolvedDependency(ref string) *Error {
	return &Error{Kind: Invalid, Code: "invalid_input", Detail: fmt.Sprintf(
		"Removed a flag dependency (source flag reference %s) because the dependency flag could not be resolved in the source project.", ref)}
}

// ScheduleCopyWarning is the schedule_copy_warning of a copy whose scheduled changes had
// warnings ("" when none).
func ScheduleCopyWarning(warnings []string) string {
	if len(warnings) == 0 {
		return ""
	}
	return "Flag copied but scheduled changes had dependency warnings: " + strings.Join(dedupe(warnings), "; ")
}

// dedupe is list without its repetitions, in order (never nil).
func dedupe(list []string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// SourceDependency is a flag that a flag's condition names in the source project, as far as a
// copy needs to know it.
type SourceDependency struct {
	Key    string
	Active bool
}

// TargetFlag is a flag of a target project that a copied condition may name instead.
type TargetFlag struct {
	ID     int64
	Active bool
}

// conditionSets are the keys of a flag's filters that hold conditions with properties.
var conditionSets = []string{"groups", "super_groups", "holdout_groups"}

// decodeJSON decodes raw keeping numbers as written.
func decodeJSON(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// CohortReferences lists the cohorts that raw (a flag's filters, a cohort's filters or a
// scheduled change's value) names in its property filters of type cohort, in order, once.
func CohortReferences(raw json.RawMessage) []int64 {
	v, err := decodeJSON(raw)
	if err != nil {
		return nil
	}
	var out []int64
	seen := map[int64]bool{}
	walkCohortFilters(v, func(p map[string]any) {
		if id, ok := cohortValue(p["value"]); ok && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	})
	return out
}

// RemapCohorts rewrites, in raw, the cohort ids of property filters of type cohort that ids
// maps; the others are left as they are.
func RemapCohorts(raw json.RawMessage, ids map[int64]int64) (json.RawMessage, error) {
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	walkCohortFilters(v, func(p map[string]any) {
		if id, ok := cohortValue(p["value"]); ok {
			if to, ok := ids[id]; ok {
				p["value"] = to
			}
		}
	})
	return json.Marshal(v)
}

// walkCohortFilters calls fn for every object of v that is a property filter of type cohort.
func walkCohortFilters(v any, fn func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		if t, _ := x["type"].(string); t == "cohort" {
			if _, ok := x["value"]; ok {
				fn(x)
			}
		}
		for _, c := range x {
			walkCohortFilters(c, fn)
		}
	case []any:
		for _, c := range x {
			walkCohortFilters(c, fn)
		}
	}
}

func cohortValue(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		id, err := strconv.ParseInt(x.String(), 10, 64)
		return id, err == nil
	case string:
		id, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		return id, err == nil
	}
	return 0, false
}

// FlagReferences lists the flags (by key or id, as written, trimmed) that the conditions of
// filters name in properties of type flag, in order, once.
func FlagReferences(filters json.RawMessage) []string {
	v, err := decodeJSON(filters)
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	forEachCondition(v, func(cond map[string]any) {
		props, _ := cond["properties"].([]any)
		for _, p := range props {
			if ref, ok := flagRef(p); ok && !seen[ref] {
				seen[ref] = true
				out = append(out, ref)
			}
		}
	})
	return out
}

// forEachCondition calls fn for every condition of the filters v.
func forEachCondition(v any, fn func(map[string]any)) {
	m, _ := v.(map[string]any)
	for _, set := range conditionSets {
		list, _ := m[set].([]any)
		for _, c := range list {
			if cond, ok := c.(map[string]any); ok {
				fn(cond)
			}
		}
	}
}

// flagRef is the reference of a property filter of type flag (PostHog's normalisation: a
// trimmed string or a non-negative integer).
func flagRef(p any) (string, bool) {
	m, ok := p.(map[string]any)
	if !ok || m["type"] != "flag" {
		return "", false
	}
	switch k := m["key"].(type) {
	case string:
		k = strings.TrimSpace(k)
		return k, k != ""
	case json.Number:
		if n, err := k.Int64(); err == nil && n >= 0 {
			return strconv.FormatInt(n, 10), true
		}
	}
	return "", false
}

// isFlagFilter reports whether p is a property filter of type flag.
func isFlagFilter(p any) bool {
	m, ok := p.(map[string]any)
	return ok && m["type"] == "flag"
}

// RemapFlagDependencies rewrites the flag-on-flag conditions of filters for a target project,
// as PostHog does: a reference whose source flag (source, by the reference as written) is
// known and active, and whose key names an active flag of the target (target), then names
// that flag's id; any other is dropped, with a warning saying why. A condition left without
// properties by a drop gets a warning of its own: it now matches everyone at its rollout.
func RemapFlagDependencies(filters json.RawMessage, source func(ref string) (SourceDependency, bool),
	target func(key string) (TargetFlag, bool)) (json.RawMessage, []string, error) {
	v, err := decodeJSON(filters)
	if err != nil {
		return nil, nil, err
	}
	var warnings []string
	forEachCondition(v, func(cond map[string]any) {
		props, _ := cond["properties"].([]any)
		if !slices.ContainsFunc(props, isFlagFilter) {
			return
		}
		kept := []any{}
		dropped := false
		for _, p := range props {
			if !isFlagFilter(p) {
				kept = append(kept, p)
				continue
			}
			m := p.(map[string]any)
			ref, _ := flagRef(p)
			dep, known := source(ref)
			if ref == "" || !known {
				dropped = true
				warnings = append(warnings, fmt.Sprintf("Removed a flag dependency (source flag reference %v) because the dependency flag could not be resolved in the source project.", m["key"]))
				continue
			}
			if !dep.Active {
				dropped = true
				warnings = append(warnings, fmt.Sprintf("Removed dependency on flag '%s' because that flag is disabled in the source project.", dep.Key))
				continue
			}
			switch t, ok := target(dep.Key); {
			case ok && t.Active:
				m["key"] = strconv.FormatInt(t.ID, 10)
				kept = append(kept, m)
			case ok:
				dropped = true
				warnings = append(warnings, fmt.Sprintf("Removed dependency on flag '%s' because that flag is disabled in the target project.", dep.Key))
			default:
				dropped = true
				warnings = append(warnings, fmt.Sprintf("Removed dependency on flag '%s' because no flag with that key exists in the target project.", dep.Key))
			}
		}
		if dropped && len(kept) == 0 {
			warnings = append(warnings, copyUngatedGroupWarning)
		}
		cond["properties"] = kept
	})
	out, err := json.Marshal(v)
	return out, warnings, err
}

package posthogimport

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane/flagsascode"
)

// Warning is a flag the import could not bring over exactly: it is imported inactive, and
// Reasons say why (the cohort or payloads that flagedge cannot serve as PostHog does).
type Warning struct {
	Flag    string
	Reasons []string
}

// Translation is a PostHog project as flagedge's desired state, with what could not be kept.
type Translation struct {
	State *flagsascode.State
	// Warnings are the flags imported inactive, by key.
	Warnings []Warning
	// Unservable are the cohorts flagedge cannot serve exactly, by name, with why.
	Unservable map[string]string
	// SkippedFeatures are the early access features not imported, with why.
	SkippedFeatures []string
}

// Translate turns a PostHog project into a State. Flag keys are kept; static cohorts are
// kept as such (Import copies their members). A flag that uses a cohort flagedge cannot serve
// exactly (behavioural filters, which need event queries; a cohort using one), that
// aggregates by group (group type indexes are per installation), or that has encrypted
// payloads (flagedge has none), is imported inactive with a Warning, its targeting otherwise
// unchanged: it is never served differently from PostHog.
func Translate(p *Project) (*Translation, error) {
	t := &Translation{State: flagsascode.NewState(), Unservable: map[string]string{}}
	names := cohortNames(p.Cohorts)
	flagKeys := map[string]string{}
	for _, f := range p.Flags {
		flagKeys[strconv.FormatInt(f.ID, 10)] = f.Key
	}
	byID := map[int64]*Cohort{}
	for i := range p.Cohorts {
		if !p.Cohorts[i].Deleted {
			byID[p.Cohorts[i].ID] = &p.Cohorts[i]
		}
	}
	rename := func(v any) any {
		if id, ok := refID(v); ok {
			if name, ok := names[id]; ok {
				return name
			}
		}
		return v
	}
	for _, co := range byID {
		filters, err := decode(co.Filters)
		if err != nil {
			return nil, fmt.Errorf("cohort %q: %w", co.Name, err)
		}
		out := &flagsascode.Cohort{Description: co.Description, IsStatic: co.IsStatic}
		if !co.IsStatic {
			out.Filters = mapRefs(filters, rename, nil).(map[string]any)
			if dropped := dropType(out.Filters, "behavioral"); len(dropped) > 0 {
				// flagedge refuses behavioural properties: the cohort keeps the rest, and
				// its description what was left out, so nothing is lost from view.
				kept, _ := json.Marshal(dropped)
				out.Description = strings.TrimSpace(out.Description + "\n[imported from PostHog without its behavioural filters: " + string(kept) + "]")
			}
		}
		t.State.Cohorts[names[co.ID]] = out
		if why := unservable(co, byID, map[int64]bool{}); why != "" {
			t.Unservable[names[co.ID]] = why
		}
	}
	for _, f := range p.Flags {
		if f.Deleted {
			continue
		}
		filters, err := decode(f.Filters)
		if err != nil {
			return nil, fmt.Errorf("flag %q: %w", f.Key, err)
		}
		var reasons []string
		for _, v := range refs(filters) {
			id, ok := refID(v)
			if !ok {
				continue
			}
			if co, ok := byID[id]; !ok {
				reasons = append(reasons, fmt.Sprintf("uses cohort %d, which the source does not list", id))
			} else if why := t.Unservable[names[co.ID]]; why != "" {
				reasons = append(reasons, fmt.Sprintf("uses cohort %q: %s", names[co.ID], why))
			}
		}
		if hasKey(filters, "aggregation_group_type_index") {
			reasons = append(reasons, "aggregates by group: PostHog's group type indexes need not name the same group types in flagedge, check them before activating it")
		}
		if f.HasEncryptedPayloads {
			reasons = append(reasons, "has encrypted payloads, which flagedge does not serve: set its payloads again before activating it")
			delete(filters, "payloads")
		}
		slices.Sort(reasons)
		reasons = slices.Compact(reasons)
		out := &flagsascode.Flag{Name: f.Name, Active: f.Active && len(reasons) == 0,
			Filters: mapRefs(filters, rename, func(k string) string {
				if key, ok := flagKeys[k]; ok {
					return key
				}
				return k
			}).(map[string]any),
			Tags: f.Tags, EvaluationRuntime: f.EvaluationRuntime, EvaluationContexts: f.EvaluationTags,
			EnsureExperienceContinuity: f.EnsureExperienceContinuity}
		if f.BucketingIdentifier != nil {
			out.BucketingIdentifier = *f.BucketingIdentifier
		}
		if out.EvaluationRuntime == "" {
			out.EvaluationRuntime = "all"
		}
		t.State.Flags[f.Key] = out
		if len(reasons) > 0 {
			t.Warnings = append(t.Warnings, Warning{Flag: f.Key, Reasons: reasons})
		}
	}
	slices.SortFunc(t.Warnings, func(a, b Warning) int {
		if a.Flag < b.Flag {
			return -1
		}
		if a.Flag > b.Flag {
			return 1
		}
		return 0
	})
	for _, f := range p.Features {
		if f.FeatureFlag == nil || t.State.Flags[f.FeatureFlag.Key] == nil {
			t.SkippedFeatures = append(t.SkippedFeatures, fmt.Sprintf("%q: its flag is not among the source's flags", f.Name))
			continue
		}
		if _, dup := t.State.Features[f.Name]; dup {
			t.SkippedFeatures = append(t.SkippedFeatures, fmt.Sprintf("%q: another feature has this name (flagedge tells features apart by name)", f.Name))
			continue
		}
		t.State.Features[f.Name] = &flagsascode.Feature{Description: f.Description, Stage: f.Stage,
			DocumentationURL: f.DocumentationURL, Flag: f.FeatureFlag.Key}
	}
	return t, nil
}

// cohortNames names every cohort uniquely: PostHog allows two cohorts one name, flagedge's
// state refers to cohorts by name, so a repeated name gets the cohort's id appended.
func cohortNames(cohorts []Cohort) map[int64]string {
	seen := map[string]int{}
	for _, co := range cohorts {
		if !co.Deleted {
			seen[co.Name]++
		}
	}
	names := map[int64]string{}
	for _, co := range cohorts {
		if co.Deleted {
			continue
		}
		names[co.ID] = co.Name
		if seen[co.Name] > 1 {
			names[co.ID] = fmt.Sprintf("%s (#%d)", co.Name, co.ID)
		}
	}
	return names
}

// unservable says why flagedge cannot serve a cohort exactly, "" when it can: behavioural
// filters (or legacy action and event groups) need event queries, and a cohort inherits the
// reason of a cohort it uses. A static cohort is served: its members are copied.
func unservable(co *Cohort, byID map[int64]*Cohort, visiting map[int64]bool) string {
	if co.IsStatic {
		return ""
	}
	filters, _ := decode(co.Filters)
	if hasType(filters, "behavioral") {
		return "behavioural filters (events), which flagedge cannot evaluate"
	}
	if groups, _ := decodeAny(co.Groups); hasKey(groups, "action_id") || hasKey(groups, "event_id") {
		return "legacy action or event groups, which flagedge cannot evaluate"
	}
	visiting[co.ID] = true
	for _, v := range refs(filters) {
		id, ok := refID(v)
		if !ok || visiting[id] {
			continue
		}
		inner, ok := byID[id]
		if !ok {
			return fmt.Sprintf("uses cohort %d, which the source does not list", id)
		}
		if why := unservable(inner, byID, visiting); why != "" {
			return fmt.Sprintf("uses cohort %q (%s)", inner.Name, why)
		}
	}
	return ""
}

func decode(raw json.RawMessage) (map[string]any, error) {
	v, err := decodeAny(raw)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if v != nil && !ok {
		return nil, errNotJSON
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

func decodeAny(raw json.RawMessage) (any, error) {
	var v any
	if len(raw) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("filters: %w", err)
	}
	return v, nil
}

// refID reads a cohort property's value: an id as a number or a string.
func refID(v any) (int64, bool) {
	switch x := v.(type) {
	case float64:
		return int64(x), x == float64(int64(x))
	case string:
		id, err := strconv.ParseInt(x, 10, 64)
		return id, err == nil
	}
	return 0, false
}

// mapRefs returns a copy of v with every cohort property's value passed through cohort and
// every flag property's key through flag (nil leaves them).
func mapRefs(v any, cohort func(any) any, flag func(string) string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = mapRefs(e, cohort, flag)
		}
		switch x["type"] {
		case "cohort":
			if val, ok := x["value"]; ok && cohort != nil {
				out["value"] = cohort(val)
			}
		case "flag":
			if key, ok := x["key"].(string); ok && flag != nil {
				out["key"] = flag(key)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = mapRefs(e, cohort, flag)
		}
		return out
	}
	return v
}

// refs returns the values of v's cohort properties.
func refs(v any) []any {
	var out []any
	mapRefs(v, func(val any) any { out = append(out, val); return val }, nil)
	return out
}

// dropType removes, in place, the objects of type typ from every array in v and returns them.
func dropType(v any, typ string) []any {
	var dropped []any
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if arr, ok := e.([]any); ok {
				kept := arr[:0:0]
				for _, el := range arr {
					if m, ok := el.(map[string]any); ok && m["type"] == typ {
						dropped = append(dropped, el)
						continue
					}
					kept = append(kept, el)
				}
				x[k] = kept
				e = kept
			}
			dropped = append(dropped, dropType(e, typ)...)
		}
	case []any:
		for _, e := range x {
			dropped = append(dropped, dropType(e, typ)...)
		}
	}
	return dropped
}

// hasType reports whether any object in v has the given "type".
func hasType(v any, typ string) bool {
	switch x := v.(type) {
	case map[string]any:
		if x["type"] == typ {
			return true
		}
		for _, e := range x {
			if hasType(e, typ) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(x, func(e any) bool { return hasType(e, typ) })
	}
	return false
}

// hasKey reports whether any object in v has key set (not null).
func hasKey(v any, key string) bool {
	switch x := v.(type) {
	case map[string]any:
		if e, ok := x[key]; ok && e != nil {
			return true
		}
		for _, e := range x {
			if hasKey(e, key) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(x, func(e any) bool { return hasKey(e, key) })
	}
	return false
}

package controlplane_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/flagedge/flagedge/controlplane"
)

func TestRemapCohortsNestedAndInEveryConditionSet(t *testing.T) {
	in := json.RawMessage(`{"groups": [{"properties": [{"key": "id", "type": "cohort", "value": 5}, {"key": "plan", "type": "person", "value": 5}]}],
		"holdout_groups": [{"properties": [{"key": "id", "type": "cohort", "value": "6"}]}],
		"properties": {"type": "OR", "values": [{"type": "AND", "values": [{"key": "id", "type": "cohort", "value": 7}]}]}}`)
	got := controlplane.CohortReferences(in)
	slices.Sort(got)
	if !slices.Equal(got, []int64{5, 6, 7}) {
		t.Errorf("references %v, want 5, 6 and 7", got)
	}
	out, err := controlplane.RemapCohorts(in, map[int64]int64{5: 50, 6: 60})
	if err != nil {
		t.Fatal(err)
	}
	refs := controlplane.CohortReferences(out)
	slices.Sort(refs)
	if !slices.Equal(refs, []int64{7, 50, 60}) {
		t.Errorf("remapped %s: references %v, want 7 (unmapped), 50, 60", out, refs)
	}
	var v struct {
		Groups []struct {
			Properties []map[string]any `json:"properties"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Groups[0].Properties[1]["value"] != float64(5) {
		t.Errorf("a person property's value changed: %s", out)
	}
}

func TestRemapFlagDependencies(t *testing.T) {
	filters := json.RawMessage(`{"groups": [
		{"properties": [{"key": "1", "type": "flag", "value": true, "operator": "flag_evaluates_to"}, {"key": "plan", "type": "person", "value": "pro"}]},
		{"properties": [{"key": "off-in-source", "type": "flag", "value": true}]},
		{"properties": [{"key": "99", "type": "flag", "value": true}], "rollout_percentage": 10}]}`)
	source := func(ref string) (controlplane.SourceDependency, bool) {
		switch ref {
		case "1":
			return controlplane.SourceDependency{Key: "base", Active: true}, true
		case "off-in-source":
			return controlplane.SourceDependency{Key: "off-in-source"}, true
		}
		return controlplane.SourceDependency{}, false
	}
	target := func(key string) (controlplane.TargetFlag, bool) {
		return controlplane.TargetFlag{ID: 42, Active: true}, key == "base"
	}
	out, warnings, err := controlplane.RemapFlagDependencies(filters, source, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := controlplane.FlagReferences(out); !slices.Equal(got, []string{"42"}) {
		t.Errorf("references after the remap %v (%s), want [42]", got, out)
	}
	ungated := "A condition group now has no remaining constraints and will match all users at its rollout percentage — review and re-gate it before re-enabling this flag."
	want := []string{"Removed dependency on flag 'off-in-source' because that flag is disabled in the source project.", ungated,
		"Removed a flag dependency (source flag reference 99) because the dependency flag could not be resolved in the source project.", ungated}
	if !slices.Equal(warnings, want) {
		t.Errorf("warnings:\n%q\nwant\n%q", warnings, want)
	}
}

func TestCopyRequirementsWording(t *testing.T) {
	for _, tc := range []struct {
		deps           []string
		copied, reused map[string]bool
		warnings       []string
		unreachable    bool
		can            bool
		reason         string
	}{
		{nil, nil, nil, nil, false, false, "This feature flag doesn't have dependencies to copy."},
		{[]string{"a", "b"}, map[string]bool{"a": true, "b": true}, nil, nil, false, true, "2 dependency flags can be copied."},
		{[]string{"a", "b"}, map[string]bool{"b": true}, nil, []string{"w", "w"}, false, true, "1 dependency flag can be copied. Some dependencies will be left unchanged."},
		{[]string{"a"}, nil, map[string]bool{"a": true}, nil, false, false, "No dependency flags need to be copied because existing active target flags satisfy this flag's dependencies."},
		{[]string{"a"}, nil, nil, []string{"why"}, false, false, "why"},
		{[]string{"a"}, map[string]bool{"a": true}, nil, nil, true, false, "Project not found."},
	} {
		got := controlplane.NewCopyRequirements(tc.deps, tc.copied, tc.reused, tc.warnings, tc.unreachable)
		if got.CanCopyDependencies != tc.can || got.Reason != tc.reason || got.DependencyCount != len(tc.deps) || len(got.Warnings) > 1 {
			t.Errorf("%+v: got %+v", tc, got)
		}
	}
}

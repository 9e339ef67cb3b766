package controlplane_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/flags"
)

func TestClassifyExposure(t *testing.T) {
	for _, c := range []struct {
		response, reason string
		want             controlplane.ExposureClass
	}{
		{`true`, "", controlplane.ExposureTreatment},
		{`"true"`, "", controlplane.ExposureTreatment},
		{`"variant-b"`, "Matched condition set 2", controlplane.ExposureTreatment}, // a multivariate flag's variant
		{`false`, "Out of rollout bound", controlplane.ExposureControl},            // posthog-js, -python: the description
		{`false`, "out_of_rollout_bound", controlplane.ExposureControl},            // posthog-node's fallback: the code
		{`"false"`, " OUT OF ROLLOUT BOUND ", controlplane.ExposureControl},
		{`false`, "No matching condition set", controlplane.ExposureIneligible},
		{`false`, "no_condition_match", controlplane.ExposureIneligible},
		{`false`, "Feature flag is disabled", controlplane.ExposureIneligible},
		{`false`, "no_group_type", controlplane.ExposureIneligible},
		{`false`, "", controlplane.ExposureUnknown},
		{`false`, "Evaluated locally", controlplane.ExposureUnknown}, // posthog-node's local evaluation says nothing
		{`""`, "", controlplane.ExposureUnknown},
		{`null`, "Out of rollout bound", controlplane.ExposureNone}, // the flag was missing
		{``, "", controlplane.ExposureNone},
		{`3`, "", controlplane.ExposureNone},
	} {
		if got := controlplane.ClassifyExposure(json.RawMessage(c.response), c.reason); got != c.want {
			t.Errorf("%s, %q: %d, want %d", c.response, c.reason, got, c.want)
		}
	}
}

func TestEligibleFor(t *testing.T) {
	for _, c := range []struct {
		r             flags.Result
		eligible, got bool
	}{
		{flags.Result{Reason: flags.ReasonOutOfRolloutBound}, true, true},
		{flags.Result{Reason: flags.ReasonConditionMatch, Enabled: true}, true, true}, // matches now; rollouts only grow
		{flags.Result{Reason: flags.ReasonNoConditionMatch}, false, true},
		{flags.Result{Reason: flags.ReasonError, Failed: true}, false, false}, // a property it reads is not stored
		{flags.Result{Reason: flags.ReasonMissingDependency}, false, false},
	} {
		eligible, ok := controlplane.EligibleFor(&c.r)
		if eligible != c.eligible || ok != c.got {
			t.Errorf("%+v: %v %v, want %v %v", c.r, eligible, ok, c.eligible, c.got)
		}
	}
}

func TestCheckPlanFlag(t *testing.T) {
	for _, c := range []struct {
		filters string
		ok      bool
	}{
		{`{"groups": [{"properties": [], "rollout_percentage": 10}]}`, true},
		{`{"groups": [{"properties": [{"key": "email", "value": "@acme.com", "operator": "icontains", "type": "person"}], "rollout_percentage": 10}]}`, true},
		{`{"groups": [{"properties": [], "rollout_percentage": 10}], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 50}, {"key": "b", "rollout_percentage": 50}]}}`, true},
		{`{"groups": []}`, false},
		{`{"groups": [{"properties": []}], "aggregation_group_type_index": 0}`, false},
		{`{"groups": [{"properties": [], "aggregation_group_type_index": 1}]}`, false},
		{`{"groups": [{"properties": []}], "super_groups": [{"properties": [{"key": "$feature_enrollment/x", "value": ["true"], "type": "person"}]}]}`, false},
		{`{"groups": [{"properties": []}], "holdout": {"id": 1, "exclusion_percentage": 10}}`, false},
		{`{"groups": [{"properties": []}], "holdout_groups": [{"properties": [], "rollout_percentage": 10}]}`, false},
	} {
		err := controlplane.CheckPlanFlag(json.RawMessage(c.filters))
		if (err == nil) != c.ok || err != nil && !errors.Is(err, controlplane.ErrPlanFlagShape) {
			t.Errorf("%s: %v, want ok %v", c.filters, err, c.ok)
		}
	}
	if controlplane.HasPropertyFilters(json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 10}]}`)) ||
		!controlplane.HasPropertyFilters(json.RawMessage(`{"groups": [{"properties": []}, {"properties": [{"key": "plan", "value": "pro", "type": "person"}]}]}`)) {
		t.Error("HasPropertyFilters")
	}
}

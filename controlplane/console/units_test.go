package console

import (
	"encoding/json"
	"fmt"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFilterFormRoundTrip reads filters into the form and writes them back: what the form
// edits survives unchanged, and what it does not edit is kept.
func TestFilterFormRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"everyone", `{"groups": [{"properties": [], "rollout_percentage": null}]}`,
			`{"aggregation_group_type_index": null, "groups": [{"properties": [], "rollout_percentage": null}], "multivariate": null, "payloads": {}}`},
		{"condition and rollout", `{"groups": [{"properties": [{"key": "email", "value": "@x.com", "operator": "icontains", "type": "person"}], "rollout_percentage": 50}]}`,
			`{"aggregation_group_type_index": null, "groups": [{"properties": [{"key": "email", "value": "@x.com", "operator": "icontains", "type": "person"}], "rollout_percentage": 50}], "multivariate": null, "payloads": {}}`},
		{"exact list, negation, cohort, flag", `{"groups": [{"properties": [
			{"key": "plan", "value": ["pro", "team"], "operator": "exact", "type": "person", "negation": true},
			{"key": "id", "value": 7, "operator": "in", "type": "cohort"},
			{"key": "other", "value": true, "operator": "flag_evaluates_to", "type": "flag"}], "rollout_percentage": 10}]}`,
			`{"aggregation_group_type_index": null, "groups": [{"properties": [
			{"key": "plan", "value": ["pro", "team"], "operator": "exact", "type": "person", "negation": true},
			{"key": "id", "value": 7, "operator": "in", "type": "cohort"},
			{"key": "other", "value": true, "operator": "flag_evaluates_to", "type": "flag"}], "rollout_percentage": 10}], "multivariate": null, "payloads": {}}`},
		{"variants, payloads, override, kept keys", `{"groups": [{"properties": [], "rollout_percentage": 100, "variant": "b"}],
			"multivariate": {"variants": [{"key": "a", "name": "A", "rollout_percentage": 30}, {"key": "b", "name": "", "rollout_percentage": 70}]},
			"payloads": {"a": "{\"x\": 1}"}, "holdout_groups": [{"properties": [], "rollout_percentage": 5}]}`,
			`{"aggregation_group_type_index": null, "groups": [{"properties": [], "rollout_percentage": 100, "variant": "b"}],
			"multivariate": {"variants": [{"key": "a", "name": "A", "rollout_percentage": 30}, {"key": "b", "name": "", "rollout_percentage": 70}]},
			"payloads": {"a": "{\"x\": 1}"}, "holdout_groups": [{"properties": [], "rollout_percentage": 5}]}`},
		{"group flag", `{"aggregation_group_type_index": 0, "groups": [{"properties": [{"key": "size", "value": "10", "operator": "gt", "type": "group", "group_type_index": 0}], "rollout_percentage": null}]}`,
			`{"aggregation_group_type_index": 0, "groups": [{"properties": [{"key": "size", "value": "10", "operator": "gt", "type": "group", "group_type_index": 0}], "rollout_percentage": null}], "multivariate": null, "payloads": {}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseFilterForm(json.RawMessage(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			// Through the form's fields, as the browser posts them.
			v := formValues(f)
			out, err := filterFormFrom(v, f.rest).filters()
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("filters (-want +got):\n%s", diff)
			}
		})
	}
}

// formValues renders the form model as the edit page's fields.
func formValues(f *filterForm) url.Values {
	v := url.Values{"cond_count": {fmt.Sprint(len(f.Conditions))}, "var_count": {fmt.Sprint(len(f.Variants))},
		"group_type": {f.GroupTypeIndex}, "payload_true": {f.PayloadTrue}}
	for i, c := range f.Conditions {
		p := fmt.Sprintf("c%d_", i)
		v.Set(p+"rollout", c.Rollout)
		v.Set(p+"variant", c.Variant)
		v.Set(p+"props", fmt.Sprint(len(c.Properties)))
		for j, pr := range c.Properties {
			pp := fmt.Sprintf("%sp%d_", p, j)
			v.Set(pp+"key", pr.Key)
			v.Set(pp+"op", pr.Operator)
			v.Set(pp+"value", pr.Value)
			v.Set(pp+"type", pr.Type)
			if pr.Negation {
				v.Set(pp+"negation", "on")
			}
		}
	}
	for k, va := range f.Variants {
		p := fmt.Sprintf("v%d_", k)
		v.Set(p+"key", va.Key)
		v.Set(p+"name", va.Name)
		v.Set(p+"pct", va.Rollout)
		v.Set(p+"payload", va.Payload)
	}
	return v
}

func TestFilterFormErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		form url.Values
		attr string
	}{
		{"rollout not a number", url.Values{"cond_count": {"1"}, "c0_rollout": {"half"}}, "c0_rollout"},
		{"variant percentage not a number", url.Values{"cond_count": {"1"}, "var_count": {"1"}, "v0_key": {"a"}, "v0_pct": {"x"}}, "v0_pct"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := filterFormFrom(tc.form, nil).filters()
			fe := invalid(err)
			if fe == nil || fe.Attr != tc.attr {
				t.Errorf("err = %v, want a field error on %s", err, tc.attr)
			}
		})
	}
}

func TestLineDiff(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []string
		want []diffLine
	}{
		{"same", []string{"x", "y"}, []string{"x", "y"}, []diffLine{{" ", "x"}, {" ", "y"}}},
		{"changed line", []string{"{", `"r": 50`, "}"}, []string{"{", `"r": 30`, "}"},
			[]diffLine{{" ", "{"}, {"-", `"r": 50`}, {"+", `"r": 30`}, {" ", "}"}}},
		{"added", []string{"a"}, []string{"a", "b"}, []diffLine{{" ", "a"}, {"+", "b"}}},
		{"removed", []string{"a", "b"}, []string{"b"}, []diffLine{{"-", "a"}, {" ", "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, lineDiff(tc.a, tc.b), cmp.AllowUnexported(diffLine{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

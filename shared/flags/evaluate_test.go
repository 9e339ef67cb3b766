package flags_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/shared/flags"
)

// mustCompile compiles flags given as key → filters (JSON), all active, ids in order.
func mustCompile(t testing.TB, p flags.Project) *flags.Snapshot {
	t.Helper()
	snap, err := flags.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func flag(id int64, key, filters string) flags.FlagDefinition {
	return flags.FlagDefinition{ID: id, Key: key, Active: true, Version: 1, Filters: json.RawMessage(filters)}
}

// outcome is the comparable part of a result.
type outcome struct {
	Value   any
	Reason  string
	Index   int
	Payload string
	Failed  bool
}

func outcomeOf(r flags.Result) outcome {
	return outcome{Value: r.Value(), Reason: r.Reason.String(), Index: r.ConditionIndex, Payload: string(r.Payload), Failed: r.Failed}
}

func evalKey(t *testing.T, snap *flags.Snapshot, req flags.Request, key string) outcome {
	t.Helper()
	i := snap.Lookup(key)
	if i < 0 {
		t.Fatalf("no flag %q", key)
	}
	return outcomeOf(snap.Evaluate(&req, nil)[i])
}

func TestReasonsAndPriority(t *testing.T) {
	snap := mustCompile(t, flags.Project{Flags: []flags.FlagDefinition{
		flag(1, "none", `{"groups": []}`),
		flag(2, "props-fail", `{"groups": [{"properties": [{"key": "plan", "value": "pro"}]}]}`),
		// The first condition is out of rollout (0%), the second does not match: the higher
		// reason, out_of_rollout_bound, wins and names condition 0.
		flag(3, "rollout-beats-props", `{"groups": [{"rollout_percentage": 0}, {"properties": [{"key": "plan", "value": "pro"}]}]}`),
		// Ties go to the later condition.
		flag(4, "tie", `{"groups": [{"rollout_percentage": 0}, {"rollout_percentage": 0}]}`),
		flag(5, "second-matches", `{"groups": [{"properties": [{"key": "plan", "value": "pro"}]}, {"rollout_percentage": 100}], "payloads": {"true": "{\"a\": 1}"}}`),
		flag(6, "inactive", `{"groups": [{}]}`),
	}})
	snap2 := mustCompile(t, flags.Project{Flags: []flags.FlagDefinition{{ID: 6, Key: "inactive", Active: false, Filters: json.RawMessage(`{"groups": [{}]}`)}}})
	req := flags.Request{DistinctID: "u1", PersonProperties: flags.Properties{"plan": "free"}}
	for key, want := range map[string]outcome{
		"none":                {false, "no_condition_match", -1, "", false},
		"props-fail":          {false, "no_condition_match", 0, "", false},
		"rollout-beats-props": {false, "out_of_rollout_bound", 0, "", false},
		"tie":                 {false, "out_of_rollout_bound", 1, "", false},
		"second-matches":      {true, "condition_match", 1, `"{\"a\": 1}"`, false},
	} {
		if diff := cmp.Diff(want, evalKey(t, snap, req, key)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", key, diff)
		}
	}
	r := snap2.Evaluate(&req, nil)[0]
	if r.Active || r.Enabled || r.Reason != flags.ReasonDisabled {
		t.Errorf("inactive flag: %+v", r)
	}
	if d := flags.ReasonConditionMatch.Description(1); d != "Matched condition set 2" {
		t.Errorf("description %q", d)
	}
}

func TestVariantsAndPayloads(t *testing.T) {
	snap := mustCompile(t, flags.Project{Flags: []flags.FlagDefinition{
		flag(1, "mv", `{"groups": [{"properties": [{"key": "plan", "value": "pro"}], "variant": "b"}, {}],
			"multivariate": {"variants": [{"key": "a", "rollout_percentage": 50}, {"key": "b", "rollout_percentage": 50}]},
			"payloads": {"a": {"x": 1}, "b": "\"text\""}}`),
	}})
	if got := evalKey(t, snap, flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"plan": "pro"}}, "mv"); got.Value != "b" || got.Payload != `"\"text\""` || got.Index != 0 {
		t.Errorf("override: %+v", got)
	}
	seen := map[any]int{}
	for i := range 2000 {
		got := evalKey(t, snap, flags.Request{DistinctID: "user-" + string(rune('a'+i%26)) + string(rune('0'+i/26%10)) + string(rune('0'+i/260))}, "mv")
		seen[got.Value]++
		if got.Value == "a" && got.Payload != `{"x":1}` {
			t.Errorf("payload of a: %q", got.Payload)
		}
	}
	if seen["a"] < 800 || seen["b"] < 800 || len(seen) != 2 {
		t.Errorf("variant split %v", seen)
	}
}

func TestGroupFlags(t *testing.T) {
	snap := mustCompile(t, flags.Project{GroupTypes: map[int]string{1: "company"}, Flags: []flags.FlagDefinition{
		flag(1, "g", `{"aggregation_group_type_index": 1, "groups": [{"properties": [
			{"key": "seats", "value": 10, "operator": "gt", "type": "group", "group_type_index": 1}], "rollout_percentage": 100}]}`),
		flag(2, "unmapped", `{"aggregation_group_type_index": 3, "groups": [{}]}`),
	}})
	for name, tc := range map[string]struct {
		req  flags.Request
		want outcome
	}{
		"no group":      {flags.Request{DistinctID: "u"}, outcome{false, "no_group_type", -1, "", false}},
		"override":      {flags.Request{DistinctID: "u", Groups: map[string]string{"company": "acme"}, GroupProperties: map[string]flags.Properties{"company": {"seats": 20}}}, outcome{true, "condition_match", 0, "", false}},
		"stored":        {flags.Request{DistinctID: "u", Groups: map[string]string{"company": "acme"}, StoredGroups: map[string]flags.Properties{"company": {"seats": 20}}}, outcome{true, "condition_match", 0, "", false}},
		"too small":     {flags.Request{DistinctID: "u", Groups: map[string]string{"company": "acme"}, StoredGroups: map[string]flags.Properties{"company": {"seats": 2}}}, outcome{false, "no_condition_match", 0, "", false}},
		"lookup failed": {flags.Request{DistinctID: "u", Groups: map[string]string{"company": "acme"}, GroupLookupFailed: 1 << 1}, outcome{false, "error", -1, "", true}},
	} {
		if diff := cmp.Diff(tc.want, evalKey(t, snap, tc.req, "g")); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if got := evalKey(t, snap, flags.Request{DistinctID: "u", Groups: map[string]string{"company": "acme"}}, "unmapped"); got.Reason != "no_group_type" {
		t.Errorf("unmapped group type: %+v", got)
	}
	if !snap.NeedsGroupLookup(1, nil) || snap.NeedsGroupLookup(1, flags.Properties{"seats": 3}) || snap.NeedsGroupLookup(0, nil) {
		t.Error("NeedsGroupLookup")
	}
}

func TestSuperConditionsAndHoldouts(t *testing.T) {
	snap := mustCompile(t, flags.Project{Flags: []flags.FlagDefinition{
		flag(1, "early", `{"groups": [{"rollout_percentage": 0}],
			"super_groups": [{"properties": [{"key": "$feature_enrollment/early", "value": ["true"], "operator": "exact"}], "rollout_percentage": 100}]}`),
		flag(2, "held", `{"groups": [{}], "holdout_groups": [{"properties": [], "rollout_percentage": 100, "variant": "holdout-7"}]}`),
		flag(3, "not-held", `{"groups": [{}], "holdout_groups": [{"properties": [], "rollout_percentage": 0, "variant": "holdout-7"}]}`),
	}})
	enrolled := flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"$feature_enrollment/early": true}}
	optedOut := flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"$feature_enrollment/early": false}}
	for name, tc := range map[string]struct {
		req  flags.Request
		key  string
		want outcome
	}{
		"enrolled":     {enrolled, "early", outcome{true, "super_condition_value", 0, "", false}},
		"opted out":    {optedOut, "early", outcome{false, "super_condition_value", 0, "", false}},
		"not set":      {flags.Request{DistinctID: "u"}, "early", outcome{false, "out_of_rollout_bound", 0, "", false}},
		"in holdout":   {flags.Request{DistinctID: "u"}, "held", outcome{"holdout-7", "holdout_condition_value", 0, "", false}},
		"holdout zero": {flags.Request{DistinctID: "u"}, "not-held", outcome{true, "condition_match", 0, "", false}},
	} {
		if diff := cmp.Diff(tc.want, evalKey(t, snap, tc.req, tc.key)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

func TestExperienceContinuity(t *testing.T) {
	def := flag(1, "sticky", `{"groups": [{"rollout_percentage": 50}]}`)
	def.EnsureExperienceContinuity = true
	snap := mustCompile(t, flags.Project{Flags: []flags.FlagDefinition{def}})
	// With the override, every distinct id gets the anonymous id's value.
	anon := evalKey(t, snap, flags.Request{DistinctID: "anon-1"}, "sticky").Value
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		got := evalKey(t, snap, flags.Request{DistinctID: id, HashKeyOverrides: map[string]string{"sticky": "anon-1"}}, "sticky").Value
		if got != anon {
			t.Errorf("%s: %v, want the anonymous id's %v", id, got, anon)
		}
	}
}

func TestFlagDependencies(t *testing.T) {
	snap := mustCompile(t, flags.Project{Flags: []flags.FlagDefinition{
		flag(1, "base", `{"groups": [{"properties": [{"key": "plan", "value": "pro"}]}]}`),
		flag(2, "mv", `{"groups": [{}], "multivariate": {"variants": [{"key": "only", "rollout_percentage": 100}]}}`),
		flag(3, "needs-base", `{"groups": [{"properties": [{"key": "base", "type": "flag", "value": true, "operator": "flag_evaluates_to"}]}]}`),
		flag(4, "needs-base-off", `{"groups": [{"properties": [{"key": "1", "type": "flag", "value": false, "operator": "flag_evaluates_to"}]}]}`),
		flag(5, "needs-variant", `{"groups": [{"properties": [{"key": "mv", "type": "flag", "value": "only", "operator": "flag_evaluates_to"}]}]}`),
		flag(6, "needs-any-mv", `{"groups": [{"properties": [{"key": "mv", "type": "flag", "value": true, "operator": "flag_evaluates_to"}]}]}`),
		flag(7, "chain", `{"groups": [{"properties": [{"key": "needs-base", "type": "flag", "value": true, "operator": "flag_evaluates_to"}]}]}`),
		flag(8, "cycle-a", `{"groups": [{"properties": [{"key": "cycle-b", "type": "flag", "value": true, "operator": "flag_evaluates_to"}]}]}`),
		flag(9, "cycle-b", `{"groups": [{"properties": [{"key": "cycle-a", "type": "flag", "value": false, "operator": "flag_evaluates_to"}]}]}`),
		flag(10, "self", `{"groups": [{"properties": [{"key": "self", "type": "flag", "value": false, "operator": "flag_evaluates_to"}]}]}`),
		flag(11, "unknown", `{"groups": [{"properties": [{"key": "nope", "type": "flag", "value": false, "operator": "flag_evaluates_to"}]}]}`),
	}})
	pro := flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"plan": "pro"}}
	free := flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"plan": "free"}}
	for name, tc := range map[string]struct {
		req  flags.Request
		want map[string]any
	}{
		"pro": {pro, map[string]any{"needs-base": true, "needs-base-off": false, "needs-variant": true, "needs-any-mv": true,
			"chain": true, "cycle-a": false, "cycle-b": false, "self": false, "unknown": false}},
		"free": {free, map[string]any{"needs-base": false, "needs-base-off": true, "chain": false}},
	} {
		results := snap.Evaluate(&tc.req, nil)
		for key, want := range tc.want {
			if got := results[snap.Lookup(key)].Value(); got != want {
				t.Errorf("%s: %s = %v, want %v", name, key, got, want)
			}
		}
		// EvaluateFlag evaluates a flag's dependencies (chain needs needs-base, which needs
		// base) without the rest, into scratch that holds stale results of other flags.
		scratch := snap.Evaluate(&free, nil)
		for i := range results {
			var one flags.Result
			if one, scratch = snap.EvaluateFlag(&tc.req, i, scratch); outcomeOf(one) != outcomeOf(results[i]) {
				t.Errorf("%s: EvaluateFlag(%s) = %+v, want %+v", name, results[i].Key, outcomeOf(one), outcomeOf(results[i]))
			}
		}
	}
}

func TestCohorts(t *testing.T) {
	snap := mustCompile(t, flags.Project{
		Cohorts: []flags.CohortDefinition{
			{ID: 1, Filters: json.RawMessage(`{"properties": {"type": "OR", "values": [
				{"type": "AND", "values": [{"key": "plan", "value": "pro", "type": "person"}, {"key": "age", "value": 18, "operator": "gte", "type": "person"}]},
				{"type": "AND", "values": [{"key": "email", "value": "@corp", "operator": "icontains", "type": "person", "negation": true}, {"key": "vip", "value": true, "type": "person"}]}]}}`)},
			{ID: 2, Static: true},
			{ID: 3, Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [{"key": "id", "value": 1, "type": "cohort", "operator": "in"}, {"key": "country", "value": "FR", "type": "person"}]}}`)},
			{ID: 4, Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [{"key": "id", "value": 5, "type": "cohort", "operator": "in"}]}}`)},
			{ID: 5, Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [{"key": "id", "value": 4, "type": "cohort", "operator": "in"}]}}`)},
		},
		Flags: []flags.FlagDefinition{
			flag(1, "c1", `{"groups": [{"properties": [{"key": "id", "value": 1, "type": "cohort", "operator": "in"}]}]}`),
			flag(2, "not-c1", `{"groups": [{"properties": [{"key": "id", "value": "1", "type": "cohort", "operator": "not_in"}]}]}`),
			flag(3, "static", `{"groups": [{"properties": [{"key": "id", "value": 2, "type": "cohort", "operator": "in"}]}]}`),
			flag(4, "nested", `{"groups": [{"properties": [{"key": "id", "value": 3, "type": "cohort", "operator": "in"}]}]}`),
			flag(5, "cyclic", `{"groups": [{"properties": [{"key": "id", "value": 4, "type": "cohort", "operator": "in"}]}]}`),
			flag(6, "missing", `{"groups": [{"properties": [{"key": "id", "value": 99, "type": "cohort", "operator": "in"}]}]}`),
		},
	})
	for name, tc := range map[string]struct {
		req  flags.Request
		want map[string]any
	}{
		"pro adult": {flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"plan": "pro", "age": 30, "country": "FR"}},
			map[string]any{"c1": true, "not-c1": false, "static": false, "nested": true, "cyclic": false, "missing": false}},
		"vip outsider": {flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"vip": true, "email": "a@b.c"}},
			map[string]any{"c1": true, "nested": false}},
		"vip insider": {flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"vip": true, "email": "a@corp.io"}},
			map[string]any{"c1": false, "not-c1": true}},
		"static member": {flags.Request{DistinctID: "u", StaticCohorts: []int64{2}}, map[string]any{"static": true}},
	} {
		results := snap.Evaluate(&tc.req, nil)
		for key, want := range tc.want {
			if got := results[snap.Lookup(key)].Value(); got != want {
				t.Errorf("%s: %s = %v, want %v", name, key, got, want)
			}
		}
	}
	if !snap.UsesStaticCohorts() || !snap.NeedsPersonLookup(flags.Properties{"plan": "x"}, nil) {
		t.Error("static cohorts need a person look-up")
	}
	failed := snap.Evaluate(&flags.Request{DistinctID: "u", PersonLookupFailed: true}, nil)[snap.Lookup("static")]
	if !failed.Failed || failed.Enabled {
		t.Errorf("static cohort with a failed look-up: %+v", failed)
	}
}

// TestCohortFlagFilter: a cohort holding a flag filter (posthog-node's "resolves a cohort
// referencing a flag dependency locally when dependency_chain is present") is matched by
// PostHog's server with match_property, which errs on flag_evaluates_to, so the filter is no
// match, negation applied (rust/feature-flags/src/cohorts/cohort_operations.rs:
// evaluate_property_with_negation); the SDK evaluates the flag instead.
func TestCohortFlagFilter(t *testing.T) {
	snap := mustCompile(t, flags.Project{
		Cohorts: []flags.CohortDefinition{
			{ID: 1, Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [{"type": "AND", "values": [
				{"key": "plan", "value": "pro", "type": "person"},
				{"key": "base", "value": true, "type": "flag", "operator": "flag_evaluates_to", "dependency_chain": ["base"]}]}]}}`)},
			{ID: 2, Filters: json.RawMessage(`{"properties": {"type": "OR", "values": [
				{"key": "plan", "value": "pro", "type": "person"},
				{"key": "base", "value": true, "type": "flag", "operator": "flag_evaluates_to"}]}}`)},
			{ID: 3, Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [
				{"key": "base", "value": true, "type": "flag", "operator": "flag_evaluates_to", "negation": true}]}}`)},
		},
		Flags: []flags.FlagDefinition{
			flag(1, "base", `{"groups": [{"rollout_percentage": 100}]}`),
			flag(2, "and-cohort", `{"groups": [{"properties": [{"key": "id", "value": 1, "type": "cohort"}]}]}`),
			flag(3, "or-cohort", `{"groups": [{"properties": [{"key": "id", "value": 2, "type": "cohort"}]}]}`),
			flag(4, "negated-cohort", `{"groups": [{"properties": [{"key": "id", "value": 3, "type": "cohort"}]}]}`),
		},
	})
	results := snap.Evaluate(&flags.Request{DistinctID: "some-distinct-id", PersonProperties: flags.Properties{"plan": "pro"}}, nil)
	for key, want := range map[string]bool{"base": true, "and-cohort": false, "or-cohort": true, "negated-cohort": true} {
		if r := results[snap.Lookup(key)]; r.Enabled != want || r.Failed {
			t.Errorf("%s: %+v, want enabled %v", key, r, want)
		}
	}
}

func TestNeededProperties(t *testing.T) {
	snap := mustCompile(t, flags.Project{Flags: []flags.FlagDefinition{
		flag(1, "a", `{"groups": [{"properties": [{"key": "plan", "value": "pro"}, {"key": "distinct_id", "value": "x"}]}]}`),
		flag(2, "b", `{"groups": [{"properties": [{"key": "$geoip_country_code", "value": "FR"}]}]}`),
		flag(3, "c", `{"groups": [{"rollout_percentage": 10}]}`),
	}})
	if diff := cmp.Diff([]string{"$geoip_country_code", "distinct_id", "plan"}, snap.PersonPropertyKeys()); diff != "" {
		t.Error(diff)
	}
	for _, tc := range []struct {
		overrides, geoip flags.Properties
		want             bool
	}{
		{nil, nil, true},
		{flags.Properties{"plan": "x"}, nil, true},
		{flags.Properties{"plan": "x"}, flags.Properties{"$geoip_country_code": "FR"}, false},
		{flags.Properties{"plan": "x", "$geoip_country_code": "DE"}, nil, false},
		{flags.Properties{"plan": nil, "$geoip_country_code": "DE"}, nil, false}, // sent as null: the request decides
	} {
		if got := snap.NeedsPersonLookup(tc.overrides, tc.geoip); got != tc.want {
			t.Errorf("NeedsPersonLookup(%v, %v) = %v", tc.overrides, tc.geoip, got)
		}
	}
	// A failed look-up fails exactly the flags that read a property no layer has.
	results := snap.Evaluate(&flags.Request{DistinctID: "u", PersonLookupFailed: true, GeoIP: flags.Properties{"$geoip_country_code": "FR"}}, nil)
	got := map[string]bool{}
	for _, r := range results {
		got[r.Key] = r.Failed
	}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": false, "c": false}, got); diff != "" {
		t.Errorf("failed flags (-want +got):\n%s", diff)
	}
}

func TestPropertyLayers(t *testing.T) {
	snap := mustCompile(t, flags.Project{Flags: []flags.FlagDefinition{
		flag(1, "fr", `{"groups": [{"properties": [{"key": "$geoip_country_code", "value": "FR"}]}]}`),
	}})
	for name, tc := range map[string]struct {
		req  flags.Request
		want bool
	}{
		"stored":              {flags.Request{StoredPerson: flags.Properties{"$geoip_country_code": "FR"}}, true},
		"geoip over stored":   {flags.Request{StoredPerson: flags.Properties{"$geoip_country_code": "FR"}, GeoIP: flags.Properties{"$geoip_country_code": "DE"}}, false},
		"override over geoip": {flags.Request{GeoIP: flags.Properties{"$geoip_country_code": "DE"}, PersonProperties: flags.Properties{"$geoip_country_code": "fr"}}, true},
	} {
		tc.req.DistinctID = "u"
		if got := snap.Evaluate(&tc.req, nil)[0].Enabled; got != tc.want {
			t.Errorf("%s: %v", name, got)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	_, err := flags.Compile(flags.Project{Flags: []flags.FlagDefinition{
		flag(1, "ok", `{"groups": []}`),
		flag(2, "bad-json", `{"groups": [`),
		flag(3, "bad-op", `{"groups": [{"properties": [{"key": "a", "operator": "nope", "value": 1}]}]}`),
		// The API refuses variants that do not sum to 100, but a stored one still evaluates.
		flag(4, "bad-sum", `{"groups": [], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 10}]}}`),
	}})
	var ce *flags.CompileError
	if !errors.As(err, &ce) || len(ce.Problems) != 2 {
		t.Fatalf("got %v", err)
	}
}

// TestRepeatedFilters covers filters that several conditions share, which an evaluation
// tests once: every flag that reads a property that could not be fetched is failed (not
// only the first), negation and the operator keep filters apart, and a cohort's condition
// written again in a flag gives the same answer in both.
func TestRepeatedFilters(t *testing.T) {
	snap := mustCompile(t, flags.Project{
		Cohorts: []flags.CohortDefinition{{ID: 1, Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [
			{"key": "plan", "value": ["pro"], "type": "person"}]}}`)}},
		Flags: []flags.FlagDefinition{
			flag(1, "a-plan", `{"groups": [{"properties": [{"key": "plan", "value": ["pro"], "operator": "exact"}]}]}`),
			flag(2, "b-plan", `{"groups": [{"properties": [{"key": "plan", "value": ["pro"]}]}, {"rollout_percentage": 100}]}`),
			flag(3, "c-not-plan", `{"groups": [{"properties": [{"key": "plan", "value": ["pro"], "negation": true}]}]}`),
			flag(4, "d-is-not", `{"groups": [{"properties": [{"key": "plan", "value": ["pro"], "operator": "is_not"}]}]}`),
			flag(5, "e-cohort", `{"groups": [{"properties": [{"key": "id", "value": 1, "type": "cohort"}]}]}`),
			flag(6, "f-email", `{"groups": [{"properties": [{"key": "email", "value": "x", "operator": "icontains"}]}]}`),
		},
	})
	for _, tc := range []struct {
		name string
		req  flags.Request
		want map[string]outcome
	}{
		{"pro", flags.Request{PersonProperties: flags.Properties{"plan": "Pro", "email": "x@y"}}, map[string]outcome{
			"a-plan":     {Value: true, Reason: "condition_match", Index: 0},
			"b-plan":     {Value: true, Reason: "condition_match", Index: 0},
			"c-not-plan": {Value: false, Reason: "no_condition_match", Index: 0},
			"d-is-not":   {Value: false, Reason: "no_condition_match", Index: 0},
			"e-cohort":   {Value: true, Reason: "condition_match", Index: 0},
			"f-email":    {Value: true, Reason: "condition_match", Index: 0},
		}},
		{"free", flags.Request{PersonProperties: flags.Properties{"plan": "free", "email": "x@y"}}, map[string]outcome{
			"a-plan":     {Value: false, Reason: "no_condition_match", Index: 0},
			"b-plan":     {Value: true, Reason: "condition_match", Index: 1},
			"c-not-plan": {Value: true, Reason: "condition_match", Index: 0},
			"d-is-not":   {Value: true, Reason: "condition_match", Index: 0},
			"e-cohort":   {Value: false, Reason: "no_condition_match", Index: 0},
			"f-email":    {Value: true, Reason: "condition_match", Index: 0},
		}},
		{"plan not fetched", flags.Request{PersonLookupFailed: true, PersonProperties: flags.Properties{"email": "x@y"}}, map[string]outcome{
			"a-plan":     {Value: false, Reason: "error", Index: -1, Failed: true},
			"b-plan":     {Value: false, Reason: "error", Index: -1, Failed: true},
			"c-not-plan": {Value: false, Reason: "error", Index: -1, Failed: true},
			"d-is-not":   {Value: false, Reason: "error", Index: -1, Failed: true},
			"e-cohort":   {Value: false, Reason: "error", Index: -1, Failed: true},
			"f-email":    {Value: true, Reason: "condition_match", Index: 0},
		}},
	} {
		tc.req.DistinctID = "u"
		got := map[string]outcome{}
		for _, r := range snap.Evaluate(&tc.req, nil) {
			got[r.Key] = outcomeOf(r)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

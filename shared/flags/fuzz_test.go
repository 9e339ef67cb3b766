package flags_test

import (
	"encoding/json"
	"testing"

	"github.com/flagedge/flagedge/shared/flags"
)

// FuzzParseFilters feeds arbitrary definitions to the parser: no input may panic, and a
// definition the parser accepts must compile and evaluate.
func FuzzParseFilters(f *testing.F) {
	for _, seed := range []string{
		`{"groups": [{"properties": [], "rollout_percentage": null}]}`,
		`{"groups": [{"properties": [{"key": "email", "value": "@x", "operator": "icontains", "type": "person"}], "rollout_percentage": 50}]}`,
		`{"groups": [{"variant": "a"}], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 60}, {"key": "b", "rollout_percentage": 40}]}, "payloads": {"a": "{\"x\": 1}"}}`,
		`{"aggregation_group_type_index": 0, "groups": [{"properties": [{"key": "seats", "value": 3, "operator": "gt", "type": "group", "group_type_index": 0}]}]}`,
		`{"groups": [{"properties": [{"key": "v", "value": "1.2.*", "operator": "semver_wildcard"}, {"key": "d", "value": "-3m", "operator": "is_date_before"}]}]}`,
		`{"groups": [{"properties": [{"key": "id", "value": 1, "operator": "in", "type": "cohort"}, {"key": "f", "value": true, "operator": "flag_evaluates_to", "type": "flag"}]}]}`,
		`{"groups": [], "super_groups": [{"properties": [{"key": "$feature_enrollment/x", "value": ["true"]}]}], "holdout_groups": [{"rollout_percentage": 10, "variant": "holdout-1"}]}`,
		`{"groups": [{"properties": [{"key": "r", "value": "^(a|b)+$", "operator": "regex", "negation": true}]}]}`,
		`[]`, `null`, `{"groups": "x"}`, `{"groups": [{"rollout_percentage": 1e400}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := flags.ParseFilters(data); err != nil {
			return
		}
		snap, err := flags.Compile(flags.Project{
			GroupTypes: map[int]string{0: "company"},
			Cohorts:    []flags.CohortDefinition{{ID: 1, Static: true}},
			Flags: []flags.FlagDefinition{
				{ID: 1, Key: "fuzzed", Active: true, Filters: data},
				{ID: 2, Key: "f", Active: true, Filters: json.RawMessage(`{"groups": [{}]}`)},
			},
		})
		if err != nil {
			t.Fatalf("parsed but did not compile: %v\n%s", err, data)
		}
		for _, req := range []flags.Request{
			{DistinctID: "u"},
			{DistinctID: "u", Groups: map[string]string{"company": "c"}, PersonProperties: flags.Properties{
				"email": "a@x", "v": "1.2.3", "d": "2020-01-01", "r": "ab", "seats": 5.0, "$feature_enrollment/x": true}},
			{DistinctID: "", PersonLookupFailed: true, GroupLookupFailed: 0xff},
		} {
			snap.Evaluate(&req, nil)
		}
	})
}

// FuzzEvaluateValues matches arbitrary property values against every operator: no value may
// panic, and negation must invert every result.
func FuzzEvaluateValues(f *testing.F) {
	ops := []struct{ op, value string }{
		{"exact", `["a", 1, true]`}, {"is_not", `"x"`}, {"is_set", `null`}, {"is_not_set", `null`},
		{"icontains", `"ab"`}, {"not_icontains", `"AB"`}, {"regex", `"^a.*b$"`}, {"not_regex", `"\\d+"`},
		{"gt", `10`}, {"gte", `"10"`}, {"lt", `"m"`}, {"lte", `2.5`},
		{"is_date_before", `"-30d"`}, {"is_date_after", `"2024-01-01"`}, {"is_date_exact", `"2024-01-01"`},
		{"starts_with", `"a"`}, {"ends_with", `"z"`}, {"not_starts_with", `"a"`}, {"not_ends_with", `"z"`},
		{"semver_eq", `"1.2.3"`}, {"semver_neq", `"1.2.3"`}, {"semver_gt", `"1.2.3"`}, {"semver_gte", `"1.0"`},
		{"semver_lt", `"2"`}, {"semver_lte", `"2.0.1"`}, {"semver_tilde", `"1.2.3"`}, {"semver_caret", `"0.2.3"`},
		{"semver_wildcard", `"1.*"`},
	}
	var defs []flags.FlagDefinition
	for _, o := range ops {
		for _, neg := range []string{"false", "true"} {
			filters := `{"groups": [{"properties": [{"key": "p", "operator": "` + o.op + `", "value": ` + o.value + `, "negation": ` + neg + `}]}]}`
			defs = append(defs, flags.FlagDefinition{ID: int64(len(defs) + 1), Key: o.op + "-" + neg, Active: true, Filters: json.RawMessage(filters)})
		}
	}
	snap, err := flags.Compile(flags.Project{Flags: defs})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{`"abc"`, `12`, `1e308`, `-0.5`, `true`, `null`, `[1, "a"]`, `{"a": 1}`, `"2024-01-01T00:00:00Z"`,
		`"v1.2.3-rc1"`, `"1704067200"`, `"ÄBÇ"`, `""`, `"\u0000"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return
		}
		results := snap.Evaluate(&flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"p": v}}, nil)
		for i := 0; i < len(results); i += 2 {
			neg, pos := results[i], results[i+1] // keys sort "-false" before "-true"
			if neg.Enabled == pos.Enabled {
				t.Errorf("%s and %s agree (%v) for %s", neg.Key, pos.Key, neg.Enabled, raw)
			}
		}
	})
}

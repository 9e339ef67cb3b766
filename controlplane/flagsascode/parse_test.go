package flagsascode_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/controlplane/flagsascode"
)

// TestParseRefusesBadInput feeds files with one mistake each: the error names the file, the
// line and column, and the field, and says what is wrong.
func TestParseRefusesBadInput(t *testing.T) {
	const everyone = "    filters:\n      groups:\n        - properties: []\n          rollout_percentage: 100\n"
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"unknown field", "flags:\n  f:\n    activ: true\n" + everyone,
			[]string{"flags.yaml:3:5: flags.f.activ: unknown field"}},
		{"unknown top-level field", "flag:\n  f: {}\n",
			[]string{"flags.yaml:1:1: flag: unknown field"}},
		{"wrong type", "flags:\n  f:\n    active: \"yes\"\n" + everyone,
			[]string{`flags.yaml:3:13: flags.f.active: must be true or false, not the string "yes"`}},
		{"wrong type of list", "flags:\n  f:\n    tags: web\n" + everyone,
			[]string{`flags.yaml:3:11: flags.f.tags: must be a list of strings, not the string "web"`}},
		{"duplicate flag", "flags:\n  f:\n" + everyone + "  f:\n" + everyone,
			[]string{"flags.yaml:7:3: flags.f: duplicate key (first at line 2)"}},
		{"duplicate field", "flags:\n  f:\n    name: a\n    name: b\n" + everyone,
			[]string{"flags.yaml:4:5: flags.f.name: duplicate key (first at line 3)"}},
		{"invalid filters", "flags:\n  f:\n    filters:\n      groups:\n        - properties: []\n          rollout_percentage: 150\n",
			[]string{"flags.yaml:4:7: flags.f.filters: Invalid groups[0]: rollout_percentage must be between 0 and 100."}},
		{"invalid operator", "flags:\n  f:\n    filters:\n      groups:\n        - properties:\n            - {key: email, value: x, operator: resembles, type: person}\n",
			[]string{`flags.yaml:4:7: flags.f.filters: Invalid groups[0]: unknown operator "resembles".`}},
		{"missing filters", "flags:\n  f:\n    name: a\n",
			[]string{"flags.yaml:2:3: flags.f.filters: required"}},
		{"unknown cohort", "flags:\n  f:\n    filters:\n      groups:\n        - properties:\n            - {key: id, type: cohort, value: Nope}\n",
			[]string{`flags.yaml:6:46: flags.f.filters.groups[0].properties[0].value: unknown cohort "Nope"`}},
		{"cohort by id", "cohorts:\n  C: {filters: {properties: {type: AND, values: [{key: a, value: b, type: person}]}}}\nflags:\n  f:\n    filters:\n      groups:\n        - properties:\n            - {key: id, type: cohort, value: 5}\n",
			[]string{"flags.yaml:8:46: flags.f.filters.groups[0].properties[0].value: must name a cohort of the file (a string), not the number 5"}},
		{"unknown flag dependency", "flags:\n  f:\n    filters:\n      groups:\n        - properties:\n            - {key: g, type: flag, value: true, operator: flag_evaluates_to}\n",
			[]string{`flags.yaml:6:21: flags.f.filters.groups[0].properties[0].key: unknown flag "g"`}},
		{"dependency cycle", "flags:\n  a:\n    filters: {groups: [{properties: [{key: b, type: flag, value: true, operator: flag_evaluates_to}]}]}\n" +
			"  b:\n    filters: {groups: [{properties: [{key: a, type: flag, value: true, operator: flag_evaluates_to}]}]}\n",
			[]string{"flags: circular flag dependency: a → b → a"}},
		{"bad key", "flags:\n  bad key:\n" + everyone,
			[]string{"flags.yaml:2:3: flags.bad key.key: Only letters, numbers, hyphens (-) & underscores (_) are allowed."}},
		{"evaluation context not a tag", "flags:\n  f:\n    tags: [web]\n    evaluation_contexts: [ios]\n" + everyone,
			[]string{"flags.yaml:4:26: flags.f.evaluation_contexts: Evaluation tags must be a subset of tags. Invalid evaluation tags: ios"}},
		{"bad runtime", "flags:\n  f:\n    evaluation_runtime: edge\n" + everyone,
			[]string{`flags.yaml:3:25: flags.f.evaluation_runtime: "edge" is not a valid choice.`}},
		{"bad cohort filters", "cohorts:\n  C:\n    filters: {properties: {type: XOR, values: []}}\n",
			[]string{`flags.yaml:3:14: cohorts.C.filters: a property group's type is "AND" or "OR"`}},
		{"feature without flag", "early_access_features:\n  Search:\n    stage: beta\n",
			[]string{"flags.yaml:2:3: early_access_features.Search.flag: required"}},
		{"feature with unknown stage and flag", "early_access_features:\n  Search:\n    stage: later\n    flag: nope\n",
			[]string{`flags.yaml:3:12: early_access_features.Search.stage: "later" is not a valid choice.`,
				`flags.yaml:4:11: early_access_features.Search.flag: unknown flag "nope"`}},
		{"version", "version: 2\n", []string{"flags.yaml:1:10: version: must be 1, not the number 2"}},
		{"not YAML", "flags:\n  f: [\n", []string{"flags.yaml: yaml: line 3: "}},
		{"empty", "", []string{"flags.yaml:1:1: the file is empty"}},
		{"several mistakes", "flags:\n  f:\n    activ: true\n    name: 3\n" + everyone,
			[]string{"flags.yaml:3:5: flags.f.activ: unknown field", "flags.yaml:4:11: flags.f.name: must be a string, not the number 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := flagsascode.Parse("flags.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.file)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error\n%v\nlacks %q", err, want)
				}
			}
		})
	}
}

// TestParseKeepsWhatIsWritten reads values YAML would turn into other types (a date into a
// time) as the text written, as the filters mean them.
func TestParseKeepsWhatIsWritten(t *testing.T) {
	s, err := flagsascode.Parse("flags.yaml", []byte("flags:\n  f:\n    filters:\n      groups:\n        - properties:\n"+
		"            - {key: signed_up, type: person, operator: is_date_before, value: 2024-01-01}\n"+
		"            - {key: plan, type: person, operator: exact, value: [pro, 3, 2.5, true]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	props := s.Flags["f"].Filters["groups"].([]any)[0].(map[string]any)["properties"].([]any)
	got := []any{props[0].(map[string]any)["value"], props[1].(map[string]any)["value"]}
	want := []any{"2024-01-01", []any{"pro", 3.0, 2.5, true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
}

// FuzzParse checks that no file makes Parse panic, and that what it accepts survives a round
// trip through Marshal unchanged.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"flags:\n  f:\n    filters: {groups: [{properties: [], rollout_percentage: 50}]}\n",
		"cohorts:\n  C: {filters: {properties: {type: AND, values: []}}}\nflags:\n  f:\n    filters: {groups: [{properties: [{key: id, type: cohort, value: C}]}]}\n",
		"flags:\n  f:\n    filters: {groups: [], x: .nan}\n",
		"a: &x [1]\nb: *x\n",
		"early_access_features:\n  F: {stage: beta, flag: f}\nflags:\n  f: {filters: {groups: []}}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := flagsascode.Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		out, err := flagsascode.Marshal(s)
		if err != nil {
			t.Fatalf("marshal of a parsed file: %v", err)
		}
		again, err := flagsascode.Parse("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("the marshalled file does not parse: %v\n%s", err, out)
		}
		if out2, _ := flagsascode.Marshal(again); string(out2) != string(out) {
			t.Fatalf("round trip changed the file:\n%s\n---\n%s", out, out2)
		}
	})
}

package flags_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/shared/flags"
	"github.com/flagedge/flagedge/shared/flags/flagstest"
)

func TestDefinitionsBody(t *testing.T) {
	project := flags.Project{
		GroupTypes: map[int]string{0: "company", 2: "team"},
		Cohorts: []flags.CohortDefinition{
			{ID: 7, Filters: json.RawMessage(`{"properties": {"type": "OR", "values": [{"type": "AND", "values": [{"key": "plan", "value": "pro", "type": "person"}]}]}}`)},
			{ID: 8, Static: true},
			{ID: 9, Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [{"key": "id", "value": 7, "type": "cohort", "operator": "in"}]}}`)},
		},
		Flags: []flags.FlagDefinition{
			{ID: 2, Key: "b", Name: "B", Active: true, Version: 4, Filters: json.RawMessage(`{"groups": [{"properties": [{"key": "1", "type": "flag", "value": true, "operator": "flag_evaluates_to"}]}]}`)},
			{ID: 1, Key: "a", Active: false, Version: 1, Filters: json.RawMessage(`{"groups": [{"properties": [{"key": "id", "value": 7, "type": "cohort", "operator": "in"}], "rollout_percentage": 50}]}`)},
			{ID: 3, Key: "c", Active: true, Version: 1, EnsureExperienceContinuity: true, Filters: json.RawMessage(`{"groups": [{"properties": [{"key": "id", "value": 9, "type": "cohort"}, {"key": "id", "value": 8, "type": "cohort"}]}]}`)},
		},
	}
	decode := func(sendCohorts bool) map[string]any {
		body, err := flags.DefinitionsBody(42, project, sendCohorts)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := flags.DefinitionsBody(42, project, sendCohorts)
		if string(again) != string(body) {
			t.Error("the body is not deterministic")
		}
		var out map[string]any
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	inlined := decode(false)
	fl := inlined["flags"].([]any)
	if len(fl) != 3 || fl[0].(map[string]any)["key"] != "a" || fl[0].(map[string]any)["team_id"] != 42.0 || fl[0].(map[string]any)["active"] != false {
		t.Fatalf("flags %v", fl)
	}
	aProps := fl[0].(map[string]any)["filters"].(map[string]any)["groups"].([]any)[0].(map[string]any)["properties"]
	if diff := cmp.Diff([]any{map[string]any{"key": "plan", "value": "pro", "type": "person", "operator": "exact"}}, aProps); diff != "" {
		t.Errorf("cohort 7 not inlined (-want +got):\n%s", diff)
	}
	bProp := fl[1].(map[string]any)["filters"].(map[string]any)["groups"].([]any)[0].(map[string]any)["properties"].([]any)[0].(map[string]any)
	if bProp["key"] != "a" || cmp.Diff([]any{"a"}, bProp["dependency_chain"]) != "" {
		t.Errorf("dependency not named by key with its chain: %v", bProp)
	}
	if diff := cmp.Diff(map[string]any{"0": "company", "2": "team"}, inlined["group_type_mapping"]); diff != "" {
		t.Error(diff)
	}
	if len(inlined["cohorts"].(map[string]any)) != 0 {
		t.Errorf("cohorts sent without send_cohorts: %v", inlined["cohorts"])
	}
	withCohorts := decode(true)
	cohorts := withCohorts["cohorts"].(map[string]any)
	if _, ok := cohorts["8"]; ok || cohorts["7"] == nil || cohorts["9"] == nil || len(cohorts) != 2 {
		t.Errorf("cohorts %v: want 7 and 9 (9 references 7), never the static 8", cohorts)
	}
	if op := cohorts["7"].(map[string]any)["values"].([]any)[0].(map[string]any)["values"].([]any)[0].(map[string]any)["operator"]; op != "exact" {
		t.Errorf("cohort property without its default operator: %v", op)
	}
	if op := fl[2].(map[string]any)["filters"].(map[string]any)["groups"].([]any)[0].(map[string]any)["properties"].([]any)[0].(map[string]any)["operator"]; op != "in" {
		t.Errorf("cohort filter without its default operator: %v", op)
	}
	if p := withCohorts["flags"].([]any)[0].(map[string]any)["filters"].(map[string]any)["groups"].([]any)[0].(map[string]any)["properties"].([]any)[0].(map[string]any); p["type"] != "cohort" {
		t.Errorf("with send_cohorts the cohort filter stays: %v", p)
	}
}

// TestDefinitionsFromSnapshot checks that a snapshot's Source, which is all an edge keeps of
// the definitions (filters compacted and shared), gives the same definitions body as what
// it was compiled from.
func TestDefinitionsFromSnapshot(t *testing.T) {
	spaced := flagstest.RealisticProject()
	spaced.Flags = append(spaced.Flags, flags.FlagDefinition{ID: 99, Key: "spaced", Name: "Spaced out", Active: true, Version: 7,
		EnsureExperienceContinuity: true, Filters: json.RawMessage("{ \"groups\" : [ { \"properties\" : [ ] ,\n\t\"rollout_percentage\" : 1.50 } ] ,\"payloads\":{\"true\": \" {\\\"a\\\" : 1} \"} }")},
		flags.FlagDefinition{ID: 100, Key: "empty", Active: false})
	spaced.Cohorts = append(spaced.Cohorts, flags.CohortDefinition{ID: 5, Static: true},
		flags.CohortDefinition{ID: 6, Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [ {"key": "id", "value": 1, "type": "cohort"} ]}}`)})
	spaced.GroupTypes[3] = "team"
	for _, sendCohorts := range []bool{false, true} {
		want, err := flags.DefinitionsBody(7, spaced, sendCohorts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := flags.DefinitionsBody(7, mustCompile(t, spaced).Source(), sendCohorts)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("send_cohorts %v (-want +got):\n%s", sendCohorts, diff)
		}
	}
}

// TestDefinitionsCarryRuntime: every flag goes to local evaluation whatever its runtime, with
// its evaluation_runtime and evaluation_tags, also from a compiled snapshot's Source.
func TestDefinitionsCarryRuntime(t *testing.T) {
	project := flags.Project{Flags: []flags.FlagDefinition{
		{ID: 1, Key: "web", Active: true, EvaluationRuntime: "client", EvaluationTags: []string{"app"}, Filters: json.RawMessage(`{"groups":[{}]}`)},
		{ID: 2, Key: "plain", Active: true, Filters: json.RawMessage(`{"groups":[{}]}`)},
	}}
	for _, p := range []flags.Project{project, mustCompile(t, project).Source()} {
		body, err := flags.DefinitionsBody(1, p, false)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Flags []struct {
				Key               string   `json:"key"`
				EvaluationRuntime string   `json:"evaluation_runtime"`
				EvaluationTags    []string `json:"evaluation_tags"`
			} `json:"flags"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(out.Flags)
		if want := "[{web client [app]} {plain all []}]"; got != want {
			t.Errorf("flags %s, want %s", got, want)
		}
	}
}

package posthogimport

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestTranslateKeepsWhatItCannotServeInactive(t *testing.T) {
	p := &Project{
		Cohorts: []Cohort{
			{ID: 1, Name: "Twins", Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [{"key": "a", "type": "person", "value": "x"}]}}`)},
			{ID: 2, Name: "Twins", Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [{"key": "1", "type": "cohort", "value": 1}]}}`)},
			{ID: 3, Name: "Legacy", Groups: json.RawMessage(`[{"action_id": 7, "days": 30}]`), Filters: json.RawMessage(`{}`)},
			{ID: 4, Name: "Uses legacy", Filters: json.RawMessage(`{"properties": {"type": "AND", "values": [{"key": "id", "type": "cohort", "value": "3"}]}}`)},
		},
		Flags: []Flag{
			{ID: 10, Key: "twins", Active: true, Filters: json.RawMessage(`{"groups": [{"properties": [{"key": "id", "type": "cohort", "value": 2}]}]}`)},
			{ID: 11, Key: "legacy", Active: true, Filters: json.RawMessage(`{"groups": [{"properties": [{"key": "id", "type": "cohort", "value": 4}]}]}`)},
			{ID: 12, Key: "companies", Active: true, Filters: json.RawMessage(`{"aggregation_group_type_index": 0, "groups": [{"properties": [], "rollout_percentage": 50}]}`)},
			{ID: 13, Key: "after-twins", Active: true, Filters: json.RawMessage(`{"groups": [{"properties": [{"key": "10", "type": "flag", "value": true, "operator": "flag_evaluates_to"}]}]}`)},
		},
	}
	p.Features = []Feature{{Name: "Orphan", Stage: "beta"}}
	tr, err := Translate(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.State.Cohorts["Twins (#1)"]; !ok {
		t.Errorf("two cohorts named Twins are not told apart: %v", tr.State.Cohorts)
	}
	ref := tr.State.Cohorts["Twins (#2)"].Filters["properties"].(map[string]any)["values"].([]any)[0].(map[string]any)
	if ref["value"] != "Twins (#1)" {
		t.Errorf("the cohort reference is %v, want the renamed cohort", ref["value"])
	}
	dep := tr.State.Flags["after-twins"].Filters["groups"].([]any)[0].(map[string]any)["properties"].([]any)[0].(map[string]any)
	if dep["key"] != "twins" {
		t.Errorf("the flag dependency names %v, want the flag's key", dep["key"])
	}
	if !tr.State.Flags["twins"].Active || !tr.State.Flags["after-twins"].Active {
		t.Error("a flag flagedge serves exactly was imported inactive")
	}
	for _, key := range []string{"legacy", "companies"} {
		if tr.State.Flags[key].Active {
			t.Errorf("flag %s was imported active", key)
		}
	}
	if len(tr.SkippedFeatures) != 1 || len(tr.State.Features) != 0 {
		t.Errorf("a feature without its flag: skipped %v, imported %v", tr.SkippedFeatures, tr.State.Features)
	}
	if len(tr.Warnings) != 2 || !strings.Contains(tr.Warnings[1].Reasons[0], "legacy action or event groups") ||
		!strings.Contains(tr.Warnings[0].Reasons[0], "aggregates by group") {
		t.Errorf("warnings %+v", tr.Warnings)
	}
}

func TestSourceRefusesANextPageElsewhere(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"next": "https://attacker.example/api/projects/1/feature_flags/?offset=100", "results": []}`))
	}))
	defer srv.Close()
	s, err := NewSource(srv.URL, "phx_k", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listAll[Flag](context.Background(), s, "/feature_flags/"); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("a next page on another host: %v", err)
	}
}

func TestSourceStaysUnderTheRateLimit(t *testing.T) {
	var times []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		times = append(times, time.Now())
		_, _ = w.Write([]byte(`{"next": null, "results": []}`))
	}))
	defer srv.Close()
	s, err := NewSource(srv.URL, "phx_k", "1")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := listAll[Flag](context.Background(), s, "/feature_flags/"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d < 120*time.Millisecond {
			t.Errorf("requests %v apart: faster than 480 a minute", d)
		}
	}
}

package e2e

import (
	"fmt"
	"testing"
)

// TestEvaluationCountsReachTheAPI evaluates flags at a real edge (/decide, /flags and a
// captured $feature_flag_called) and finds the counts in the management API once the edge has
// reported them.
func TestEvaluationCountsReachTheAPI(t *testing.T) {
	s := newStack(t)
	s.createFlag(map[string]any{"key": "counted", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	id := s.createFlag(map[string]any{"key": "mv", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}},
		"multivariate": map[string]any{"variants": []any{map[string]any{"key": "blue", "rollout_percentage": 100}}}}})
	e := s.startEdge("edge-usage", "", true, "--evaluation-report-interval", "200ms")
	waitFor(t, "the flags at the edge", func() bool { return hasKey(featureFlags(s.decide(e, map[string]any{"distinct_id": "u"})), "mv") })
	for i := range 5 {
		s.decide(e, map[string]any{"distinct_id": fmt.Sprint("user-", i)})
	}
	if code, out := call(t, "POST", e.url+"/flags/?v=2", "", map[string]any{"token": s.token, "distinct_id": "x", "flag_keys_to_evaluate": []string{"mv"}}); code != 200 {
		t.Fatalf("flags: %d %v", code, out)
	}
	if code, out := call(t, "POST", e.url+"/batch/", "", map[string]any{"api_key": s.token, "batch": []any{
		map[string]any{"event": "$feature_flag_called", "distinct_id": "y", "properties": map[string]any{"$feature_flag": "mv", "$feature_flag_response": "blue"}}}}); code != 200 {
		t.Fatalf("capture: %d %v", code, out)
	}
	// mv: one evaluation before the loop's waitFor found it (at least), five /decide, one
	// /flags, one $feature_flag_called.
	var flag map[string]any
	waitFor(t, "the counts in the API", func() bool {
		_, flag = call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/%d/", s.httpAddr, s.projectID, id), s.personal, nil)
		counts := flag["evaluation_counts"].(map[string]any)
		return counts["1d"].(float64) >= 8
	})
	if flag["last_called_at"] == nil || flag["stale"] != false {
		t.Errorf("flag: last_called_at %v, stale %v", flag["last_called_at"], flag["stale"])
	}
	_, daily := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/%d/evaluations/", s.httpAddr, s.projectID, id), s.personal, nil)
	days := daily["results"].([]any)
	if n := days[len(days)-1].(map[string]any)["count"].(float64); n < 8 {
		t.Errorf("today's evaluations of mv: %v", n)
	}
}

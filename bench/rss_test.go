package main

import (
	"encoding/json"
	"testing"
)

// TestSpreadPersons: every person is given out, half or more to the bench project, and the
// rest falls off with the project's rank.
func TestSpreadPersons(t *testing.T) {
	for _, tc := range []struct{ n, projects int }{{1_000_000, 1001}, {1000, 3}, {7, 1}, {10, 50}} {
		counts := spreadPersons(tc.n, tc.projects)
		sum := 0
		for k, c := range counts {
			sum += c
			if k > 1 && c > counts[k-1] {
				t.Errorf("%+v: project %d has %d persons, more than project %d's %d", tc, k, c, k-1, counts[k-1])
			}
		}
		if sum != tc.n || counts[0] < tc.n/2 {
			t.Errorf("%+v: %d persons given out, %d to the bench project", tc, sum, counts[0])
		}
	}
}

// TestPersonsBatch: a /batch body the edge can decode, one event a person.
func TestPersonsBatch(t *testing.T) {
	var body struct {
		APIKey string `json:"api_key"`
		Batch  []struct {
			DistinctID string `json:"distinct_id"`
			Properties struct {
				Set map[string]string `json:"$set"`
			} `json:"properties"`
		} `json:"batch"`
	}
	if err := json.Unmarshal(personsBatch(nil, "phc_x", "run", 3, 10, 13), &body); err != nil {
		t.Fatal(err)
	}
	if body.APIKey != "phc_x" || len(body.Batch) != 3 || body.Batch[0].DistinctID != "rss-run-3-10" || body.Batch[2].Properties.Set["plan"] == "" {
		t.Fatalf("batch: %+v", body)
	}
}

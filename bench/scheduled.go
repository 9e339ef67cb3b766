package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The scheduled scenario measures how late scheduled changes run and reach an edge: a
// self-contained stack (its own PostgreSQL, a control plane and an edge) plus a second
// control-plane replica on the same database, scheduledChanges flags created on for nobody
// (one condition at 0 %), and one change per flag (add_release_condition: everyone)
// scheduled scheduledLead ahead and then scheduledSpacing apart. For each change: executed_at − scheduled_at (the database's clock
// against the time asked for), and the time from scheduled_at until the edge's /decide
// answers the flag on (polled every few milliseconds). Each change must run once: both
// replicas' executed counters add up to the number of changes, and every flag's activity log
// holds one update. `go run ./bench --scenario scheduled`.

const (
	scheduledChanges = 100
	scheduledLead    = 3 * time.Second
	scheduledSpacing = 50 * time.Millisecond
	scheduledPoll    = 5 * time.Millisecond
)

// scheduledResult is the scenario's report.
type scheduledResult struct {
	Changes          int     `json:"changes"`
	Executed         int     `json:"executed"`
	ByReplica        [2]int  `json:"executed_by_replica"`
	Updates          int     `json:"activity_updates"`
	LatenessP50Ms    float64 `json:"lateness_p50_ms"`
	LatenessP99Ms    float64 `json:"lateness_p99_ms"`
	LatenessMaxMs    float64 `json:"lateness_max_ms"`
	LatenessP90Ms    float64 `json:"lateness_p90_ms"`
	LatestChange     int     `json:"latest_change"` // which change (0-based, in schedule order) was latest
	EdgeP50Ms        float64 `json:"edge_p50_ms"`
	EdgeP99Ms        float64 `json:"edge_p99_ms"`
	EdgeMaxMs        float64 `json:"edge_max_ms"`
	EdgeAfterExecP50 float64 `json:"edge_after_execution_p50_ms"`
}

// scheduledScenario is `--scenario scheduled`.
func scheduledScenario(cfg config) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := startSelfStack(ctx, stackOptions{name: "scheduled"})
	if err != nil {
		return err
	}
	defer s.close()
	second, err := s.startControlPlane(ctx, "controlplane-2", "")
	if err != nil {
		return err
	}
	defer second.stop()
	if err := waitReady("http://" + second.httpAddr + "/_ready"); err != nil {
		return err
	}
	projectID, token, err := s.project()
	if err != nil {
		return err
	}
	a, proj := s.api(), fmt.Sprintf("/api/projects/%d", projectID)

	ids := make([]int64, scheduledChanges)
	for i := range ids {
		progress(fmt.Sprintf("scheduled: flag %d/%d", i+1, scheduledChanges))
		var flag struct {
			ID int64 `json:"id"`
		}
		if err := a.call("POST", proj+"/feature_flags/", map[string]any{"key": scheduledKey(i),
			"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 0}}}}, &flag); err != nil {
			return err
		}
		ids[i] = flag.ID
	}
	decide := "http://" + s.edge.httpAddr + "/decide/?v=3"
	if err := waitFor(10*time.Second, func() bool { ff, _ := edgeFlags(decide, token); return len(ff) == scheduledChanges }); err != nil {
		return fmt.Errorf("the edge never had the %d flags: %w", scheduledChanges, err)
	}

	first := time.Now().Add(scheduledLead)
	scheduledAt := make([]time.Time, scheduledChanges)
	for i, id := range ids {
		progress(fmt.Sprintf("scheduled: change %d/%d", i+1, scheduledChanges))
		scheduledAt[i] = first.Add(time.Duration(i) * scheduledSpacing)
		if err := a.call("POST", proj+"/scheduled_changes/", map[string]any{"record_id": fmt.Sprint(id), "model_name": "FeatureFlag",
			"payload": map[string]any{"operation": "add_release_condition", "value": map[string]any{"groups": []any{
				map[string]any{"properties": []any{}, "rollout_percentage": 100}}}}, "scheduled_at": scheduledAt[i].UTC().Format(time.RFC3339Nano)}, nil); err != nil {
			return err
		}
	}
	if time.Now().After(first) {
		return fmt.Errorf("scheduling %d changes took longer than the %s lead", scheduledChanges, scheduledLead)
	}

	// Poll the edge until every flag is on, noting when each was first seen on.
	progress("scheduled: polling the edge")
	seen := make([]time.Time, scheduledChanges)
	deadline := scheduledAt[scheduledChanges-1].Add(10 * time.Second)
	for on := 0; on < scheduledChanges; {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d changes reached the edge", on, scheduledChanges)
		}
		ff, err := edgeFlags(decide, token)
		now := time.Now()
		if err != nil {
			return err
		}
		for i := range seen {
			if seen[i].IsZero() && ff[scheduledKey(i)] == true {
				seen[i] = now
				on++
			}
		}
		time.Sleep(scheduledPoll)
	}

	res := scheduledResult{Changes: scheduledChanges}
	var list struct {
		Results []struct {
			RecordID      string  `json:"record_id"`
			ScheduledAt   string  `json:"scheduled_at"`
			ExecutedAt    *string `json:"executed_at"`
			FailureReason *string `json:"failure_reason"`
		} `json:"results"`
	}
	if err := a.call("GET", proj+"/scheduled_changes/?limit=1000", nil, &list); err != nil {
		return err
	}
	index := map[string]int{}
	for i, id := range ids {
		index[fmt.Sprint(id)] = i
	}
	var lateness, edge, afterExec []float64
	latest := -1.0
	for _, c := range list.Results {
		if c.ExecutedAt == nil || c.FailureReason != nil {
			return fmt.Errorf("change of flag %s: executed %v, failure %v", c.RecordID, c.ExecutedAt, c.FailureReason)
		}
		at, err1 := time.Parse(time.RFC3339Nano, c.ScheduledAt)
		done, err2 := time.Parse(time.RFC3339Nano, *c.ExecutedAt)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("times of flag %s: %v %v", c.RecordID, err1, err2)
		}
		i := index[c.RecordID]
		res.Executed++
		late := ms(done.Sub(at))
		if late > latest {
			latest, res.LatestChange = late, i
		}
		lateness = append(lateness, late)
		edge = append(edge, ms(seen[i].Sub(at)))
		afterExec = append(afterExec, ms(seen[i].Sub(done)))
	}
	for r, base := range []string{s.controlPlaneURL(), "http://" + second.httpAddr} {
		m, err := scrape(base)
		if err != nil {
			return err
		}
		res.ByReplica[r] = int(m[`flagedge_controlplane_scheduled_changes_total{outcome="executed"}`])
	}
	for i, id := range ids {
		progress(fmt.Sprintf("scheduled: activity %d/%d", i+1, scheduledChanges))
		var activity struct {
			Results []struct {
				Activity string `json:"activity"`
			} `json:"results"`
		}
		if err := a.call("GET", fmt.Sprintf(proj+"/feature_flags/%d/activity/", id), nil, &activity); err != nil {
			return err
		}
		for _, a := range activity.Results {
			if a.Activity == "updated" {
				res.Updates++
			}
		}
	}
	res.LatenessP50Ms, res.LatenessP99Ms, res.LatenessMaxMs = quantile(lateness, 0.5), quantile(lateness, 0.99), quantile(lateness, 1)
	res.LatenessP90Ms = quantile(lateness, 0.9)
	res.EdgeP50Ms, res.EdgeP99Ms, res.EdgeMaxMs = quantile(edge, 0.5), quantile(edge, 0.99), quantile(edge, 1)
	res.EdgeAfterExecP50 = quantile(afterExec, 0.5)

	md := fmt.Sprintf(`| %d scheduled changes, %s apart, two control-plane replicas and one edge | p50 | p99 | max |
|---|---|---|---|
| executed_at − scheduled_at | %.1f ms | %.1f ms | %.1f ms |
| scheduled_at → the edge's /decide answers the new value (polled every %s) | %.1f ms | %.1f ms | %.1f ms |

Executed %d of %d, by the replicas %d + %d; the flags' activity logs hold %d updates (one per change).
Lateness p90 %.1f ms; the latest was change #%d of the schedule. The edge answered a median %.1f ms after executed_at.
`, res.Changes, scheduledSpacing, res.LatenessP50Ms, res.LatenessP99Ms, res.LatenessMaxMs, scheduledPoll, res.EdgeP50Ms, res.EdgeP99Ms, res.EdgeMaxMs,
		res.Executed, res.Changes, res.ByReplica[0], res.ByReplica[1], res.Updates, res.LatenessP90Ms, res.LatestChange, res.EdgeAfterExecP50)
	fmt.Print("\n" + md)
	if err := writeScenarioReport(cfg.out, "scheduled", "result", res, md); err != nil {
		return err
	}
	if res.Executed != res.Changes || res.ByReplica[0]+res.ByReplica[1] != res.Changes || res.Updates != res.Changes {
		return fmt.Errorf("not every change ran exactly once: %+v", res)
	}
	fmt.Printf("\nreport: %s/scheduled.md, scheduled.json\n", cfg.out)
	return nil
}

func scheduledKey(i int) string { return fmt.Sprintf("scheduled-%03d", i) }

// edgeFlags asks the edge for every flag of the project (decide v3) for one user.
func edgeFlags(url, token string) (map[string]any, error) {
	body, _ := json.Marshal(map[string]any{"api_key": token, "distinct_id": "bench-user"})
	resp, err := httpClient.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("decide: %d %s", resp.StatusCode, raw)
	}
	var out struct {
		FeatureFlags map[string]any `json:"featureFlags"`
	}
	return out.FeatureFlags, json.Unmarshal(raw, &out)
}

// waitFor polls ok every few milliseconds until it holds or within has passed.
func waitFor(within time.Duration, ok func() bool) error {
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", within)
		}
		time.Sleep(scheduledPoll)
	}
	return nil
}

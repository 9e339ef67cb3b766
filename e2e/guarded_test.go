package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// guardedTraffic is SDK-shaped traffic for a flag under a release plan: each user asks the
// edge for flags (/decide), then sends, through the edge's /batch, the $feature_flag_called
// event with the answer it got, and an $exception when errs says the user hits one.
type guardedTraffic struct {
	s    *stack
	e    *edge
	flag string
}

// run sends users prefix-from … prefix-to-1; errs(i, enabled) says whether user i sends an
// $exception. It returns the users who were answered true.
func (g guardedTraffic) run(t *testing.T, prefix string, from, to int, errs func(i int, enabled bool) bool) []string {
	t.Helper()
	var mu sync.Mutex
	var batch []any
	var treated []string
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				d := fmt.Sprintf("%s-%d", prefix, i)
				code, out := call(t, "POST", g.e.url+"/decide/?v=3", "", map[string]any{"api_key": g.s.token, "distinct_id": d})
				if code != 200 {
					t.Errorf("decide: %d %v", code, out)
					return
				}
				enabled := featureFlags(out)[g.flag] == true
				now := time.Now().UTC().Format(time.RFC3339Nano)
				evs := []any{map[string]any{"event": "$feature_flag_called", "distinct_id": d, "timestamp": now,
					"properties": map[string]any{"$feature_flag": g.flag, "$feature_flag_response": enabled, "$lib": "posthog-node"}}}
				if errs(i, enabled) {
					evs = append(evs, map[string]any{"event": "$exception", "distinct_id": d, "timestamp": now,
						"properties": map[string]any{"$exception_message": "boom", "$lib": "posthog-node"}})
				}
				mu.Lock()
				batch = append(batch, evs...)
				if enabled {
					treated = append(treated, d)
				}
				mu.Unlock()
			}
		}()
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	g.send(t, batch)
	return treated
}

// send posts events through the edge's /batch, 200 at a time, as SDKs flush.
func (g guardedTraffic) send(t *testing.T, batch []any) {
	t.Helper()
	for len(batch) > 0 {
		n := min(200, len(batch))
		if code, out := post(t, "POST", g.e.url+"/batch/", mustJSON(t, map[string]any{"api_key": g.s.token, "batch": batch[:n]})); code != 200 {
			t.Fatalf("batch: %d %s", code, out)
		}
		batch = batch[n:]
	}
}

func (s *stack) planURL(flag int64, suffix string) string {
	return fmt.Sprintf("http://%s/api/projects/%d/feature_flags/%d/release_plan/%s", s.httpAddr, s.projectID, flag, suffix)
}

// startPlan starts a release plan on the flag and returns the answer.
func (s *stack) startPlan(flag int64, body map[string]any) map[string]any {
	s.t.Helper()
	code, out := call(s.t, "POST", s.planURL(flag, ""), s.personal, body)
	if code != 201 {
		s.t.Fatalf("start plan: %d %v", code, out)
	}
	return out
}

// waitPlan polls the plan until ok says it is there, and returns it.
func (s *stack) waitPlan(flag int64, what string, ok func(p map[string]any) bool) map[string]any {
	s.t.Helper()
	var plan map[string]any
	waitFor(s.t, what, func() bool {
		code, out := call(s.t, "GET", s.planURL(flag, ""), s.personal, nil)
		plan = out
		return code == 200 && ok(out)
	})
	return plan
}

func lastDecision(p map[string]any) map[string]any {
	ds, _ := p["decisions"].([]any)
	if len(ds) == 0 {
		return nil
	}
	d, _ := ds[len(ds)-1].(map[string]any)
	return d
}

// TestGuardedRollout runs release plans end to end, with a control plane evaluating plans
// every 100 ms, an edge, and SDK-shaped traffic through the edge: /decide, then
// $feature_flag_called with the answer and $exception events through /batch.
func TestGuardedRollout(t *testing.T) {
	s := newStack(t, "--release-plan-interval", "100ms")
	e := s.startEdge("edge", "", true)
	off := map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 0}}}

	t.Run("a regression rolls back on its own", func(t *testing.T) {
		flag := s.createFlag(map[string]any{"key": "guarded-regress", "filters": off})
		s.startPlan(flag, map[string]any{
			"steps":      []any{map[string]any{"rollout_percentage": 50, "min_duration_seconds": 3600}, map[string]any{"rollout_percentage": 100}},
			"guardrails": []any{map[string]any{"event": "$exception"}}})
		g := guardedTraffic{s: s, e: e, flag: "guarded-regress"}
		waitFor(t, "the edge serves the first step", func() bool {
			return featureFlags(s.decide(e, map[string]any{"distinct_id": "probe"}))["guarded-regress"] != nil
		})
		// Control users hit an exception 5% of the time, treatment users 15%.
		treated := g.run(t, "regress", 0, 1600, func(i int, enabled bool) bool {
			if enabled {
				return i%20 < 3
			}
			return i%20 == 0
		})
		t.Logf("%d of 1600 users answered true at 50%%", len(treated))
		if len(treated) == 0 {
			t.Fatal("no user was answered true")
		}
		plan := s.waitPlan(flag, "the plan rolls back", func(p map[string]any) bool { return p["state"] == "rolled_back" })
		seen := time.Now()
		d := lastDecision(plan)
		decidedAt, err := time.Parse(time.RFC3339Nano, d["at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if d["kind"] != "rolled_back" || !strings.Contains(d["reason"].(string), "$exception per user regressed") {
			t.Errorf("decision: %v", d)
		}
		gr := plan["guardrails"].([]any)[0].(map[string]any)
		if gr["regression"] != true || gr["change"] == nil {
			t.Errorf("guardrail: %v", gr)
		}
		// The edge serves the rollout from before the plan (0%) to a user who was in treatment.
		deadline := decidedAt.Add(time.Second)
		for featureFlags(s.decide(e, map[string]any{"distinct_id": treated[0]}))["guarded-regress"] == true {
			if time.Now().After(deadline) {
				t.Fatalf("the edge still serves the rollout 1 s after the rollback (decided %s, seen by the test %s)", decidedAt, seen)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("rollback decided %s; the edge served it %v after the decision", decidedAt.Format(time.RFC3339Nano), time.Since(decidedAt).Round(time.Millisecond))
		live := s.waitPlan(flag, "the rollback is live on every edge", func(p map[string]any) bool {
			rb, _ := p["rollback"].(map[string]any)
			return rb != nil && rb["live_everywhere"] == true
		})
		if rb := live["rollback"].(map[string]any); rb["total"].(float64) < 1 {
			t.Errorf("rollback status counts no edge: %v", rb)
		}
		// The rollback is a flag write in the activity log, as the plan's creator.
		code, act := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/%d/activity/", s.httpAddr, s.projectID, flag), s.personal, nil)
		if code != 200 || !strings.Contains(fmt.Sprint(act), "release_plan") {
			t.Errorf("activity: %d %v", code, act)
		}
	})

	t.Run("equal rates advance to 100% and complete", func(t *testing.T) {
		flag := s.createFlag(map[string]any{"key": "guarded-equal", "filters": off})
		s.startPlan(flag, map[string]any{
			"steps": []any{map[string]any{"rollout_percentage": 50, "min_duration_seconds": 1, "min_exposures": 600},
				map[string]any{"rollout_percentage": 100, "min_duration_seconds": 1, "min_exposures": 100}},
			"guardrails": []any{map[string]any{"event": "$exception"}}})
		g := guardedTraffic{s: s, e: e, flag: "guarded-equal"}
		waitFor(t, "the edge serves the first step", func() bool {
			return featureFlags(s.decide(e, map[string]any{"distinct_id": "probe"}))["guarded-equal"] != nil
		})
		fivePercent := func(i int, _ bool) bool { return i%20 == 0 }
		g.run(t, "equal", 0, 800, fivePercent)
		s.waitPlan(flag, "the plan advances to 100%", func(p map[string]any) bool { return p["step"] == 1.0 })
		waitFor(t, "the edge serves 100%", func() bool {
			return featureFlags(s.decide(e, map[string]any{"distinct_id": "equal-new-probe"}))["guarded-equal"] == true
		})
		if treated := g.run(t, "equal", 800, 1000, fivePercent); len(treated) != 200 {
			t.Errorf("%d of 200 new users answered true at 100%%", len(treated))
		}
		plan := s.waitPlan(flag, "the plan completes", func(p map[string]any) bool { return p["state"] == "completed" })
		var kinds []string
		for _, d := range plan["decisions"].([]any) {
			kinds = append(kinds, d.(map[string]any)["kind"].(string))
		}
		if got := strings.Join(kinds, ","); got != "started,advanced,completed" {
			t.Errorf("decisions: %s", got)
		}
	})

	t.Run("a sample-ratio mismatch pauses", func(t *testing.T) {
		flag := s.createFlag(map[string]any{"key": "guarded-srm", "filters": off})
		s.startPlan(flag, map[string]any{
			"steps":      []any{map[string]any{"rollout_percentage": 50, "min_duration_seconds": 3600}, map[string]any{"rollout_percentage": 100}},
			"guardrails": []any{map[string]any{"event": "$exception"}}})
		g := guardedTraffic{s: s, e: e, flag: "guarded-srm"}
		// A broken client reports true three times as often as the 50% rollout answers it.
		var batch []any
		for i := range 400 {
			batch = append(batch, map[string]any{"event": "$feature_flag_called", "distinct_id": fmt.Sprintf("srm-%d", i),
				"properties": map[string]any{"$feature_flag": "guarded-srm", "$feature_flag_response": i%4 != 0}})
		}
		g.send(t, batch)
		plan := s.waitPlan(flag, "the plan pauses", func(p map[string]any) bool { return p["state"] == "paused" })
		if d := lastDecision(plan); !strings.Contains(d["reason"].(string), "Sample ratio mismatch") {
			t.Errorf("decision: %v", d)
		}
		if exp := plan["exposures"].(map[string]any); exp["srm_p_value"].(float64) >= 0.001 {
			t.Errorf("exposures: %v", exp)
		}
	})
}

package e2e

import (
	"fmt"
	"io"
	"log"
	"testing"
	"time"

	posthog "github.com/posthog/posthog-go"
)

// TestPostHogGoAgainstEdge points the official Go SDK at an edge: remote evaluation
// (/flags) and local evaluation (definitions downloaded with a personal key) must both give
// the values the flags define.
func TestPostHogGoAgainstEdge(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	s.createFlag(map[string]any{"key": "everyone", "filters": map[string]any{
		"groups": []any{map[string]any{"rollout_percentage": 100}}, "payloads": map[string]any{"true": `{"banner": "hello"}`}}})
	s.createFlag(map[string]any{"key": "pro-only", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}}}}})
	s.createFlag(map[string]any{"key": "experiment", "filters": map[string]any{
		"groups":       []any{map[string]any{"rollout_percentage": 100}},
		"multivariate": map[string]any{"variants": []any{map[string]any{"key": "control", "rollout_percentage": 50}, map[string]any{"key": "test", "rollout_percentage": 50}}},
		"payloads":     map[string]any{"test": `{"color": "green"}`}}})
	s.createFlag(map[string]any{"key": "half", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 50}}}})
	waitFor(t, "flags at the edge", func() bool { return len(featureFlags(s.decide(e, map[string]any{"distinct_id": "x"}))) == 4 })

	// What the edge's /decide says is the reference for both modes.
	type user struct {
		id    string
		props posthog.Properties
	}
	var users []user
	for i := range 20 {
		plan := "free"
		if i%3 == 0 {
			plan = "pro"
		}
		users = append(users, user{id: fmt.Sprintf("sdk-user-%d", i), props: posthog.NewProperties().Set("plan", plan)})
	}
	expected := map[string]map[string]any{}
	for _, u := range users {
		expected[u.id] = featureFlags(s.decide(e, map[string]any{"distinct_id": u.id, "person_properties": map[string]any(u.props)}))
	}
	noEvents := false
	for _, mode := range []struct {
		name  string
		cfg   posthog.Config
		local bool
	}{
		{"remote", posthog.Config{Endpoint: e.url}, false},
		{"local", posthog.Config{Endpoint: e.url, PersonalApiKey: s.personal, DefaultFeatureFlagsPollingInterval: time.Hour}, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			mode.cfg.Logger = posthog.StdLogger(log.New(io.Discard, "", 0), false)
			c, err := posthog.NewWithConfig(s.token, mode.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			variants := map[any]int{}
			for _, u := range users {
				for _, key := range []string{"everyone", "pro-only", "experiment", "half"} {
					payload := posthog.FeatureFlagPayload{Key: key, DistinctId: u.id, PersonProperties: u.props,
						OnlyEvaluateLocally: mode.local, SendFeatureFlagEvents: &noEvents}
					got, err := c.GetFeatureFlag(payload)
					if err != nil {
						t.Fatalf("%s for %s: %v", key, u.id, err)
					}
					if want := expected[u.id][key]; got != want {
						t.Errorf("GetFeatureFlag(%s, %s) = %v, want %v", key, u.id, got, want)
					}
					// posthog-go's IsFeatureEnabled answers the flag's value (a variant for a
					// multivariate flag), like GetFeatureFlag.
					enabled, err := c.IsFeatureEnabled(payload)
					if err != nil || enabled != expected[u.id][key] {
						t.Errorf("IsFeatureEnabled(%s, %s) = %v, %v", key, u.id, enabled, err)
					}
					if key == "experiment" {
						variants[got]++
						want := ""
						if got == "test" {
							want = `{"color": "green"}`
						}
						if p, err := c.GetFeatureFlagPayload(payload); err != nil || p != want {
							t.Errorf("payload of experiment=%v for %s: %q, %v", got, u.id, p, err)
						}
					}
				}
			}
			if p, err := c.GetFeatureFlagPayload(posthog.FeatureFlagPayload{Key: "everyone", DistinctId: "someone",
				OnlyEvaluateLocally: mode.local, SendFeatureFlagEvents: &noEvents}); err != nil || p != `{"banner": "hello"}` {
				t.Errorf("payload of everyone: %q, %v", p, err)
			}
			if len(variants) != 2 {
				t.Errorf("variants seen: %v", variants)
			}
		})
	}
}

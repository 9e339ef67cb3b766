// Package flagstest provides flag projects for tests and benchmarks of the engine, the edge
// and the load generator.
package flagstest

import (
	"encoding/json"
	"fmt"

	"github.com/flagedge/flagedge/shared/flags"
)

// RealisticProject is a project of 50 flags of the kinds teams run: plain rollouts,
// person-property targeting, multivariate experiments with payloads, a few regex, date and
// semver conditions, a cohort, a flag dependency and one group flag.
func RealisticProject() flags.Project {
	p := flags.Project{
		GroupTypes: map[int]string{0: "company"},
		Cohorts: []flags.CohortDefinition{{ID: 1, Filters: json.RawMessage(`{"properties": {"type": "OR", "values": [
			{"type": "AND", "values": [{"key": "plan", "value": ["pro", "enterprise"], "type": "person"}]}]}}`)}},
	}
	add := func(key, filters string) {
		p.Flags = append(p.Flags, flags.FlagDefinition{ID: int64(len(p.Flags) + 1), Key: key, Active: true, Version: 3, Filters: json.RawMessage(filters)})
	}
	for i := range 20 {
		add(fmt.Sprintf("rollout-%02d", i), fmt.Sprintf(`{"groups": [{"properties": [], "rollout_percentage": %d}]}`, 5*i))
	}
	for i := range 12 {
		add(fmt.Sprintf("targeted-%02d", i), fmt.Sprintf(`{"groups": [
			{"properties": [{"key": "email", "value": "@example.com", "operator": "icontains", "type": "person"},
				{"key": "plan", "value": ["pro", "enterprise"], "operator": "exact", "type": "person"}], "rollout_percentage": %d},
			{"properties": [{"key": "age", "value": %d, "operator": "gt", "type": "person"}], "rollout_percentage": 100}]}`, 40+5*i, 20+i))
	}
	for i := range 8 {
		add(fmt.Sprintf("experiment-%02d", i), `{"groups": [{"properties": [{"key": "country", "value": ["US", "FR", "DE"], "type": "person"}], "rollout_percentage": 80}],
			"multivariate": {"variants": [{"key": "control", "rollout_percentage": 34}, {"key": "test-a", "rollout_percentage": 33}, {"key": "test-b", "rollout_percentage": 33}]},
			"payloads": {"control": "{\"color\": \"grey\"}", "test-a": "{\"color\": \"blue\", \"size\": 2}", "test-b": "{\"color\": \"green\"}"}}`)
	}
	add("regex-email", `{"groups": [{"properties": [{"key": "email", "value": "^[a-z]+\\d*@example\\.com$", "operator": "regex", "type": "person"}]}]}`)
	add("regex-path", `{"groups": [{"properties": [{"key": "$current_url", "value": "/checkout/(new|v2)", "operator": "regex", "type": "person"}]}]}`)
	add("recent-signup", `{"groups": [{"properties": [{"key": "signup_date", "value": "-30d", "operator": "is_date_after", "type": "person"}]}]}`)
	add("old-accounts", `{"groups": [{"properties": [{"key": "signup_date", "value": "2023-01-01", "operator": "is_date_before", "type": "person"}]}]}`)
	add("new-app", `{"groups": [{"properties": [{"key": "app_version", "value": "2.4.0", "operator": "semver_gte", "type": "person"}]}]}`)
	add("app-2x", `{"groups": [{"properties": [{"key": "app_version", "value": "2.*", "operator": "semver_wildcard", "type": "person"}]}]}`)
	add("paying-cohort", `{"groups": [{"properties": [{"key": "id", "value": 1, "operator": "in", "type": "cohort"}], "rollout_percentage": 50}]}`)
	add("after-experiment", `{"groups": [{"properties": [{"key": "experiment-00", "value": "test-a", "operator": "flag_evaluates_to", "type": "flag"}]}]}`)
	add("company-beta", `{"aggregation_group_type_index": 0, "groups": [{"properties": [
		{"key": "seats", "value": 50, "operator": "gte", "type": "group", "group_type_index": 0}], "rollout_percentage": 50}]}`)
	add("kill-switch", `{"groups": [{"properties": [], "rollout_percentage": 100}], "payloads": {"true": "{\"message\": \"maintenance tonight\"}"}}`)
	return p
}

// RealisticPersonProperties are properties of a user that matches many of RealisticProject's
// conditions.
func RealisticPersonProperties() flags.Properties {
	return flags.Properties{"email": "alice42@example.com", "plan": "pro", "age": 31.0, "country": "FR",
		"$current_url": "https://shop.example.com/checkout/v2", "signup_date": "2024-11-02T10:00:00Z", "app_version": "2.5.1"}
}

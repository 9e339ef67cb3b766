// Package flagstest provides flag projects for tests and benchmarks of the engine, the edge
// and the load generator.
package flagstest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

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

// RealisticProjectOf is a project of n flags of RealisticProject's mix: its 50 flags, then
// copies of them (keys suffixed "-c1", "-c2", …) until there are n. Each copy has rollout
// percentages and an age threshold of its own, so that copies are not one filter repeated
// (an evaluation tests a repeated filter once), and its dependency on its own copy of
// experiment-00. Of 50 or fewer flags it is RealisticProject's first n.
func RealisticProjectOf(n int) flags.Project {
	base := RealisticProject()
	p := flags.Project{GroupTypes: base.GroupTypes, Cohorts: base.Cohorts}
	for c := 0; len(p.Flags) < n; c++ {
		for _, f := range base.Flags {
			if len(p.Flags) == n {
				break
			}
			if c > 0 {
				f.Key = fmt.Sprintf("%s-c%d", f.Key, c)
				f.Filters = json.RawMessage(varied(string(f.Filters), c))
			}
			f.ID = int64(len(p.Flags) + 1)
			p.Flags = append(p.Flags, f)
		}
	}
	return p
}

// varied is the filters of copy c of one of RealisticProject's flags: the rollout of each
// condition below 100% moved by 7c (within 1–99), the age threshold by c (within 18–77), and
// a dependency on experiment-00 made one on copy c's.
func varied(filters string, c int) string {
	out := rolloutRe.ReplaceAllStringFunc(filters, func(m string) string {
		pct, _ := strconv.Atoi(rolloutRe.FindStringSubmatch(m)[1])
		if pct == 100 || pct == 0 {
			return m // everyone and no one stay what they are
		}
		return fmt.Sprintf(`], "rollout_percentage": %d`, 1+(pct+7*c)%99)
	})
	out = ageRe.ReplaceAllStringFunc(out, func(m string) string {
		age, _ := strconv.Atoi(ageRe.FindStringSubmatch(m)[1])
		return fmt.Sprintf(`"value": %d, "operator": "gt"`, 18+(age+c)%60)
	})
	return strings.ReplaceAll(out, `"key": "experiment-00"`, fmt.Sprintf(`"key": "experiment-00-c%d"`, c))
}

// A condition's rollout (after its properties: a variant's share is not one) and the age
// filter's threshold.
var (
	rolloutRe = regexp.MustCompile(`\], "rollout_percentage": (\d+)`)
	ageRe     = regexp.MustCompile(`"value": (\d+), "operator": "gt"`)
)

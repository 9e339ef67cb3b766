package flags_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	posthog "github.com/posthog/posthog-go"

	"github.com/flagedge/flagedge/shared/flags"
)

// TestParityWithPostHogGo evaluates random flags for random users with both this engine and
// posthog-go v1.23.1's local evaluator (served the same definitions over HTTP), and requires
// the same value and payload wherever the SDK gives a conclusive answer.
//
// Known, intended differences, kept out of the generated workload:
//   - exact/is_not: the SDK compares Go values strictly (case- and type-sensitive); we compare
//     case-insensitive string forms with the boolean rule (docs/api.md, Flag evaluation).
//     Filter and person values here come from the same pools, where both agree.
//   - gt/gte/lt/lte: the SDK only orders numbers; we also compare numeric strings and strings.
//   - a missing property: the SDK skips the condition (and answers from a later one, or not
//     at all); we apply the operator's rule for absent properties. Users here have them all.
//   - is_not_set, is_date_exact, super conditions, holdouts, experience
//     continuity and static cohorts: the SDK is inconclusive (it would ask the server).
//   - negation on a flag condition's property: the SDK ignores it; we apply it (it does apply
//     it inside cohorts, which are generated with negation).
//   - relative dates in months or years: we step back a month (a year) at a time, clamping the
//     day, as the server; the SDK uses time.AddDate, which overflows into the next month.
//   - pre-release and build versions: the server orders them by semver precedence (1.0.0-beta
//     is below 1.0.0, and only meets a range that names a pre-release of 1.0.0); the SDK drops
//     the suffix. The conformance corpus (testdata/conformance) covers them.
func TestParityWithPostHogGo(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { checkParity(t, seed, 80, 120) })
	}
}

func checkParity(t *testing.T, seed uint64, nFlags, nUsers int) {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	project, wire := randomProject(rng, nFlags)
	snap, err := flags.Compile(project)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/flags/definitions" || r.URL.Path == "/api/feature_flag/local_evaluation" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(wire)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"status": 1}`))
	}))
	defer srv.Close()
	client, err := posthog.NewWithConfig("phc_test", posthog.Config{
		Endpoint: srv.URL, PersonalApiKey: "phx_test", Logger: posthog.StdLogger(log.New(io.Discard, "", 0), false),
		DefaultFeatureFlagsPollingInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	noEvents := false
	var out []flags.Result
	compared, inconclusive, enabled, variants := 0, 0, 0, 0
	for u := range nUsers {
		user := randomUser(rng, u)
		out = snap.Evaluate(&flags.Request{DistinctID: user.id, PersonProperties: user.props,
			Groups: map[string]string{"company": user.company}, GroupProperties: map[string]flags.Properties{"company": user.companyProps}}, out)
		for _, r := range out {
			payload := posthog.FeatureFlagPayload{
				Key: r.Key, DistinctId: user.id, PersonProperties: posthog.Properties(user.props),
				Groups:              posthog.Groups{"company": user.company},
				GroupProperties:     map[string]posthog.Properties{"company": posthog.Properties(user.companyProps)},
				OnlyEvaluateLocally: true, SendFeatureFlagEvents: &noEvents,
			}
			want, err := client.GetFeatureFlag(payload)
			if err != nil || want == nil {
				inconclusive++
				continue
			}
			compared++
			if r.Enabled {
				enabled++
			}
			if r.Variant != "" {
				variants++
			}
			if got := r.Value(); got != want {
				t.Errorf("flag %s user %s: got %v (%s), SDK %v\nfilters %s\nprops %v", r.Key, user.id, got, r.Reason,
					want, project.Flags[flagIndex(project, r.Key)].Filters, user.props)
				continue
			}
			wantPayload, _ := client.GetFeatureFlagPayload(payload)
			if got := payloadString(r.Payload); got != wantPayload {
				t.Errorf("flag %s user %s: payload %q, SDK %q", r.Key, user.id, got, wantPayload)
			}
		}
	}
	t.Logf("compared %d evaluations (%d enabled, %d variants), %d inconclusive for the SDK", compared, enabled, variants, inconclusive)
	if enabled < compared/10 || variants < compared/50 {
		t.Errorf("too few enabled flags (%d) or variants (%d) among %d: the workload tests too little", enabled, variants, compared)
	}
	if compared < nFlags*nUsers/2 {
		t.Errorf("only %d of %d evaluations were conclusive: the workload tests too little", compared, nFlags*nUsers)
	}
}

func flagIndex(p flags.Project, key string) int {
	for i, f := range p.Flags {
		if f.Key == key {
			return i
		}
	}
	return -1
}

// payloadString is a payload as the SDK returns it: a JSON string unquoted, else the JSON.
func payloadString(p json.RawMessage) string {
	if p == nil {
		return ""
	}
	var s string
	if json.Unmarshal(p, &s) == nil {
		return s
	}
	return string(p)
}

type user struct {
	id, company         string
	props, companyProps flags.Properties
}

var (
	plans     = []any{"free", "pro", "enterprise", "startup"}
	countries = []any{"US", "FR", "de", "Japan"}
	emails    = []string{"user%d@example.com", "Admin%d@Corp.io", "ops+%d@flagedge.dev", "%d@mail.example.org"}
	versions  = []string{"1.2.3", "v2.0.0", "0.9", "10.1.1", "1.2", "2.3.4", "0.0.5", "1.10.0"}
	dates     = []string{"2024-01-15T10:00:00Z", "2023-06-01", "2021-12-31T23:59:59+02:00", "2025-03-03 08:00:00"}
)

func randomUser(rng *rand.Rand, n int) user {
	u := user{id: fmt.Sprintf("user-%d-%d", n, rng.IntN(1_000_000)), company: fmt.Sprintf("company-%d", rng.IntN(50)),
		props: flags.Properties{}, companyProps: flags.Properties{}}
	// Every property is present: for a missing one the SDK skips the condition as
	// inconclusive and may still answer from a later one, where we apply the operator's rule
	// for an absent property (the negative operators match, the others do not).
	maybe := func(key string, v any) { u.props[key] = v }
	maybe("email", fmt.Sprintf(emails[rng.IntN(len(emails))], n))
	maybe("plan", plans[rng.IntN(len(plans))])
	maybe("country", countries[rng.IntN(len(countries))])
	maybe("age", float64(rng.IntN(80)))
	maybe("version", versions[rng.IntN(len(versions))])
	maybe("signup", dates[rng.IntN(len(dates))])
	maybe("beta", rng.IntN(2) == 0)
	u.companyProps["plan"] = plans[rng.IntN(len(plans))]
	u.companyProps["seats"] = float64(rng.IntN(500))
	return u
}

func randomProperty(rng *rand.Rand) map[string]any {
	p := map[string]any{"type": "person"}
	switch rng.IntN(9) {
	case 0:
		p["key"] = "email"
		ops := []string{"icontains", "not_icontains", "regex", "not_regex", "starts_with", "ends_with", "not_starts_with", "not_ends_with"}
		p["operator"] = ops[rng.IntN(len(ops))]
		switch p["operator"] {
		case "regex", "not_regex":
			p["value"] = []string{`^user\d+@`, `@(corp|example)\.`, `\d{2,}`, `^ops\+`}[rng.IntN(4)]
		default:
			p["value"] = []string{"@example", "USER", ".io", "ops", "admin", "org"}[rng.IntN(6)]
		}
	case 1:
		p["key"], p["operator"], p["value"] = "plan", []string{"exact", "is_not"}[rng.IntN(2)], []any{plans[rng.IntN(4)], plans[rng.IntN(4)]}
	case 2:
		p["key"], p["operator"], p["value"] = "plan", "exact", plans[rng.IntN(4)]
	case 3:
		p["key"], p["operator"], p["value"] = "country", []string{"exact", "is_not", "is_set"}[rng.IntN(3)], countries[rng.IntN(4)]
	case 4:
		p["key"], p["operator"], p["value"] = "age", []string{"gt", "gte", "lt", "lte", "exact"}[rng.IntN(5)], float64(rng.IntN(80))
	case 5:
		ops := []string{"semver_eq", "semver_neq", "semver_gt", "semver_gte", "semver_lt", "semver_lte", "semver_tilde", "semver_caret"}
		p["key"], p["operator"], p["value"] = "version", ops[rng.IntN(len(ops))], versions[rng.IntN(len(versions))]
	case 6:
		p["key"], p["operator"], p["value"] = "version", "semver_wildcard", []string{"1.*", "1.2.*", "2.*", "0.*", "10.1.*"}[rng.IntN(5)]
	case 7:
		p["key"], p["operator"] = "signup", []string{"is_date_before", "is_date_after"}[rng.IntN(2)]
		p["value"] = []string{"2024-01-01", "2022-06-15T12:00:00Z", "-30d", "-2w", "-72h", "2025-01-01T00:00:00"}[rng.IntN(6)]
	case 8:
		p["key"], p["operator"], p["value"] = "beta", "exact", []any{true, false}[rng.IntN(2)]
	}
	return p
}

func randomRollout(rng *rand.Rand) any {
	switch rng.IntN(4) {
	case 0:
		return nil
	case 1:
		return float64(rng.IntN(101))
	case 2:
		return float64(rng.IntN(10000)) / 100
	}
	return []float64{0, 100, 50}[rng.IntN(3)]
}

// randomProject builds a project and the definitions body an SDK would download for it.
func randomProject(rng *rand.Rand, n int) (flags.Project, map[string]any) {
	project := flags.Project{GroupTypes: map[int]string{0: "company"}}
	cohorts := map[string]any{
		"1": map[string]any{"type": "OR", "values": []any{
			map[string]any{"type": "AND", "values": []any{
				map[string]any{"key": "plan", "value": "pro", "operator": "exact", "type": "person"},
				map[string]any{"key": "age", "value": 30.0, "operator": "gte", "type": "person"},
			}},
			map[string]any{"type": "AND", "values": []any{
				map[string]any{"key": "email", "value": "corp", "operator": "icontains", "type": "person", "negation": true},
				map[string]any{"key": "country", "value": []any{"US", "FR"}, "operator": "exact", "type": "person"},
			}},
		}},
		"2": map[string]any{"type": "AND", "values": []any{
			map[string]any{"key": "version", "value": "1.0.0", "operator": "semver_gte", "type": "person"},
		}},
	}
	for id, group := range cohorts {
		raw, _ := json.Marshal(map[string]any{"properties": group})
		n, _ := strconv.ParseInt(id, 10, 64)
		project.Cohorts = append(project.Cohorts, flags.CohortDefinition{ID: n, Filters: raw})
	}
	var wireFlags []any
	for i := range n {
		key := fmt.Sprintf("flag-%03d", i)
		filters := map[string]any{}
		var conditions []any
		nConditions := 1 + rng.IntN(3)
		isGroup := rng.IntN(12) == 0
		var variants []any
		if rng.IntN(3) == 0 {
			k := 2 + rng.IntN(3)
			remaining := 100
			for v := range k {
				pct := remaining
				if v < k-1 {
					pct = rng.IntN(remaining + 1)
				}
				remaining -= pct
				variants = append(variants, map[string]any{"key": fmt.Sprintf("variant-%d", v), "rollout_percentage": float64(pct)})
			}
			filters["multivariate"] = map[string]any{"variants": variants}
		}
		for range nConditions {
			var props []any
			if isGroup {
				if rng.IntN(2) == 0 {
					props = append(props, map[string]any{"key": "seats", "value": float64(rng.IntN(500)), "operator": "gt", "type": "group", "group_type_index": 0})
				}
			} else {
				for range rng.IntN(3) {
					props = append(props, randomProperty(rng))
				}
				if rng.IntN(10) == 0 {
					props = append(props, map[string]any{"key": "id", "value": float64(1 + rng.IntN(2)), "operator": "in", "type": "cohort"})
				}
				if i > 0 && rng.IntN(10) == 0 {
					dep := fmt.Sprintf("flag-%03d", rng.IntN(i))
					props = append(props, map[string]any{"key": dep, "value": []any{true, false}[rng.IntN(2)],
						"operator": "flag_evaluates_to", "type": "flag"})
				}
			}
			cond := map[string]any{"properties": props, "rollout_percentage": randomRollout(rng)}
			if len(variants) > 0 && rng.IntN(4) == 0 {
				cond["variant"] = variants[rng.IntN(len(variants))].(map[string]any)["key"]
			}
			conditions = append(conditions, cond)
		}
		filters["groups"] = conditions
		if isGroup {
			filters["aggregation_group_type_index"] = 0
		}
		switch {
		case len(variants) > 0 && rng.IntN(2) == 0:
			filters["payloads"] = map[string]any{"variant-0": `{"color": "blue"}`, "variant-1": "42"}
		case len(variants) == 0 && rng.IntN(2) == 0:
			filters["payloads"] = map[string]any{"true": []string{`{"a": [1, 2]}`, `"hello"`, `true`}[rng.IntN(3)]}
		}
		raw, err := json.Marshal(filters)
		if err != nil {
			panic(err)
		}
		active := rng.IntN(10) != 0
		project.Flags = append(project.Flags, flags.FlagDefinition{ID: int64(i + 1), Key: key, Active: active, Version: 1, Filters: raw})
		wireFlags = append(wireFlags, map[string]any{"id": i + 1, "key": key, "active": active, "filters": addDependencyChains(filters)})
	}
	return project, map[string]any{"flags": wireFlags, "group_type_mapping": map[string]string{"0": "company"}, "cohorts": cohorts}
}

// addDependencyChains adds the dependency_chain the SDK requires on flag properties: the
// direct dependency, whose own dependencies the SDK then evaluates recursively.
func addDependencyChains(filters map[string]any) map[string]any {
	for _, c := range filters["groups"].([]any) {
		for _, p := range c.(map[string]any)["properties"].([]any) {
			prop := p.(map[string]any)
			if prop["type"] == "flag" {
				prop["dependency_chain"] = []string{prop["key"].(string)}
			}
		}
	}
	return filters
}

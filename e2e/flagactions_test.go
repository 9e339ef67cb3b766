package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
)

func plan(i int) string { return []string{"pro", "free", "team"}[i%3] }

// raw GETs a URL with a bearer and returns status, ETag and body.
func raw(t *testing.T, url, bearer string, headers ...string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("ETag"), body
}

func TestFlagActions(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	api := fmt.Sprintf("http://%s/api/projects/%d", s.httpAddr, s.projectID)
	const users = 120
	var batch []any
	for i := range users {
		batch = append(batch, map[string]any{"event": "$identify", "distinct_id": fmt.Sprintf("user-%d", i),
			"properties": map[string]any{"$set": map[string]any{"plan": plan(i), "email": fmt.Sprintf("user-%d@example.com", i), "age": i}}})
	}
	for i := range 10 {
		batch = append(batch, map[string]any{"event": "$groupidentify", "distinct_id": "group-admin", "properties": map[string]any{
			"$group_type": "company", "$group_key": fmt.Sprintf("co-%d", i), "$group_set": map[string]any{"seats": i * 20}}})
	}
	if code, out := post(t, "POST", e.url+"/batch/", mustJSON(t, map[string]any{"api_key": s.token, "batch": batch})); code != 200 {
		t.Fatalf("capture: %d %s", code, out)
	}
	s.waitEventCount(users + 10)

	// A property cohort, counted over the stored persons.
	code, cohort := call(t, "POST", api+"/cohorts/", s.personal, map[string]any{"name": "Pros", "filters": map[string]any{"properties": map[string]any{
		"type": "OR", "values": []any{map[string]any{"type": "AND", "values": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}}}}}})
	if code != 201 || cohort["count"] != float64(users/3) {
		t.Fatalf("cohort: %d %v", code, cohort)
	}
	cohortID := cohort["id"]
	code, bad := call(t, "POST", api+"/cohorts/", s.personal, map[string]any{"name": "Bad", "filters": map[string]any{"properties": map[string]any{"type": "AND", "values": []any{
		map[string]any{"key": "plan", "value": 1, "operator": "regex"}}}}})
	if code != 400 || bad["attr"] != "filters" {
		t.Errorf("invalid cohort: %d %v", code, bad)
	}
	halfID := s.createFlag(map[string]any{"key": "half", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 50}}}})
	s.createFlag(map[string]any{"key": "pro-cohort", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "id", "value": cohortID, "type": "cohort"}}}}}})
	s.createFlag(map[string]any{"key": "mv", "filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
		map[string]any{"key": "age", "value": 30, "operator": "gte", "type": "person"}}}},
		"multivariate": map[string]any{"variants": []any{map[string]any{"key": "a", "rollout_percentage": 50}, map[string]any{"key": "b", "rollout_percentage": 50}}}}})
	s.createFlag(map[string]any{"key": "inactive", "active": false})
	s.createFlag(map[string]any{"key": "big-co", "filters": map[string]any{"aggregation_group_type_index": 0, "groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "seats", "value": 50, "operator": "gt", "type": "group", "group_type_index": 0}}}}}})
	waitFor(t, "flags at the edge", func() bool { return len(featureFlags(s.decide(e, map[string]any{"distinct_id": "x"}))) == 4 })

	decided := map[string]map[string]any{}
	for i := range users {
		id := fmt.Sprintf("user-%d", i)
		decided[id] = featureFlags(s.decide(e, map[string]any{"distinct_id": id, "groups": map[string]any{"company": fmt.Sprintf("co-%d", i%10)}}))
	}

	t.Run("evaluation reasons agree with decide", func(t *testing.T) {
		for i := 0; i < users; i += 7 {
			id := fmt.Sprintf("user-%d", i)
			code, out := call(t, "GET", fmt.Sprintf("%s/feature_flags/evaluation_reasons?distinct_id=%s&groups=%s", api, id,
				fmt.Sprintf(`{"company":"co-%d"}`, i%10)), s.personal, nil)
			if code != 200 {
				t.Fatalf("%d %v", code, out)
			}
			for key, want := range decided[id] {
				if got := out[key].(map[string]any)["value"]; got != want {
					t.Errorf("%s %s: evaluation_reasons %v, decide %v", id, key, got, want)
				}
			}
			if r := out["inactive"].(map[string]any)["evaluation"].(map[string]any)["reason"]; r != "disabled" {
				t.Errorf("inactive flag's reason: %v", r)
			}
		}
		code, out := call(t, "GET", api+"/feature_flags/evaluation_reasons", s.personal, nil)
		if code != 400 || out["detail"] != "distinct_id is required" {
			t.Errorf("without distinct_id: %d %v", code, out)
		}
	})

	t.Run("local evaluation is byte-identical at the control plane and the edge", func(t *testing.T) {
		for _, q := range []string{"", "&send_cohorts"} {
			_, edgeTag, edgeBody := raw(t, e.url+"/flags/definitions?token="+s.token+q, s.personal)
			for _, u := range []string{api + "/feature_flags/local_evaluation/?x=1" + q, fmt.Sprintf("http://%s/flags/definitions?token=%s%s", s.httpAddr, s.token, q),
				fmt.Sprintf("http://%s/api/feature_flag/local_evaluation?token=%s%s", s.httpAddr, s.token, q)} {
				code, tag, body := raw(t, u, s.personal)
				if code != 200 || string(body) != string(edgeBody) || tag != edgeTag {
					t.Errorf("%s: %d %s, the edge's ETag %s; identical bodies: %v", u, code, tag, edgeTag, string(body) == string(edgeBody))
				}
				if code, _, body := raw(t, u, s.personal, "If-None-Match: "+tag); code != 304 || len(body) != 0 {
					t.Errorf("%s with If-None-Match: %d", u, code)
				}
			}
		}
		if code, _, _ := raw(t, fmt.Sprintf("http://%s/flags/definitions?token=%s", s.httpAddr, s.token), s.secret); code != 200 {
			t.Errorf("secret key at the control plane: %d", code)
		}
		if code, _, _ := raw(t, fmt.Sprintf("http://%s/flags/definitions?token=%s", s.httpAddr, s.token), "phs_wrong"); code != 401 {
			t.Errorf("wrong secret key: %d", code)
		}
	})

	t.Run("my flags", func(t *testing.T) {
		me := flagCreator(t, api, s.personal, halfID)
		if code, out := post(t, "POST", e.url+"/capture/", mustJSON(t, map[string]any{"api_key": s.token, "event": "$identify",
			"distinct_id": me, "properties": map[string]any{"$set": map[string]any{"plan": "pro", "age": 40}}})); code != 200 {
			t.Fatalf("%d %s", code, out)
		}
		s.waitEventCount(users + 11)
		want := featureFlags(s.decide(e, map[string]any{"distinct_id": me}))
		req, _ := http.NewRequest("GET", api+"/feature_flags/my_flags", nil)
		req.Header.Set("Authorization", "Bearer "+s.personal)
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("my_flags: %v %v", err, resp.StatusCode)
		}
		defer resp.Body.Close()
		var list []map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		if len(list) != 4 {
			t.Errorf("%d flags, want the 4 active ones", len(list))
		}
		for _, item := range list {
			key := item["feature_flag"].(map[string]any)["key"].(string)
			if item["value"] != want[key] {
				t.Errorf("my_flags %s = %v, decide %v", key, item["value"], want[key])
			}
		}
	})

	t.Run("blast radius equals a brute-force count", func(t *testing.T) {
		cond := map[string]any{"properties": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}, "rollout_percentage": 50}
		s.createFlag(map[string]any{"key": "half-pro", "filters": map[string]any{"groups": []any{cond}}})
		waitFor(t, "half-pro", func() bool { return hasKey(featureFlags(s.decide(e, map[string]any{"distinct_id": "x"})), "half-pro") })
		// The brute force asks the edge about every stored person, by its first distinct id.
		code, persons := call(t, "GET", api+"/persons/?limit=1000", s.personal, nil)
		if code != 200 {
			t.Fatalf("persons: %d %v", code, persons)
		}
		total := persons["count"].(float64)
		brute, pros := 0, 0
		for _, p := range persons["results"].([]any) {
			person := p.(map[string]any)
			ids := person["distinct_ids"].([]any)
			if featureFlags(s.decide(e, map[string]any{"distinct_id": ids[0]}))["half-pro"] == true {
				brute++
			}
			if person["properties"].(map[string]any)["plan"] == "pro" {
				pros++
			}
		}
		code, out := call(t, "POST", api+"/feature_flags/user_blast_radius", s.personal, map[string]any{"condition": cond, "key": "half-pro"})
		if code != 200 || out["users_affected"] != float64(brute) || out["total_users"] != total {
			t.Errorf("with the flag key: %d %v, want %d of %v", code, out, brute, total)
		}
		code, out = call(t, "POST", api+"/feature_flags/user_blast_radius", s.personal, map[string]any{"condition": cond})
		if want := math.Round(float64(pros) * 0.5); code != 200 || out["users_affected"] != want {
			t.Errorf("without the key: %v, want %v", out, want)
		}
		code, out = call(t, "POST", api+"/feature_flags/user_blast_radius", s.personal, map[string]any{"group_type_index": 0, "condition": map[string]any{
			"properties": []any{map[string]any{"key": "seats", "value": 50, "operator": "gt", "type": "group", "group_type_index": 0}}}})
		if code != 200 || out["users_affected"] != 7.0 || out["total_users"] != 10.0 {
			t.Errorf("groups: %d %v, want 7 of 10", code, out)
		}
		code, out = call(t, "POST", api+"/feature_flags/user_blast_radius", s.personal, map[string]any{})
		if code != 400 || out["attr"] != "condition" {
			t.Errorf("without a condition: %d %v", code, out)
		}
	})

	t.Run("static cohort from a 50% rollout", func(t *testing.T) {
		code, out := call(t, "POST", fmt.Sprintf("%s/feature_flags/%d/create_static_cohort_for_flag/", api, halfID), s.personal, map[string]any{})
		if code != 200 {
			t.Fatalf("%d %v", code, out)
		}
		c := out["cohort"].(map[string]any)
		want := 0
		for i := range users {
			if decided[fmt.Sprintf("user-%d", i)]["half"] == true {
				want++
			}
		}
		// The cohort also holds the other persons for whom "half" is on (the admin, group-admin).
		extra := 0
		for _, id := range []string{"group-admin", flagCreator(t, api, s.personal, halfID)} {
			if featureFlags(s.decide(e, map[string]any{"distinct_id": id}))["half"] == true {
				extra++
			}
		}
		if c["is_static"] != true || c["count"] != float64(want+extra) {
			t.Errorf("cohort %v: count %v, want %d", c["name"], c["count"], want+extra)
		}
		s.createFlag(map[string]any{"key": "in-static", "filters": map[string]any{"groups": []any{map[string]any{
			"properties": []any{map[string]any{"key": "id", "value": c["id"], "type": "cohort", "operator": "in"}}}}}})
		waitFor(t, "in-static", func() bool { return hasKey(featureFlags(s.decide(e, map[string]any{"distinct_id": "x"})), "in-static") })
		for i := range users {
			id := fmt.Sprintf("user-%d", i)
			if got := featureFlags(s.decide(e, map[string]any{"distinct_id": id}))["in-static"]; got != decided[id]["half"] {
				t.Errorf("%s: in the static cohort %v, half %v", id, got, decided[id]["half"])
			}
		}
	})

	t.Run("dashboards are idempotent", func(t *testing.T) {
		path := fmt.Sprintf("%s/feature_flags/%d/", api, halfID)
		_, first := call(t, "POST", path+"dashboard/", s.personal, nil)
		_, second := call(t, "POST", path+"dashboard/", s.personal, nil)
		if first["usage_dashboard"] == nil || first["usage_dashboard"] != second["usage_dashboard"] || first["version"] != second["version"] {
			t.Errorf("dashboard: %v then %v", first["usage_dashboard"], second["usage_dashboard"])
		}
		_, a := call(t, "POST", path+"enrich_usage_dashboard/", s.personal, nil)
		_, b := call(t, "POST", path+"enrich_usage_dashboard/", s.personal, nil)
		if a["has_enriched_analytics"] != true || a["version"] != b["version"] {
			t.Errorf("enrich: %v %v then %v", a["has_enriched_analytics"], a["version"], b["version"])
		}
	})

	t.Run("not found and scopes", func(t *testing.T) {
		for _, action := range []string{"dashboard", "enrich_usage_dashboard", "create_static_cohort_for_flag"} {
			if code, _ := call(t, "POST", fmt.Sprintf("%s/feature_flags/99999/%s/", api, action), s.personal, map[string]any{}); code != 404 {
				t.Errorf("%s on an unknown flag: %d", action, code)
			}
		}
		reader := s.keyWithScopes(t, "feature_flag:read")
		for _, c := range []struct{ method, path string }{
			{"POST", "/feature_flags/user_blast_radius"}, {"POST", fmt.Sprintf("/feature_flags/%d/dashboard/", halfID)},
			{"POST", "/cohorts/"}, {"GET", "/cohorts/"},
		} {
			if code, out := call(t, c.method, api+c.path, reader, map[string]any{"condition": map[string]any{}, "name": "x"}); code != 403 {
				t.Errorf("%s %s with feature_flag:read: %d %v", c.method, c.path, code, out)
			}
		}
		if code, _ := call(t, "GET", api+"/feature_flags/evaluation_reasons?distinct_id=x", reader, nil); code != 200 {
			t.Errorf("evaluation_reasons with feature_flag:read: %d", code)
		}
	})

	t.Run("posthog-node evaluates locally like decide", func(t *testing.T) {
		for _, host := range []string{"http://" + s.httpAddr, e.url} {
			out := node(t, `
const { PostHog } = require("posthog-node");
(async () => {
  const c = new PostHog(process.env.TOKEN, { host: process.env.HOST, personalApiKey: process.env.KEY, featureFlagsPollingInterval: 600000 });
  await c.reloadFeatureFlags();
  const out = {};
  for (let i = 0; i < 120; i += 5) {
    const id = "user-" + i;
    const props = { plan: ["pro", "free", "team"][i % 3], email: id + "@example.com", age: i };
    out[id] = {};
    for (const key of ["half", "pro-cohort", "mv"]) {
      out[id][key] = await c.getFeatureFlag(key, id, { personProperties: props, onlyEvaluateLocally: true, sendFeatureFlagEvents: false });
    }
  }
  console.log(JSON.stringify(out));
  await c.shutdown();
})().catch((e) => { console.error(e); process.exit(1); });
`, "TOKEN="+s.token, "HOST="+host, "KEY="+s.personal)
			var got map[string]map[string]any
			if err := json.Unmarshal([]byte(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), &got); err != nil {
				t.Fatalf("%s: %v\n%s", host, err, out)
			}
			for id, values := range got {
				for key, v := range values {
					if v != decided[id][key] {
						t.Errorf("%s: posthog-node %s %s = %v, decide %v", host, id, key, v, decided[id][key])
					}
				}
			}
		}
	})
}

// flagCreator returns the distinct id of the user who created a flag.
func flagCreator(t *testing.T, api, key string, id int64) string {
	_, flag := call(t, "GET", fmt.Sprintf("%s/feature_flags/%d/", api, id), key, nil)
	return flag["created_by"].(map[string]any)["distinct_id"].(string)
}

// keyWithScopes issues a personal key for the stack's admin with the given scopes.
func (s *stack) keyWithScopes(t *testing.T, scopes string) string {
	out, err := execOutput(binaries.controlplane, "keys", "create", "--database-url", s.dbURL, "--email", "ops@example.com", "--scopes", scopes)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

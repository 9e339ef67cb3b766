package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestPropagation changes a flag through the REST API and measures how long it takes until
// both edges answer the new value, from the moment the PATCH answered.
func TestPropagation(t *testing.T) {
	s := newStack(t)
	edges := []*edge{s.startEdge("edge-a", "", true), s.startEdge("edge-b", "", true)}
	created := time.Now()
	id := s.createFlag(map[string]any{"key": "rollout", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	for _, e := range edges {
		waitFor(t, "new flag at "+e.name, func() bool { return featureFlags(s.decide(e, map[string]any{"distinct_id": "u"}))["rollout"] == true })
	}
	t.Logf("a new flag reached both edges %v after the create was sent", time.Since(created))

	const rounds = 30
	var delays []time.Duration
	for i := range rounds {
		want := i%2 == 1 // rounds alternate 0% and 100%
		pct := 0
		if want {
			pct = 100
		}
		s.patchFlag(id, map[string]any{"filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": pct}}}})
		answered := time.Now()
		for _, e := range edges {
			for featureFlags(s.decide(e, map[string]any{"distinct_id": "u"}))["rollout"] != want {
				if time.Since(answered) > 5*time.Second {
					t.Fatalf("round %d: %s still answers the old value after 5s", i, e.name)
				}
				time.Sleep(200 * time.Microsecond)
			}
		}
		delays = append(delays, time.Since(answered))
	}
	slices.Sort(delays)
	t.Logf("propagation to both edges after the PATCH answered, %d rounds: p50 %v, p90 %v, max %v",
		rounds, delays[rounds/2], delays[rounds*9/10], delays[rounds-1])
	if p50 := delays[rounds/2]; p50 > 500*time.Millisecond {
		t.Errorf("median propagation %v: far over the 50 ms goal", p50)
	}
}

// TestStaticStability stops the control plane: edges keep answering, an edge restarted
// meanwhile answers from its disk copy, and everything catches up when it returns.
func TestStaticStability(t *testing.T) {
	s := newStack(t)
	a := s.startEdge("edge-a", "", true)
	b := s.startEdge("edge-b", "", true)
	id := s.createFlag(map[string]any{"key": "stable", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}}}}})
	req := map[string]any{"distinct_id": "u", "person_properties": map[string]any{"plan": "pro"}}
	for _, e := range []*edge{a, b} {
		waitFor(t, "flag at "+e.name, func() bool { return featureFlags(s.decide(e, req))["stable"] == true })
	}

	// A user the control plane stores (captured at edge-a, never looked up there).
	s.captureStored(a, "$identify", "stored-user", map[string]any{"$set": map[string]any{"plan": "pro"}})

	s.cp.stop()
	for _, e := range []*edge{a, b} {
		if got := featureFlags(s.decide(e, req))["stable"]; got != true {
			t.Errorf("%s with the control plane down: %v", e.name, got)
		}
	}
	// A flag that needs a stored property the request lacks cannot be computed now: it is
	// left out and the answer says so, with a 200.
	stored := s.decide(a, map[string]any{"distinct_id": "stored-user"})
	if hasKey(featureFlags(stored), "stable") || stored["errorsWhileComputingFlags"] != true {
		t.Errorf("failed look-up: %v", stored)
	}
	// A user the control plane has never seen needs no look-up: answered in full.
	unknown := s.decide(a, map[string]any{"distinct_id": "someone-new"})
	if featureFlags(unknown)["stable"] != false || unknown["errorsWhileComputingFlags"] != false {
		t.Errorf("a new user with the control plane down: %v", unknown)
	}

	b.stop()
	restarted := s.startEdge("edge-b-restarted", b.dataDir, true)
	if got := featureFlags(s.decide(restarted, req))["stable"]; got != true {
		t.Errorf("edge restarted with the control plane down answers %v", got)
	}

	s.startControlPlane()
	s.patchFlag(id, map[string]any{"active": false})
	for _, e := range []*edge{a, restarted} {
		waitFor(t, "change after the control plane's return at "+e.name, func() bool {
			return !hasKey(featureFlags(s.decide(e, req)), "stable")
		})
	}
}

// TestRevokedKey: a personal key reads definitions at the edge until it is revoked.
func TestRevokedKey(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	s.createFlag(map[string]any{"key": "f"})
	url := e.url + "/flags/definitions?token=" + s.token
	waitFor(t, "definitions", func() bool {
		code, out := call(t, "GET", url, s.personal, nil)
		return code == 200 && len(out["flags"].([]any)) == 1
	})
	if code, _ := call(t, "GET", url, s.secret, nil); code != 200 {
		t.Errorf("secret key: %d", code)
	}
	db, err := postgres.Open(context.Background(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	auth := postgres.NewAuthService(db)
	key, err := auth.AuthenticatePersonalKey(context.Background(), s.personal)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.RevokePersonalKey(context.Background(), key.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "revocation at the edge", func() bool {
		code, _ := call(t, "GET", url, s.personal, nil)
		return code == http.StatusUnauthorized
	})
	// A key without feature_flag:read is refused with 403.
	other, err := auth.CreatePersonalKey(context.Background(), "ops@example.com", "annotations", []string{"annotation:write"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "new key at the edge", func() bool {
		code, _ := call(t, "GET", url, other.Secret, nil)
		return code == http.StatusForbidden
	})
}

// TestStoredProperties: flags that need what is stored about persons and groups get it from
// the control plane (the tables capture fills), and experience continuity keeps a user's
// variant across identification.
func TestStoredProperties(t *testing.T) {
	s := newStack(t)
	db, err := postgres.Open(context.Background(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	mustExec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(`INSERT INTO persons (id, project_id, properties) VALUES (1001, $1, '{"plan": "pro"}')`, s.projectID)
	mustExec(`INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) VALUES ($1, 'stored-user', 1001)`, s.projectID)
	mustExec(`INSERT INTO cohorts (id, project_id, name, is_static) VALUES (501, $1, 'beta testers', true)`, s.projectID)
	mustExec(`INSERT INTO cohort_people (cohort_id, person_id) VALUES (501, 1001)`)
	mustExec(`INSERT INTO group_type_mappings (project_id, group_type, group_type_index) VALUES ($1, 'company', 0)`, s.projectID)
	mustExec(`INSERT INTO groups (project_id, group_type_index, group_key, properties) VALUES ($1, 0, 'acme', '{"seats": 250}')`, s.projectID)

	e := s.startEdge("edge", "", true)
	s.createFlag(map[string]any{"key": "pro-plan", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}}}}})
	s.createFlag(map[string]any{"key": "beta-cohort", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "id", "value": 501, "type": "cohort", "operator": "in"}}}}}})
	s.createFlag(map[string]any{"key": "big-companies", "filters": map[string]any{"aggregation_group_type_index": 0, "groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "seats", "value": 100, "operator": "gt", "type": "group", "group_type_index": 0}}}}}})
	s.createFlag(map[string]any{"key": "sticky", "ensure_experience_continuity": true, "filters": map[string]any{
		"groups": []any{map[string]any{"rollout_percentage": 100}},
		"multivariate": map[string]any{"variants": []any{
			map[string]any{"key": "a", "rollout_percentage": 50}, map[string]any{"key": "b", "rollout_percentage": 50}}}}})
	waitFor(t, "flags at the edge", func() bool { return len(featureFlags(s.decide(e, map[string]any{"distinct_id": "x"}))) == 4 })

	stored := featureFlags(s.decide(e, map[string]any{"distinct_id": "stored-user", "groups": map[string]any{"company": "acme"}}))
	for k, want := range map[string]any{"pro-plan": true, "beta-cohort": true, "big-companies": true} {
		if stored[k] != want {
			t.Errorf("stored user: %s = %v, want %v", k, stored[k], want)
		}
	}
	fresh := s.decide(e, map[string]any{"distinct_id": "nobody-yet", "groups": map[string]any{"company": "unknown-co"}})
	if ff := featureFlags(fresh); ff["pro-plan"] != false || ff["beta-cohort"] != false || ff["big-companies"] != false || fresh["errorsWhileComputingFlags"] != false {
		t.Errorf("unknown user: %v", fresh)
	}
	// Request properties override stored ones.
	if ff := featureFlags(s.decide(e, map[string]any{"distinct_id": "stored-user", "person_properties": map[string]any{"plan": "free"}})); ff["pro-plan"] != false {
		t.Errorf("override: %v", ff)
	}

	// Experience continuity: once identified, each user keeps the variant of its anonymous id.
	for i := range 12 {
		anon, user := fmt.Sprintf("anon-%d", i), fmt.Sprintf("user-%d", i)
		before := featureFlags(s.decide(e, map[string]any{"distinct_id": anon}))["sticky"]
		after := featureFlags(s.decide(e, map[string]any{"distinct_id": user, "$anon_distinct_id": anon}))["sticky"]
		later := featureFlags(s.decide(e, map[string]any{"distinct_id": user}))["sticky"]
		if before != after || after != later {
			t.Errorf("%s: anonymous %v, identifying %v, later %v", user, before, after, later)
		}
	}
	var overrides int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM hash_key_overrides WHERE feature_flag_key = 'sticky'`).Scan(&overrides); err != nil || overrides != 12 {
		t.Errorf("hash key overrides stored: %d, %v", overrides, err)
	}
}

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// lookups returns how many person and group look-ups an edge has made at the control plane.
func lookups(t *testing.T, e *edge) int {
	return metricSum(t, e, "flagedge_edge_lookup_duration_seconds_count{", "hash_key_overrides")
}

// announced returns how many keys the control plane has announced to an edge.
func announced(t *testing.T, e *edge) int {
	return metricSum(t, e, "flagedge_edge_membership_additions_total", "")
}

// metricSum adds up the edge's series whose line starts with prefix, leaving out lines that
// contain skip (when not empty).
func metricSum(t *testing.T, e *edge, prefix, skip string) int {
	t.Helper()
	resp, err := http.Get(e.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) && (skip == "" || !strings.Contains(line, skip)) {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			n += int(v)
		}
	}
	return n
}

// captureStored captures an event at an edge and waits until the control plane has stored
// the person and announced it back to that edge (so the edge no longer counts the person as
// one it created itself).
func (s *stack) captureStored(e *edge, event, distinctID string, props map[string]any) {
	s.t.Helper()
	before := announced(s.t, e)
	s.capture(e, event, distinctID, props)
	waitFor(s.t, distinctID+" stored", func() bool { return len(s.persons("distinct_id="+distinctID)) == 1 })
	waitFor(s.t, distinctID+" announced to "+e.name, func() bool { return announced(s.t, e) > before })
}

// capture sends one event to an edge.
func (s *stack) capture(e *edge, event, distinctID string, props map[string]any) {
	s.t.Helper()
	if code, out := post(s.t, "POST", e.url+"/capture/", mustJSON(s.t, map[string]any{"api_key": s.token, "event": event,
		"distinct_id": distinctID, "properties": props})); code != 200 {
		s.t.Fatalf("capture %s: %d %s", event, code, out)
	}
}

// TestEdgeKnowsWhoHasNothingStored checks the membership filters end to end: an edge answers
// users the control plane stores nothing about without asking it, and never answers from the
// filter alone for a user or group the control plane does store — whatever stored it (another
// edge's capture, an identify or alias merging into a stored person, a group, a write while
// the edge was away or down). Look-up misses are cached for a minute here, so an edge that
// missed an addition, or kept a stale "not found", answers wrongly for the rest of the test.
func TestEdgeKnowsWhoHasNothingStored(t *testing.T) {
	s := newStack(t)
	s.createFlag(map[string]any{"key": "pro-only", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}, "rollout_percentage": 100}}}})
	s.createFlag(map[string]any{"key": "big-companies", "filters": map[string]any{"aggregation_group_type_index": 0, "groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "seats", "value": 100, "operator": "gt", "type": "group", "group_type_index": 0}}}}}})
	cacheFlags := []string{"--person-cache-ttl", "60s", "--person-cache-miss-ttl", "60s"}
	a := s.startEdge("edge-a", "", true, cacheFlags...)
	b := s.startEdge("edge-b", "", true)
	flag := func(e *edge, distinctID, key string, extra map[string]any) any {
		body := map[string]any{"distinct_id": distinctID}
		for k, v := range extra {
			body[k] = v
		}
		out := s.decide(e, body)
		if out["errorsWhileComputingFlags"] != false {
			t.Errorf("%s at %s: errorsWhileComputingFlags %v", distinctID, e.name, out["errorsWhileComputingFlags"])
		}
		return featureFlags(out)[key]
	}
	waitFor(t, "flags at edge-a", func() bool { return len(featureFlags(s.decide(a, map[string]any{"distinct_id": "x"}))) == 2 })
	// The filters arrive after the snapshots: a first new user answered without a look-up.
	waitFor(t, "edge-a's filter", func() bool {
		before := lookups(t, a)
		flag(a, fmt.Sprintf("probe-%d", time.Now().UnixNano()), "pro-only", nil)
		return lookups(t, a) == before
	})

	t.Run("new users need no look-up", func(t *testing.T) {
		before := lookups(t, a)
		for i := range 50 {
			if v := flag(a, fmt.Sprintf("first-visit-%d", i), "pro-only", nil); v != false {
				t.Fatalf("new user: pro-only %v", v)
			}
		}
		if n := lookups(t, a) - before; n != 0 {
			t.Fatalf("%d look-ups for 50 users the control plane has never seen", n)
		}
	})

	t.Run("a project created after the control plane started", func(t *testing.T) {
		code, created := call(t, "POST", "http://"+s.httpAddr+"/api/projects/", s.personal, map[string]any{"name": "later"})
		if code != 201 {
			t.Fatalf("create project: %d %v", code, created)
		}
		token := created["api_token"].(string)
		id := int64(created["id"].(float64))
		code, _ = call(t, "POST", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/", s.httpAddr, id), s.personal, map[string]any{"key": "pro-only",
			"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}}}}})
		if code != 201 {
			t.Fatalf("create flag: %d", code)
		}
		waitFor(t, "the new project at edge-a", func() bool {
			code, out := call(t, "POST", a.url+"/decide/?v=3", "", map[string]any{"api_key": token, "distinct_id": "x"})
			return code == 200 && hasKey(featureFlags(out), "pro-only")
		})
		waitFor(t, "the new project's filter", func() bool {
			before := lookups(t, a)
			call(t, "POST", a.url+"/decide/?v=3", "", map[string]any{"api_key": token, "distinct_id": fmt.Sprintf("n-%d", time.Now().UnixNano())})
			return lookups(t, a) == before
		})
	})

	// waitStored waits until the control plane stores distinctID's person.
	waitStored := func(distinctID string) time.Time {
		waitFor(t, distinctID+" stored", func() bool { return len(s.persons("distinct_id="+distinctID)) == 1 })
		return time.Now()
	}
	// eventually waits (up to 20 s: a wait, not a measure) until edge-a answers want, and
	// reports how long after since it took.
	eventually := func(what string, since time.Time, get func() any, want any) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for get() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: edge-a still answers %v 20 s after it was stored (want %v)", what, get(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s: edge-a answers from the stored data %v after it was stored", what, time.Since(since).Round(time.Millisecond))
	}

	t.Run("a new user captured here needs no look-up", func(t *testing.T) {
		before := lookups(t, a)
		s.capture(a, "$identify", "newcomer", map[string]any{"$set": map[string]any{"plan": "pro"}})
		if v := flag(a, "newcomer", "pro-only", nil); v != true {
			t.Fatalf("right after its capture: pro-only %v", v)
		}
		if n := lookups(t, a) - before; n != 0 {
			t.Fatalf("%d look-ups for a user this edge created", n)
		}
	})

	t.Run("a person stored through another edge", func(t *testing.T) {
		if v := flag(a, "buyer", "pro-only", nil); v != false {
			t.Fatalf("before: %v", v)
		}
		s.capture(b, "$identify", "buyer", map[string]any{"$set": map[string]any{"plan": "pro"}})
		stored := waitStored("buyer")
		eventually("capture at edge-b", stored, func() any { return flag(a, "buyer", "pro-only", nil) }, true)
	})

	t.Run("identify merges into a stored person", func(t *testing.T) {
		s.capture(b, "$pageview", "anon-42", map[string]any{"$set": map[string]any{"plan": "pro"}})
		waitStored("anon-42")
		if v := flag(a, "user-42", "pro-only", nil); v != false { // nothing stored for user-42 yet
			t.Fatalf("before: %v", v)
		}
		s.capture(b, "$identify", "user-42", map[string]any{"$anon_distinct_id": "anon-42"})
		stored := waitStored("user-42")
		eventually("$identify", stored, func() any { return flag(a, "user-42", "pro-only", nil) }, true)
	})

	t.Run("an alias of a stored person", func(t *testing.T) {
		s.capture(b, "$pageview", "anon-7", map[string]any{"$set": map[string]any{"plan": "pro"}})
		waitStored("anon-7")
		if v := flag(a, "alias-7", "pro-only", nil); v != false {
			t.Fatalf("before: %v", v)
		}
		s.capture(b, "$create_alias", "anon-7", map[string]any{"alias": "alias-7"})
		stored := waitStored("alias-7")
		eventually("$create_alias", stored, func() any { return flag(a, "alias-7", "pro-only", nil) }, true)
	})

	t.Run("a group stored through another edge", func(t *testing.T) {
		groups := map[string]any{"groups": map[string]any{"company": "acme"}}
		s.capture(b, "$groupidentify", "admin", map[string]any{"$group_type": "company", "$group_key": "warmup", "$group_set": map[string]any{"seats": 1}})
		waitFor(t, "group type at edge-a", func() bool {
			return s.decide(a, map[string]any{"distinct_id": "x", "groups": map[string]any{"company": "acme"}}) != nil &&
				hasKey(featureFlags(s.decide(a, map[string]any{"distinct_id": "x", "groups": map[string]any{"company": "warmup"}})), "big-companies")
		})
		if v := flag(a, "someone", "big-companies", groups); v != false {
			t.Fatalf("before: %v", v)
		}
		s.capture(b, "$groupidentify", "admin", map[string]any{"$group_type": "company", "$group_key": "acme", "$group_set": map[string]any{"seats": 500}})
		var stored time.Time
		waitFor(t, "group stored", func() bool {
			var n int
			db := openDB(t, s.dbURL)
			defer db.Close()
			db.QueryRow(context.Background(), `SELECT count(*) FROM groups WHERE group_key = 'acme'`).Scan(&n)
			stored = time.Now()
			return n == 1
		})
		eventually("$groupidentify", stored, func() any { return flag(a, "someone", "big-companies", groups) }, true)
	})

	t.Run("stored while the control plane was down", func(t *testing.T) {
		if v := flag(a, "offline-buyer", "pro-only", nil); v != false {
			t.Fatalf("before: %v", v)
		}
		s.cp.stop()
		// Written straight into the database: nothing announces it to anyone.
		db := openDB(t, s.dbURL)
		defer db.Close()
		if _, err := db.Exec(context.Background(), `WITH p AS (INSERT INTO persons (project_id, properties) VALUES ($1, '{"plan": "pro"}') RETURNING id)
			INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) SELECT $1, 'offline-buyer', id FROM p`, s.projectID); err != nil {
			t.Fatal(err)
		}
		s.startControlPlane()
		// Once the edge counts itself connected again, the filters it kept from before must
		// not answer for a user stored meanwhile: the first answer is right.
		waitFor(t, "edge-a connected again", func() bool {
			return metricSum(t, a, "flagedge_edge_control_plane_connected", "") == 1
		})
		if v := flag(a, "offline-buyer", "pro-only", nil); v != true {
			t.Fatalf("first answer once connected again: pro-only %v, want true", v)
		}
	})

	t.Run("stored while the edge was down", func(t *testing.T) {
		if v := flag(a, "returning-buyer", "pro-only", nil); v != false {
			t.Fatalf("before: %v", v)
		}
		a.stop()
		s.capture(b, "$identify", "returning-buyer", map[string]any{"$set": map[string]any{"plan": "pro"}})
		waitStored("returning-buyer")
		a = s.startEdge("edge-a", a.dataDir, true, cacheFlags...)
		// Ready from its disk copy at once, before its stream brings a filter: the very first
		// answer must not be the one of a user with nothing stored (a look-up that fails while
		// the connection comes up is marked as such, and is not wrong).
		first := s.decide(a, map[string]any{"distinct_id": "returning-buyer"})
		if v := featureFlags(first)["pro-only"]; v != true && !(v == nil && first["errorsWhileComputingFlags"] == true) {
			t.Fatalf("first answer after a restart from disk: %v", first)
		}
		waitFor(t, "returning-buyer's stored plan at edge-a", func() bool {
			return featureFlags(s.decide(a, map[string]any{"distinct_id": "returning-buyer"}))["pro-only"] == true
		})
	})
}

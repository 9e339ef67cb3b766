package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestImportCorpusFromFlagedgeAsPostHog is the import's "done when": a source (a second
// flagedge stack serving PostHog's API and /flags) holding the engine's conformance corpus as
// flags (well over 200, of every kind the corpus has: rollouts, variants and payloads,
// dependencies, every operator, dates, device bucketing, runtimes, evaluation tags, inactive
// ones), a dynamic cohort, a static cohort with 300 members, a dynamic cohort using the
// static one, early access features and annotations is imported with the built binary;
// --verify 1000 finds no difference (half of the users asked about are the static cohort's
// members), and a second import changes nothing.
func TestImportCorpusFromFlagedgeAsPostHog(t *testing.T) {
	began := time.Now()
	src := newStack(t)
	dst := newStack(t)
	srcEdge := src.startEdge("import-corpus-source-edge", "", true)
	dstEdge := dst.startEdge("import-corpus-target-edge", "", true)
	srcAPI := func(method, path string, body any, want int) map[string]any {
		t.Helper()
		code, out := call(t, method, fmt.Sprintf("http://%s/api/projects/%d%s", src.httpAddr, src.projectID, path), src.personal, body)
		if code != want {
			t.Fatalf("%s %s: %d %v", method, path, code, out)
		}
		return out
	}

	flags := src.createCorpusFlags(t)
	if flags < 200 {
		t.Fatalf("only %d corpus flags created", flags)
	}
	pro := srcAPI("POST", "/cohorts/", map[string]any{"name": "Pro plans", "filters": map[string]any{"properties": map[string]any{
		"type": "OR", "values": []any{map[string]any{"type": "AND", "values": []any{
			map[string]any{"key": "plan", "value": []any{"pro", "team"}, "operator": "exact", "type": "person"}}}}}}}, 201)
	beta := srcAPI("POST", "/cohorts/", map[string]any{"name": "Beta list", "is_static": true}, 201)
	members := make([]string, 300)
	for i := range members {
		members[i] = fmt.Sprintf("beta-member-%d", i)
	}
	srcAPI("PATCH", fmt.Sprintf("/cohorts/%v/add_persons_to_static_cohort/", beta["id"]), map[string]any{"distinct_ids": members}, 200)
	either := srcAPI("POST", "/cohorts/", map[string]any{"name": "Pro or beta", "filters": map[string]any{"properties": map[string]any{
		"type": "OR", "values": []any{
			map[string]any{"type": "AND", "values": []any{map[string]any{"key": "id", "value": beta["id"], "type": "cohort"}}},
			map[string]any{"type": "AND", "values": []any{map[string]any{"key": "id", "value": pro["id"], "type": "cohort"}}}}}}}, 201)
	betaBanner := src.createFlag(map[string]any{"key": "beta-banner", "name": "Beta banner", "active": true,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "id", "value": beta["id"], "type": "cohort"}}, "rollout_percentage": 100}}}})
	src.createFlag(map[string]any{"key": "beta-half", "name": "Half of the beta", "active": true,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "id", "value": beta["id"], "type": "cohort"}}, "rollout_percentage": 50}},
			"multivariate": map[string]any{"variants": []any{
				map[string]any{"key": "one", "rollout_percentage": 50}, map[string]any{"key": "two", "rollout_percentage": 50}}}}})
	src.createFlag(map[string]any{"key": "pro-or-beta", "name": "Pro or beta", "active": true,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "id", "value": either["id"], "type": "cohort"}}, "rollout_percentage": 100}}}})
	srcAPI("POST", "/early_access_feature/", map[string]any{"name": "Beta banner", "stage": "beta", "feature_flag_id": betaBanner}, 201)
	srcAPI("POST", "/early_access_feature/", map[string]any{"name": "Next thing", "stage": "concept"}, 201)
	for i := range 3 {
		srcAPI("POST", "/annotations/", map[string]any{"content": fmt.Sprintf("Release %d", i),
			"date_marker": fmt.Sprintf("2026-0%d-01T00:00:00Z", i+1), "scope": "project"}, 201)
	}
	t.Logf("source ready: %d corpus flags and 3 more in %s", flags, time.Since(began).Round(time.Millisecond))

	run := func(extra ...string) (string, string, int) {
		t.Helper()
		args := append([]string{"import", "posthog", "--from-url", "http://" + src.httpAddr, "--from-project", fmt.Sprint(src.projectID),
			"--from-key", src.personal, "--url", "http://" + dst.httpAddr, "--api-key", dst.personal, "--project", fmt.Sprint(dst.projectID)}, extra...)
		return runBinary(t, binaries.controlplane, args...)
	}
	imported := time.Now()
	out, stderr, code := run("--verify", "1000", "--from-flags-url", srcEdge.url, "--from-token", src.token,
		"--edge-url", dstEdge.url, "--edge-token", dst.token)
	if code != 0 || !strings.Contains(out, "1000 users") || !strings.Contains(out, " 0 differences") {
		t.Fatalf("import --verify 1000: exit %d:\n%s\n%s", code, out, stderr)
	}
	t.Logf("import and --verify 1000 in %s", time.Since(imported).Round(time.Millisecond))
	for _, want := range []string{
		"static cohorts: 300 members of 1 cohorts read in 3 pages, 300 distinct ids written",
		"3 annotations created",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr, `static cohort "Beta list": 3 pages read, 300 of 300 members written`) {
		t.Errorf("the progress lacks the members' copy:\n%s", stderr)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "verify:") {
			t.Log(line)
		}
	}
	// The comparison covered the members: the target's edge gives them the static cohort's flag
	// (and a new user not).
	for id, want := range map[string]bool{"beta-member-7": true, "beta-member-299": true, "not-a-member": false} {
		if got := featureFlags(dst.decide(dstEdge, map[string]any{"distinct_id": id}))["beta-banner"] == true; got != want {
			t.Errorf("beta-banner for %s at the target's edge: %v, want %v", id, got, want)
		}
	}
	for _, key := range []string{"beta-banner", "beta-half", "pro-or-beta"} {
		if strings.Contains(out, "  "+key+":") {
			t.Errorf("%s is imported with a warning:\n%s", key, out)
		}
	}

	out, stderr, code = run()
	if code != 0 || !strings.Contains(out, "No changes") || !strings.Contains(out, "0 created, 0 updated, 0 annotations created") ||
		!strings.Contains(out, "0 persons became members (0 created)") {
		t.Fatalf("a second import: exit %d, want no change:\n%s\n%s", code, out, stderr)
	}
	t.Logf("the whole test took %s", time.Since(began).Round(time.Millisecond))
}

// createCorpusFlags creates the conformance corpus's flags in the stack's project, each
// case's keys prefixed with the case's number (a flag dependency's corpus id becomes the
// created flag's), and every third property case as a flag of its one condition; cases that
// need group types or an engine-only input are left out, and so are flags the API refuses
// (as PostHog refuses them). It returns how many flags it created.
func (s *stack) createCorpusFlags(t *testing.T) int {
	t.Helper()
	created := 0
	n := 0
	for _, name := range []string{"targeting.json", "selection.json", "sdk_replay.json", "property_matching.json", "dates.json"} {
		raw, err := os.ReadFile(filepath.Join("..", "shared", "flags", "testdata", "conformance", name))
		if err != nil {
			t.Fatal(err)
		}
		var file struct{ Cases []map[string]any }
		if err := json.Unmarshal(raw, &file); err != nil {
			t.Fatal(err)
		}
		for i, c := range file.Cases {
			if c["group_types"] != nil || c["engine_only"] != nil {
				continue
			}
			if prop, ok := c["property"].(map[string]any); ok {
				if i%3 != 0 {
					continue
				}
				prop["type"] = "person"
				c["flags"] = []any{map[string]any{"key": "f", "filters": map[string]any{"groups": []any{map[string]any{"properties": []any{prop}}}}}}
			}
			n++
			ids := map[string]string{} // corpus id → created id
			for j, f := range c["flags"].([]any) {
				flag := f.(map[string]any)
				filters, _ := json.Marshal(flag["filters"])
				text := string(filters)
				for corpus, real := range ids {
					text = strings.ReplaceAll(text, `"key":"`+corpus+`"`, `"key":"`+real+`"`)
				}
				body := map[string]any{"key": fmt.Sprintf("c%d-%v", n, flag["key"]), "name": fmt.Sprint(c["name"]),
					"filters": json.RawMessage(text), "active": flag["inactive"] != true}
				for _, field := range []string{"ensure_experience_continuity", "bucketing_identifier", "evaluation_runtime"} {
					if v, ok := flag[field]; ok {
						body[field] = v
					}
				}
				if tags, ok := flag["evaluation_tags"]; ok {
					body["evaluation_tags"], body["tags"] = tags, tags
				}
				code, out := call(t, "POST", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/", s.httpAddr, s.projectID), s.personal, body)
				if code == 400 {
					continue
				}
				if code != 201 {
					t.Fatalf("create flag %v: %d %v", body["key"], code, out)
				}
				created++
				corpus := fmt.Sprint(j + 1)
				if v, ok := flag["id"].(float64); ok {
					corpus = strconv.Itoa(int(v))
				}
				ids[corpus] = strconv.FormatInt(int64(out["id"].(float64)), 10)
			}
		}
	}
	return created
}

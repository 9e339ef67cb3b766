package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// runBinary runs a built binary to its end and returns what it wrote and its exit status.
func runBinary(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestImportFromFlagedgeAsPostHog imports a project from a second flagedge stack, which
// serves PostHog's REST API and /flags, with the built binary: flags of several kinds
// (rollouts, properties, a cohort, variants with payloads, a dependency, an inactive one),
// an early access feature and an annotation. --verify 200 compares both edges for 200
// synthetic users (1,000 answers of the 5 active flags) and reports no difference; a second import changes nothing.
func TestImportFromFlagedgeAsPostHog(t *testing.T) {
	src := newStack(t)
	dst := newStack(t)
	srcEdge := src.startEdge("import-source-edge", "", true)
	dstEdge := dst.startEdge("import-target-edge", "", true)
	api := func(path string, body any) map[string]any {
		t.Helper()
		code, out := call(t, "POST", fmt.Sprintf("http://%s/api/projects/%d%s", src.httpAddr, src.projectID, path), src.personal, body)
		if code != 201 {
			t.Fatalf("POST %s: %d %v", path, code, out)
		}
		return out
	}
	cohort := api("/cohorts/", map[string]any{"name": "Pro plans", "filters": map[string]any{"properties": map[string]any{
		"type": "OR", "values": []any{map[string]any{"type": "AND", "values": []any{
			map[string]any{"key": "plan", "value": []any{"pro", "team"}, "operator": "exact", "type": "person"}}}}}}})
	src.createFlag(map[string]any{"key": "rollout", "name": "Rollout", "active": true,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 37}}}})
	country := src.createFlag(map[string]any{"key": "by-country", "name": "By country", "active": true,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "country", "value": []any{"DE", "FR"}, "operator": "exact", "type": "person"}}, "rollout_percentage": 80}}}})
	src.createFlag(map[string]any{"key": "pro-only", "name": "Pro", "active": true,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "id", "value": cohort["id"], "type": "cohort"}}, "rollout_percentage": 100}}}})
	src.createFlag(map[string]any{"key": "experiment", "name": "Experiment", "active": true,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "email", "value": "@example.com", "operator": "icontains", "type": "person"}}, "rollout_percentage": 100}},
			"multivariate": map[string]any{"variants": []any{
				map[string]any{"key": "control", "rollout_percentage": 34}, map[string]any{"key": "a", "rollout_percentage": 33},
				map[string]any{"key": "b", "rollout_percentage": 33}}},
			"payloads": map[string]any{"a": `{"color": "red"}`}}})
	src.createFlag(map[string]any{"key": "after-experiment", "name": "Dependent", "active": true,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "experiment", "value": "a", "operator": "flag_evaluates_to", "type": "flag"}}, "rollout_percentage": 100}}}})
	src.createFlag(map[string]any{"key": "off", "name": "Off", "active": false,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 100}}}})
	api("/early_access_feature/", map[string]any{"name": "Country launch", "stage": "beta", "feature_flag_id": country})
	api("/annotations/", map[string]any{"content": "Launch", "date_marker": "2026-01-01T00:00:00Z", "scope": "project"})

	importCmd := func(extra ...string) (string, string, int) {
		t.Helper()
		args := append([]string{"import", "posthog", "--from-url", "http://" + src.httpAddr, "--from-project", fmt.Sprint(src.projectID),
			"--from-key", src.personal, "--url", "http://" + dst.httpAddr, "--api-key", dst.personal, "--project", fmt.Sprint(dst.projectID)}, extra...)
		return runBinary(t, binaries.controlplane, args...)
	}
	out, stderr, code := importCmd("--verify", "200", "--from-flags-url", srcEdge.url, "--from-token", src.token,
		"--edge-url", dstEdge.url, "--edge-token", dst.token)
	if code != 0 || !strings.Contains(out, "verify: 200 users, 6 flags compared (0 imported inactive left out), 1000 answers compared, 0 differences") {
		t.Fatalf("import --verify 200: exit %d:\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "1 annotations created") || !strings.Contains(stderr, "requests/s") {
		t.Errorf("the summary or the progress lacks the annotation or the rate:\n%s\n%s", out, stderr)
	}
	out, stderr, code = importCmd()
	if code != 0 || !strings.Contains(out, "No changes") || !strings.Contains(out, "0 created, 0 updated, 0 annotations created") {
		t.Fatalf("a second import: exit %d, want no change:\n%s\n%s", code, out, stderr)
	}
}

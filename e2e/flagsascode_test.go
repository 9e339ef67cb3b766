package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagsAsCode runs "controlplane flags" as a CI job does: the built binary, configured by
// its environment variables, against a control plane and an edge. Export, then plan (exit 0);
// a hand edit is planned (exit 2, naming the field); a file with a mistake is refused (exit 1,
// naming file, line and field) and changes nothing; apply --wait returns once the edge serves
// the change, so the very next request sees it; then plan exits 0.
func TestFlagsAsCode(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("flags-edge", "", true)
	s.createFlag(map[string]any{"key": "checkout", "name": "Checkout",
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 0}}}})
	env := append(os.Environ(), "FLAGEDGE_URL=http://"+s.httpAddr, "FLAGEDGE_API_KEY="+s.personal,
		fmt.Sprintf("FLAGEDGE_PROJECT=%d", s.projectID))
	flags := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(binaries.controlplane, append([]string{"flags"}, args...)...)
		cmd.Env = env
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
	file := filepath.Join(t.TempDir(), "flags.yaml")
	if _, stderr, code := flags("export", "-o", file); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	if out, stderr, code := flags("plan", "-f", file); code != 0 {
		t.Fatalf("plan of the export: exit %d, want 0: %s%s", code, out, stderr)
	}
	exported, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(exported), "rollout_percentage: 0", "rollout_percentage: 100", 1)
	if edited == string(exported) {
		t.Fatalf("no rollout to edit in\n%s", exported)
	}
	mistaken := strings.Replace(edited, "active: true", "activ: true", 1)
	if err := os.WriteFile(file, []byte(mistaken), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := flags("apply", "-f", file)
	if code != 1 || !strings.Contains(stderr, file+":") || !strings.Contains(stderr, "flags.checkout.activ: unknown field") {
		t.Errorf("apply of a file with a mistake: exit %d, want 1 naming the line and field: %s", code, stderr)
	}
	if err := os.WriteFile(file, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := flags("plan", "-f", file)
	if code != 2 || !strings.Contains(out, `~ flag "checkout" (update)`) || !strings.Contains(out, "filters.groups[0].rollout_percentage: 0 → 100") {
		t.Fatalf("plan of the edit (nothing applied before): exit %d, want 2 naming the field:\n%s%s", code, out, stderr)
	}
	out, _, code = flags("plan", "-f", file, "--json")
	var summary struct {
		Update  int `json:"update"`
		Changes []struct {
			Name  string `json:"name"`
			Diffs []struct {
				Path string `json:"path"`
			} `json:"diffs"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &summary); err != nil || code != 2 || summary.Update != 1 ||
		len(summary.Changes) != 1 || len(summary.Changes[0].Diffs) != 1 || summary.Changes[0].Diffs[0].Path != "filters.groups[0].rollout_percentage" {
		t.Errorf("plan --json: exit %d, %v: %s", code, err, out)
	}
	out, stderr, code = flags("apply", "-f", file, "--wait", "--timeout", "30s")
	if code != 0 || !strings.Contains(out, "Applied 1 of 1 changes.") || !strings.Contains(out, "Live: 1 of 1 connected edges") {
		t.Fatalf("apply --wait: exit %d:\n%s%s", code, out, stderr)
	}
	if answer := s.decide(e, map[string]any{"distinct_id": "someone"}); featureFlags(answer)["checkout"] != true {
		t.Errorf("right after apply --wait, the edge answers %v", featureFlags(answer))
	}
	if out, stderr, code := flags("plan", "-f", file); code != 0 {
		t.Errorf("plan after apply: exit %d, want 0:\n%s%s", code, out, stderr)
	}
	if _, stderr, code := flags("plan", "-f", filepath.Join(t.TempDir(), "missing.yaml")); code != 1 {
		t.Errorf("plan of a missing file: exit %d, want 1: %s", code, stderr)
	}
}

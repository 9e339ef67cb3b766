package flagsascode_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/flagedge/flagedge/controlplane/flagsascode"
)

// TestRoundTrip exports a project with every kind of flag, applies the file to an empty
// project, and expects the plan to be empty there, the two exports identical byte for byte,
// and a second apply to write nothing: no change, no activity.
func TestRoundTrip(t *testing.T) {
	src, dst := newEnv(t), newEnv(t)
	src.seed()
	file := src.export()
	if again := src.export(); !bytes.Equal(file, again) {
		t.Fatalf("two exports differ:\n%s\n---\n%s", file, again)
	}
	for _, server := range []string{"created_at", "created_by", "last_modified_by", "  version:", " id:", "Unused"} {
		if strings.Contains(string(file), server) {
			t.Errorf("the export holds %q:\n%s", server, file)
		}
	}
	res := dst.apply(file, false)
	if len(res.Applied) != len(res.Plan.Changes) || len(res.Applied) == 0 || len(res.Gated) != 0 {
		t.Fatalf("apply into an empty project: %d of %d applied, %d gated", len(res.Applied), len(res.Plan.Changes), len(res.Gated))
	}
	if res.Version == 0 {
		t.Error("apply names no snapshot version although it wrote flags")
	}
	if p := dst.plan(file, true); !p.Empty() {
		t.Fatalf("after apply, the plan is not empty:\n%s", planText(t, p))
	}
	if got := dst.export(); !bytes.Equal(file, got) {
		t.Errorf("the applied project exports differently:\n%s\n---\n%s", file, got)
	}
	before := dst.activity()
	res = dst.apply(file, true)
	if len(res.Applied) != 0 || res.Version != 0 {
		t.Errorf("a second apply made %d changes", len(res.Applied))
	}
	if after := dst.activity(); after != before {
		t.Errorf("a second apply wrote %d activity entries", after-before)
	}
}

// TestHandEdit changes the file by hand: the plan names the flag and the field, apply makes
// it so, and the plan is empty again.
func TestHandEdit(t *testing.T) {
	e := newEnv(t)
	e.seed()
	file := e.export()
	edited := replaceOnce(t, file, "  dark-mode:\n    active: false", "  dark-mode:\n    active: true")
	edited = replaceOnce(t, edited, "rollout_percentage: 30", "rollout_percentage: 40")
	p := e.plan(edited, false)
	text := planText(t, p)
	for _, want := range []string{`~ flag "dark-mode" (update)`, "active: false → true", `~ flag "new-checkout" (update)`,
		"filters.groups[1].rollout_percentage: 30 → 40", "Plan: 0 to create, 2 to change, 0 to delete."} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan lacks %q:\n%s", want, text)
		}
	}
	res := e.apply(edited, false)
	if len(res.Applied) != 2 {
		t.Errorf("applied %d changes, want 2", len(res.Applied))
	}
	if p := e.plan(edited, false); !p.Empty() {
		t.Errorf("after apply:\n%s", planText(t, p))
	}
	if got := e.export(); !bytes.Equal(got, edited) {
		t.Errorf("the export is not the edited file:\n%s\n---\n%s", edited, got)
	}
}

func replaceOnce(t *testing.T, file []byte, old, new string) []byte {
	t.Helper()
	if bytes.Count(file, []byte(old)) != 1 {
		t.Fatalf("%q is not once in the file:\n%s", old, file)
	}
	return bytes.Replace(file, []byte(old), []byte(new), 1)
}

// TestPrune deletes (softly) the flags and features the file lacks only with prune, and
// plans their deletion only then.
func TestPrune(t *testing.T) {
	e := newEnv(t)
	e.seed()
	file := e.export()
	extra := e.mustDo("POST", "/feature_flags/", map[string]any{"key": "left-over", "filters": map[string]any{"groups": []any{}}}, 201)
	if p := e.plan(file, false); !p.Empty() {
		t.Errorf("without prune, a flag the file lacks is planned:\n%s", planText(t, p))
	}
	text := planText(t, e.plan(file, true))
	if !strings.Contains(text, `- flag "left-over" (delete)`) || !strings.Contains(text, "0 to create, 0 to change, 1 to delete") {
		t.Errorf("with prune:\n%s", text)
	}
	if res := e.apply(file, false); len(res.Applied) != 0 {
		t.Errorf("apply without prune made %d changes", len(res.Applied))
	}
	if res := e.apply(file, true); len(res.Applied) != 1 {
		t.Errorf("apply with prune made %d changes, want 1", len(res.Applied))
	}
	got := e.mustDo("GET", fmt.Sprintf("/feature_flags/%v/", extra["id"]), nil, 200)
	if got["deleted"] != true {
		t.Errorf("the pruned flag: deleted = %v", got["deleted"])
	}
	if p := e.plan(file, true); !p.Empty() {
		t.Errorf("after prune:\n%s", planText(t, p))
	}
	// Removing the feature and its flag from the file prunes both.
	trimmed := cut(t, file, "early_access_features:\n", "flags:\n")
	trimmed = cut(t, trimmed, "  beta-search:\n", "  dark-mode:\n")
	text = planText(t, e.plan(trimmed, true))
	for _, want := range []string{`- flag "beta-search" (delete)`, `- early access feature "Search 2.0" (delete)`} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan lacks %q:\n%s", want, text)
		}
	}
	e.apply(trimmed, true)
	if p := e.plan(trimmed, true); !p.Empty() {
		t.Errorf("after pruning the feature:\n%s", planText(t, p))
	}
}

// cut removes from file the text from start up to (not including) end.
func cut(t *testing.T, file []byte, start, end string) []byte {
	t.Helper()
	s := string(file)
	i := strings.Index(s, start)
	j := strings.Index(s[i+len(start):], end)
	if i < 0 || j < 0 {
		t.Fatalf("%q … %q not in\n%s", start, end, s)
	}
	return []byte(s[:i] + s[i+len(start)+j:])
}

// TestGatedChanges applies a file to a project whose approval policy gates rollout changes:
// the gated flag comes back with the change request the real gate filed, the rest is applied,
// and a second apply names the same pending request instead of failing the run.
func TestGatedChanges(t *testing.T) {
	e := newEnv(t)
	e.seed()
	file := e.export()
	me := e.mustGet("/api/users/@me/")
	e.mustDo("POST", "/approval_policies/", map[string]any{"action_key": "feature_flag.update",
		"approver_config": map[string]any{"users": []any{me["id"]}, "quorum": 1}}, 201)
	edited := replaceOnce(t, file, "name: Dark mode\n", "name: Dark\n")
	edited = replaceOnce(t, edited, "rollout_percentage: 0\n", "rollout_percentage: 25\n")
	want, err := flagsascode.Parse("flags.yaml", edited)
	if err != nil {
		t.Fatal(err)
	}
	var requestID string
	for round := 1; round <= 2; round++ {
		res, err := flagsascode.Apply(context.Background(), e.client, want, false)
		if err != nil {
			t.Fatalf("apply %d: %v", round, err)
		}
		if len(res.Gated) != 1 || res.Gated[0].ChangeRequestID == "" || res.Gated[0].Change.Name != "beta-search" {
			t.Fatalf("apply %d: gated %+v", round, res.Gated)
		}
		if round == 1 {
			requestID = res.Gated[0].ChangeRequestID
			if len(res.Applied) != 1 || res.Applied[0].Name != "dark-mode" {
				t.Errorf("apply 1: applied %+v", res.Applied)
			}
		} else if res.Gated[0].ChangeRequestID != requestID || len(res.Applied) != 0 {
			t.Errorf("apply 2: gated by %q (first %q), applied %+v", res.Gated[0].ChangeRequestID, requestID, res.Applied)
		}
	}
	cr := e.mustDo("GET", "/change_requests/"+requestID+"/", nil, 200)
	if cr["state"] != "pending" || cr["action_key"] != "feature_flag.update" {
		t.Errorf("change request: %v", cr)
	}
	text := planText(t, e.plan(edited, false))
	if !strings.Contains(text, `~ flag "beta-search"`) || strings.Contains(text, `"dark-mode" (update)`) {
		t.Errorf("after the gated apply:\n%s", text)
	}
}

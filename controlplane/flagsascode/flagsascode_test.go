package flagsascode_test

import (
	"bytes"
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
		t.Error("apply names no snapshot version")
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

var _ = flagsascode.FileVersion

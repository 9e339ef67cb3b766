package flagsascode_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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

// TestGatedChanges puts the approval gate's answer (409 approval_required with the change
// request, as the approvals work defines it) in front of the real API for one flag: apply
// reports that change with its request and makes the others.
func TestGatedChanges(t *testing.T) {
	e := newEnv(t)
	e.seed()
	file := e.export()
	gatedID := e.mustDo("GET", "/feature_flags/?search=dark-mode-banner", nil, 200)["results"].([]any)[0].(map[string]any)["id"]
	gatedPath := fmt.Sprintf("/api/projects/%d/feature_flags/%v/", e.project, gatedID)
	target, _ := url.Parse(e.srv.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch && r.URL.Path == gatedPath {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"type": "validation_error", "code": "approval_required", "detail": "This change needs an approval.", "attr": null, "change_request_id": 42}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer gate.Close()
	edited := replaceOnce(t, file, "name: Banner for dark mode users", "name: Banner")
	edited = replaceOnce(t, edited, "name: Dark mode\n", "name: Dark\n")
	want, err := flagsascode.Parse("flags.yaml", edited)
	if err != nil {
		t.Fatal(err)
	}
	res, err := flagsascode.Apply(context.Background(), flagsascode.NewClient(gate.URL, e.key, fmt.Sprint(e.project), nil), want, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Gated) != 1 || res.Gated[0].ChangeRequestID != 42 || res.Gated[0].Change.Name != "dark-mode-banner" {
		t.Errorf("gated: %+v", res.Gated)
	}
	if len(res.Applied) != 1 || res.Applied[0].Name != "dark-mode" {
		t.Errorf("applied: %+v", res.Applied)
	}
	text := planText(t, e.plan(edited, false))
	if !strings.Contains(text, `~ flag "dark-mode-banner"`) || strings.Contains(text, `"dark-mode" (update)`) {
		t.Errorf("after the gated apply:\n%s", text)
	}
}

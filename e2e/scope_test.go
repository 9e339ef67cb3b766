package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"testing"
)

// TestScopedEdgeToken: an edge issued with --projects serves only those projects; at that edge
// another project's token is answered exactly as an unknown token is (it never received the
// project), while an edge issued without --projects serves both.
func TestScopedEdgeToken(t *testing.T) {
	s := newStack(t)
	code, created := call(t, "POST", "http://"+s.httpAddr+"/api/projects/", s.personal, map[string]any{"name": "other"})
	if code != 201 {
		t.Fatalf("create project: %d %v", code, created)
	}
	otherID, otherToken := int64(created["id"].(float64)), created["api_token"].(string)
	s.createFlag(map[string]any{"key": "mine", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	code, out := call(t, "POST", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/", s.httpAddr, otherID), s.personal,
		map[string]any{"key": "theirs", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	if code != 201 {
		t.Fatalf("create flag in the other project: %d %v", code, out)
	}

	raw, err := exec.Command(binaries.controlplane, "edges", "create", "--database-url", s.dbURL, "--name", "scoped",
		"--projects", fmt.Sprint(s.projectID)).Output()
	if err != nil {
		t.Fatalf("edges create --projects: %v", err)
	}
	var issued struct {
		EdgeToken string  `json:"edge_token"`
		Projects  []int64 `json:"projects"`
	}
	if err := json.Unmarshal(raw, &issued); err != nil || len(issued.Projects) != 1 || issued.Projects[0] != s.projectID {
		t.Fatalf("edges create --projects printed %q (%v), want the project listed", raw, err)
	}
	if out, err := exec.Command(binaries.controlplane, "edges", "create", "--database-url", s.dbURL, "--name", "typo",
		"--projects", "1,x").CombinedOutput(); err == nil || !bytes.Contains(out, []byte("not a project id")) {
		t.Errorf("edges create --projects 1,x: %v %s, want a usage error", err, out)
	}
	scoped := s.startEdge("scoped", "", true, "--edge-token", issued.EdgeToken)
	all := s.startEdge("all", "", true)

	post := func(e *edge, path string, body map[string]any) (int, string) {
		data, _ := json.Marshal(body)
		resp, err := client.Post(e.url+path, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	decide := func(e *edge, token string) (int, string) {
		return post(e, "/decide/?v=3", map[string]any{"api_key": token, "distinct_id": "u"})
	}
	waitFor(t, "the flag at the scoped edge", func() bool {
		code, body := decide(scoped, s.token)
		return code == 200 && bytes.Contains([]byte(body), []byte(`"mine":true`))
	})
	waitFor(t, "the other project's flag at the unscoped edge", func() bool {
		code, body := decide(all, otherToken)
		return code == 200 && bytes.Contains([]byte(body), []byte(`"theirs":true`))
	})

	for _, c := range []struct {
		path string
		body func(token string) map[string]any
	}{
		{"/decide/?v=3", func(tok string) map[string]any { return map[string]any{"api_key": tok, "distinct_id": "u"} }},
		{"/flags/?v=2", func(tok string) map[string]any { return map[string]any{"api_key": tok, "distinct_id": "u"} }},
		{"/capture/", func(tok string) map[string]any {
			return map[string]any{"api_key": tok, "event": "x", "distinct_id": "u"}
		}},
		{"/batch/", func(tok string) map[string]any {
			return map[string]any{"api_key": tok, "batch": []any{map[string]any{"event": "x", "distinct_id": "u"}}}
		}},
	} {
		otherCode, otherBody := post(scoped, c.path, c.body(otherToken))
		unknownCode, unknownBody := post(scoped, c.path, c.body("phc_unknown"))
		if otherCode != http.StatusUnauthorized || otherCode != unknownCode || otherBody != unknownBody {
			t.Errorf("%s at the scoped edge with another project's token: %d %s; with an unknown token: %d %s; want the same 401",
				c.path, otherCode, otherBody, unknownCode, unknownBody)
		}
		if code, body := post(all, c.path, c.body(otherToken)); code != 200 {
			t.Errorf("%s at the unscoped edge with the other project's token: %d %s", c.path, code, body)
		}
	}
	if code, body := post(scoped, "/capture/", map[string]any{"api_key": s.token, "event": "x", "distinct_id": "u"}); code != 200 {
		t.Errorf("capture at the scoped edge with its project's token: %d %s", code, body)
	}
}

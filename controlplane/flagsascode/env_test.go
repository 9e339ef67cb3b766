package flagsascode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/flagedge/flagedge/controlplane/flagsascode"
	"github.com/flagedge/flagedge/controlplane/httpapi/httpapitest"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run()) // a fuzz worker runs only FuzzParse, which needs no database
	}
	os.Exit(pgtest.Main(m, postgres.Migrate))
}

// env is a control plane's REST API on a real database and a real HTTP server on 127.0.0.1,
// with a bootstrapped admin's key and project, and a flags as code client of it.
type env struct {
	t       *testing.T
	db      *postgres.DB
	url     string // the API's base URL
	key     string
	project int64
	client  *flagsascode.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	api := httpapitest.Serve(t)
	e := &env{t: t, db: api.DB, url: api.URL, key: api.Key, project: api.ProjectID}
	e.client = flagsascode.NewClient(api.URL, e.key, fmt.Sprint(e.project), nil)
	return e
}

// mustDo sends a JSON request to the project's path and returns the decoded answer, failing
// unless the status is want.
func (e *env) mustDo(method, path string, body any, want int) map[string]any {
	e.t.Helper()
	data, _ := json.Marshal(body)
	req, err := http.NewRequest(method, fmt.Sprintf("%s/api/projects/%d%s", e.url, e.project, path), bytes.NewReader(data))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		e.t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}

// mustGet reads an API path outside the project and returns the decoded answer.
func (e *env) mustGet(path string) map[string]any {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
		e.t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	return out
}

// activity counts the activity log's entries: every write of a flag, cohort or feature adds one.
func (e *env) activity() int {
	e.t.Helper()
	var n int
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM activity_log`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// seed gives the project a flag of every kind the file holds: variants with payloads, tags
// and evaluation contexts, a client runtime, continuity, device bucketing, a cohort (which
// uses another), a static cohort, a dependency on another flag, and an early access feature.
func (e *env) seed() {
	e.t.Helper()
	beta := e.mustDo("POST", "/cohorts/", map[string]any{"name": "Beta users", "description": "opted in", "filters": map[string]any{
		"properties": map[string]any{"type": "OR", "values": []any{map[string]any{"type": "AND", "values": []any{
			map[string]any{"key": "email", "value": "@example.com", "operator": "icontains", "type": "person"}}}}}}}, 201)
	staff := e.mustDo("POST", "/cohorts/", map[string]any{"name": "Staff", "filters": map[string]any{
		"properties": map[string]any{"type": "AND", "values": []any{
			map[string]any{"key": "id", "value": beta["id"], "type": "cohort"},
			map[string]any{"key": "role", "value": []any{"admin", "support"}, "operator": "exact", "type": "person"}}}}}, 201)
	e.mustDo("POST", "/cohorts/", map[string]any{"name": "Unused", "filters": map[string]any{
		"properties": map[string]any{"type": "AND", "values": []any{map[string]any{"key": "x", "value": "y", "type": "person"}}}}}, 201)
	e.mustDo("POST", "/feature_flags/", map[string]any{"key": "new-checkout", "name": "New checkout", "active": true,
		"tags": []string{"checkout", "web"}, "evaluation_contexts": []string{"web"}, "evaluation_runtime": "client",
		"ensure_experience_continuity": true, "bucketing_identifier": "device_id",
		"filters": map[string]any{
			"groups": []any{
				map[string]any{"properties": []any{map[string]any{"key": "id", "value": staff["id"], "type": "cohort"}}, "rollout_percentage": 100, "variant": "treatment"},
				map[string]any{"properties": []any{}, "rollout_percentage": 30},
			},
			"multivariate": map[string]any{"variants": []any{
				map[string]any{"key": "control", "name": "Control", "rollout_percentage": 50},
				map[string]any{"key": "treatment", "name": "Treatment", "rollout_percentage": 50}}},
			"payloads": map[string]any{"treatment": `{"color": "green", "steps": 2}`},
		}}, 201)
	e.mustDo("POST", "/feature_flags/", map[string]any{"key": "dark-mode", "name": "Dark mode", "active": false,
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 50}}}}, 201)
	e.mustDo("POST", "/feature_flags/", map[string]any{"key": "dark-mode-banner", "name": "Banner for dark mode users",
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "dark-mode", "value": true, "operator": "flag_evaluates_to", "type": "flag"}}, "rollout_percentage": nil}}}}, 201)
	beta2 := e.mustDo("POST", "/feature_flags/", map[string]any{"key": "beta-search", "name": "Beta search",
		"filters": map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 0}}}}, 201)
	e.mustDo("POST", "/early_access_feature/", map[string]any{"name": "Search 2.0", "description": "Faster search",
		"stage": "beta", "documentation_url": "https://docs.example.com/search", "feature_flag_id": beta2["id"]}, 201)
}

// export exports the project and returns the file.
func (e *env) export() []byte {
	e.t.Helper()
	s, err := flagsascode.Export(context.Background(), e.client)
	if err != nil {
		e.t.Fatal(err)
	}
	data, err := flagsascode.Marshal(s)
	if err != nil {
		e.t.Fatal(err)
	}
	return data
}

// plan parses file and plans it against the project.
func (e *env) plan(file []byte, prune bool) *flagsascode.Plan {
	e.t.Helper()
	want, err := flagsascode.Parse("flags.yaml", file)
	if err != nil {
		e.t.Fatalf("parse: %v\n%s", err, file)
	}
	p, err := flagsascode.NewPlan(context.Background(), e.client, want, prune)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// apply parses file and applies it to the project.
func (e *env) apply(file []byte, prune bool) *flagsascode.Result {
	e.t.Helper()
	want, err := flagsascode.Parse("flags.yaml", file)
	if err != nil {
		e.t.Fatalf("parse: %v\n%s", err, file)
	}
	res, err := flagsascode.Apply(context.Background(), e.client, want, prune)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// planText is the plan as printed.
func planText(t *testing.T, p *flagsascode.Plan) string {
	t.Helper()
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

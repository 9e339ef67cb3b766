package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/httpapi/httpapitest"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run()) // a fuzz worker runs only fuzz targets, which need no database
	}
	os.Exit(pgtest.Main(m, postgres.Migrate))
}

// env is a control plane API on a real database and a real HTTP server on 127.0.0.1, with
// a bootstrapped admin (key, project).
type env struct {
	t       *testing.T
	db      *postgres.DB
	api     *httpapi.Server
	srv     *httptest.Server
	key     string // the admin's personal key, scope *
	project int64
	token   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	a := httpapitest.Serve(t)
	return &env{t: t, db: a.DB, api: a.Server, srv: a.HTTP, key: a.Key, project: a.ProjectID, token: a.Token}
}

// response is a decoded answer.
type response struct {
	status      int
	raw         []byte
	body        map[string]any
	contentType string
	header      http.Header
}

func (r response) str(k string) string { s, _ := r.body[k].(string); return s }

// do sends a request with the given key (none when empty) and a JSON body (string bodies
// are sent as they are).
func (e *env) do(method, path, key string, body any) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	out := response{status: resp.StatusCode, raw: raw, contentType: resp.Header.Get("Content-Type"), header: resp.Header}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			e.t.Fatalf("%s %s: bad JSON %q: %v", method, path, raw, err)
		}
	}
	return out
}

func (e *env) flagsPath(suffix string) string {
	return fmt.Sprintf("/api/projects/%d/feature_flags%s", e.project, suffix)
}

// mustCreateFlag creates a flag and returns its id.
func (e *env) mustCreateFlag(body map[string]any) int64 {
	e.t.Helper()
	r := e.do("POST", e.flagsPath("/"), e.key, body)
	if r.status != http.StatusCreated {
		e.t.Fatalf("create flag: %d %s", r.status, r.raw)
	}
	return int64(r.body["id"].(float64))
}

// mustKey issues a personal key for the admin with the given scopes and project limit.
func (e *env) mustKey(scopes []string, projects []int64) string {
	e.t.Helper()
	k, err := postgres.NewAuthService(e.db).CreatePersonalKey(context.Background(), "admin@example.com", "test", scopes, projects)
	if err != nil {
		e.t.Fatal(err)
	}
	return k.Secret
}

// wantError checks an error answer's status and body.
func wantError(t *testing.T, r response, status int, typ, code string, attr any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
	got := map[string]any{"type": r.body["type"], "code": r.body["code"], "attr": r.body["attr"]}
	want := map[string]any{"type": typ, "code": code, "attr": attr}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("error body (-want +got):\n%s\nbody: %s", diff, r.raw)
	}
	if d, _ := r.body["detail"].(string); d == "" {
		t.Errorf("error body without detail: %s", r.raw)
	}
}

// mustUser adds a user to the admin's organisation and returns a key with scope * for it.
func (e *env) mustUser(email string, admin bool) (key, userUUID string) {
	e.t.Helper()
	u, err := postgres.CreateUser(context.Background(), e.db, "admin@example.com", email, "", admin)
	if err != nil {
		e.t.Fatal(err)
	}
	k, err := postgres.NewAuthService(e.db).CreatePersonalKey(context.Background(), email, "test", []string{"*"}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return k.Secret, u.UUID
}

func (e *env) annotationsPath(suffix string) string {
	return fmt.Sprintf("/api/projects/%d/annotations%s", e.project, suffix)
}

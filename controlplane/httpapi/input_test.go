package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestBadInputIsValidationError replays the inputs that reached PostgreSQL and answered 500:
// NUL and invalid UTF-8 in bodies (values and keys, at any depth), query parameters and path
// values. Each must be a 400 validation_error naming the field.
func TestBadInputIsValidationError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flagID := e.mustCreateFlag(map[string]any{"key": "hardened"})
	roleID := e.mustRole("Hardened", 37)
	flag := e.flagsPath(fmt.Sprintf("/%d/", flagID))
	project := fmt.Sprintf("/api/projects/%d", e.project)
	for _, tc := range []struct {
		name, method, path string
		body               string
		attr               string
	}{
		{"annotation content NUL", "POST", e.annotationsPath("/"), `{"content":"\u0000"}`, "content"},
		{"annotation content raw 0xff", "POST", e.annotationsPath("/"), "{\"content\":\"a\xffb\"}", "content"},
		{"annotation content lone surrogate", "POST", e.annotationsPath("/"), `{"content":"\ud800"}`, "content"},
		{"flag name NUL", "PATCH", flag, `{"name":"\u0000"}`, "name"},
		{"flag filters nested NUL value", "PATCH", flag, `{"filters":{"groups":[{"properties":[{"key":"email","value":"a\u0000"}]}]}}`, "filters"},
		{"flag filters nested NUL key", "PATCH", flag, `{"filters":{"payloads":{"tr\u0000ue":"1"}}}`, "filters"},
		{"flag filters nested surrogate", "PATCH", flag, `{"filters":{"payloads":{"true":"\udc00"}}}`, "filters"},
		{"flag filters huge number", "PATCH", flag, `{"filters":{"groups":[{"rollout_percentage":1e200000}]}}`, "filters"},
		{"flag create key NUL in key name", "POST", e.flagsPath("/"), `{"key":"ok","na\u0000me":"x"}`, "na\uFFFDme"},
		{"project name NUL", "PATCH", project + "/", `{"name":"\u0000"}`, "name"},
		{"persons search NUL", "GET", project + "/persons/?search=%00", "", "search"},
		{"persons distinct_id invalid UTF-8", "GET", project + "/persons/?distinct_id=%ff", "", "distinct_id"},
		{"events distinct_id NUL", "GET", project + "/events/?distinct_id=%00", "", "distinct_id"},
		{"events event invalid UTF-8", "GET", project + "/events/?event=%c3", "", "event"},
		{"groups search NUL", "GET", project + "/groups/?search=%00", "", "search"},
		{"annotations search NUL", "GET", e.annotationsPath("/?search=%00"), "", "search"},
		{"evaluation_reasons distinct_id NUL", "GET", e.flagsPath("/evaluation_reasons?distinct_id=%00"), "", "distinct_id"},
		{"evaluation_reasons groups NUL escape", "GET", e.flagsPath(`/evaluation_reasons?distinct_id=u&groups={"company":"a\u0000"}`), "", "groups"},
		{"definitions token NUL", "GET", "/api/feature_flag/local_evaluation?token=%00", "", "token"},
		{"role path invalid UTF-8", "GET", rolesPath + "%ff/", "", "role"},
		{"role path NUL on PATCH", "PATCH", rolesPath + "%00/", `{"name":"x"}`, "role"},
		{"event path NUL", "GET", project + "/events/%00/", "", "id"},
		{"membership path NUL", "DELETE", rolesPath + roleID + "/role_memberships/%00/", "", "id"},
		{"membership user_uuid NUL", "POST", rolesPath + roleID + "/role_memberships/", `{"user_uuid":"a\u0000b"}`, "user_uuid"},
		{"role access role_id NUL", "POST", flag + "role_access/", `{"role_id":"\u0000"}`, "role_id"},
		{"role name NUL", "POST", rolesPath, `{"name":"\u0000"}`, "name"},
		{"cohort nested NUL", "POST", project + "/cohorts/", `{"name":"c","filters":{"properties":{"type":"AND","values":[{"key":"\u0000"}]}}}`, "filters"},
		{"query parameter name NUL", "GET", e.flagsPath("/?a%00b=1"), "", "a\uFFFDb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			wantError(t, e.do(tc.method, tc.path, e.key, body), 400, "validation_error", "invalid_input", tc.attr)
		})
	}
}

// TestPagingBounds checks that paging far beyond any list is refused instead of overflowing
// (an OFFSET PostgreSQL refuses, or a negative offset in next).
func TestPagingBounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mustCreateFlag(map[string]any{"key": "paged"})
	for _, tc := range []struct{ path, attr string }{
		{e.flagsPath("/activity?page=9223372036854775807"), "page"},
		{e.flagsPath("/activity?page=9223372036854775808"), "page"},
		{e.flagsPath("/activity?limit=1000&page=1000002"), "page"},
		{e.flagsPath("/?offset=9223372036854775807"), "offset"},
		{e.flagsPath("/?offset=1000000001"), "offset"},
		{e.annotationsPath("/?offset=9223372036854775807"), "offset"},
		{rolesPath + "?offset=9223372036854775807", "offset"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			wantError(t, e.do("GET", tc.path, e.key, nil), 400, "validation_error", "invalid_input", tc.attr)
		})
	}
	// At the bound the answer is an empty page whose links stay within it.
	r := e.do("GET", e.flagsPath("/?offset=1000000000&limit=1000"), e.key, nil)
	if r.status != 200 || r.body["next"] != nil || !strings.Contains(r.str("previous"), "offset=999999000") {
		t.Errorf("offset at the bound: %d %s", r.status, r.raw)
	}
	r = e.do("GET", e.flagsPath("/activity?limit=1000&page=1000001"), e.key, nil)
	if r.status != 200 || r.body["next"] != nil || !strings.Contains(r.str("previous"), "page=1000000") {
		t.Errorf("page at the bound: %d %s", r.status, r.raw)
	}
}

// TestSearchIsLiteral checks that % and _ (and the escape character) in search match
// themselves in annotations, persons and groups.
func TestSearchIsLiteral(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, content := range []string{"100% sure", "1000 sure", "snake_case", "snakeXcase", `back\slash`, "backslash"} {
		if r := e.do("POST", e.annotationsPath("/"), e.key, map[string]any{"content": content}); r.status != 201 {
			t.Fatalf("create annotation: %d %s", r.status, r.raw)
		}
	}
	now := time.Now()
	var evs []controlplane.Event
	for i, d := range []string{"user_1", "userX1", `us\er`, "user"} {
		props, _ := json.Marshal(map[string]any{"$group_type": "company", "$group_key": d, "$group_set": map[string]any{"n": i}})
		evs = append(evs,
			controlplane.Event{UUID: uuid.NewString(), Name: "$pageview", DistinctID: d, Properties: json.RawMessage(`{}`), Timestamp: now, ReceivedAt: now},
			controlplane.Event{UUID: uuid.NewString(), Name: "$groupidentify", DistinctID: d, Properties: props, Timestamp: now, ReceivedAt: now})
	}
	store := postgres.NewEventStore(e.db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := store.Ingest(context.Background(), []controlplane.EventBatch{{ProjectID: e.project, Events: evs}}); err != nil {
		t.Fatal(err)
	}
	project := fmt.Sprintf("/api/projects/%d", e.project)
	for _, tc := range []struct {
		path  string
		field string
		want  []string
	}{
		{e.annotationsPath("/?search=0%25"), "content", []string{"100% sure"}},
		{e.annotationsPath("/?search=e_c"), "content", []string{"snake_case"}},
		{e.annotationsPath(`/?search=k%5Cs`), "content", []string{`back\slash`}},
		{project + "/persons/?search=r_1", "distinct_ids", []string{"user_1"}},
		{project + "/persons/?search=s%5Ce", "distinct_ids", []string{`us\er`}},
		{project + "/groups/?search=r_", "group_key", []string{"user_1"}},
		{project + "/groups/?search=%25", "group_key", nil},
	} {
		t.Run(tc.path, func(t *testing.T) {
			r := e.do("GET", tc.path, e.key, nil)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.raw)
			}
			var got []string
			for _, item := range r.body["results"].([]any) {
				switch v := item.(map[string]any)[tc.field].(type) {
				case string:
					got = append(got, v)
				case []any:
					got = append(got, v[0].(string))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("found %q, want %q", got, tc.want)
			}
		})
	}
}

// TestOversizedBody checks that a body over the limit is a 413 in the API's error shape,
// whether its length is announced (refused before reading) or not (streamed, chunked).
func TestOversizedBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	big := `{"content":"` + strings.Repeat("a", 25<<20) + `"}`
	for _, tc := range []struct {
		name    string
		body    func() io.Reader
		chunked bool
	}{
		{"announced", func() io.Reader { return strings.NewReader(big) }, false},
		{"chunked", func() io.Reader { return io.MultiReader(strings.NewReader(big)) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", e.srv.URL+e.annotationsPath("/"), tc.body())
			if err != nil {
				t.Fatal(err)
			}
			if tc.chunked {
				req.ContentLength = -1
			}
			req.Header.Set("Authorization", "Bearer "+e.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			r := response{status: resp.StatusCode, raw: raw}
			if err := json.Unmarshal(raw, &r.body); err != nil {
				t.Fatalf("%d %q: %v", resp.StatusCode, raw, err)
			}
			wantError(t, r, 413, "invalid_request", "request_too_large", nil)
		})
	}
	// Just under the limit is read and validated as usual.
	under := `{"content":"` + strings.Repeat("a", 2<<20-20) + `"}`
	r := e.do("POST", e.annotationsPath("/"), e.key, under)
	if r.status != 400 || !bytes.Contains(r.raw, []byte(`"content"`)) {
		t.Errorf("a body under the limit: %d %.200s", r.status, r.raw)
	}
}

// TestValuesTooLongForAnIndex checks that names PostgreSQL indexes are bounded before they
// reach it (a 5,000-letter role name used to answer 500: index row too large).
func TestValuesTooLongForAnIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role := e.mustRole("Short", 37)
	long := incompressible(5000)
	for _, tc := range []struct{ method, path, attr string }{
		{"POST", rolesPath, "name"},
		{"PATCH", rolesPath + role + "/", "name"},
		{"POST", e.flagsPath("/"), "key"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			body := map[string]any{tc.attr: long}
			wantError(t, e.do(tc.method, tc.path, e.key, body), 400, "validation_error", "max_length", tc.attr)
		})
	}
}

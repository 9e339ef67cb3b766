package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
)

func TestPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []float64
	for i := range 5 {
		ids = append(ids, float64(e.mustCreateFlag(map[string]any{"key": fmt.Sprintf("f%d", i)})))
	}
	base := e.srv.URL + e.flagsPath("/")
	resultIDs := func(r response) []float64 {
		var out []float64
		for _, item := range r.body["results"].([]any) {
			out = append(out, item.(map[string]any)["id"].(float64))
		}
		return out
	}
	for _, tc := range []struct {
		query      string
		ids        []float64 // newest first
		next, prev any
	}{
		{"", []float64{ids[4], ids[3], ids[2], ids[1], ids[0]}, nil, nil},
		{"?limit=2", []float64{ids[4], ids[3]}, base + "?limit=2&offset=2", nil},
		{"?limit=2&offset=2", []float64{ids[2], ids[1]}, base + "?limit=2&offset=4", base + "?limit=2"},
		{"?offset=4&limit=2", []float64{ids[0]}, nil, base + "?limit=2&offset=2"},
		{"?limit=2&offset=1", []float64{ids[3], ids[2]}, base + "?limit=2&offset=3", base + "?limit=2"},
		{"?limit=2&offset=10", nil, nil, base + "?limit=2&offset=8"},
		{"?limit=5000", []float64{ids[4], ids[3], ids[2], ids[1], ids[0]}, nil, nil},
		{"?limit=2&x=%C3%A9&a=1", []float64{ids[4], ids[3]}, base + "?a=1&limit=2&offset=2&x=%C3%A9", nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			r := e.do("GET", e.flagsPath("/")+tc.query, e.key, nil)
			if r.status != 200 || r.body["count"] != 5.0 {
				t.Fatalf("%d %s", r.status, r.raw)
			}
			if got := resultIDs(r); fmt.Sprint(got) != fmt.Sprint(tc.ids) {
				t.Errorf("ids %v, want %v", got, tc.ids)
			}
			if r.body["next"] != tc.next || r.body["previous"] != tc.prev {
				t.Errorf("next %v previous %v, want %v %v", r.body["next"], r.body["previous"], tc.next, tc.prev)
			}
		})
	}
	for _, q := range []string{"?limit=-1", "?limit=abc", "?offset=-3", "?offset=1.5"} {
		r := e.do("GET", e.flagsPath("/")+q, e.key, nil)
		attr := strings.TrimPrefix(strings.Split(q, "=")[0], "?")
		wantError(t, r, 400, "validation_error", "invalid_input", attr)
	}
}

func TestActivityLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.mustCreateFlag(map[string]any{"key": "tracked", "name": "first"})
	other := e.mustCreateFlag(map[string]any{"key": "other"})
	path := e.flagsPath(fmt.Sprintf("/%d", id))
	e.do("PATCH", path, e.key, map[string]any{"name": "second", "active": false})
	e.do("PATCH", path, e.key, map[string]any{"name": "second"}) // no change: no entry
	e.do("PATCH", path, e.key, map[string]any{"deleted": true})

	r := e.do("GET", path+"/activity", e.key, nil)
	if r.status != 200 || r.body["total_count"] != 3.0 {
		t.Fatalf("activity: %d %s", r.status, r.raw)
	}
	results := r.body["results"].([]any)
	var kinds []string
	for _, item := range results {
		a := item.(map[string]any)
		kinds = append(kinds, a["activity"].(string))
		if a["scope"] != "FeatureFlag" || a["item_id"] != fmt.Sprint(id) {
			t.Errorf("entry %v", a)
		}
		if u := a["user"].(map[string]any); u["email"] != "admin@example.com" {
			t.Errorf("user %v", u)
		}
		if d := a["detail"].(map[string]any); d["name"] != "tracked" || d["id"] != fmt.Sprint(id) {
			t.Errorf("detail %v", d)
		}
	}
	if fmt.Sprint(kinds) != "[deleted updated created]" {
		t.Errorf("activities %v, newest first", kinds)
	}
	changes := results[1].(map[string]any)["detail"].(map[string]any)["changes"].([]any)
	var fields []string
	for _, c := range changes {
		ch := c.(map[string]any)
		fields = append(fields, fmt.Sprintf("%s:%v->%v:%s", ch["field"], ch["before"], ch["after"], ch["action"]))
	}
	if fmt.Sprint(fields) != "[name:first->second:changed active:true->false:changed]" {
		t.Errorf("changes %v", fields)
	}
	if del := results[0].(map[string]any)["detail"].(map[string]any)["changes"].([]any)[0].(map[string]any); del["action"] != "deleted" {
		t.Errorf("delete change %v", del)
	}
	if created := results[2].(map[string]any)["detail"].(map[string]any); created["changes"] != nil {
		t.Errorf("created entry has changes %v", created["changes"])
	}

	all := e.do("GET", e.flagsPath("/activity"), e.key, nil)
	if all.body["total_count"] != 4.0 {
		t.Errorf("project activity: %s", all.raw)
	}
	page := e.do("GET", e.flagsPath("/activity?limit=3"), e.key, nil)
	wantNext := e.srv.URL + e.flagsPath("/activity?limit=3&page=2")
	if len(page.body["results"].([]any)) != 3 || page.body["next"] != wantNext || page.body["previous"] != nil {
		t.Errorf("page 1: next %v previous %v", page.body["next"], page.body["previous"])
	}
	page2 := e.do("GET", e.flagsPath("/activity?limit=3&page=2"), e.key, nil)
	if len(page2.body["results"].([]any)) != 1 || page2.body["next"] != nil || page2.body["previous"] != e.srv.URL+e.flagsPath("/activity?limit=3&page=1") {
		t.Errorf("page 2: %s", page2.raw)
	}
	if o := e.do("GET", e.flagsPath(fmt.Sprintf("/%d/activity", other)), e.key, nil); o.body["total_count"] != 1.0 {
		t.Errorf("other flag's activity: %s", o.raw)
	}
}

func TestOperationalEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"/_health", "/_ready"} {
		if r := e.do("GET", path, "", nil); r.status != 200 || r.body["status"] != "ok" {
			t.Errorf("%s: %d %s", path, r.status, r.raw)
		}
	}
	e.do("GET", e.flagsPath(""), e.key, nil)
	m := e.do("GET", "/metrics", "", nil)
	want := `flagedge_controlplane_http_requests_total{code="200",route="GET /api/projects/{project_id}/feature_flags"} 1`
	if m.status != 200 || !strings.Contains(string(m.raw), want) {
		t.Errorf("metrics lack %q:\n%s", want, m.raw)
	}
	if r := e.do("PUT", e.flagsPath(""), e.key, nil); r.status != 405 || r.body["code"] != "method_not_allowed" {
		t.Errorf("PUT: %d %s", r.status, r.raw)
	}
}

package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
)

func TestEventDestinationsAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dests := fmt.Sprintf("/api/projects/%d/event_destinations/", e.project)
	valid := func() map[string]any {
		return map[string]any{"url": "https://93.184.215.14", "api_key": "phc_secretprojectkey1234", "enabled": true}
	}
	r := e.do("POST", dests, e.key, valid())
	if r.status != 201 || r.body["id"] == nil || r.body["enabled"] != true || r.str("api_key_hint") != "phc_…1234" ||
		r.body["queued_events"] != float64(0) || r.str("paused_reason") != "" {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	if strings.Contains(string(r.raw), "secretprojectkey") {
		t.Fatalf("the key is shown: %s", r.raw)
	}
	id := int64(r.body["id"].(float64))
	one := fmt.Sprintf("%s%d/", dests, id)
	if r := e.do("GET", one, e.key, nil); r.status != 200 || strings.Contains(string(r.raw), "secretprojectkey") || r.str("url") != "https://93.184.215.14" {
		t.Errorf("get: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", dests, e.key, nil); r.status != 200 || r.body["count"] != float64(1) {
		t.Errorf("list: %d %s", r.status, r.raw)
	}
	if r := e.do("PATCH", one, e.key, map[string]any{"enabled": false, "api_key": "phc_anotherkey5678"}); r.status != 200 ||
		r.body["enabled"] != false || r.str("api_key_hint") != "phc_…5678" {
		t.Errorf("patch: %d %s", r.status, r.raw)
	}

	for name, c := range map[string]struct {
		change map[string]any
		attr   string
		code   string
	}{
		"missing url":         {map[string]any{"url": nil}, "url", "required"},
		"missing key":         {map[string]any{"api_key": nil}, "api_key", "required"},
		"empty key":           {map[string]any{"api_key": ""}, "api_key", "invalid_input"},
		"key not text":        {map[string]any{"api_key": 12}, "api_key", "invalid_input"},
		"ftp":                 {map[string]any{"url": "ftp://93.184.215.14/"}, "url", "invalid_url"},
		"loopback":            {map[string]any{"url": "http://127.0.0.1:8080"}, "url", "forbidden_address"},
		"metadata service":    {map[string]any{"url": "http://169.254.169.254/"}, "url", "forbidden_address"},
		"enabled not boolean": {map[string]any{"enabled": "yes"}, "enabled", "invalid_input"},
	} {
		body := valid()
		for k, v := range c.change {
			if v == nil {
				delete(body, k)
			} else {
				body[k] = v
			}
		}
		r := e.do("POST", dests, e.key, body)
		if r.status != 400 || r.str("attr") != c.attr || r.str("code") != c.code || r.str("type") != "validation_error" {
			t.Errorf("%s: %d %s, want 400 %s on %s", name, r.status, r.raw, c.code, c.attr)
		}
	}
	if r := e.do("POST", dests, e.key, valid()); r.status != 201 {
		t.Errorf("a second destination: %d %s", r.status, r.raw)
	}
	if r := e.do("PATCH", one, e.key, map[string]any{"url": "http://[::1]/"}); r.status != 400 || r.str("code") != "forbidden_address" ||
		!strings.Contains(r.str("detail"), "--forward-allow-private") {
		t.Errorf("patch to loopback: %d %s", r.status, r.raw)
	}

	// Only organisation admins see or manage destinations, or turn storage off.
	member, _ := e.mustUser("member@example.com", false)
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		if r := e.do(m, one, member, map[string]any{}); r.status != 403 {
			t.Errorf("member %s: %d %s", m, r.status, r.raw)
		}
	}
	if r := e.do("POST", dests, member, valid()); r.status != 403 {
		t.Errorf("member create: %d %s", r.status, r.raw)
	}
	project := fmt.Sprintf("/api/projects/%d/", e.project)
	if r := e.do("PATCH", project, member, map[string]any{"store_events": false}); r.status != 403 {
		t.Errorf("member turns storage off: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", project, e.key, nil); r.body["store_events"] != true {
		t.Errorf("store_events by default: %s", r.raw)
	}
	if r := e.do("PATCH", project, e.key, map[string]any{"store_events": false}); r.status != 200 || r.body["store_events"] != false {
		t.Errorf("admin turns storage off: %d %s", r.status, r.raw)
	}

	if r := e.do("GET", fmt.Sprintf("%s%d/dead_letters/", dests, id), e.key, nil); r.status != 200 || r.body["count"] != float64(0) {
		t.Errorf("dead letters: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", fmt.Sprintf("%s%d/dead_letters/", dests, id+1000), e.key, nil); r.status != 404 {
		t.Errorf("dead letters of no destination: %d %s", r.status, r.raw)
	}
	if r := e.do("DELETE", one, e.key, nil); r.status != 204 {
		t.Errorf("delete: %d %s", r.status, r.raw)
	}
	if r := e.do("DELETE", one, e.key, nil); r.status != 404 {
		t.Errorf("delete again: %d %s", r.status, r.raw)
	}
}

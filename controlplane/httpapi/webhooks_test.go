package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
)

func TestWebhooksAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hooks := fmt.Sprintf("/api/projects/%d/webhooks/", e.project)
	valid := func() map[string]any {
		return map[string]any{"url": "https://93.184.215.14/hook?team=1", "events": []string{"feature_flag.updated", "annotation.created"},
			"secret": "whsec-0123456789abcdef"}
	}
	r := e.do("POST", hooks, e.key, valid())
	if r.status != 201 || r.body["id"] == nil || r.body["secret_set"] != true || r.body["enabled"] != true {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	if strings.Contains(string(r.raw), "whsec") {
		t.Fatalf("the secret is shown: %s", r.raw)
	}
	id := int64(r.body["id"].(float64))
	one := fmt.Sprintf("%s%d/", hooks, id)
	if r := e.do("GET", one, e.key, nil); r.status != 200 || strings.Contains(string(r.raw), "whsec") || r.body["url"] != "https://93.184.215.14/hook?team=1" {
		t.Errorf("get: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", hooks, e.key, nil); r.status != 200 || r.body["count"] != float64(1) {
		t.Errorf("list: %d %s", r.status, r.raw)
	}
	if r := e.do("PATCH", one, e.key, map[string]any{"enabled": false, "events": []string{"annotation.deleted"}}); r.status != 200 ||
		r.body["enabled"] != false || fmt.Sprint(r.body["events"]) != "[annotation.deleted]" {
		t.Errorf("patch: %d %s", r.status, r.raw)
	}

	for name, c := range map[string]struct {
		change map[string]any
		attr   string
		code   string
	}{
		"unknown kind":        {map[string]any{"events": []string{"feature_flag.exploded"}}, "events", "invalid_choice"},
		"no kinds":            {map[string]any{"events": []string{}}, "events", "invalid_input"},
		"kinds not a list":    {map[string]any{"events": "feature_flag.updated"}, "events", "invalid_input"},
		"ftp":                 {map[string]any{"url": "ftp://93.184.215.14/"}, "url", "invalid_url"},
		"credentials":         {map[string]any{"url": "https://user:pass@93.184.215.14/"}, "url", "invalid_url"},
		"loopback":            {map[string]any{"url": "http://127.0.0.1:8080/hook"}, "url", "forbidden_address"},
		"localhost":           {map[string]any{"url": "http://localhost/hook"}, "url", "forbidden_address"},
		"metadata service":    {map[string]any{"url": "http://169.254.169.254/latest/meta-data/"}, "url", "forbidden_address"},
		"private network":     {map[string]any{"url": "http://10.0.0.5/"}, "url", "forbidden_address"},
		"IPv6 unique local":   {map[string]any{"url": "http://[fd00::1]/"}, "url", "forbidden_address"},
		"carrier-grade NAT":   {map[string]any{"url": "http://100.64.1.1/"}, "url", "forbidden_address"},
		"short secret":        {map[string]any{"secret": "short"}, "secret", "invalid_input"},
		"missing secret":      {map[string]any{"secret": nil}, "secret", "required"},
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
		r := e.do("POST", hooks, e.key, body)
		if r.status != 400 || r.str("attr") != c.attr || r.str("code") != c.code || r.str("type") != "validation_error" {
			t.Errorf("%s: %d %s, want 400 %s on %s", name, r.status, r.raw, c.code, c.attr)
		}
	}
	if r := e.do("PATCH", one, e.key, map[string]any{"url": "http://[::1]/"}); r.status != 400 || r.str("code") != "forbidden_address" {
		t.Errorf("patch to loopback: %d %s", r.status, r.raw)
	}

	// Only organisation admins see or manage hooks.
	member, _ := e.mustUser("member@example.com", false)
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		if r := e.do(m, one, member, map[string]any{}); r.status != 403 {
			t.Errorf("member %s: %d %s", m, r.status, r.raw)
		}
	}
	if r := e.do("GET", fmt.Sprintf("%s%d/deliveries/", hooks, id), e.key, nil); r.status != 200 || r.body["count"] != float64(0) {
		t.Errorf("deliveries: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", fmt.Sprintf("%s%d/deliveries/", hooks, id+1000), e.key, nil); r.status != 404 {
		t.Errorf("deliveries of no hook: %d %s", r.status, r.raw)
	}
	if r := e.do("DELETE", one, e.key, nil); r.status != 204 {
		t.Errorf("delete: %d %s", r.status, r.raw)
	}
	if r := e.do("DELETE", one, e.key, nil); r.status != 404 {
		t.Errorf("delete again: %d %s", r.status, r.raw)
	}
}

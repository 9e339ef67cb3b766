package console_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// hostileValues are what TestHostileForms puts in every field: text PostgreSQL refuses,
// numbers out of every range, values too long, and the form buttons' own actions pointing
// outside the form.
var hostileValues = []string{
	"\x00", "a\x00b", "\xff\xfe", "-1", "NaN", "Inf", "-Inf", "1e309", "-1e309", "99999999999999999999", "0x10", "",
	strings.Repeat("a", 100_000), "%00", "%ff", "<script>alert(1)</script>", `{"a":`, "[]", "null",
	"remove_condition_-1", "remove_variant_-1", "remove_condition_99999", "add_property_-1", "remove_property_-1_-1",
	"remove_property_0_-1", "add_property_99999",
}

// hostileSegments replace each id in a path.
var hostileSegments = []string{"%00", "%ff", "-1", "0", "99999999999999999999", "%2e%2e", "a%2Fb"}

var (
	formPattern  = regexp.MustCompile(`(?s)<form\b([^>]*)>(.*?)</form>`)
	fieldPattern = regexp.MustCompile(`(?s)<(input|select|textarea|button)\b([^>]*)>`)
	attrPattern  = regexp.MustCompile(`([a-zA-Z_:-]+)="([^"]*)"`)
	hrefPattern  = regexp.MustCompile(`href="(/[^"]*)"`)
	idSegment    = regexp.MustCompile(`^([0-9]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)
)

// form is a form found on a console page: where it goes and its fields' values as the page
// fills them (a button's name with its value among the choices).
type form struct {
	method, action string
	fields         url.Values
	anonymous      bool // a form of the logged-out pages (login, set-password)
}

func attrs(s string) map[string]string {
	out := map[string]string{}
	for _, m := range attrPattern.FindAllStringSubmatch(s, -1) {
		out[m[1]] = html.UnescapeString(m[2])
	}
	return out
}

func parseForms(pagePath, body string) []form {
	var out []form
	for _, m := range formPattern.FindAllStringSubmatch(body, -1) {
		a := attrs(m[1])
		f := form{method: strings.ToUpper(a["method"]), action: a["action"], fields: url.Values{}}
		if f.method == "" {
			f.method = "GET"
		}
		if f.action == "" {
			f.action = pagePath
		}
		f.action, _, _ = strings.Cut(f.action, "#")
		for _, fm := range fieldPattern.FindAllStringSubmatch(m[2], -1) {
			fa := attrs(fm[2])
			if fa["name"] == "" {
				continue
			}
			f.fields.Add(fa["name"], fa["value"])
		}
		out = append(out, f)
	}
	return out
}

// TestHostileForms logs in, finds every form on every console page, and posts each with
// hostile values in each field in turn, then every form and link with hostile ids in its
// path: no answer may be a 5xx (a panic is answered 500 too).
func TestHostileForms(t *testing.T) {
	if testing.Short() {
		t.Skip("posts thousands of forms")
	}
	s := newSite(t)
	b := s.browser()
	token := b.login("admin@example.com", s.password)
	// Something on every page: a flag with conditions, variants and properties, an
	// annotation, a second member, a key.
	for _, c := range []struct {
		path string
		form url.Values
	}{
		{fmt.Sprintf("/project/%d/feature_flags/new", s.project), url.Values{"key": {"hostile"}, "name": {"h"}, "cond_count": {"2"},
			"c0_rollout": {"50"}, "c0_prop_count": {"1"}, "c0_p0_key": {"email"}, "c0_p0_op": {"exact"}, "c0_p0_value": {"a@b.c"},
			"var_count": {"2"}, "v0_key": {"a"}, "v0_pct": {"50"}, "v1_key": {"b"}, "v1_pct": {"50"}}},
		{fmt.Sprintf("/project/%d/annotations/new", s.project), url.Values{"content": {"note"}, "date_marker": {"2026-01-01T00:00"}}},
		{"/settings/members", url.Values{"email": {"second@example.com"}}},
		{"/settings/keys", url.Values{"label": {"k"}, "scopes": {"*"}}},
	} {
		c.form.Set("csrf_token", token)
		if p := b.post(c.path, c.form); p.status >= 400 {
			t.Logf("seeding %s: %d (the crawl goes on without it)", c.path, p.status)
		}
	}

	// Crawl every page reachable from the home page.
	pages := map[string]string{}
	queue := []string{"/", "/projects", fmt.Sprintf("/project/%d/feature_flags", s.project)}
	for len(queue) > 0 && len(pages) < 200 {
		path := queue[0]
		queue = queue[1:]
		if _, seen := pages[path]; seen || strings.HasPrefix(path, "/static/") {
			continue
		}
		p := b.get(path)
		if p.status >= 500 {
			t.Errorf("GET %s: %d", path, p.status)
		}
		pages[path] = p.body
		for _, m := range hrefPattern.FindAllStringSubmatch(p.body, -1) {
			next, _, _ := strings.Cut(html.UnescapeString(m[1]), "#")
			if _, seen := pages[next]; !seen {
				queue = append(queue, next)
			}
		}
	}
	var forms []form
	seen := map[string]bool{}
	for _, path := range slices.Sorted(func(yield func(string) bool) {
		for p := range pages {
			if !yield(p) {
				return
			}
		}
	}) {
		for _, f := range parseForms(path, pages[path]) {
			key := f.method + " " + f.action + " " + strings.Join(slices.Sorted(func(yield func(string) bool) {
				for k := range f.fields {
					if !yield(k) {
						return
					}
				}
			}), ",")
			if seen[key] || f.action == "/logout" {
				continue
			}
			seen[key] = true
			forms = append(forms, f)
		}
	}
	anon := s.browser()
	for _, path := range []string{"/login", "/set-password?token=nothing"} {
		p := anon.get(path)
		for _, f := range parseForms(path, p.body) {
			f.anonymous = true
			forms = append(forms, f)
		}
	}
	if len(pages) < 10 || len(forms) < 10 {
		t.Fatalf("the crawl found %d pages and %d forms: too few to mean anything", len(pages), len(forms))
	}

	send := func(client *http.Client, method, path string, values url.Values) int {
		t.Helper()
		var req *http.Request
		var err error
		if method == "GET" {
			req, err = http.NewRequest("GET", s.srv.URL+path+"?"+values.Encode(), nil)
		} else {
			req, err = http.NewRequest("POST", s.srv.URL+path, strings.NewReader(values.Encode()))
			if req != nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
		}
		if err != nil {
			t.Fatalf("%s %q: %v", method, path, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	posts, failures := 0, 0
	check := func(method, path, field, value string, status int) {
		posts++
		if status >= 500 {
			failures++
			if failures <= 40 {
				t.Errorf("%s %s with %s=%.40q: %d", method, path, field, value, status)
			}
		}
	}
	for _, f := range forms {
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range f.fields {
				if k != "csrf_token" && !yield(k) {
					return
				}
			}
		})
		names = append(names, "action", "cond_count", "var_count", "c0_prop_count", "c-1_rollout")
		for _, name := range names {
			for _, v := range hostileValues {
				values := url.Values{}
				for k, vs := range f.fields {
					values[k] = slices.Clone(vs)
				}
				values.Set(name, v)
				client := b.client
				if f.anonymous {
					client = anon.client
				}
				check(f.method, f.action, name, v, send(client, f.method, f.action, values))
			}
		}
		// Still logged in? A form that ended the session would make the rest meaningless.
		if p := b.get("/projects"); p.status != http.StatusOK {
			t.Fatalf("after the hostile posts to %s the session is gone (%d)", f.action, p.status)
		}
	}
	// Hostile ids in every path with one.
	paths := map[string]string{} // path → method
	for p := range pages {
		paths[strings.SplitN(p, "?", 2)[0]] = "GET"
	}
	for _, f := range forms {
		if !f.anonymous {
			paths[f.action] = f.method
		}
	}
	paths["/static/x"] = "GET"
	for path, method := range paths {
		segs := strings.Split(path, "/")
		for i, seg := range segs {
			if !idSegment.MatchString(seg) && !(path == "/static/x" && i == 2) {
				continue
			}
			for _, h := range hostileSegments {
				mutated := slices.Clone(segs)
				mutated[i] = h
				mp := strings.Join(mutated, "/")
				check(method, mp, "path", h, send(b.client, method, mp, url.Values{"csrf_token": {token}}))
			}
		}
	}
	t.Logf("%d pages, %d forms, %d hostile requests, %d answered 5xx", len(pages), len(forms), posts, failures)
}

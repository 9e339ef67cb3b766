package httpapi

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// storable reports whether every string in v (object keys and values, at any depth) is
// text PostgreSQL can hold, and every number a finite float64.
func storable(v any) bool {
	switch x := v.(type) {
	case string:
		return utf8.ValidString(x) && !strings.ContainsRune(x, 0)
	case map[string]any:
		for k, e := range x {
			if !storable(k) || !storable(e) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !storable(e) {
				return false
			}
		}
	}
	return true
}

// FuzzDecodeObject checks the request body decoder: it never panics, and what it accepts is
// a JSON object that encoding/json also accepts, with nothing PostgreSQL would refuse.
func FuzzDecodeObject(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `{"name":"x"}`, `{"content":"\u0000"}`, "{\"a\":\"\xff\"}", `{"a":"\ud800"}`,
		`{"a":"\ud83d\ude00"}`, `{"a":{"b":[1,2,{"c":"\u0000"}]}}`, `{"a\u0000":1}`, `{"n":1e200000}`, `{"n":-1e-400}`,
		`{"n":123456789012345678901234567890}`, `{"s":"\\u0000"}`, `{"s":"\\"}`, `{"a":1}{"b":2}`, `{"a":`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/", strings.NewReader(string(body)))
		got, err := decodeObject(r)
		if err != nil {
			return
		}
		if len(strings.TrimSpace(string(body))) == 0 {
			return // an empty body is an empty object
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil || m == nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
		}
		if len(got) != len(m) {
			t.Fatalf("accepted %q as %d fields, encoding/json reads %d", body, len(got), len(m))
		}
		for k, raw := range got {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatalf("field %q of %q: %v", k, body, err)
			}
			if !storable(k) || !storable(v) {
				t.Fatalf("accepted %q, whose field %q PostgreSQL cannot store", body, k)
			}
		}
		if !utf8.Valid(body) {
			t.Fatalf("accepted %q, which is not UTF-8", body)
		}
	})
}

// FuzzRequestParams checks query and path validation and paging: never a panic; accepted
// values are storable text, and accepted paging stays within bounds without overflow.
func FuzzRequestParams(f *testing.F) {
	for _, seed := range [][2]string{
		{"/api/projects/1/persons", "search=%00"}, {"/api/organizations/@current/roles/%ff", ""},
		{"/api/projects/1/events/%00", "distinct_id=x"}, {"/x", "limit=10&offset=9223372036854775807"},
		{"/x", "offset=-1"}, {"/x", "limit=abc"}, {"/x", "a%00=1"}, {"/x", "%zz=%"}, {"/x", "page=9223372036854775807"},
	} {
		f.Add(seed[0], seed[1])
	}
	const pattern = "GET /api/projects/{project_id}/events/{id}"
	f.Fuzz(func(t *testing.T, path, query string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.URL.RawPath, r.URL.Path, r.URL.RawQuery = "", "/"+strings.TrimPrefix(path, "/"), query
		if err := checkRequest(r, pattern); err == nil {
			for k, vs := range r.URL.Query() {
				for _, v := range append(vs, k) {
					if !storable(v) {
						t.Fatalf("accepted query %q with %q", query, v)
					}
				}
			}
		}
		limit, offset, err := pageParams(r)
		if err == nil && (limit < 1 || limit > maxLimit || offset < 0 || offset > maxOffset || offset+limit < offset) {
			t.Fatalf("query %q: limit %d offset %d", query, limit, offset)
		}
	})
}

// FuzzParseISOTime checks the date parser never panics and answers UTC.
func FuzzParseISOTime(f *testing.F) {
	for _, seed := range []string{"2024-05-01T12:00:00+02:00", "2024-05-01", "2024-13-45", "-10000-01-01", "9999-12-31T23:59:59.999999999Z", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if tm, err := parseISOTime(s); err == nil && tm.Location().String() != "UTC" {
			t.Fatalf("%q parsed in %v", s, tm.Location())
		}
	})
}

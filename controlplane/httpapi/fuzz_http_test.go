package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"
)

// hostileStrings are values that have broken servers: NUL, invalid UTF-8, lone surrogates
// (as JSON escapes), LIKE and path syntax, quotes, numbers and dates out of every range.
var hostileStrings = []string{
	"", " ", "\x00", "a\x00b", "\xff", "\xc3", "\xed\xa0\x80", "\ufffd", "%", "_", `\`, "%_\\", "'", `"`, "''; --",
	"../..", "/", "@current", "null", "true", "0", "-1", "1.5", "1e400", "-1e400", "9223372036854775807",
	"9223372036854775808", "-9223372036854775809", "99999999999999999999999", "NaN", "Infinity",
	"2024-05-01T12:00:00Z", "2024-13-45", "0000-00-00", "-10000-01-01T00:00:00Z", "99999-12-31", "1970-01-01",
	"00000000-0000-0000-0000-000000000000", "not-a-uuid", "phx_", "phc_x", strings.Repeat("x", 5000),
	strings.Repeat("é", 3000), incompressible(5000), "😀", "\u2028", "<script>", "{}", "[]", `{"a":"\u0000"}`, `{"a":1e999}`,
}

// incompressible is n letters that PostgreSQL cannot compress under its index row limit, as
// a repeated letter would be.
func incompressible(n int) string {
	rng := rand.New(rand.NewPCG(7, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

// hostileJSON are JSON values (as text) that decoders and stores have mishandled.
var hostileJSON = []string{
	`null`, `true`, `false`, `0`, `-1`, `1.5`, `1e308`, `-1e308`, `1e200000`, `-1e200000`, `1e-200000`,
	`123456789012345678901234567890`, `9223372036854775807`, `-9223372036854775808`, `""`, `"\u0000"`,
	`"a\u0000b"`, `"\ud800"`, `"\udc00x"`, `"\ud83d\ude00"`, "\"\xff\"", `[]`, `{}`, `[null]`, `[1,"a",{}]`,
	`{"\u0000":1}`, `{"a":{"b":{"c":"\u0000"}}}`, `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	`"2024-05-01T12:00:00Z"`, `"-10000-01-01"`, `"9999-12-31T23:59:59.999999Z"`, `"%"`, `"_"`, `"\\"`,
	`"` + strings.Repeat("y", 5000) + `"`, `"` + incompressible(6000) + `"`,
}

var bodyFields = []string{
	"name", "key", "filters", "content", "date_marker", "dashboard_item", "dashboard_id", "scope", "creation_type",
	"deleted", "active", "tags", "role_id", "user_uuid", "feature_flags_access_level", "condition", "group_type_index",
	"timezone", "is_static", "description", "rollback_conditions", "ensure_experience_continuity", "created_at",
	"analytics_dashboards", "has_enriched_analytics", "performed_rollback", "variant",
}

var queryParams = []string{
	"limit", "offset", "page", "search", "distinct_id", "event", "after", "before", "groups", "token", "deleted",
	"dashboardItemId", "group_type_index", "scope", "send_cohorts", "key",
}

var operators = []string{"exact", "is_not", "icontains", "not_icontains", "regex", "not_regex", "gt", "gte", "lt", "lte",
	"is_set", "is_not_set", "is_date_before", "is_date_after", "is_date_exact", "in", "not_in", "semver_gt", "flag_evaluates_to", "bogus"}

// fuzzer makes deterministic hostile requests.
type fuzzer struct {
	rng *rand.Rand
}

func (f *fuzzer) pick(list []string) string { return list[f.rng.IntN(len(list))] }

// jsonValue returns a random JSON value (as text), at most depth levels deep; hostile
// leaves are mixed with well-formed ones so that requests get past the first check.
func (f *fuzzer) jsonValue(depth int) string {
	if depth <= 0 || f.rng.IntN(3) == 0 {
		if f.rng.IntN(2) == 0 {
			return f.pick(hostileJSON)
		}
		s, _ := json.Marshal(f.pick(hostileStrings))
		return string(s)
	}
	n := f.rng.IntN(4)
	parts := make([]string, n)
	if f.rng.IntN(2) == 0 {
		for i := range parts {
			parts[i] = f.jsonValue(depth - 1)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	for i := range parts {
		k, _ := json.Marshal(f.pick(append(bodyFields, "properties", "groups", "value", "operator", "type", "rollout_percentage", "variants")))
		parts[i] = string(k) + ":" + f.jsonValue(depth-1)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// filters returns flag or cohort filters, mostly well-shaped, with hostile values.
func (f *fuzzer) filters() string {
	prop := func() string {
		return fmt.Sprintf(`{"key":%s,"value":%s,"operator":%q,"type":%q,"group_type_index":%s,"negation":%s}`,
			f.jsonValue(0), f.jsonValue(1), f.pick(operators), f.pick([]string{"person", "group", "cohort", "flag", "event", "x"}),
			f.jsonValue(0), f.pick([]string{"true", "false", "null", `"x"`}))
	}
	var groups []string
	for range f.rng.IntN(3) + 1 {
		groups = append(groups, fmt.Sprintf(`{"properties":[%s],"rollout_percentage":%s,"variant":%s}`, prop(), f.jsonValue(0), f.jsonValue(0)))
	}
	return fmt.Sprintf(`{"groups":[%s],"multivariate":%s,"payloads":%s,"aggregation_group_type_index":%s,"properties":{"type":"AND","values":[%s]}}`,
		strings.Join(groups, ","), f.pick([]string{`null`, `{"variants":[{"key":"a","rollout_percentage":50},{"key":"b","rollout_percentage":50}]}`,
			`{"variants":[{"key":` + f.jsonValue(0) + `,"rollout_percentage":` + f.jsonValue(0) + `}]}`, f.jsonValue(2)}),
		f.pick([]string{`{}`, `{"true":"{\"a\":1}"}`, `{"a":` + f.jsonValue(1) + `}`, f.jsonValue(1)}), f.jsonValue(0), prop())
}

// body returns a request body: usually a JSON object of known fields with hostile values,
// sometimes something that is not JSON or not an object at all.
func (f *fuzzer) body() []byte {
	switch f.rng.IntN(10) {
	case 0:
		return []byte(f.pick([]string{"", "{", `{"a":`, "[]", "null", "\xff\xfe", "{}{}", `{"a":1}x`, strings.Repeat("[", 20000)}))
	case 1:
		return []byte(f.jsonValue(3))
	}
	var parts []string
	for range f.rng.IntN(4) + 1 {
		field := f.pick(bodyFields)
		var v string
		switch {
		case field == "filters" || field == "condition":
			v = f.filters()
		case f.rng.IntN(3) == 0:
			v = f.jsonValue(2)
		default:
			b, _ := json.Marshal(f.pick(hostileStrings))
			v = string(b)
		}
		k, _ := json.Marshal(field)
		if f.rng.IntN(15) == 0 {
			k = []byte(f.pick([]string{`"na\u0000me"`, "\"\xff\"", `"\ud800"`}))
		}
		parts = append(parts, string(k)+":"+v)
	}
	return []byte("{" + strings.Join(parts, ",") + "}")
}

// pathValue fills a path wildcard: a valid value most of the time, else a hostile one.
func (f *fuzzer) pathValue(valid string) string {
	if f.rng.IntN(3) > 0 {
		return valid
	}
	return url.PathEscape(f.pick(hostileStrings))
}

// query returns a raw query string of known parameters with hostile values.
func (f *fuzzer) query() string {
	var parts []string
	for range f.rng.IntN(4) {
		parts = append(parts, url.QueryEscape(f.pick(queryParams))+"="+url.QueryEscape(f.pick(hostileStrings)))
	}
	if f.rng.IntN(20) == 0 {
		parts = append(parts, "%zz=%", "a%00b=1", "x=%ff")
	}
	return strings.Join(parts, "&")
}

// TestHTTPFuzz sends a few thousand deterministic hostile requests to every registered
// route, valid fixtures mixed with hostile path values, query parameters and bodies, with
// a key that may do everything: no answer may be a 5xx (a panic is answered 500 too).
func TestHTTPFuzz(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fx := &matrixFixtures{e: e}
	fx.org = e.do("GET", fmt.Sprintf("/api/projects/%d/", e.project), e.key, nil).str("organization")
	fx.flag = e.mustCreateFlag(map[string]any{"key": "fuzzed"})
	fx.role = e.mustRole("Fuzzed", 37)
	access := fx.freshRoleAccess()
	_, membership := fx.freshMembership()
	valid := map[string]string{
		"project_id": fmt.Sprint(e.project), "id": fmt.Sprint(fx.flag), "org": fx.org, "role": fx.role,
		"access_id": fmt.Sprint(access),
	}
	routes := e.api.Routes()
	f := &fuzzer{rng: rand.New(rand.NewPCG(2026, 12))}
	// At least minRequests are always sent, however slow the machine: that many make the run
	// mean something. Beyond them the run stops at requests or after 45 s, so that the suite
	// stays fast on a loaded machine.
	const requests, minRequests = 5000, 5000 / 3
	deadline := time.Now().Add(45 * time.Second)
	statuses := map[int]int{}
	var failures []string
	sent := 0
	for ; sent < requests && (sent < minRequests || time.Now().Before(deadline)); sent++ {
		rt := routes[f.rng.IntN(len(routes))]
		path := rt.Pattern
		for name, v := range valid {
			if strings.Contains(rt.Pattern, "/role_memberships/{id}") && name == "id" {
				v = membership
			}
			path = strings.ReplaceAll(path, "{"+name+"}", f.pathValue(v))
		}
		if f.rng.IntN(2) == 0 {
			path += "/"
		}
		if q := f.query(); q != "" {
			path += "?" + q
		}
		var body io.Reader
		var raw []byte
		if rt.Method != "GET" {
			raw = f.body()
			body = bytes.NewReader(raw)
		}
		req, err := http.NewRequest(rt.Method, e.srv.URL+path, body)
		if err != nil {
			t.Fatalf("%s %s: %v", rt.Method, path, err)
		}
		req.Header.Set("Authorization", "Bearer "+e.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", rt.Method, path, err)
		}
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		statuses[resp.StatusCode]++
		if resp.StatusCode >= 500 && len(failures) < 20 {
			failures = append(failures, fmt.Sprintf("%d %s %s body %.300q → %.200s", resp.StatusCode, rt.Method, path, raw, answer))
		}
	}
	var summary []string
	for code, n := range statuses {
		summary = append(summary, fmt.Sprintf("%d×%d", n, code))
	}
	sort.Strings(summary)
	t.Logf("%d requests: %s", sent, strings.Join(summary, " "))
	for _, f := range failures {
		t.Error(f)
	}
}

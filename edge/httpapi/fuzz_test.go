package httpapi_test

import (
	"encoding/base64"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"
)

// hostileBodies are bodies of the kinds that broke servers like this one: malformed and
// truncated JSON, wrong types, text PostgreSQL cannot hold, numbers out of range, deep
// nesting, and encodings that do not decode.
func hostileBodies(r *rand.Rand) []string {
	tok := token
	if r.IntN(4) == 0 {
		tok = otherToken
	}
	big := strings.Repeat("x", 1+r.IntN(70_000))
	deep := strings.Repeat("[", 1+r.IntN(2000))
	raw := make([]byte, r.IntN(300))
	for i := range raw {
		raw[i] = byte(r.UintN(256))
	}
	return []string{
		"", "{", "[", "null", "true", "12", `"s"`, string(raw), deep,
		`{"api_key":"` + tok + `","distinct_id":` + []string{"null", "[]", "{}", "1e400", "-0", `"\u0000"`, `"\ud800"`, "\"\xff\xfe\"", `"` + big + `"`}[r.IntN(9)] + `}`,
		`{"api_key":"` + tok + `","distinct_id":"d","person_properties":` + []string{"[]", "1", `{"a":` + deep + `}`, `{"\u0000":"\ud800"}`, `{"n":1e99999}`}[r.IntN(5)] + `}`,
		`{"api_key":"` + tok + `","distinct_id":"d","groups":` + []string{"[1]", `{"company":[]}`, `{"company":{"x":1}}`, `{"company":1e400}`, `{"":""}`}[r.IntN(5)] + `}`,
		`{"api_key":"` + tok + `","distinct_id":"d","flag_keys_to_evaluate":` + []string{"1", `[1,null]`, `"x"`, `{}`}[r.IntN(4)] + `}`,
		`{"api_key":"` + tok + `","batch":` + []string{"1", "[1,2]", `[{"event":1}]`, `[{"event":"e","distinct_id":"d","properties":[]}]`, `[{"event":"e","distinct_id":"d","uuid":"nope"}]`, `[{"event":"e","distinct_id":"d","timestamp":"` + big + `"}]`}[r.IntN(6)] + `}`,
		`[{"api_key":"` + tok + `","event":"e","distinct_id":"d","properties":{"$set":` + []string{"1", "[]", `{"a":"\u0000"}`}[r.IntN(3)] + `}}]`,
		`{"api_key":"` + tok + `","event":"$groupidentify","distinct_id":"d","properties":{"$group_type":` + []string{"1", `"` + big + `"`, "null"}[r.IntN(3)] + `,"$group_key":{}}}`,
		`{"api_key":"` + tok + `","event":` + []string{`"\u0000"`, "\"\xff\"", `"` + big + `"`, `""`}[r.IntN(4)] + `,"distinct_id":` + []string{`"\u0000"`, "\"\xff\"", `"` + strings.Repeat("é", 150) + `"`, "12e5"}[r.IntN(4)] + `}`,
		base64.StdEncoding.EncodeToString(raw),
		"data=" + url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(`{"api_key":"`+tok+`","distinct_id":"d"`))),
	}
}

// hostileQueries are query strings that select decoders and versions, valid and not.
var hostileQueries = []string{"", "?v=3", "?v=4", "?v=-1", "?v=99999999999999999999", "?compression=gzip", "?compression=gzip-js",
	"?compression=lz64", "?compression=base64", "?compression=zstd", "?config=true&v=2", "?token=" + token, "?token=%00", "?_=-1",
	"?send_cohorts", "?data=%ff", "?ip=1"}

// checkAnswer fails on a server error or an answer outside the API's shapes.
func checkAnswer(t *testing.T, e *env, method, uri string, body []byte, headers ...string) {
	t.Helper()
	got := e.call(method, uri, body, headers...)
	if got.status >= 500 {
		t.Fatalf("%s %s with %q (%v): %d %s", method, uri, truncate(body), headers, got.status, got.body)
	}
	if got.status >= 400 && got.status != 405 && (got.json["type"] == nil || got.json["code"] == nil) {
		t.Fatalf("%s %s: %d without the error shape: %s", method, uri, got.status, got.body)
	}
}

func truncate(b []byte) []byte {
	if len(b) > 200 {
		return append(b[:200:200], "…"...)
	}
	return b
}

// TestHTTPFuzz sends a few thousand hostile requests, chosen by a fixed seed, to every route
// of the edge: none may get a 5xx or panic, and afterwards capture and /decide still work
// (no stuck spool, no poisoned state).
func TestHTTPFuzz(t *testing.T) {
	e := newEnv(t, true)
	var routes []string
	for _, paths := range e.api.Routes() {
		routes = append(routes, paths...)
	}
	r := rand.New(rand.NewPCG(1, 2))
	deadline := time.Now().Add(45 * time.Second)
	n := 0
	for n < 4000 && time.Now().Before(deadline) {
		route := strings.NewReplacer("{token}", []string{token, "x", "%00"}[r.IntN(3)], "{project}", []string{"7", "@current", "-1"}[r.IntN(3)],
			"{key}", []string{"everyone", "nope", "%ff"}[r.IntN(3)]).Replace(routes[r.IntN(len(routes))])
		bodies := hostileBodies(r)
		body := []byte(bodies[r.IntN(len(bodies))])
		var headers []string
		switch r.IntN(5) {
		case 0:
			body = gzipped(body)
			headers = append(headers, "Content-Encoding: gzip")
		case 1:
			headers = append(headers, "Content-Type: application/x-www-form-urlencoded")
		case 2:
			headers = append(headers, "Authorization: Bearer "+[]string{readKey, secretKey, "phx_\x00", "x"}[r.IntN(4)])
		}
		method := []string{"GET", "POST", "POST", "PUT", "OPTIONS"}[r.IntN(5)]
		uri := route + []string{"", "/"}[r.IntN(2)] + hostileQueries[r.IntN(len(hostileQueries))]
		checkAnswer(t, e, method, uri, body, headers...)
		n++
	}
	t.Logf("%d hostile requests, no 5xx", n)
	if got := e.call("POST", "/capture/", []byte(`{"api_key":"`+token+`","event":"after","distinct_id":"d"}`)); got.status != 200 {
		t.Fatalf("capture after the fuzz run: %d %s", got.status, got.body)
	}
	if got := e.decide("/decide/?v=3", map[string]any{"api_key": token, "distinct_id": "d"}); got.status != 200 {
		t.Fatalf("/decide after the fuzz run: %d %s", got.status, got.body)
	}
	done := make(chan struct{})
	close(done)
	if recs, _, err := e.spool.Read(done, e.spool.Acked(), 64<<20); err != nil || len(recs) == 0 {
		t.Fatalf("spool after the fuzz run: %d records, %v", len(recs), err)
	}
}

// FuzzEdgeRequest drives the whole edge handler: any method, path, query, headers and body
// must get an answer below 500 in the API's shape.
func FuzzEdgeRequest(f *testing.F) {
	f.Add("POST", "/decide/", "v=3", "", []byte(`{"api_key":"phc_test","distinct_id":"d"}`))
	f.Add("POST", "/batch/", "", "gzip", gzipped([]byte(`{"api_key":"phc_test","batch":[{"event":"e","distinct_id":"d"}]}`)))
	f.Add("POST", "/e/", "compression=lz64", "", []byte("N4Ig"))
	f.Add("GET", "/flags/definitions", "token=phc_test", "", []byte(nil))
	f.Add("GET", "/array/phc_test/config.js", "", "", []byte(nil))
	f.Add("POST", "/capture", "", "form", []byte("data=eyJhcGlfa2V5IjoicGhjX3Rlc3QifQ%3D%3D"))
	e := newEnv(f, true)
	f.Fuzz(func(t *testing.T, method, path, query, encoding string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n?#") || strings.ContainsAny(method, " \r\n") || method == "" {
			return // not a request line fasthttp would hand to a handler
		}
		e.t = t // calls run one at a time in a fuzz worker
		var headers []string
		switch encoding {
		case "gzip":
			headers = append(headers, "Content-Encoding: gzip")
		case "form":
			headers = append(headers, "Content-Type: application/x-www-form-urlencoded")
		}
		uri := path
		if query != "" {
			uri += "?" + query
		}
		checkAnswer(t, e, method, uri, body, headers...)
	})
}

package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// post sends a raw body to an edge.
func post(t *testing.T, method, u string, body []byte, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

var nodeOnce sync.Once
var nodeErr error

// node runs a Node.js script from e2e/node with its dependencies installed.
func node(t *testing.T, script string, env ...string) string {
	t.Helper()
	nodeOnce.Do(func() {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = "node"
		if out, err := cmd.CombinedOutput(); err != nil {
			nodeErr = fmt.Errorf("npm ci: %v\n%s", err, out)
		}
	})
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}
	cmd := exec.Command("node", "-e", script)
	cmd.Dir = "node"
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	return string(out)
}

// eventCount asks the management API how many events are stored, optionally of one name.
func (s *stack) eventCount(name string) int {
	s.t.Helper()
	q := "?limit=1"
	if name != "" {
		q += "&event=" + url.QueryEscape(name)
	}
	code, out := call(s.t, "GET", fmt.Sprintf("http://%s/api/projects/%d/events/%s", s.httpAddr, s.projectID, q), s.personal, nil)
	if code != 200 {
		s.t.Fatalf("events: %d %v", code, out)
	}
	return int(out["count"].(float64))
}

// waitEventCount waits until exactly n events are stored, then checks no more arrive.
func (s *stack) waitEventCount(n int) {
	s.t.Helper()
	waitFor(s.t, fmt.Sprintf("%d events stored", n), func() bool { return s.eventCount("") >= n })
	time.Sleep(300 * time.Millisecond)
	if got := s.eventCount(""); got != n {
		s.t.Fatalf("%d events stored, want exactly %d", got, n)
	}
}

func (s *stack) persons(query string) []any {
	s.t.Helper()
	code, out := call(s.t, "GET", fmt.Sprintf("http://%s/api/projects/%d/persons/?%s", s.httpAddr, s.projectID, query), s.personal, nil)
	if code != 200 {
		s.t.Fatalf("persons: %d %v", code, out)
	}
	return out["results"].([]any)
}

// person returns the one person with the distinct id, or nil.
func (s *stack) person(distinctID string) map[string]any {
	s.t.Helper()
	list := s.persons("distinct_id=" + url.QueryEscape(distinctID))
	if len(list) != 1 {
		return nil
	}
	return list[0].(map[string]any)
}

func TestCaptureEveryEncoding(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	n := 0
	ev := func(name string) map[string]any {
		n++
		return map[string]any{"event": name, "distinct_id": fmt.Sprintf("enc-user-%d", n), "properties": map[string]any{"n": n}}
	}
	withToken := func(m map[string]any) map[string]any {
		m["properties"].(map[string]any)["token"] = s.token
		return m
	}
	single := ev("single")
	single["api_key"] = s.token
	track := ev("track")
	track["token"] = s.token
	batch := map[string]any{"api_key": s.token, "batch": []any{ev("b1"), ev("b2"), ev("b3")}}
	gzBatch := map[string]any{"api_key": s.token, "batch": []any{ev("g1"), ev("g2")}, "sent_at": time.Now().Format(time.RFC3339Nano)}
	array := []any{withToken(ev("a1")), withToken(ev("a2"))}
	lzArray := []any{withToken(ev("lz1")), withToken(ev("lz2")), withToken(ev("lz3"))}
	formArray := []any{withToken(ev("form1"))}
	getEvent := withToken(ev("get1"))
	lz := strings.TrimSpace(node(t, `process.stdout.write(require("lz-string").compressToBase64(process.env.BODY))`, "BODY="+string(mustJSON(t, lzArray))))
	b64 := func(v any) string { return base64.StdEncoding.EncodeToString(mustJSON(t, v)) }

	for _, c := range []struct {
		name, method, path string
		body               []byte
		headers            []string
	}{
		{"single", "POST", "/capture/", mustJSON(t, single), nil},
		{"track", "POST", "/track", mustJSON(t, track), nil},
		{"batch", "POST", "/batch/", mustJSON(t, batch), nil},
		{"gzip batch", "POST", "/batch/?compression=gzip", gzipBytes(mustJSON(t, gzBatch)), []string{"Content-Encoding: gzip"}},
		{"gzip magic, no header", "POST", "/e/?ver=1.2.3", gzipBytes(mustJSON(t, array)), []string{"Content-Type: text/plain"}},
		{"lz64", "POST", "/e/?compression=lz64", []byte(lz), nil},
		{"form data", "POST", "/i/v0/e/", []byte("data=" + url.QueryEscape(b64(formArray))), []string{"Content-Type: application/x-www-form-urlencoded"}},
		{"get", "GET", "/capture/?data=" + url.QueryEscape(b64(getEvent)), nil, nil},
		{"engage", "POST", "/engage/", mustJSON(t, map[string]any{"$token": s.token, "$distinct_id": "engaged", "$set": map[string]any{"plan": "pro"}}), nil},
		// Not ingested, still 200: no name, no distinct id, an empty one.
		{"no name", "POST", "/capture/", mustJSON(t, map[string]any{"api_key": s.token, "distinct_id": "x"}), nil},
		{"no distinct id", "POST", "/capture/", mustJSON(t, map[string]any{"api_key": s.token, "event": "x"}), nil},
		{"empty distinct id", "POST", "/capture/", mustJSON(t, map[string]any{"api_key": s.token, "event": "x", "distinct_id": ""}), nil},
	} {
		code, body := post(t, c.method, e.url+c.path, c.body, c.headers...)
		if code != 200 || body != `{"status":1}` {
			t.Errorf("%s: %d %s", c.name, code, body)
		}
	}
	want := n + 1 // the numbered events and the engage
	s.waitEventCount(want)
	if got := s.eventCount("$identify"); got != 1 {
		t.Errorf("engage stored %d $identify events", got)
	}
	if p := s.person("engaged"); p == nil || p["properties"].(map[string]any)["plan"] != "pro" {
		t.Errorf("engage person: %v", p)
	}
	// Events carry what the edge stamped: a uuid, the client IP and GeoIP.
	code, out := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/events/?event=single", s.httpAddr, s.projectID), s.personal, nil)
	if code != 200 || out["count"] != 1.0 {
		t.Fatalf("events: %v", out)
	}
	stored := out["results"].([]any)[0].(map[string]any)
	if _, err := uuid.Parse(stored["uuid"].(string)); err != nil {
		t.Errorf("uuid %v", stored["uuid"])
	}
	if ip := stored["properties"].(map[string]any)["$ip"]; ip != "127.0.0.1" {
		t.Errorf("$ip = %v", ip)
	}
}

func TestCaptureStampsAndErrors(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	id := uuid.NewString()
	sent := time.Now().Add(-time.Hour) // the client's clock is an hour behind
	body := mustJSON(t, map[string]any{"api_key": s.token, "sent_at": sent.Format(time.RFC3339Nano), "batch": []any{
		map[string]any{"event": "paris", "distinct_id": "geo-user", "uuid": id, "timestamp": sent.Add(-10 * time.Second).Format(time.RFC3339Nano),
			"properties": map[string]any{"a": 1}, "$set": map[string]any{"plan": "team"}},
		map[string]any{"event": "private", "distinct_id": "geo-user", "properties": map[string]any{"$geoip_disable": true}},
		map[string]any{"event": "bad uuid", "distinct_id": "geo-user", "uuid": "not-a-uuid"},
	}})
	posted := time.Now()
	if code, out := post(t, "POST", e.url+"/batch/", body, "X-Forwarded-For: 203.0.113.50, 10.0.0.1"); code != 200 {
		t.Fatalf("batch: %d %s", code, out)
	}
	answered := time.Now()
	s.waitEventCount(2)
	code, out := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/events/%s/", s.httpAddr, s.projectID, id), s.personal, nil)
	if code != 200 {
		t.Fatalf("event by uuid: %d %v", code, out)
	}
	props := out["properties"].(map[string]any)
	if props["$ip"] != "203.0.113.50" || props["$geoip_city_name"] != "Paris" || props["$geoip_country_code"] != "FR" ||
		props["$set"].(map[string]any)["plan"] != "team" || props["a"] != 1.0 {
		t.Errorf("enriched properties: %v", props)
	}
	// Corrected for the client's clock, the event happened 10 s before the edge received the
	// batch, which it did between posted and answered (give or take the stamps' rounding):
	// bounds that do not move with how long this machine takes to store and read it back.
	ts, _ := time.Parse(time.RFC3339Nano, out["timestamp"].(string))
	if earliest, latest := posted.Add(-11*time.Second), answered.Add(-9*time.Second); ts.Before(earliest) || ts.After(latest) {
		t.Errorf("timestamp %v, want 10 s before the batch arrived (between %v and %v): the client's clock skew was not corrected", ts, earliest, latest)
	}
	code, out = call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/events/?event=private", s.httpAddr, s.projectID), s.personal, nil)
	if code != 200 || out["count"] != 1.0 {
		t.Fatalf("events named private: %d %v", code, out)
	}
	if p := out["results"].([]any)[0].(map[string]any)["properties"].(map[string]any); p["$ip"] != nil || p["$geoip_city_name"] != nil {
		t.Errorf("$geoip_disable ignored: %v", p)
	}

	for _, c := range []struct {
		name    string
		body    []byte
		headers []string
		status  int
		want    string
	}{
		{"unknown token", mustJSON(t, map[string]any{"api_key": "phc_nope", "event": "x", "distinct_id": "d"}), nil, 401, `"code":"invalid_api_key"`},
		{"no token", mustJSON(t, map[string]any{"event": "x", "distinct_id": "d"}), nil, 401, `"code":"no_api_key"`},
		{"malformed", []byte(`{"api_key": `), nil, 400, `"code":"invalid_payload"`},
		{"not an event", []byte(`"hello"`), nil, 400, `"code":"invalid_payload"`},
		{"mixed tokens", mustJSON(t, []any{map[string]any{"event": "x", "distinct_id": "d", "properties": map[string]any{"token": s.token}},
			map[string]any{"event": "x", "distinct_id": "d", "properties": map[string]any{"token": "phc_other"}}}), nil, 401, `"code":"invalid_api_key"`},
		{"personal key without project", mustJSON(t, map[string]any{"api_key": s.personal, "event": "x", "distinct_id": "d"}), nil, 400,
			`"code":"invalid_project","detail":"Invalid Project ID: the project for these events cannot be determined.","attr":"project_id"`},
		{"personal key, wrong project", mustJSON(t, map[string]any{"api_key": s.personal, "project_id": s.projectID + 100, "event": "x", "distinct_id": "d"}), nil, 400, `"code":"invalid_project"`},
		{"too large", bytes.Repeat([]byte("a"), 21<<20), nil, 413, `"code":"request_too_large"`},
	} {
		code, out := post(t, "POST", e.url+"/capture/", c.body, c.headers...)
		if code != c.status || !strings.Contains(out, c.want) {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, out, c.status, c.want)
		}
	}
	// A personal key that reaches the project, with project_id, may capture.
	if code, out := post(t, "POST", e.url+"/capture/", mustJSON(t, map[string]any{"api_key": s.personal, "project_id": s.projectID,
		"event": "server-side", "distinct_id": "d"})); code != 200 {
		t.Errorf("personal key with project_id: %d %s", code, out)
	}
	s.waitEventCount(3)
}

func TestPersonsFromCapture(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	s.createFlag(map[string]any{"key": "pro-users", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}}}}})
	waitFor(t, "flag", func() bool { return hasKey(featureFlags(s.decide(e, map[string]any{"distinct_id": "x"})), "pro-users") })
	capture := func(events ...map[string]any) {
		t.Helper()
		if code, out := post(t, "POST", e.url+"/batch/", mustJSON(t, map[string]any{"api_key": s.token, "batch": events})); code != 200 {
			t.Fatalf("capture: %d %s", code, out)
		}
	}
	// Before identifying, the flag is off for the anonymous user.
	if featureFlags(s.decide(e, map[string]any{"distinct_id": "anon-7"}))["pro-users"] != false {
		t.Fatal("flag on before identify")
	}
	capture(
		map[string]any{"event": "$pageview", "distinct_id": "anon-7", "properties": map[string]any{"$set_once": map[string]any{"first_page": "/pricing"}}},
		map[string]any{"event": "$identify", "distinct_id": "user-7@example.com", "properties": map[string]any{
			"$anon_distinct_id": "anon-7", "$set": map[string]any{"plan": "pro", "email": "user-7@example.com"}}},
	)
	// At the same edge, the identified user's new properties count at once.
	if featureFlags(s.decide(e, map[string]any{"distinct_id": "user-7@example.com"}))["pro-users"] != true {
		t.Error("decide right after identify did not see $set")
	}
	capture(
		map[string]any{"event": "$create_alias", "distinct_id": "user-7@example.com", "properties": map[string]any{"alias": "crm-7"}},
		map[string]any{"event": "$set", "distinct_id": "crm-7", "properties": map[string]any{"$set_once": map[string]any{"first_page": "/ignored"}, "$unset": []any{"email"}}},
		map[string]any{"event": "$groupidentify", "distinct_id": "$acme", "properties": map[string]any{"$group_type": "company", "$group_key": "acme", "$group_set": map[string]any{"seats": 42, "name": "Acme"}}},
		map[string]any{"event": "$pageview", "distinct_id": "user-7@example.com", "properties": map[string]any{"$groups": map[string]any{"company": "acme", "team": "never-created"}}},
	)
	s.waitEventCount(6)
	p := s.person("anon-7")
	if p == nil {
		t.Fatal("no person for anon-7")
	}
	ids := fmt.Sprint(p["distinct_ids"])
	for _, d := range []string{"anon-7", "user-7@example.com", "crm-7"} {
		if !strings.Contains(ids, d) {
			t.Errorf("merged person lacks %s: %s", d, ids)
		}
	}
	props := p["properties"].(map[string]any)
	if props["plan"] != "pro" || props["first_page"] != "/pricing" || props["email"] != nil {
		t.Errorf("merged properties: %v", props)
	}
	code, out := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/groups/?group_type_index=0", s.httpAddr, s.projectID), s.personal, nil)
	if code != 200 || out["count"] != 1.0 || out["results"].([]any)[0].(map[string]any)["group_properties"].(map[string]any)["seats"] != 42.0 {
		t.Errorf("groups: %v", out)
	}
	code, proj := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/", s.httpAddr, s.projectID), s.personal, nil)
	if code != 200 || fmt.Sprint(proj["group_types"]) != "[map[group_type:company group_type_index:0]]" {
		t.Errorf("group types: %v", proj["group_types"])
	}
	// The edge learns the new group type from the snapshot and reads the group's properties.
	s.createFlag(map[string]any{"key": "big-co", "filters": map[string]any{"aggregation_group_type_index": 0, "groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "seats", "value": 10, "operator": "gt", "type": "group", "group_type_index": 0}}}}}})
	waitFor(t, "group flag", func() bool {
		return featureFlags(s.decide(e, map[string]any{"distinct_id": "crm-7", "groups": map[string]any{"company": "acme"}}))["big-co"] == true
	})
}

// TestCaptureSurvivesSIGKILL kills the edge in the middle of a stream of acknowledged events:
// after a restart, every acknowledged event is stored exactly once.
func TestCaptureSurvivesSIGKILL(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	l := s.startLoad([]string{e.url}, "stream", 20, time.Millisecond)
	l.waitAcked(t, 100) // the kill lands in a stream under way, however slowly it started
	e.kill()
	time.Sleep(100 * time.Millisecond)
	acked := l.finish()
	s.startEdge("edge-restarted", e.dataDir, true)
	stored, dups, missing := s.storedOnce("stream", acked)
	t.Logf("kill -9 of an edge under batch load: %d events acknowledged, %d stored, %d duplicates, %d missing", len(acked), stored, dups, missing)
}

// TestCaptureWhileControlPlaneDown: the edge keeps accepting, then drains.
func TestCaptureWhileControlPlaneDown(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	s.cp.stop()
	for i := range 50 {
		body := mustJSON(t, map[string]any{"api_key": s.token, "event": "offline", "distinct_id": fmt.Sprintf("off-%d", i)})
		if code, out := post(t, "POST", e.url+"/capture/", body); code != 200 {
			t.Fatalf("capture with the control plane down: %d %s", code, out)
		}
	}
	time.Sleep(300 * time.Millisecond)
	s.startControlPlane()
	s.waitEventCount(50)
}

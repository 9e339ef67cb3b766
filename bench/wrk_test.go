package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestWrkEntriesAgreeWithWorkload: the script's request i, for i below the number of
// entries, is the Go workload's request i byte for byte.
func TestWrkEntriesAgreeWithWorkload(t *testing.T) {
	w := newWorkload(42, "phc_token", "127.0.0.1:1", 1, 1)
	entries, err := wrkEntries(w, 300)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		r := w.decide(int64(i), "/decide/?v=3", 0)
		if got := e.pre + strconv.Itoa(i) + e.post; got != string(r.body) {
			t.Fatalf("entry %d gives\n%s\nthe workload sends\n%s", i, got, r.body)
		}
		if e.forwardedFor != r.headers[1][1] {
			t.Fatalf("entry %d: X-Forwarded-For %q, the workload sends %q", i, e.forwardedFor, r.headers[1][1])
		}
	}
}

func TestLuaQuote(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"b\c"}`: `"{\"a\":\"b\\c\"}"`,
		"é\n":         `"\195\169\010"`,
	} {
		if got := luaQuote(in); got != want {
			t.Errorf("luaQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestParseWrk(t *testing.T) {
	out := "Running 4s test @ http://127.0.0.1:1\n  1 threads and 16 connections\n" +
		"BENCH requests=400000 duration_us=4000000 connect=0 read=0 write=0 status=3 timeout=0 min=20 max=9000 " +
		"p10=100 p25=120 p50=150 p75=180 p90=220 p95=260 p99=400 p99.5=500 p99.9=900 p99.95=1200 p99.99=3000\n"
	res, err := parseWrk("edge", 16, out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Throughput != 100_000 || res.LatencyUs["p50"] != 150 || res.LatencyUs["p99.9"] != 900 || res.LatencyUs["max"] != 9000 ||
		res.Errors["status"] != 3 || len(res.Percentiles) != len(wrkPercentiles)+2 {
		t.Errorf("parsed %+v", res)
	}
	if _, err := parseWrk("edge", 16, "no summary"); err == nil {
		t.Error("no BENCH line parsed without an error")
	}
}

// wrkTestBase is 10,000 ids below 10^10, so that the test sees the script's prepared requests
// and, past the change to 11 digits, the ones it formats whole.
const wrkTestBase = 1e10 - 10_000

// TestWrkScriptRuns drives a server with wrk and the generated script for one second on
// loopback (skipped where wrk is not installed): every request is valid JSON with its
// headers, a POST to /decide/?v=3 with a distinct id counted from the base given after
// "--": each request's own, or with repeat one id and one body for them all.
func TestWrkScriptRuns(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil || testing.Short() {
		t.Skip("wrk not installed")
	}
	for _, repeat := range []bool{false, true} {
		t.Run(fmt.Sprintf("repeat=%v", repeat), func(t *testing.T) { testWrkScript(t, repeat) })
	}
}

func testWrkScript(t *testing.T, repeat bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen, bodies, bad := map[string]int{}, map[string]bool{}, []string{}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		var body struct {
			DistinctID string         `json:"distinct_id"`
			Props      map[string]any `json:"person_properties"`
		}
		err := json.Unmarshal(ctx.PostBody(), &body)
		n, _ := strconv.ParseInt(strings.TrimPrefix(body.DistinctID, "user-42-"), 10, 64)
		mu.Lock()
		if err != nil || string(ctx.Method()) != "POST" || string(ctx.RequestURI()) != "/decide/?v=3" ||
			n < wrkTestBase || n >= wrkTestBase+1e9 || body.Props["plan"] == nil || string(ctx.Request.Header.ContentType()) != "application/json" ||
			len(ctx.Request.Header.Peek("X-Forwarded-For")) == 0 {
			bad = append(bad, fmt.Sprintf("%s %s %s (%v)", ctx.Method(), ctx.RequestURI(), ctx.PostBody(), err))
		}
		seen[body.DistinctID]++
		bodies[string(ctx.PostBody())] = true
		mu.Unlock()
		ctx.SetBodyString("{}")
	}}
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	defer srv.Shutdown()
	entries, err := wrkEntries(newWorkload(42, "phc_token", ln.Addr().String(), 1, 1), 64)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "decide.lua")
	if err := os.WriteFile(script, []byte(wrkScript(entries, repeat)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("wrk", "-t1", "-c2", "-d1s", "-s", script, "http://"+ln.Addr().String(), "--", strconv.Itoa(wrkTestBase)).CombinedOutput()
	if err != nil {
		t.Fatalf("wrk: %v\n%s", err, out)
	}
	res, err := parseWrk("test", 2, string(out))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d requests, %d distinct ids, %d distinct bodies", res.Requests, len(seen), len(bodies))
	if res.Requests == 0 || len(res.Errors) > 0 || len(bad) > 0 {
		t.Fatalf("wrk: %d requests, errors %v, bad requests %d (first: %v)\n%s", res.Requests, res.Errors, len(bad), bad[:min(1, len(bad))], out)
	}
	switch {
	case repeat && (len(seen) != 1 || len(bodies) != 1):
		t.Errorf("repeat: %d distinct ids and %d distinct bodies in %d requests, want 1 and 1", len(seen), len(bodies), res.Requests)
	case !repeat && int64(len(seen)) < res.Requests:
		t.Errorf("%d distinct ids in %d requests: ids were reused", len(seen), res.Requests)
	}
	for id, n := range seen {
		if !repeat && n > 1 {
			t.Errorf("distinct id %s sent %d times", id, n)
			break
		}
	}
}

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/internal/pgtest"
	"github.com/flagedge/flagedge/internal/tlstest"
)

// patchFlagVersion changes a flag through replica httpAddr and returns the snapshot version
// the write answered in X-Flagedge-Snapshot-Version.
func (s *stack) patchFlagVersion(httpAddr string, id int64, body map[string]any) int64 {
	s.t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest("PATCH", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/%d/", httpAddr, s.projectID, id), bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+s.personal)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	v, err := strconv.ParseInt(resp.Header.Get("X-Flagedge-Snapshot-Version"), 10, 64)
	if resp.StatusCode != 200 || err != nil {
		s.t.Fatalf("patch flag: %d, X-Flagedge-Snapshot-Version %q", resp.StatusCode, resp.Header.Get("X-Flagedge-Snapshot-Version"))
	}
	return v
}

// rolloutStatus asks replica httpAddr for the rollout of version.
func (s *stack) rolloutStatus(httpAddr string, version int64, timeout string) (int, map[string]any) {
	s.t.Helper()
	return call(s.t, "GET", fmt.Sprintf("http://%s/api/projects/%d/rollout_status/?version=%d&timeout=%s", httpAddr, s.projectID, version, timeout), s.personal, nil)
}

// edgeNames returns the edge_id of each entry of a list of edges in an answer.
func edgeNames(list any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, e := range list.([]any) {
		m := e.(map[string]any)
		out[m["edge_id"].(string)] = m
	}
	return out
}

// TestRolloutStatusAcrossReplicas runs two control-plane replicas and three edges: a write
// names its snapshot version, the edges serve it (and say so in their answers), and either
// replica answers rollout_status as soon as all three acknowledged it, wherever they are
// connected; a frozen edge is a laggard (408, wait-for-edges exits 1) until it thaws; when a
// replica is killed its edges reconnect to the other, which lists all three at once.
func TestRolloutStatusAcrossReplicas(t *testing.T) {
	tls := tlstest.MustWrite(t)
	s := &stack{t: t, dbURL: pgtest.NewDatabase(t), geoipDB: geoiptest.MustWrite(t)}
	s.bootstrap()
	a, aHTTP, aGRPC := s.startReplica("replica-a", tls)
	_, bHTTP, bGRPC := s.startReplica("replica-b", tls)
	s.httpAddr = bHTTP
	flag := s.createFlag(map[string]any{"key": "roll", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	ca := []string{"--control-plane-ca", tls.CA}
	onA := append([]string{"--control-plane", aGRPC}, ca...)
	onB := append([]string{"--control-plane", bGRPC}, ca...)
	onAThenB := append([]string{"--control-plane", aGRPC + "," + bGRPC}, ca...)
	edges := []*edge{s.startEdge("edge-1", "", true, onAThenB...), s.startEdge("edge-2", "", true, onB...), s.startEdge("edge-3", "", true, onA...)}

	// Both replicas list the three edges, each on the replica it is connected to.
	var listed map[string]map[string]any
	waitFor(t, "three edges listed", func() bool {
		code, out := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/edges/", aHTTP, s.projectID), s.personal, nil)
		if code != 200 {
			t.Fatalf("edges: %d %v", code, out)
		}
		listed = edgeNames(out["results"])
		return len(listed) == 3 && listed["edge-1"]["last_acknowledged_at"] != nil && listed["edge-3"]["last_acknowledged_at"] != nil &&
			listed["edge-2"]["last_acknowledged_at"] != nil
	})
	if r1, r2 := listed["edge-3"]["replica"].(string), listed["edge-2"]["replica"].(string); r1 == r2 || r1 == "" {
		t.Errorf("edges on different replicas listed with replicas %q and %q", r1, r2)
	}

	// Every save: rollout_status on the other replica answers 200 with all three, and each
	// edge then answers from that version or a later one.
	var took []time.Duration
	for i := range 30 {
		start := time.Now()
		v := s.patchFlagVersion(bHTTP, flag, map[string]any{"name": fmt.Sprint("change ", i)})
		code, out := s.rolloutStatus(aHTTP, v, "10s")
		took = append(took, time.Since(start))
		if code != 200 || out["done"] != true || out["live"] != 3.0 || out["total"] != 3.0 || len(out["laggards"].([]any)) != 0 {
			t.Fatalf("rollout_status of version %d: %d %v", v, code, out)
		}
		for _, e := range edges {
			resp, err := client.Post(e.url+"/decide/?v=3", "application/json", bytes.NewReader([]byte(`{"api_key":"`+s.token+`","distinct_id":"u"}`)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got, _ := strconv.ParseInt(resp.Header.Get("X-Flagedge-Snapshot-Version"), 10, 64); got < v {
				t.Fatalf("%s answers from version %d after rollout_status said it serves %d", e.name, got, v)
			}
		}
	}
	t.Logf("save until rollout_status answered with three edges on two replicas: p50 %v, p99 %v, max %v (%d saves)",
		percentile(took, 0.5), percentile(took, 0.99), percentile(took, 1), len(took))

	// A frozen edge keeps its stream but acknowledges nothing: a laggard until it thaws.
	frozen := edges[2]
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	v := s.patchFlagVersion(bHTTP, flag, map[string]any{"name": "while frozen"})
	code, out := s.rolloutStatus(aHTTP, v, "1s")
	laggards := edgeNames(out["laggards"])
	if code != http.StatusRequestTimeout || out["done"] != false || out["live"] != 2.0 || len(laggards) != 1 || laggards["edge-3"] == nil ||
		laggards["edge-3"]["lag"].(float64) < 1 {
		t.Errorf("rollout_status with a frozen edge: %d %v", code, out)
	}
	cli := func(timeout string) (int, string) {
		cmd := exec.Command(binaries.controlplane, "wait-for-edges", "--url", "http://"+bHTTP, "--project", strconv.FormatInt(s.projectID, 10),
			"--version", strconv.FormatInt(v, 10), "--timeout", timeout)
		cmd.Env = append(cmd.Environ(), "FLAGEDGE_API_KEY="+s.personal)
		outText, _ := cmd.Output()
		return cmd.ProcessState.ExitCode(), string(outText)
	}
	if code, printed := cli("500ms"); code != 1 {
		t.Errorf("wait-for-edges with a frozen edge exited %d, want 1: %s", code, printed)
	}
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code, printed := cli("30s"); code != 0 {
		t.Errorf("wait-for-edges after the edge thawed exited %d, want 0: %s", code, printed)
	}

	// Replica a dies: edge-1 reconnects to b, which replaces its session at once; edge-3 knows
	// only a, and its session stops counting once a's heartbeats stop (SessionTTL, 15 s).
	a.kill()
	deadline := time.Now().Add(30 * time.Second)
	for !func() bool {
		_, out := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/edges/", bHTTP, s.projectID), s.personal, nil)
		listed := edgeNames(out["results"])
		if len(listed) != 2 { // edge-3 knows only replica a
			return false
		}
		for _, e := range listed {
			if e["replica"] != listed["edge-2"]["replica"] {
				return false
			}
		}
		return true
	}() {
		if time.Now().After(deadline) {
			t.Fatal("replica b did not list edge-1 and edge-2 alone within 30s of replica a's death")
		}
		time.Sleep(100 * time.Millisecond)
	}
	v = s.patchFlagVersion(bHTTP, flag, map[string]any{"name": "after a replica died"})
	if code, out := s.rolloutStatus(bHTTP, v, "10s"); code != 200 || out["total"] != 2.0 {
		t.Errorf("rollout_status after replica a died: %d %v", code, out)
	}
}

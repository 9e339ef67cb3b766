package e2e

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flagedge/flagedge/internal/tlstest"
)

// relay is an edge that serves edges (--serve-edges), with the address it serves them on.
type relay struct {
	*edge
	serveAddr string
}

// startRelay starts a relay whose upstreams are upstream (a comma-separated list); dataDir
// "" gives it a new one.
func (s *stack) startRelay(name, dataDir, upstream string, extra ...string) *relay {
	s.t.Helper()
	e := s.startEdge(name, dataDir, true, append([]string{"--control-plane", upstream, "--serve-edges", "127.0.0.1:0"}, extra...)...)
	return &relay{edge: e, serveAddr: e.listening("relay listening")["serve_edges_addr"].(string)}
}

// keeps reports whether the relay's kept list of live edges (live-edges.pb in its data
// directory) holds token's hash.
func (r *relay) keeps(token string) bool {
	data, err := os.ReadFile(filepath.Join(r.dataDir, "live-edges.pb"))
	sum := sha256.Sum256([]byte(token))
	return err == nil && bytes.Contains(data, sum[:])
}

// servedVersion is the snapshot version e answers /decide from (0: it does not answer).
func (s *stack) servedVersion(e *edge) int64 {
	req, _ := http.NewRequest("POST", e.url+"/decide/?v=3", strings.NewReader(`{"api_key":"`+s.token+`","distinct_id":"u"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	v, _ := strconv.ParseInt(resp.Header.Get("X-Flagedge-Snapshot-Version"), 10, 64)
	return v
}

// paths returns the path of each listed edge, by edge_id.
func (s *stack) paths() map[string]string {
	code, out := call(s.t, "GET", fmt.Sprintf("http://%s/api/projects/%d/edges/", s.httpAddr, s.projectID), s.personal, nil)
	if code != 200 {
		s.t.Fatalf("edges: %d %v", code, out)
	}
	got := map[string]string{}
	for id, e := range edgeNames(out["results"]) {
		got[id], _ = e["path"].(string)
	}
	return got
}

// hops is how many edges a path names.
func hops(path string) int { return len(strings.Split(path, " → ")) }

// TestRelayTiers runs a control plane, a relay, a relay behind it, and an edge behind each:
// a change reaches both leaves, and rollout_status confirms it with every edge listed with
// its path; a token revoked two tiers down is cut within a second; events captured at the
// leaves while the control plane restarts are stored exactly once; with the control plane
// down the relays keep serving, a relay restarted then serves from its disk, and a new edge
// behind it gets the snapshot. The membership filters pass through the tiers: a leaf two
// tiers down answers strangers without a look-up and a person stored after it connected from
// the stored properties, and a new edge gets the filters with the control plane down — from
// a relay's disk when its upstream is down too.
func TestRelayTiers(t *testing.T) {
	s := newStack(t)
	flag := s.createFlag(map[string]any{"key": "tiers", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	r1 := s.startRelay("relay-1", "", s.grpcAddr)
	r2 := s.startRelay("relay-2", "", r1.serveAddr)
	leafA := s.startEdge("leaf-a", "", true, "--control-plane", r1.serveAddr)
	leafB := s.startEdge("leaf-b", "", true, "--control-plane", r2.serveAddr)
	all := []*edge{r1.edge, r2.edge, leafA, leafB}

	// A change reaches every tier; rollout_status says so, listing each edge with its path.
	for i := range 5 {
		start := time.Now()
		v := s.patchFlagVersion(s.httpAddr, flag, map[string]any{"name": fmt.Sprint("change ", i)})
		code, out := s.rolloutStatus(s.httpAddr, v, "10s")
		if code != 200 || out["done"] != true || out["total"] != 4.0 || out["live"] != 4.0 {
			t.Fatalf("rollout_status of version %d: %d %v", v, code, out)
		}
		took := time.Since(start)
		for _, e := range all {
			if got := s.servedVersion(e); got < v {
				t.Fatalf("%s answers from version %d after rollout_status said every edge serves %d", e.name, got, v)
			}
		}
		t.Logf("change %d confirmed on 4 edges over 3 tiers in %v", i, took.Round(time.Millisecond))
	}
	paths := s.paths()
	want := map[string]int{"relay-1": 1, "relay-2": 2, "leaf-a": 2, "leaf-b": 3}
	for id, n := range want {
		if hops(paths[id]) != n {
			t.Errorf("%s listed with path %q, want %d hops", id, paths[id], n)
		}
	}
	if !strings.HasPrefix(paths["leaf-b"], paths["relay-2"]+" → ") || !strings.HasPrefix(paths["relay-2"], paths["relay-1"]+" → ") {
		t.Errorf("paths do not chain: %v", paths)
	}

	// The membership filters pass through both relays: leaf-b, two tiers down, answers users
	// nobody stored without a look-up, and a person stored after it connected (through /batch
	// at leaf-a) from the stored properties as soon as the addition reaches it.
	s.createFlag(map[string]any{"key": "pro-only", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}, "rollout_percentage": 100}}}})
	proOnly := func(e *edge, distinctID string) any {
		out := s.decide(e, map[string]any{"distinct_id": distinctID})
		if out["errorsWhileComputingFlags"] != false {
			t.Errorf("%s at %s: errorsWhileComputingFlags %v", distinctID, e.name, out["errorsWhileComputingFlags"])
		}
		return featureFlags(out)["pro-only"]
	}
	waitFor(t, "pro-only at leaf-b", func() bool {
		return hasKey(featureFlags(s.decide(leafB, map[string]any{"distinct_id": "x"})), "pro-only")
	})
	waitFor(t, "leaf-b's filter through two relays", func() bool {
		before := lookups(t, leafB)
		proOnly(leafB, fmt.Sprintf("probe-%d", time.Now().UnixNano()))
		return lookups(t, leafB) == before
	})
	before := lookups(t, leafB)
	for i := range 20 {
		if v := proOnly(leafB, fmt.Sprintf("stranger-%d", i)); v != false {
			t.Fatalf("a user nobody stored: pro-only %v", v)
		}
	}
	if n := lookups(t, leafB) - before; n != 0 {
		t.Errorf("leaf-b made %d look-ups for 20 users nobody stored", n)
	}
	announcedBefore := announced(t, leafB)
	if code, out := post(t, "POST", leafA.url+"/batch/", mustJSON(t, map[string]any{"api_key": s.token, "batch": []any{map[string]any{
		"event": "$identify", "distinct_id": "tier-buyer", "properties": map[string]any{"$set": map[string]any{"plan": "pro"}}}}})); code != 200 {
		t.Fatalf("batch at leaf-a: %d %s", code, out)
	}
	waitFor(t, "tier-buyer stored", func() bool { return len(s.persons("distinct_id=tier-buyer")) == 1 })
	storedAt := time.Now()
	waitFor(t, "tier-buyer announced to leaf-b", func() bool { return announced(t, leafB) > announcedBefore })
	if v := proOnly(leafB, "tier-buyer"); v != true {
		t.Fatalf("leaf-b's first answer for a person stored through leaf-a: pro-only %v, want true", v)
	}
	t.Logf("a person stored through leaf-a reached leaf-b's filter, two relays down, %v after it was stored", time.Since(storedAt).Round(time.Millisecond))

	// A token revoked behind two relays is cut within a second.
	revokedName := "revoked-leaf"
	leafC := s.startEdge(revokedName, "", true, "--control-plane", r2.serveAddr, "--edge-token", s.namedEdgeToken(revokedName))
	if out, err := execOutput(binaries.controlplane, "edges", "revoke", "--database-url", s.dbURL, "--name", revokedName); err != nil {
		t.Fatalf("edges revoke: %v %s", err, out)
	}
	revokedAt := time.Now()
	waitFor(t, "the revoked edge cut", func() bool { return strings.Contains(leafC.logs.String(), "token was revoked") })
	if cut := time.Since(revokedAt); cut > time.Second {
		t.Errorf("a token revoked behind two relays was cut after %v, want within 1s", cut)
	} else {
		t.Logf("a token revoked behind two relays was cut in %v", cut.Round(time.Millisecond))
	}
	leafC.kill()

	// Events captured at the leaves while the control plane restarts are stored once.
	load := s.startLoad([]string{leafA.url, leafB.url}, "through-relays", 5, 20*time.Millisecond)
	load.waitAcked(t, 50)
	s.cp.kill()
	time.Sleep(time.Second)
	s.startControlPlane()
	time.Sleep(500 * time.Millisecond)
	acked := load.finish()
	if len(acked) == 0 {
		t.Fatal("no event was acknowledged")
	}
	stored, dups, missing := s.storedOnce("through-relays", acked)
	t.Logf("%d events captured behind relays across a control-plane restart: %d stored, %d duplicates, %d missing", len(acked), stored, dups, missing)

	// The control plane down: the relays serve their subtree; relay-2 restarted serves from
	// its disk, and a new edge behind it (its token issued before) gets the snapshot.
	newToken, offlineToken := s.namedEdgeToken("leaf-new"), s.namedEdgeToken("leaf-offline")
	// The relays learn the new tokens (polling their upstream every 200 ms) and keep them on
	// disk, which is what they will answer from below: awaited there, not slept for.
	waitFor(t, "the relays keeping the new tokens", func() bool {
		return r1.keeps(newToken) && r1.keeps(offlineToken) && r2.keeps(newToken) && r2.keeps(offlineToken)
	})
	v := s.patchFlagVersion(s.httpAddr, flag, map[string]any{"name": "last before the outage"})
	if code, out := s.rolloutStatus(s.httpAddr, v, "10s"); code != 200 {
		t.Fatalf("rollout_status: %d %v", code, out)
	}
	s.cp.kill()
	r2.kill()
	r2 = s.startRelay("relay-2", r2.dataDir, r1.serveAddr)
	leafNew := s.startEdge("leaf-new", "", true, "--control-plane", r2.serveAddr, "--edge-token", newToken)
	for _, e := range []*edge{r1.edge, r2.edge, leafA, leafB, leafNew} {
		if got := s.servedVersion(e); got != v {
			t.Errorf("with the control plane down %s answers from version %d, want %d", e.name, got, v)
		}
	}
	// The new edge gets the filters relay-1 holds: it answers a new user without a look-up
	// (which could not reach the control plane).
	waitFor(t, "leaf-new's filter with the control plane down", func() bool {
		before := lookups(t, leafNew)
		out := s.decide(leafNew, map[string]any{"distinct_id": fmt.Sprintf("offline-stranger-%d", time.Now().UnixNano())})
		return lookups(t, leafNew) == before && out["errorsWhileComputingFlags"] == false
	})

	// relay-1 down too: relay-2 restarted has only its disk, and passes the filters it kept
	// to a new edge (once relay-1 has had its chance to send its own). A stranger is answered
	// without a look-up; the person stored through leaf-a is not taken for one (its look-up
	// cannot reach the control plane: the answer says it failed, never that plan is not pro).
	r1.kill()
	r2.kill()
	r2 = s.startRelay("relay-2", r2.dataDir, r1.serveAddr)
	leafOffline := s.startEdge("leaf-offline", "", true, "--control-plane", r2.serveAddr, "--edge-token", offlineToken)
	waitFor(t, "leaf-offline's filter from relay-2's disk", func() bool {
		before := lookups(t, leafOffline)
		out := s.decide(leafOffline, map[string]any{"distinct_id": fmt.Sprintf("offline-stranger-%d", time.Now().UnixNano())})
		return lookups(t, leafOffline) == before && out["errorsWhileComputingFlags"] == false
	})
	if out := s.decide(leafOffline, map[string]any{"distinct_id": "tier-buyer"}); featureFlags(out)["pro-only"] == false && out["errorsWhileComputingFlags"] != true {
		t.Errorf("a stored person answered from relay-2's kept filters as a stranger: %v", out)
	}
}

// TestRelayKilled gives an edge two relays over TLS: when the one it uses is killed (kill -9)
// it moves to the other, answering from its snapshot meanwhile, and is listed through it.
func TestRelayKilled(t *testing.T) {
	certs := tlstest.MustWrite(t)
	s := newStack(t)
	flag := s.createFlag(map[string]any{"key": "killed", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	tlsFlags := []string{"--serve-edges-tls-cert", certs.Cert, "--serve-edges-tls-key", certs.Key}
	relays := map[string]*relay{}
	for _, name := range []string{"relay-x", "relay-y"} {
		relays[name] = s.startRelay(name, "", s.grpcAddr, tlsFlags...)
	}
	leaf := s.startEdge("leaf", "", true, "--control-plane", relays["relay-x"].serveAddr+","+relays["relay-y"].serveAddr,
		"--control-plane-ca", certs.CA)
	var via string
	waitFor(t, "the leaf listed behind a relay", func() bool {
		via = s.paths()["leaf"]
		return hops(via) == 2
	})
	usedName := strings.Split(via, " → ")[0]
	var used, other *relay
	for _, r := range relays {
		if strings.HasPrefix(usedName, r.name+"-") {
			used = r
		} else {
			other = r
		}
	}
	if used == nil {
		t.Fatalf("the leaf's path %q names neither relay", via)
	}
	used.kill()
	killedAt := time.Now()
	// It keeps answering from its snapshot while it moves.
	if got := s.servedVersion(leaf); got == 0 {
		t.Error("the leaf stopped answering when its relay died")
	}
	v := s.patchFlagVersion(s.httpAddr, flag, map[string]any{"name": "after the kill"})
	waitFor(t, "the leaf serves the change", func() bool { return s.servedVersion(leaf) >= v })
	t.Logf("a change made right after kill -9 of the leaf's relay reached it through the other in %v", time.Since(killedAt).Round(time.Millisecond))
	waitFor(t, "the leaf listed through the other relay", func() bool {
		path := s.paths()["leaf"]
		return strings.HasPrefix(path, other.name+"-") && hops(path) == 2
	})
	code, out := s.rolloutStatus(s.httpAddr, v, "10s")
	if code != 200 || out["done"] != true || out["total"] != 2.0 {
		t.Fatalf("rollout_status after the kill: %d %v", code, out)
	}
}

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/internal/pgtest"
	"github.com/flagedge/flagedge/internal/tlstest"
)

// startReplica starts a control-plane replica serving gRPC over TLS, with extra flags, and
// returns it with its HTTP and gRPC addresses.
func (s *stack) startReplica(name string, tls tlstest.Files, extra ...string) (p *process, httpAddr, grpcAddr string) {
	s.t.Helper()
	p = start(s.t, name, binaries.controlplane, append([]string{"serve", "--database-url", s.dbURL, "--http-addr", "127.0.0.1:0",
		"--grpc-addr", "127.0.0.1:0", "--grpc-tls-cert", tls.Cert, "--grpc-tls-key", tls.Key, "--drain-delay", "0s"}, extra...)...)
	addrs := p.listening("control plane listening")
	httpAddr, grpcAddr = addrs["http_addr"].(string), addrs["grpc_addr"].(string)
	waitFor(s.t, name+" ready", func() bool { return status("http://"+httpAddr+"/_ready") == 200 })
	return p, httpAddr, grpcAddr
}

// payloadAt returns the payload an edge serves for flag key, or "" when it has none.
func payloadAt(e *edge, token, key string) string {
	code, out := callQuiet("POST", e.url+"/decide/?v=3", map[string]any{"api_key": token, "distinct_id": "u"})
	if code != 200 {
		return ""
	}
	p, _ := out["featureFlagPayloads"].(map[string]any)
	if p[key] == nil {
		return ""
	}
	return fmt.Sprint(p[key]) // a number or a string holding one, as the payload is sent

}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestReplicasWithTLSAndTokens runs two control-plane replicas and three edges on one
// PostgreSQL, all gRPC over TLS with edge tokens: every change reaches every edge; when one
// replica is killed its edges fail over to the other and keep converging, and the events
// forwarded meanwhile are stored once; a revoked edge is cut off; an edge with a wrong token,
// or without TLS, never gets a snapshot.
func TestReplicasWithTLSAndTokens(t *testing.T) {
	tls := tlstest.MustWrite(t)
	s := &stack{t: t, dbURL: pgtest.NewDatabase(t), geoipDB: geoiptest.MustWrite(t)}
	s.bootstrap()
	a, _, aGRPC := s.startReplica("replica-a", tls)
	_, bHTTP, bGRPC := s.startReplica("replica-b", tls)
	s.httpAddr = bHTTP // changes go through b, which outlives a
	flag := s.createFlag(map[string]any{"key": "conv", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}},
		"payloads": map[string]any{"true": "0"}}})

	ca := []string{"--control-plane-ca", tls.CA}
	onA := append([]string{"--control-plane", aGRPC + "," + bGRPC}, ca...)
	onB := append([]string{"--control-plane", bGRPC + "," + aGRPC}, ca...)
	edges := []*edge{s.startEdge("edge-1", "", true, onA...), s.startEdge("edge-2", "", true, onB...), s.startEdge("edge-3", "", true, onA...)}

	// converge changes the flag's payload and returns how long, from the PATCH answered (the
	// change committed; the write's own time is not the edges'), until every edge serves it.
	change := 0
	converge := func(among []*edge) time.Duration {
		change++
		want := fmt.Sprint(change)
		s.patchFlag(flag, map[string]any{"filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}},
			"payloads": map[string]any{"true": want}}})
		start := time.Now()
		for _, e := range among {
			waitFor(t, e.name+" serving change "+want, func() bool { return payloadAt(e, s.token, "conv") == want })
		}
		return time.Since(start)
	}
	var before []time.Duration
	for range 30 {
		before = append(before, converge(edges))
	}

	// Kill replica a (the list is shuffled: some edges use it) while events flow into edges 1 and 3.
	l := s.startLoad([]string{edges[0].url, edges[2].url}, "failover", 5, 5*time.Millisecond)
	l.waitAcked(t, 50)
	a.kill()
	failover := converge(edges)
	var after []time.Duration
	for range 20 {
		after = append(after, converge(edges))
	}
	time.Sleep(300 * time.Millisecond)
	acked := l.finish()
	if failover > 2*time.Second {
		t.Errorf("the first change after killing replica a reached every edge in %v, want under 2s", failover)
	}
	stored, dups, missing := s.storedOnce("failover", acked)

	// A revoked edge is cut off: it keeps serving what it has, and no longer gets changes.
	revokedToken := s.namedEdgeToken("revoked-edge")
	revoked := s.startEdge("revoked-edge", "", true, append([]string{"--edge-token", revokedToken}, onA...)...)
	if out, err := execOutput(binaries.controlplane, "edges", "revoke", "--database-url", s.dbURL, "--name", "revoked-edge"); err != nil {
		t.Fatalf("edges revoke: %v %s", err, out)
	}
	// The replica's refresh closes its stream: awaited (the edge logs why), not slept for.
	waitFor(t, "the revoked edge cut", func() bool { return strings.Contains(revoked.logs.String(), "token was revoked") })
	converge(edges)
	if got := payloadAt(revoked, s.token, "conv"); got == fmt.Sprint(change) {
		t.Error("a revoked edge received a change")
	}

	// A wrong token, or plaintext to a TLS control plane: never a snapshot.
	wrongToken := s.startEdge("wrong-token", "", false, append([]string{"--edge-token", "fle_wrong"}, onA...)...)
	noTLS := s.startEdge("no-tls", "", false, "--control-plane", bGRPC)
	time.Sleep(2 * time.Second)
	for _, e := range []*edge{wrongToken, noTLS} {
		if code := status(e.url + "/_ready"); code != 503 {
			t.Errorf("%s is ready (%d): it received a snapshot", e.name, code)
		}
		if code, _ := callQuiet("POST", e.url+"/decide/?v=3", map[string]any{"api_key": s.token, "distinct_id": "u"}); code != 503 {
			t.Errorf("%s answers /decide with %d, want 503 fetch_team_fail", e.name, code)
		}
	}
	if !strings.Contains(wrongToken.logs.String(), "Unauthenticated") {
		t.Error("the edge with a wrong token does not log that it is refused")
	}
	t.Logf("convergence over 3 edges and 2 replicas (TLS, tokens): before the kill p50 %v p99 %v; the first change made right after kill -9 of a replica reached every edge in %v; after p50 %v p99 %v; %d events forwarded during the fail-over: %d stored, %d duplicates, %d missing",
		percentile(before, .5).Round(time.Millisecond), percentile(before, .99).Round(time.Millisecond), failover.Round(time.Millisecond),
		percentile(after, .5).Round(time.Millisecond), percentile(after, .99).Round(time.Millisecond),
		len(acked), stored, dups, missing)
}

// callQuiet is call for goroutines and polling: any failure is a status of 0.
func callQuiet(method, url string, body any) (int, map[string]any) {
	data, _ := json.Marshal(body)
	req, err := http.NewRequest(method, url, bytes.NewReader(data))
	if err != nil {
		return 0, nil
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out) //nolint:errcheck // a non-JSON answer leaves out nil
	return resp.StatusCode, out
}

func postQuiet(url string, body any) (int, map[string]any) { return callQuiet("POST", url, body) }

// TestMetricsListener: with --metrics-addr the metrics leave the public listener for their
// own, and say what an operator alerts on.
func TestMetricsListener(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true, "--metrics-addr", "127.0.0.1:0")
	metricsURL := "http://" + e.listening("metrics listening")["metrics_addr"].(string) + "/metrics"
	if code := status(e.url + "/metrics"); code != 404 {
		t.Errorf("/metrics on the public listener: %d, want 404", code)
	}
	waitFor(t, "the edge connected", func() bool {
		resp, err := client.Get(metricsURL)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "flagedge_edge_control_plane_connected 1") &&
			strings.Contains(string(body), "flagedge_build_info{")
	})
}

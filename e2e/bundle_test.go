package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEdgeBootsFromASignedBundle: an edge with an empty data directory and no control plane
// to reach serves the flags of a signed bundle, is brought up to date by the control plane as
// soon as it answers, and refuses a bundle altered by one byte.
func TestEdgeBootsFromASignedBundle(t *testing.T) {
	s := newStack(t)
	s.createFlag(map[string]any{"key": "in-bundle", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	dir := t.TempDir()
	priv, pub, bundle := filepath.Join(dir, "bundle.key"), filepath.Join(dir, "bundle.pub"), filepath.Join(dir, "bundle")
	if out, err := execOutput(binaries.controlplane, "snapshots", "keygen", "--private-key", priv, "--public-key", pub); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	if info, err := os.Stat(priv); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the signing key: %v, mode %v", err, info.Mode())
	}
	data, err := execOutput(binaries.controlplane, "snapshots", "export", "--database-url", s.dbURL, "--signing-key", priv, "--all")
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	if err := os.WriteFile(bundle, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	// Made after the export: the bundle lacks it, the control plane has it.
	s.createFlag(map[string]any{"key": "after-bundle", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	s.cp.stop()

	token := s.edgeToken("bundle-edge")
	e := s.startEdge("bundle-edge", "", true, "--edge-token", token, "--bootstrap-bundle", bundle, "--bundle-public-key", pub)
	flags := featureFlags(s.decide(e, map[string]any{"api_key": s.token, "distinct_id": "u1"}))
	if flags["in-bundle"] != true || hasKey(flags, "after-bundle") {
		t.Fatalf("served from the bundle with the control plane down: %v", flags)
	}

	s.startControlPlane()
	up := time.Now()
	waitFor(t, "the control plane's snapshot to replace the bundle's", func() bool {
		return featureFlags(s.decide(e, map[string]any{"api_key": s.token, "distinct_id": "u1"}))["after-bundle"] == true
	})
	t.Logf("the bundle's snapshots replaced %v after the control plane came back", time.Since(up).Round(time.Millisecond))

	// One byte of a flag's definition changed: the edge does not start, and says why.
	tampered := []byte(data)
	i := strings.LastIndex(data, "rollout_percentage")
	if i < 0 {
		t.Fatal("the bundle does not hold the flag's filters")
	}
	tampered[i+len("rollout_percentage")+2] = '9'
	bad := filepath.Join(dir, "tampered")
	if err := os.WriteFile(bad, tampered, 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "tampered-edge", binaries.edge, "--http-addr", "127.0.0.1:0", "--control-plane", s.grpcAddr,
		"--data-dir", t.TempDir(), "--edge-token", token, "--bootstrap-bundle", bad, "--bundle-public-key", pub)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("an edge given a tampered bundle did not exit")
	}
	if p.cmd.ProcessState.Success() || !strings.Contains(p.logs.String(), "signature does not verify") {
		t.Fatalf("an edge given a tampered bundle: %v\n%s", p.cmd.ProcessState, p.logs.String())
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, nil)) }

func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), err
}

// TestBootstrapAndKeys checks the operations contract: bootstrap prints one JSON line with the
// four documented fields and is idempotent; keys create prints the key alone.
func TestBootstrapAndKeys(t *testing.T) {
	url := pgtest.NewDatabase(t)
	var first, second map[string]any
	for _, dst := range []*map[string]any{&first, &second} {
		out, err := runCmd(t, "bootstrap", "--database-url", url, "--email", "ops@example.com", "--project-name", "Demo", "--bcrypt-cost", "4")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(out, "\n") != 1 {
			t.Errorf("bootstrap printed %q, want one line", out)
		}
		if err := json.Unmarshal([]byte(out), dst); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"project_id", "project_api_key", "personal_api_key", "secret_api_key"} {
		if first[k] == nil {
			t.Errorf("bootstrap output lacks %s: %v", k, first)
		}
	}
	if first["project_id"] != second["project_id"] || first["personal_api_key"] == second["personal_api_key"] {
		t.Errorf("bootstrap is not idempotent: %v then %v", first, second)
	}
	out, err := runCmd(t, "keys", "create", "--database-url", url, "--email", "ops@example.com",
		"--scopes", "feature_flag:read,annotation:write", "--projects", fmt.Sprint(first["project_id"]))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(out)
	if !strings.HasPrefix(key, "phx_") || strings.Contains(key, " ") {
		t.Errorf("keys create printed %q", out)
	}
	db, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k, err := postgres.NewAuthService(db).AuthenticatePersonalKey(context.Background(), key)
	if err != nil || fmt.Sprint(k.Scopes) != "[feature_flag:read annotation:write]" || len(k.Projects) != 1 {
		t.Errorf("created key %+v, %v", k, err)
	}
	if _, err := runCmd(t, "keys", "create", "--database-url", url, "--email", "ops@example.com", "--scopes", "flags:all"); err == nil {
		t.Error("an unknown scope was accepted")
	}
	if _, err := runCmd(t, "keys", "create", "--database-url", url, "--email", "nobody@example.com", "--scopes", "*"); err == nil {
		t.Error("a key for an unknown user was issued")
	}
	out, err = runCmd(t, "users", "create", "--database-url", url, "--email", "dev@example.com", "--organization-of", "ops@example.com")
	var user map[string]any
	if err != nil || json.Unmarshal([]byte(out), &user) != nil || user["org_role"] != "member" || user["uuid"] == "" {
		t.Errorf("users create: %q, %v", out, err)
	}
	if _, err := runCmd(t, "users", "create", "--database-url", url, "--email", "dev@example.com", "--organization-of", "ops@example.com"); err == nil {
		t.Error("a second user with the same email was created")
	}
}

// TestServeLifecycle starts the server, waits until it is ready, and stops it with a
// cancelled context as SIGTERM would.
func TestServeLifecycle(t *testing.T) {
	url := pgtest.NewDatabase(t)
	addr, grpcAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--database-url", url, "--http-addr", addr, "--grpc-addr", grpcAddr, "--log-level", "warn", "--bcrypt-cost", "4"}, os.Stdout, &bytes.Buffer{})
	}()
	// Start-up applies every migration to a fresh database: on a loaded machine under -race
	// that has taken seconds, so readiness is given a minute.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/_ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeFlagsHaveEnvironmentVariables reads serve --help: each flag's usage must name its
// variable.
func TestServeFlagsHaveEnvironmentVariables(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseServeConfig([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	entries := regexp.MustCompile(`(?m)^  -`).Split(help, -1)[1:]
	if len(entries) < 5 {
		t.Fatalf("found %d flags in help:\n%s", len(entries), help)
	}
	for _, e := range entries {
		if !regexp.MustCompile(`\(env [A-Z_]+\)`).MatchString(e) {
			t.Errorf("flag names no environment variable: %q", e)
		}
	}
	for _, env := range []string{"FLAGEDGE_DRAIN_DELAY", "FLAGEDGE_EVENT_LOG_URL", "FLAGEDGE_EVENT_LOG_REPLICAS", "FLAGEDGE_EVENT_LOG_TOKEN", "FLAGEDGE_SHUTDOWN_TIMEOUT", "DATABASE_URL"} {
		if !strings.Contains(help, "(env "+env+")") {
			t.Errorf("help does not name %s", env)
		}
	}
}

// TestPlaintextGRPCOnlyOnLoopback: the sync service carries every project's flags, key
// hashes and person properties, so without TLS it may listen only on loopback, unless the
// operator says --grpc-insecure.
func TestPlaintextGRPCOnlyOnLoopback(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--grpc-addr", "127.0.0.1:9000"}, true},
		{[]string{"--grpc-addr", ":9000"}, false},
		{[]string{"--grpc-addr", "0.0.0.0:9000"}, false},
		{[]string{"--grpc-addr", ":9000", "--grpc-insecure"}, true},
		{[]string{"--grpc-addr", ":9000", "--grpc-tls-cert", "c.pem", "--grpc-tls-key", "k.pem"}, true},
	} {
		_, err := parseServeConfig(append([]string{"--database-url", "postgres://x"}, c.args...), io.Discard)
		if (err == nil) != c.ok {
			t.Errorf("%v: %v, want accepted %v", c.args, err, c.ok)
		}
	}
}

func TestVersion(t *testing.T) {
	out, err := runCmd(t, "--version")
	if err != nil || !regexp.MustCompile(`^flagedge \S+ \S+\n$`).MatchString(out) {
		t.Errorf("--version printed %q, %v", out, err)
	}
}

// TestEdgesUsage: an unknown edges subcommand is a usage error, before any database is needed.
func TestEdgesUsage(t *testing.T) {
	for _, args := range [][]string{{"edges"}, {"edges", "frobnicate", "--database-url", "postgres://nowhere.invalid/x"}} {
		if _, err := runCmd(t, args...); err == nil || !strings.Contains(err.Error(), "usage: controlplane edges") {
			t.Errorf("%v: %v, want the usage", args, err)
		}
	}
}

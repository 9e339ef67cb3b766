package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// stdinWith returns a file holding text, to stand in for a piped stdin.
func stdinWith(t *testing.T, text string) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stdin")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestConsolePasswords checks the console's operations contract: bootstrap prints the email,
// and a generated password only when it created the user; users set-password takes a piped
// password or generates and prints one; each password then logs in.
func TestConsolePasswords(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	var first, second map[string]string
	for _, dst := range []*map[string]string{&first, &second} {
		out, err := runCmd(t, "bootstrap", "--database-url", url, "--email", "ops@example.com", "--bcrypt-cost", "4")
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			t.Fatal(err)
		}
		*dst = map[string]string{}
		for k, v := range raw {
			if s, ok := v.(string); ok {
				(*dst)[k] = s
			}
		}
	}
	if first["email"] != "ops@example.com" || len(first["password"]) < 16 {
		t.Errorf("first bootstrap: %v", first)
	}
	if _, ok := second["password"]; ok || second["email"] != "ops@example.com" {
		t.Errorf("second bootstrap printed a password or no email: %v", second)
	}
	db, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	users := postgres.NewUserService(db, bcrypt.MinCost)
	if _, err := users.CheckPassword(ctx, "ops@example.com", first["password"]); err != nil {
		t.Errorf("the bootstrap password does not log in: %v", err)
	}

	for _, tc := range []struct {
		name, stdin string
		generated   bool
	}{
		{"piped", "a piped passphrase\n", false},
		{"empty stdin", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := setPassword(ctx, []string{"--database-url", url, "--email", "ops@example.com", "--bcrypt-cost", "4"}, stdinWith(t, tc.stdin), &out, &errOut); err != nil {
				t.Fatalf("set-password: %v %s", err, errOut.String())
			}
			var res map[string]string
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			password := "a piped passphrase"
			if tc.generated {
				password = res["password"]
			} else if _, ok := res["password"]; ok {
				t.Error("a piped password was printed")
			}
			if _, err := users.CheckPassword(ctx, "ops@example.com", password); err != nil || password == "" {
				t.Errorf("the new password (%q) does not log in: %v", password, err)
			}
		})
	}
	// The hashes are written at the cost asked for, and bcrypt's range is enforced.
	var hash []byte
	if err := db.Pool.QueryRow(ctx, `SELECT password_hash FROM users WHERE email = 'ops@example.com'`).Scan(&hash); err != nil {
		t.Fatal(err)
	}
	if cost, err := bcrypt.Cost(hash); err != nil || cost != 4 {
		t.Errorf("the password was hashed at cost %d (%v), want the --bcrypt-cost given, 4", cost, err)
	}
	for _, cost := range []string{"3", "32"} {
		err := setPassword(ctx, []string{"--database-url", url, "--email", "ops@example.com", "--bcrypt-cost", cost}, stdinWith(t, "a piped passphrase\n"),
			io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--bcrypt-cost") {
			t.Errorf("--bcrypt-cost %s: %v, want it refused", cost, err)
		}
	}
	var out bytes.Buffer
	if err := setPassword(ctx, []string{"--database-url", url, "--email", "ops@example.com", "--bcrypt-cost", "4"}, stdinWith(t, "short\n"), &out, &out); err == nil {
		t.Error("a short password was accepted")
	}
	if err := setPassword(ctx, []string{"--database-url", url, "--email", "nobody@example.com", "--bcrypt-cost", "4"}, stdinWith(t, ""), &out, &out); err == nil {
		t.Error("set-password for an unknown user succeeded")
	}
}

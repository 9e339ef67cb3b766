package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

// maxPasswordInput bounds what set-password reads from stdin: a password is at most 72 bytes.
const maxPasswordInput = 4 << 10

// setPassword sets a user's console password: the one piped on stdin, or, when stdin is a
// terminal or empty, a generated one, printed with the email as one JSON line.
func setPassword(ctx context.Context, args []string, stdin *os.File, stdout, stderr io.Writer) error {
	fs := newFlagSet("users set-password", stderr)
	dbURL := databaseFlag(fs)
	email := fs.String("email", "", "email of the user (required)")
	cost := bcryptCostFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkBcryptCost(*cost); err != nil {
		return err
	}
	password, err := readPassword(stdin)
	if err != nil {
		return err
	}
	generated := password == ""
	if generated {
		password = postgres.NewPassword()
	}
	db, err := openDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	u, err := postgres.NewUserService(db, *cost).SetPassword(ctx, *email, password)
	if err != nil {
		return err
	}
	out := map[string]string{"email": u.Email}
	if generated {
		out["password"] = password
	}
	return json.NewEncoder(stdout).Encode(out)
}

// readPassword reads a password piped on stdin (its first line); a terminal gives none.
func readPassword(stdin *os.File) (string, error) {
	if stdin == nil {
		return "", nil
	}
	if fi, err := stdin.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return "", nil
	}
	b, err := io.ReadAll(io.LimitReader(stdin, maxPasswordInput))
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimRight(line, "\r"), nil
}

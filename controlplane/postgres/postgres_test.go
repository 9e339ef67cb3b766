package postgres_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/postgres/postgrestest"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, postgres.Migrate)) }

// mustOpen opens a fresh database and bootstraps a project in it.
func mustOpen(tb testing.TB) (*postgres.DB, *postgres.BootstrapResult, string) {
	tb.Helper()
	return postgrestest.Open(tb)
}

func mustKey(tb testing.TB, db *postgres.DB, secret string) *controlplane.APIKey {
	tb.Helper()
	k, err := postgres.NewAuthService(db).AuthenticatePersonalKey(context.Background(), secret)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func TestBootstrapIsIdempotent(t *testing.T) {
	t.Parallel()
	db, first, _ := mustOpen(t)
	second, err := postgres.Bootstrap(context.Background(), db, bcrypt.MinCost, "admin@example.com", "")
	if err != nil {
		t.Fatal(err)
	}
	if first.ProjectID != second.ProjectID || first.ProjectAPIKey != second.ProjectAPIKey || first.SecretAPIKey != second.SecretAPIKey {
		t.Errorf("second bootstrap made a new project: %+v vs %+v", first, second)
	}
	if first.PersonalAPIKey == second.PersonalAPIKey {
		t.Error("second bootstrap reused the personal key")
	}
	for _, k := range []string{first.PersonalAPIKey, second.PersonalAPIKey} {
		key := mustKey(t, db, k)
		if !key.HasScope(controlplane.ScopeFlagWrite) || !key.User.IsAdmin() {
			t.Errorf("key %+v lacks scope * or admin", key)
		}
	}
	if !strings.HasPrefix(first.ProjectAPIKey, "phc_") || !strings.HasPrefix(first.SecretAPIKey, "phs_") || !strings.HasPrefix(first.PersonalAPIKey, "phx_") {
		t.Errorf("bad key prefixes: %+v", first)
	}
}

func TestPersonalKeysAreStoredHashed(t *testing.T) {
	t.Parallel()
	db, res, _ := mustOpen(t)
	var n int
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM personal_api_keys WHERE position($1::bytea in secure_value) > 0`, []byte(res.PersonalAPIKey)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Error("the key is stored in clear")
	}
	if _, err := postgres.NewAuthService(db).AuthenticatePersonalKey(context.Background(), res.PersonalAPIKey+"x"); controlplane.ErrorKind(err) != controlplane.BadCredentials {
		t.Errorf("unknown key: got %v", err)
	}
}

func TestConcurrentCreatesOfOneKey(t *testing.T) {
	t.Parallel()
	db, res, _ := mustOpen(t)
	key := mustKey(t, db, res.PersonalAPIKey)
	flags := postgres.NewFlagService(db)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := "same-key"
			_, errs[i] = flags.CreateFlag(controlplane.NewContextWithUser(context.Background(), &key.User), res.ProjectID, controlplane.FlagUpdate{Key: &k})
		}()
	}
	wg.Wait()
	var ok, conflicts int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case controlplane.ErrorKind(err) == controlplane.Invalid && strings.Contains(err.Error(), "unique"):
			conflicts++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if ok != 1 || conflicts != n-1 {
		t.Errorf("got %d created and %d conflicts, want 1 and %d", ok, conflicts, n-1)
	}
}

func TestFlagChangesNotifyAndBumpSnapshot(t *testing.T) {
	t.Parallel()
	db, res, url := mustOpen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+postgres.SnapshotChannel); err != nil {
		t.Fatal(err)
	}
	version := func() int64 {
		var v int64
		if err := db.Pool.QueryRow(ctx, `SELECT snapshot_version FROM projects WHERE id = $1`, res.ProjectID).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := version()
	key := mustKey(t, db, res.PersonalAPIKey)
	k := "notify-me"
	f, err := postgres.NewFlagService(db).CreateFlag(controlplane.NewContextWithUser(ctx, &key.User), res.ProjectID, controlplane.FlagUpdate{Key: &k})
	if err != nil {
		t.Fatal(err)
	}
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := version()
	if after != before+1 {
		t.Errorf("snapshot version %d after create, want %d", after, before+1)
	}
	want := strings.Join([]string{itoa(res.ProjectID), itoa(after)}, ":")
	if n.Payload != want {
		t.Errorf("notification %q, want %q", n.Payload, want)
	}
	off := false
	if _, err := postgres.NewFlagService(db).UpdateFlag(controlplane.NewContextWithUser(ctx, &key.User), res.ProjectID, f.ID, controlplane.FlagUpdate{Active: &off}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.WaitForNotification(ctx); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != after+1 {
		t.Errorf("snapshot version %d after update, want %d", v, after+1)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Package pgtest gives tests a real PostgreSQL: one throwaway cluster per test binary (or the
// server named by DATABASE_URL), a template database prepared once, and a fresh database
// cloned from it for every test, so tests are isolated, parallel and fast.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/internal/pgcluster"
)

var (
	serverURL    string // the maintenance database of the server in use
	templateName string
	mu           sync.Mutex // serialises CREATE DATABASE … TEMPLATE, which needs the template idle
	counter      atomic.Int64
)

// Main prepares the server and the template database (running setup on it, typically the
// migrations), runs the package's tests and tears everything down. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, postgres.Migrate)) }
func Main(m *testing.M, setup func(ctx context.Context, url string) error) int {
	// Starting a cluster and migrating the template takes a few seconds here; 3 minutes allow
	// for a slow machine loaded with other packages' tests (a wait, not a measure).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	serverURL = os.Getenv("DATABASE_URL")
	if serverURL == "" {
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: start postgres:", err)
			return 1
		}
		defer cluster.Stop()
		serverURL = cluster.URL("postgres")
	}
	templateName = fmt.Sprintf("flagedge_template_%d_%d", os.Getpid(), time.Now().UnixNano())
	if err := exec(ctx, serverURL, `CREATE DATABASE `+templateName); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: create template:", err)
		return 1
	}
	defer exec(context.Background(), serverURL, `DROP DATABASE IF EXISTS `+templateName+` WITH (FORCE)`) //nolint:errcheck
	if setup != nil {
		if err := setup(ctx, withDatabase(serverURL, templateName)); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: set up template:", err)
			return 1
		}
	}
	return m.Run()
}

// NewDatabase creates a database from the template and returns its URL. The database is
// dropped when the test ends.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	return copyDatabase(tb, templateName)
}

// CopyDatabase copies the database at src, as a restore from a backup of it would, and
// returns the copy's URL; nothing may be connected to src meanwhile. The copy is dropped when
// the test ends.
func CopyDatabase(tb testing.TB, src string) string {
	tb.Helper()
	u, err := url.Parse(src)
	if err != nil {
		tb.Fatal(err)
	}
	return copyDatabase(tb, strings.TrimPrefix(u.Path, "/"))
}

func copyDatabase(tb testing.TB, from string) string {
	tb.Helper()
	if serverURL == "" {
		tb.Fatal("pgtest: call pgtest.Main from TestMain")
	}
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), counter.Add(1))
	ctx := context.Background()
	if err := exec(ctx, serverURL, `CREATE DATABASE `+name+` TEMPLATE `+from+` STRATEGY FILE_COPY`); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	tb.Cleanup(func() {
		if err := exec(context.Background(), serverURL, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			tb.Errorf("pgtest: drop database: %v", err)
		}
	})
	return withDatabase(serverURL, name)
}

func exec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns the URL with its database replaced by name.
func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(fmt.Sprintf("pgtest: bad database url %q: %v", raw, err))
	}
	u.Path = "/" + name
	return u.String()
}

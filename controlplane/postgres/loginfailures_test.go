package postgres_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane/loginlimit"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestLoginFailuresExpire: failures counted in PostgreSQL by one replica refuse an email on
// another (whose memory has none) for two windows of the limiter's clock at most, and no
// longer; the next failure then deletes the expired counts, and a success deletes the
// email's.
func TestLoginFailuresExpire(t *testing.T) {
	t.Parallel()
	db, _, _ := mustOpen(t)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC) // half-way through a window
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	cfg := loginlimit.Config{PerAddress: 100, PerEmail: 2, Window: time.Minute, MaxHashes: 1, HashWait: time.Second, Entries: 100,
		Store: postgres.NewLoginFailureStore(db), Now: clock}
	a, b := loginlimit.New(cfg, nil), loginlimit.New(cfg, nil)
	addr := netip.MustParseAddr("198.51.100.1")
	begin := func(l *loginlimit.Limiter, email string) (*loginlimit.Attempt, *loginlimit.Refusal) {
		t.Helper()
		return l.Begin(ctx, addr, email)
	}
	for range 2 {
		att, r := begin(a, "victim@example.com")
		if r != nil {
			t.Fatal(r)
		}
		att.Failed()
	}
	// Both failures in the current window: they go in 90 s, at the end of the next.
	if _, r := begin(b, "victim@example.com"); r == nil || r.Reason != loginlimit.ReasonEmail || r.RetryAfter != 90*time.Second {
		t.Fatalf("on the other replica: %+v, want refused for the email with Retry-After 90s", r)
	}
	advance(time.Minute)
	if _, r := begin(b, "victim@example.com"); r == nil || r.RetryAfter != 30*time.Second {
		t.Fatalf("a window later: %+v, want still refused, for 30s", r)
	}
	advance(time.Minute)
	att, r := begin(b, "victim@example.com")
	if r != nil {
		t.Fatalf("two windows later: refused %+v", r)
	}
	att.Failed()
	if got := windows(t, db); len(got) != 1 || got[0] != now.Truncate(time.Minute) {
		t.Errorf("windows stored after the failure: %v, want only the current one (%v)", got, now.Truncate(time.Minute))
	}
	att, r = begin(a, "victim@example.com")
	if r != nil {
		t.Fatal(r)
	}
	att.Succeeded()
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM login_failures`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d counts after the success (%v), want only the address's", n, err)
	}
}

// windows lists the windows login_failures holds counts of.
func windows(t *testing.T, db *postgres.DB) []time.Time {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT DISTINCT window_start FROM login_failures ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var w time.Time
		if err := rows.Scan(&w); err != nil {
			t.Fatal(err)
		}
		out = append(out, w.UTC())
	}
	return out
}

// TestLoginFailuresConcurrently: failures of overlapping keys counted at once from many
// connections, each also deleting expired counts, all succeed and are all counted, and
// each deletes at most its bound of expired counts.
func TestLoginFailuresConcurrently(t *testing.T) {
	t.Parallel()
	db, _, _ := mustOpen(t)
	ctx := context.Background()
	store := postgres.NewLoginFailureStore(db)
	window := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	expired := window.Add(-time.Minute)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO login_failures SELECT k, $1, 1 FROM generate_series(1, 4000) k`, expired.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Keys as the limiter gives them: an address, then an email.
				addr, email := loginlimit.Key(-1-(w+i)%3), loginlimit.Key(-10-(w*i)%3)
				if err := store.Fail(ctx, window, expired, addr, email); err != nil {
					errs <- fmt.Errorf("worker %d, failure %d: %w", w, i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var counted, left int
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(failures) FILTER (WHERE window_start = $1), 0),
		count(*) FILTER (WHERE window_start < $2) FROM login_failures`, window, expired).Scan(&counted, &left); err != nil {
		t.Fatal(err)
	}
	if counted != 2*workers*each {
		t.Errorf("%d failures counted, want %d", counted, 2*workers*each)
	}
	if left < 4000-workers*each*16 || left == 4000 {
		t.Errorf("%d of 4000 expired counts left, want some deleted, at most 16 a failure", left)
	}
	counts, err := store.Failures(ctx, expired, -1, -10)
	if err != nil || len(counts) != 2 {
		t.Errorf("Failures: %v, %v; want the current window's count of both keys", counts, err)
	}
}

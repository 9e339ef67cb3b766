package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestCheckPasswordCostsTheSame: a wrong password for an existing account, an unknown email
// and an email that is not text all cost one password hash of the same work factor, so the
// time of a failed login does not tell whether the account exists.
func TestCheckPasswordCostsTheSame(t *testing.T) {
	db, _, _ := mustOpen(t)
	ctx := context.Background()
	users := postgres.NewUserService(db, 8) // 15 ms a hash or more: well above the query
	if _, err := users.SetPassword(ctx, "admin@example.com", "a good long password"); err != nil {
		t.Fatal(err)
	}
	// The attempts are interleaved, so that load from elsewhere on the machine falls on every
	// email alike, and each email's fastest of 15 is compared: load only ever adds time, so
	// the fastest attempt is the one nearest the work itself (a median moves with a burst of
	// load that covers half the attempts), while a login that skipped the hash would be
	// several times faster however the machine was loaded.
	emails := []string{"admin@example.com", "nobody@example.com", "nul\x00@example.com", "\xff@example.com"}
	times := make([][]time.Duration, len(emails))
	for range 15 {
		for i, email := range emails {
			start := time.Now()
			_, err := users.CheckPassword(ctx, email, "a wrong password")
			times[i] = append(times[i], time.Since(start))
			if controlplane.ErrorKind(err) != controlplane.BadCredentials {
				t.Fatalf("CheckPassword(%q): %v, want bad credentials", email, err)
			}
		}
	}
	known := slices.Min(times[0])
	for i, email := range emails[1:] {
		if d := slices.Min(times[i+1]); d < known/2 || d > known*2 {
			t.Errorf("a failed login as %q took %v, one as an existing account %v: want within 2x", email, d, known)
		}
	}
}

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
	median := func(email string) time.Duration {
		var times []time.Duration
		for range 5 {
			start := time.Now()
			_, err := users.CheckPassword(ctx, email, "a wrong password")
			times = append(times, time.Since(start))
			if controlplane.ErrorKind(err) != controlplane.BadCredentials {
				t.Fatalf("CheckPassword(%q): %v, want bad credentials", email, err)
			}
		}
		slices.Sort(times)
		return times[len(times)/2]
	}
	known := median("admin@example.com")
	for _, email := range []string{"nobody@example.com", "nul\x00@example.com", "\xff@example.com"} {
		if d := median(email); d < known/2 || d > known*2 {
			t.Errorf("a failed login as %q took %v, one as an existing account %v: want within 2x", email, d, known)
		}
	}
}

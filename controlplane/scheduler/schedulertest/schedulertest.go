// Package schedulertest runs a scheduler for the tests that need scheduled changes made: the
// scheduler's own, the webhook events of their outcomes, the console's schedule page. It
// wires the scheduler as the control plane's serve does, so those tests share one wiring.
package schedulertest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/scheduler"
)

// Start runs a scheduler (a replica's) on db until the test ends: it takes due changes from
// db's queue and applies them through the guarded flag service. Call Wake on it to have it
// read what is due at once.
func Start(t testing.TB, db *postgres.DB) *scheduler.Scheduler {
	t.Helper()
	s := scheduler.New(postgres.NewScheduleStore(db), postgres.NewFlagService(db),
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s
}

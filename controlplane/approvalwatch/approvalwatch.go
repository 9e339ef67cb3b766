// Package approvalwatch keeps change requests current without a user asking: it expires
// overdue requests and records when an applied request is live on every connected edge,
// which fires its change_request.live webhook event. Every control-plane replica runs one
// Watcher; the store does each step once across replicas (controlplane.ChangeRequestUpkeep).
// A Watcher is woken by the edges' acknowledgements (Wake), so a request is confirmed live as
// soon as the last edge serves it, and sweeps on a timer otherwise.
package approvalwatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane"
)

// sweepEvery is how often a Watcher runs unwoken: requests expire on a scale of days and are
// also expired when read, and acknowledgements wake it, so a minute is plenty.
const sweepEvery = time.Minute

// Watcher runs the upkeep of change requests. The zero value is not usable; call New.
type Watcher struct {
	upkeep controlplane.ChangeRequestUpkeep
	log    *slog.Logger
	wake   chan struct{}

	done *prometheus.CounterVec
}

// New returns a Watcher running upkeep; its metrics are registered on reg.
func New(upkeep controlplane.ChangeRequestUpkeep, log *slog.Logger, reg prometheus.Registerer) *Watcher {
	w := &Watcher{upkeep: upkeep, log: log, wake: make(chan struct{}, 1),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_change_requests_upkept_total",
			Help: "Change requests this replica expired (expired) or confirmed live on every connected edge (live)."},
			[]string{"outcome"})}
	reg.MustRegister(w.done)
	return w
}

// Wake makes the Watcher run now: call it on every acknowledgement notification of the
// edges, and when notifications may have been lost.
func (w *Watcher) Wake() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Run runs the upkeep at start, on every Wake and every minute, until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	ticker := time.NewTicker(sweepEvery)
	defer ticker.Stop()
	for {
		w.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-w.wake:
		}
	}
}

// pass runs the upkeep once; a failure is logged and retried on the next pass.
func (w *Watcher) pass(ctx context.Context) {
	expired, err := w.upkeep.ExpireChangeRequests(ctx)
	w.done.WithLabelValues("expired").Add(float64(expired))
	if err != nil && ctx.Err() == nil {
		w.log.Warn("change requests: cannot expire", "err", err)
	}
	live, err := w.upkeep.ConfirmLiveChangeRequests(ctx)
	w.done.WithLabelValues("live").Add(float64(live))
	if err != nil && ctx.Err() == nil {
		w.log.Warn("change requests: cannot confirm live", "err", err)
	}
}

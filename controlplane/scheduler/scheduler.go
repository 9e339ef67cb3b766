// Package scheduler makes scheduled changes to flags when they are due. Every control-plane
// replica runs one Scheduler; they share nothing but the database, where each due change is
// claimed under a row lock in the transaction that applies it and marks it executed
// (controlplane.ScheduledChangeQueue), so a change runs once however many replicas run.
//
// A Scheduler sleeps until the earliest pending change is due. Creating or cancelling a
// change on any replica notifies every replica (Wake), which then reads what is due next; a
// replica that was down runs what fell due meanwhile as soon as it starts. A change is
// applied through the flag service as the user who scheduled it, so it is subject to that
// user's access at the time it runs, and the activity log records it as that user's,
// triggered by the scheduled change.
package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane"
)

// idleRead is how long a Scheduler sleeps at most without a notification: creations and
// cancellations are notified, so this only matters when a notification was lost.
const idleRead = 30 * time.Second

// retryDelay is the pause after the database failed to answer.
const retryDelay = time.Second

// heldElsewhere is the pause when a change is due but another replica holds it (it is being
// applied there): short, so that a replica that dies mid-change is relieved at once, but not
// a busy loop while the holder commits.
const heldElsewhere = 20 * time.Millisecond

// Scheduler runs due changes. The zero value is not usable; call New.
type Scheduler struct {
	queue controlplane.ScheduledChangeQueue
	flags controlplane.FlagService // decides what the change's creator may do, as for any user
	log   *slog.Logger
	wake  chan struct{}

	runs     *prometheus.CounterVec
	lateness prometheus.Histogram
}

// New returns a Scheduler taking due changes from queue and applying them through flags. Its
// metrics are registered on reg.
func New(queue controlplane.ScheduledChangeQueue, flags controlplane.FlagService, log *slog.Logger, reg prometheus.Registerer) *Scheduler {
	s := &Scheduler{queue: queue, flags: flags, log: log, wake: make(chan struct{}, 1),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_scheduled_changes_total",
			Help: "Scheduled changes this replica ran, by outcome: executed, failed (for good), retry (a transient failure), awaiting_approval (the approval gate filed a change request)."},
			[]string{"outcome"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flagedge_controlplane_scheduled_change_lateness_seconds",
			Help:    "Time from a change's scheduled_at until this replica executed it (database clock).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
	}
	reg.MustRegister(s.runs, s.lateness)
	return s
}

// Wake makes the Scheduler read what is due now: call it on every notification of a created
// or deleted change, and when notifications may have been lost.
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Run runs due changes until ctx ends.
func (s *Scheduler) Run(ctx context.Context) {
	for {
		timer := time.NewTimer(s.runDue(ctx))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-s.wake:
			timer.Stop()
		}
	}
}

// runDue runs every change that is due and returns how long to sleep.
func (s *Scheduler) runDue(ctx context.Context) time.Duration {
	for ctx.Err() == nil {
		c, err := s.queue.RunDue(ctx, s.apply)
		if err != nil && c == nil { // the store failed: nothing was recorded
			if ctx.Err() == nil {
				s.log.Warn("scheduled changes: cannot run", "err", err)
			}
			return retryDelay
		}
		if c == nil {
			break
		}
		s.record(c, err)
	}
	wait, ok, err := s.queue.NextDue(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Warn("scheduled changes: cannot read the next one", "err", err)
		}
		return retryDelay
	case !ok:
		return idleRead
	case wait <= 0: // due, yet RunDue found nothing to claim: another replica holds it
		return heldElsewhere
	}
	return min(wait, idleRead)
}

// record logs and counts what became of a change.
func (s *Scheduler) record(c *controlplane.ScheduledChange, err error) {
	attrs := []any{"id", c.ID, "project_id", c.ProjectID, "record_id", c.RecordID}
	switch {
	case c.AwaitsApproval():
		s.runs.WithLabelValues("awaiting_approval").Inc()
		s.log.Info("scheduled change awaits approval", append(attrs, "change_request", c.ChangeRequestID)...)
	case c.Pending():
		s.runs.WithLabelValues("retry").Inc()
		s.log.Warn("scheduled change failed, will retry", append(attrs, "err", err, "failures", c.FailureCount)...)
	case c.Failed():
		s.runs.WithLabelValues("failed").Inc()
		s.log.Info("scheduled change failed", append(attrs, "reason", c.FailureReason)...)
	default:
		s.runs.WithLabelValues("executed").Inc()
		s.lateness.Observe(c.ExecutedAt.Sub(c.ScheduledAt).Seconds())
		s.log.Info("scheduled change executed", append(attrs, "late", c.ExecutedAt.Sub(c.ScheduledAt))...)
	}
}

// errCreatorGone fails a change whose creator is no longer a member of the organisation.
var errCreatorGone = &controlplane.Error{Kind: controlplane.Forbidden, Code: "permission_denied",
	Detail: "The user who scheduled this change is no longer a member of the organisation."}

// apply makes the change as its creator, through the flag service: a creator who lost access
// to the flag gets a permission error, which fails the change.
func (s *Scheduler) apply(ctx context.Context, c *controlplane.ScheduledChange) error {
	if c.CreatedBy == nil {
		return errCreatorGone
	}
	if c.ModelName != controlplane.ModelFeatureFlag || c.FlagID() == 0 {
		return controlplane.Errorf(controlplane.Invalid, "invalid_input", "Unsupported record: %s %q", c.ModelName, c.RecordID)
	}
	ctx = controlplane.NewContextWithTrigger(controlplane.NewContextWithUser(ctx, c.CreatedBy), c.Trigger())
	flag, err := s.flags.FindFlagByID(ctx, c.ProjectID, c.FlagID())
	if controlplane.ErrorKind(err) == controlplane.NotFound {
		return controlplane.Errorf(controlplane.NotFound, "not_found", "The feature flag no longer exists.")
	}
	if err != nil {
		return err
	}
	if flag.Deleted {
		return controlplane.Errorf(controlplane.NotFound, "not_found", "The feature flag %q was deleted.", flag.Key)
	}
	payload, err := controlplane.ParseScheduledPayload(c.Payload)
	if err != nil {
		return err
	}
	upd, err := payload.Update(flag)
	if err != nil {
		return fmt.Errorf("scheduled change %d: %w", c.ID, err)
	}
	_, err = s.flags.UpdateFlag(ctx, c.ProjectID, flag.ID, upd)
	return err
}

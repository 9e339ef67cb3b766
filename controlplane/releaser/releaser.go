// Package releaser runs release plans (guarded rollouts): every control-plane replica runs
// one Releaser, which re-evaluates the running plans every interval and carries out what
// they decide: advance a step, complete, roll back, pause on a sample-ratio mismatch. The
// store claims each plan under a row lock for its evaluation (FOR UPDATE SKIP LOCKED,
// controlplane.ReleasePlanRunner), so however many replicas run, one acts on a plan at a
// time and each decision is taken once; the flag writes are made as the plan's creator.
//
// Plans are evaluated on a clock rather than on each event: the counts they rest on are kept
// as events are stored, so an evaluation reads only the plan's own rows, and the interval
// bounds how late a rollback can be after the evidence arrived.
package releaser

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane"
)

// DefaultInterval is how often plans are evaluated: a rollback follows the evidence within
// it, and an evaluation of a plan costs a few indexed queries over its own rows.
const DefaultInterval = 5 * time.Second

// Releaser evaluates running release plans. The zero value is not usable; call New.
type Releaser struct {
	runner   controlplane.ReleasePlanRunner
	interval time.Duration
	log      *slog.Logger

	decisions *prometheus.CounterVec
	failures  prometheus.Counter
}

// New returns a Releaser evaluating runner's plans every interval; its metrics are
// registered on reg.
func New(runner controlplane.ReleasePlanRunner, interval time.Duration, log *slog.Logger, reg prometheus.Registerer) *Releaser {
	r := &Releaser{runner: runner, interval: interval, log: log,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_release_plan_decisions_total",
			Help: "Decisions this replica took for release plans, by kind: advanced, completed, rolled_back, paused, failed."},
			[]string{"kind"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_controlplane_release_plan_evaluation_failures_total",
			Help: "Evaluations of the release plans that failed for want of the database; retried at the next interval."}),
	}
	reg.MustRegister(r.decisions, r.failures)
	return r
}

// Run evaluates the plans every interval until ctx ends.
func (r *Releaser) Run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		r.Evaluate(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Evaluate evaluates every running plan once, logging and counting what was decided.
func (r *Releaser) Evaluate(ctx context.Context) {
	decided, err := r.runner.EvaluatePlans(ctx)
	for _, d := range decided {
		r.decisions.WithLabelValues(d.Kind).Inc()
		r.log.Info("release plan decision", "kind", d.Kind, "step", d.Step, "reason", d.Reason)
	}
	if err != nil && ctx.Err() == nil {
		r.failures.Inc()
		r.log.Warn("release plans: cannot evaluate", "err", err)
	}
}

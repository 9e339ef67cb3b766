package evalcount

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/shared/syncpb"
)

// maxPending bounds the counts kept while the control plane cannot be reached; past it the
// oldest are dropped (and counted).
const maxPending = 100_000

// reportTimeout bounds one report.
const reportTimeout = 10 * time.Second

// Reporter sends the registry's counts to the control plane every interval, over the edge's
// link (ReportEvaluations). Counts a report could not deliver are sent with the next one.
type Reporter struct {
	Registry *Registry
	Client   syncpb.SyncClient
	EdgeID   string
	Interval time.Duration
	Log      *slog.Logger

	pending []*syncpb.FlagEvaluations
	dropped prometheus.Counter
}

// NewReporter returns a reporter of reg's counts through client.
func NewReporter(reg *Registry, client syncpb.SyncClient, edgeID string, interval time.Duration, log *slog.Logger, metrics prometheus.Registerer) *Reporter {
	r := &Reporter{Registry: reg, Client: client, EdgeID: edgeID, Interval: interval, Log: log,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_evaluation_counts_dropped_total",
			Help: "Flag evaluation counts dropped because the control plane could not be reached for long."})}
	if metrics != nil {
		metrics.MustRegister(r.dropped)
	}
	return r
}

// Run reports every interval until ctx ends, then once more (briefly) so that a stopping edge
// hands over what it counted.
func (r *Reporter) Run(ctx context.Context) {
	tick := time.NewTicker(r.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			r.Report(final)
			cancel()
			return
		case <-tick.C:
			r.Report(ctx)
		}
	}
}

// Report sends what was counted since the last report, with what earlier reports could not
// deliver.
func (r *Reporter) Report(ctx context.Context) {
	now := time.Now().UnixMilli()
	for _, c := range r.Registry.Take() {
		r.pending = append(r.pending, &syncpb.FlagEvaluations{ProjectId: c.ProjectID, FlagKey: c.FlagKey, Value: c.Value,
			Count: c.N, LastUnixMs: now})
	}
	if len(r.pending) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	_, err := r.Client.ReportEvaluations(ctx, &syncpb.ReportEvaluationsRequest{EdgeId: r.EdgeID, Evaluations: r.pending})
	if err != nil {
		r.Log.Warn("reporting flag evaluations failed; kept for the next report", "counts", len(r.pending), "err", err)
		if over := len(r.pending) - maxPending; over > 0 {
			r.pending = r.pending[over:]
			r.dropped.Add(float64(over))
		}
		return
	}
	r.pending = r.pending[:0]
}

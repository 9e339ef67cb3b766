package capture

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/internal/backoff"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// Ingester is the part of the sync API that stores events.
type Ingester interface {
	Ingest(ctx context.Context, in *syncpb.IngestRequest, opts ...grpc.CallOption) (*syncpb.IngestResponse, error)
}

// Forwarder drains the spool to the control plane in batches. A batch leaves the spool only
// once the control plane has stored it; on failure the same batch is retried with jittered
// exponential backoff, so events arrive at least once and, deduplicated by uuid, once.
type Forwarder struct {
	spool    *spool.Spool
	ingester Ingester
	edgeID   string
	log      *slog.Logger
	// MaxBatchBytes bounds one Ingest call; 4 MiB keeps calls short and retries cheap.
	MaxBatchBytes int
	// Timeout bounds one Ingest call; storing 4 MiB of events takes well under a second.
	Timeout time.Duration
	// Retry spaces attempts after a failure: from 100 ms to 5 s, so a control plane that comes
	// back is fed within seconds without being hammered while it is down.
	Retry backoff.Backoff
	// Clock is what retries wait on.
	Clock backoff.Clock

	forwarded prometheus.Counter
	failures  prometheus.Counter
	pending   prometheus.GaugeFunc
}

// NewForwarder returns a forwarder from sp to ingester.
func NewForwarder(sp *spool.Spool, ingester Ingester, edgeID string, log *slog.Logger, reg prometheus.Registerer) *Forwarder {
	f := &Forwarder{spool: sp, ingester: ingester, edgeID: edgeID, log: log, MaxBatchBytes: 4 << 20, Timeout: 30 * time.Second,
		Retry: backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}, Clock: backoff.RealClock,
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_forwarded_records_total",
			Help: "Spool records the control plane acknowledged."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_forward_failures_total",
			Help: "Ingest calls that failed and will be retried."}),
		pending: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_spool_pending_bytes",
			Help: "Spool bytes not yet acknowledged by the control plane."}, func() float64 { return float64(sp.Pending()) }),
	}
	if reg != nil {
		reg.MustRegister(f.forwarded, f.failures, f.pending)
	}
	return f
}

// Run forwards until ctx ends or the spool closes.
func (f *Forwarder) Run(ctx context.Context) {
	cursor := f.spool.Acked()
	for {
		records, next, err := f.spool.Read(ctx.Done(), cursor, f.MaxBatchBytes)
		if err != nil {
			if !errors.Is(err, spool.ErrClosed) && ctx.Err() == nil {
				f.log.Error("spool read failed", "err", err)
			}
			return
		}
		for {
			callCtx, cancel := context.WithTimeout(ctx, f.Timeout)
			_, err := f.ingester.Ingest(callCtx, &syncpb.IngestRequest{Batches: records, EdgeId: f.edgeID},
				grpc.MaxCallSendMsgSize(64<<20))
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			f.failures.Inc()
			f.log.Warn("forwarding events failed; retrying", "err", err)
			if !f.Retry.Wait(ctx, f.Clock) {
				return
			}
		}
		f.Retry.Reset()
		f.forwarded.Add(float64(len(records)))
		if err := f.spool.Ack(next); err != nil {
			f.log.Error("spool ack failed", "err", err)
		}
		cursor = next
	}
}

package capture

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/internal/backoff"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// Ingester is the part of the sync API that stores events.
type Ingester interface {
	Ingest(ctx context.Context, in *syncpb.IngestRequest, opts ...grpc.CallOption) (*syncpb.IngestResponse, error)
}

// Forwarder drains the spool to the control plane in batches. A batch leaves the spool only
// once the control plane has stored it, so events arrive at least once and, deduplicated by
// uuid, once. Failures are of two kinds: transient ones (the control plane or its database is
// unreachable, busy, or the call timed out) are retried with jittered backoff for as long as
// they last; permanent ones (the control plane says the request itself is wrong) can never
// succeed, so the records are retried one by one and those refused again go to the dead-letter
// file, counted, and the queue moves on.
type Forwarder struct {
	spool       *spool.Spool
	ingester    Ingester
	deadLetters *DeadLetters
	edgeID      string
	log         *slog.Logger
	// MaxBatchBytes bounds one Ingest call; 4 MiB keeps calls short and retries cheap.
	MaxBatchBytes int
	// Timeout bounds one Ingest call; storing 4 MiB of events takes well under a second.
	Timeout time.Duration
	// Retry spaces attempts after a failure: from 100 ms to 5 s, so a control plane that comes
	// back is fed within seconds without being hammered while it is down.
	Retry backoff.Backoff
	// Clock is what retries wait on.
	Clock backoff.Clock

	forwarded    prometheus.Counter
	failures     prometheus.Counter
	deadLettered prometheus.Counter
	pending      prometheus.GaugeFunc
}

// NewForwarder returns a forwarder from sp to ingester that puts refused records in dl.
func NewForwarder(sp *spool.Spool, ingester Ingester, dl *DeadLetters, edgeID string, log *slog.Logger, reg prometheus.Registerer) *Forwarder {
	f := &Forwarder{spool: sp, ingester: ingester, deadLetters: dl, edgeID: edgeID, log: log, MaxBatchBytes: 4 << 20, Timeout: 30 * time.Second,
		Retry: backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}, Clock: backoff.RealClock,
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_forwarded_records_total",
			Help: "Spool records the control plane acknowledged."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_forward_failures_total",
			Help: "Ingest calls that failed and will be retried."}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_dead_lettered_records_total",
			Help: "Spool records the control plane refused for good, moved to the dead-letter file."}),
		pending: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_spool_pending_bytes",
			Help: "Spool bytes not yet acknowledged by the control plane."}, func() float64 { return float64(sp.Pending()) }),
	}
	if reg != nil {
		reg.MustRegister(f.forwarded, f.failures, f.deadLettered, f.pending)
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
		err = f.deliver(ctx, records)
		if isPermanent(err) {
			err = f.deliverOneByOne(ctx, records)
		}
		if err != nil { // ctx ended
			return
		}
		if err := f.spool.Ack(next); err != nil {
			f.log.Error("spool ack failed", "err", err)
		}
		cursor = next
	}
}

// deliver sends records until the control plane stores them or refuses them for good (the
// permanent error is returned); it returns ctx's error when ctx ends first.
func (f *Forwarder) deliver(ctx context.Context, records [][]byte) error {
	for {
		callCtx, cancel := context.WithTimeout(ctx, f.Timeout)
		_, err := f.ingester.Ingest(callCtx, &syncpb.IngestRequest{Batches: records, EdgeId: f.edgeID},
			grpc.MaxCallSendMsgSize(64<<20))
		cancel()
		switch {
		case err == nil:
			f.Retry.Reset()
			f.forwarded.Add(float64(len(records)))
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case isPermanent(err):
			return err
		}
		f.failures.Inc()
		f.log.Warn("forwarding events failed; retrying", "err", err, "records", len(records))
		if !f.Retry.Wait(ctx, f.Clock) {
			return ctx.Err()
		}
	}
}

// deliverOneByOne sends each record alone, so that one refused record does not take the
// others with it; the refused ones go to the dead-letter file.
func (f *Forwarder) deliverOneByOne(ctx context.Context, records [][]byte) error {
	for _, r := range records {
		for {
			err := f.deliver(ctx, [][]byte{r})
			if !isPermanent(err) {
				if err != nil {
					return err
				}
				break
			}
			derr := f.deadLetters.Add(f.edgeID, r, err)
			if derr == nil {
				f.log.Error("the control plane refused a spool record for good; moved it to the dead-letter file", "err", err, "bytes", len(r))
				f.deadLettered.Inc()
				break
			}
			// Dropping the record silently would be worse than a stuck queue: keep it, retry.
			f.log.Error("dead-letter write failed; retrying the record", "err", derr)
			if !f.Retry.Wait(ctx, f.Clock) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// isPermanent reports whether a failed Ingest call can never succeed as it is: the control
// plane found the request itself wrong. Everything else — unreachable, overloaded, timed out,
// not authorised (an operator fixes the edge's credentials), an internal failure, and
// Unimplemented (what a misrouted proxy or an old control plane in a rolling upgrade answers)
// — is retried: moving good records to the dead-letter file for those would empty the spool
// into it.
func isPermanent(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition, codes.DataLoss:
		return true
	}
	return false
}

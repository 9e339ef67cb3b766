package capture

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/internal/backoff"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// Destination is where the forwarder delivers spool records (encoded syncpb.EventBatch
// messages): the control plane's Ingest call, or the JetStream event log. Deliver returns nil
// only once the records are durably the destination's; an error marked Permanent says the
// records can never be taken as they are, and any other error is transient and retried.
// Delivering the same records twice must be harmless: after a crash the forwarder sends
// again what it had sent but not yet acknowledged in the spool.
type Destination interface {
	Deliver(ctx context.Context, records [][]byte) error
}

// AsyncDestination is a Destination that can send records without waiting for them to be
// taken (the event log: asynchronous publishes). The forwarder then keeps Window batches in
// flight instead of one, so the round trip of one batch's acknowledgement no longer idles
// the link; the spool still advances only past batches the destination has taken, in order.
type AsyncDestination interface {
	Destination
	// Send sends records after those sent before and returns a function that waits until
	// the destination has them all durably, answering as Deliver would.
	Send(ctx context.Context, records [][]byte) (wait func(context.Context) error)
}

// permanentError marks a delivery that can never succeed as it is.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a refusal for good: the forwarder then sends the records one by one
// and moves those refused again to the dead-letter file instead of retrying them forever.
func Permanent(err error) error { return &permanentError{err} }

// isPermanent reports whether a delivery failed for good (see Permanent).
func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// Ingester is the part of the sync API that stores events.
type Ingester interface {
	Ingest(ctx context.Context, in *syncpb.IngestRequest, opts ...grpc.CallOption) (*syncpb.IngestResponse, error)
}

// IngestDestination delivers records straight to the control plane's Ingest call: the path
// without an event log, where the control plane stores them before it answers.
type IngestDestination struct {
	client Ingester
	edgeID string
}

// NewIngestDestination returns the destination that calls client's Ingest as edgeID.
func NewIngestDestination(client Ingester, edgeID string) *IngestDestination {
	return &IngestDestination{client: client, edgeID: edgeID}
}

// Deliver sends the records in one Ingest call; the control plane answers once it has stored
// them.
func (d *IngestDestination) Deliver(ctx context.Context, records [][]byte) error {
	_, err := d.client.Ingest(ctx, &syncpb.IngestRequest{Batches: records, EdgeId: d.edgeID}, grpc.MaxCallSendMsgSize(64<<20))
	if refusedForGood(err) {
		return Permanent(err)
	}
	return err
}

// Forwarder drains the spool to a Destination in batches. A batch leaves the spool only once
// the destination has it durably, so events arrive at least once and, deduplicated by uuid,
// once. Failures are of two kinds: transient ones (the destination or what is behind it is
// unreachable, busy, or the call timed out) are retried with jittered backoff for as long as
// they last; permanent ones (the request itself is wrong) can never succeed, so the records
// are retried one by one and those refused again go to the dead-letter file, counted, and the
// queue moves on.
type Forwarder struct {
	spool       *spool.Spool
	dest        Destination
	deadLetters *DeadLetters
	edgeID      string
	log         *slog.Logger
	// MaxBatchBytes bounds one delivery; 4 MiB keeps calls short and retries cheap.
	MaxBatchBytes int
	// Timeout bounds one delivery; storing 4 MiB of events takes well under a second.
	Timeout time.Duration
	// Window is how many batches an AsyncDestination has in flight at once (1: send one and
	// wait for it, as for any other destination); it bounds the memory held, Window times
	// MaxBatchBytes, and what a crash sends again.
	Window int
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

// NewForwarder returns a forwarder from sp to dest that puts refused records in dl.
func NewForwarder(sp *spool.Spool, dest Destination, dl *DeadLetters, edgeID string, log *slog.Logger, reg prometheus.Registerer) *Forwarder {
	f := &Forwarder{spool: sp, dest: dest, deadLetters: dl, edgeID: edgeID, log: log, MaxBatchBytes: 4 << 20, Timeout: 30 * time.Second, Window: 4,
		Retry: backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}, Clock: backoff.RealClock,
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_forwarded_records_total",
			Help: "Spool records the control plane (or the event log) acknowledged."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_forward_failures_total",
			Help: "Deliveries (Ingest calls or event-log publishes) that failed and will be retried."}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_dead_lettered_records_total",
			Help: "Spool records refused for good, moved to the dead-letter file."}),
		pending: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_spool_pending_bytes",
			Help: "Spool bytes not yet acknowledged by the control plane (or the event log)."}, func() float64 { return float64(sp.Pending()) }),
	}
	if reg != nil {
		reg.MustRegister(f.forwarded, f.failures, f.deadLettered, f.pending)
	}
	return f
}

// Run forwards until ctx ends or the spool closes.
func (f *Forwarder) Run(ctx context.Context) {
	if dest, ok := f.dest.(AsyncDestination); ok && f.Window > 1 {
		f.runPipelined(ctx, dest)
		return
	}
	cursor := f.spool.Acked()
	for {
		records, next, ok := f.read(ctx, cursor)
		if !ok {
			return
		}
		err := f.deliver(ctx, records)
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

// read returns the next batch after cursor, waiting for one; ok is false when ctx ended or
// the spool closed (a failed read is logged).
func (f *Forwarder) read(ctx context.Context, cursor spool.Cursor) (records [][]byte, next spool.Cursor, ok bool) {
	records, next, err := f.spool.Read(ctx.Done(), cursor, f.MaxBatchBytes)
	if err != nil {
		if !errors.Is(err, spool.ErrClosed) && ctx.Err() == nil {
			f.log.Error("spool read failed", "err", err)
		}
		return nil, cursor, false
	}
	return records, next, true
}

// sentBatch is a batch sent to an AsyncDestination and not yet settled.
type sentBatch struct {
	records [][]byte
	next    spool.Cursor // the spool's cursor after the batch
	wait    func(context.Context) error
}

// runPipelined reads and sends batches while up to Window of them wait for their
// acknowledgements, which one goroutine settles in the order sent: it acknowledges the spool
// up to a batch only once that batch and every one before it are taken. A batch that failed
// is delivered again, the waiting way, before any later one is acknowledged; the batches sent
// after it meanwhile may reach the destination twice, which is harmless (message ids, uuids).
func (f *Forwarder) runPipelined(ctx context.Context, dest AsyncDestination) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The settler holds one batch and the channel the others: Window in flight.
	inflight := make(chan sentBatch, f.Window-1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer cancel() // the settler stopped (ctx ended): stop reading too
		for b := range inflight {
			if err := f.settle(ctx, b); err != nil { // ctx ended
				return
			}
			if err := f.spool.Ack(b.next); err != nil {
				f.log.Error("spool ack failed", "err", err)
			}
		}
	})
	defer func() {
		close(inflight)
		wg.Wait()
	}()
	cursor := f.spool.Acked()
	for {
		records, next, ok := f.read(ctx, cursor)
		if !ok {
			return
		}
		b := sentBatch{records: records, next: next, wait: dest.Send(ctx, records)}
		select {
		case inflight <- b:
		case <-ctx.Done():
			return
		}
		cursor = next
	}
}

// settle waits for a sent batch's acknowledgement; when it failed, it delivers the batch
// again as the sequential forwarder does (retrying, or one by one when refused for good). It
// returns an error only when ctx ended.
func (f *Forwarder) settle(ctx context.Context, b sentBatch) error {
	callCtx, cancel := context.WithTimeout(ctx, f.Timeout)
	err := b.wait(callCtx)
	cancel()
	switch {
	case err == nil:
		f.Retry.Reset()
		f.forwarded.Add(float64(len(b.records)))
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case !isPermanent(err):
		f.failures.Inc()
		f.log.Warn("forwarding events failed; retrying", "err", err, "records", len(b.records))
		if !f.Retry.Wait(ctx, f.Clock) {
			return ctx.Err()
		}
	}
	err = f.deliver(ctx, b.records)
	if isPermanent(err) {
		err = f.deliverOneByOne(ctx, b.records)
	}
	return err
}

// deliver sends records until the destination takes them or refuses them for good (the
// permanent error is returned); it returns ctx's error when ctx ends first.
func (f *Forwarder) deliver(ctx context.Context, records [][]byte) error {
	for {
		callCtx, cancel := context.WithTimeout(ctx, f.Timeout)
		err := f.dest.Deliver(callCtx, records)
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
				f.log.Error("a spool record was refused for good; moved it to the dead-letter file", "err", err, "bytes", len(r))
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

// refusedForGood reports whether a failed Ingest call can never succeed as it is: the control
// plane found the request itself wrong. Everything else — unreachable, overloaded, timed out,
// not authorised (an operator fixes the edge's credentials), an internal failure, and
// Unimplemented (what a misrouted proxy or an old control plane in a rolling upgrade answers)
// — is retried: moving good records to the dead-letter file for those would empty the spool
// into it.
func refusedForGood(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition, codes.DataLoss:
		return true
	}
	return false
}

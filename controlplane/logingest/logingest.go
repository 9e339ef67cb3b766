// Package logingest is the control plane's side of the JetStream event log: it creates (or
// updates) the stream the edges publish to, and runs the ingestion workers that fetch the
// events from the one durable consumer all replicas share and store them in PostgreSQL.
//
// A message is acknowledged only after the transaction that stored it has committed. A
// replica that dies before that leaves its messages unacknowledged; the stream delivers them
// again after the acknowledgement wait, to any replica, and the store's de-duplication by
// event uuid makes the second delivery store nothing twice. What cannot be decoded or stored
// for its content is dead-lettered by the store, and the message acknowledged, so no message
// ever holds the consumer up.
package logingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/internal/backoff"
	"github.com/flagedge/flagedge/shared/eventlog"
)

// Store stores spool records (encoded EventBatch messages), record i captured by edge
// edgeIDs[i], in one transaction, returning only once it has committed (ingest.Ingester,
// which the gRPC sync service calls too).
type Store interface {
	IngestRecords(ctx context.Context, records [][]byte, edgeIDs []string) (controlplane.IngestResult, error)
}

// Config shapes the stream, the consumer and the workers.
type Config struct {
	// Replicas of the stream (and of the consumer's state): 1 keeps one copy; 3 survives the
	// loss of a NATS server without losing or stalling anything.
	Replicas int
	// MaxAge and MaxBytes bound the stream. It is a buffer in front of PostgreSQL: stored
	// messages leave it (work-queue retention), so these limits only bite when ingestion is
	// down for long; past MaxBytes new publishes are refused (edges keep the events in their
	// spools), past MaxAge the oldest unstored events are dropped.
	MaxAge   time.Duration
	MaxBytes int64
	// AckWait is how long a fetched message may stay unacknowledged before the stream gives
	// it to another worker: the time a replica that died mid-batch holds its messages.
	AckWait time.Duration
	// Workers fetch and store concurrently in each replica.
	Workers int
	// BatchMessages and BatchBytes bound one batch, stored in one transaction; the replica's
	// pull keeps up to BatchMessages messages (and twice BatchBytes) on their way to it.
	BatchMessages int
	BatchBytes    int
	// FetchWait is the longest a batch waits to fill once its first message has come: the
	// lag added when traffic is light, for fewer, larger transactions when it is not.
	FetchWait time.Duration
	// StoreTimeout bounds one transaction; a batch of a few MiB takes well under a second.
	StoreTimeout time.Duration
}

// DefaultConfig returns what `controlplane serve` uses unless told otherwise (a function, so
// that no caller can change another's defaults).
func DefaultConfig() Config {
	return Config{Replicas: 1, MaxAge: 7 * 24 * time.Hour, MaxBytes: 10 << 30, AckWait: 30 * time.Second,
		Workers: 2, BatchMessages: 1000, BatchBytes: 4 << 20, FetchWait: 20 * time.Millisecond, StoreTimeout: 25 * time.Second}
}

// StreamConfig is the stream's configuration as cfg describes it.
func StreamConfig(cfg Config) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        eventlog.StreamName,
		Description: "flagedge: captured events on their way from the edges to PostgreSQL",
		Subjects:    []string{eventlog.Subjects},
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		MaxAge:      cfg.MaxAge,
		MaxBytes:    cfg.MaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		// Within this window a message id seen before is dropped: an edge's republish after
		// a crash. Longer windows cost the servers memory per message.
		Duplicates: 2 * time.Minute,
	}
}

// ConsumerConfig is the durable consumer's configuration as cfg describes it.
func ConsumerConfig(cfg Config) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:     eventlog.ConsumerName,
		Description: "flagedge control planes storing events in PostgreSQL",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     cfg.AckWait,
		// Never give up on a message: one that cannot be stored for its content is
		// dead-lettered and acknowledged; one that fails otherwise waits for the cause to go.
		MaxDeliver:    -1,
		MaxAckPending: max(10_000, 4*cfg.Workers*cfg.BatchMessages),
		// No MaxRequestBatch: replicas configured differently share the consumer, and a pull
		// larger than its limit would be refused every time it is asked for again.
	}
}

// Ensure creates or updates the stream and the consumer: idempotent, so every replica runs
// it at start.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Consumer, error) {
	if _, err := js.CreateOrUpdateStream(ctx, StreamConfig(cfg)); err != nil {
		return nil, fmt.Errorf("event log: stream %s: %w", eventlog.StreamName, err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, eventlog.StreamName, ConsumerConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("event log: consumer %s: %w", eventlog.ConsumerName, err)
	}
	return c, nil
}

// Ingester runs one replica's ingestion workers.
type Ingester struct {
	js    jetstream.JetStream
	nc    *nats.Conn
	store Store
	cfg   Config
	log   *slog.Logger
	// Lag, when set, observes each stored message's time from the stream's acknowledgement
	// of the publish to the commit, in seconds.
	Lag prometheus.Observer

	messages *prometheus.CounterVec
	pending  prometheus.Gauge
	lag      prometheus.Histogram
}

// New returns the ingester consuming on nc into store; its metrics go to reg (nil: none).
func New(nc *nats.Conn, store Store, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Ingester, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	in := &Ingester{js: js, nc: nc, store: store, cfg: cfg, log: log,
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_event_log_messages_total",
			Help: "Event-log messages taken by this replica, by result: stored, or failed (to be delivered again)."}, []string{"result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flagedge_controlplane_event_log_pending_messages",
			Help: "Messages in the event log not yet stored: waiting, or delivered and not yet acknowledged (the backlog)."}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flagedge_controlplane_event_log_lag_seconds",
			Help:    "Time from the event log's acknowledgement of a publish to the commit that stored it.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
	}
	if reg != nil {
		reg.MustRegister(in.messages, in.pending, in.lag)
	}
	return in, nil
}

// Run creates or updates the stream and the consumer (retrying until NATS answers), then
// runs the workers until ctx ends. Messages reach the workers through one continuous pull
// (Consume) per replica, which keeps pull requests outstanding so that the servers always have
// somewhere to deliver: a pull that the client has given up on while the servers were still
// sending (what short Fetch calls met at replication 3) leaves its messages unacknowledged until
// AckWait redelivers them. A worker that is storing a batch when ctx ends finishes it and
// acknowledges it; a message handed over after that is negatively acknowledged, so that it
// is delivered again at once, and what the pull had buffered beyond is delivered again
// after AckWait.
func (in *Ingester) Run(ctx context.Context) {
	retry := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	var cons jetstream.Consumer
	for {
		c, err := in.ensure(ctx)
		if err == nil {
			cons = c
			break
		}
		in.log.Warn("event log: cannot set up the stream yet; retrying", "err", err)
		if !retry.Wait(ctx, backoff.RealClock) {
			return
		}
	}
	in.log.Info("event log: consuming", "stream", eventlog.StreamName, "consumer", eventlog.ConsumerName, "workers", in.cfg.Workers)
	msgs := make(chan jetstream.Msg, in.cfg.BatchMessages)
	var wg sync.WaitGroup
	for range in.cfg.Workers {
		wg.Go(func() { in.work(ctx, msgs) })
	}
	wg.Go(func() { in.watchBacklog(ctx, cons) })
	in.consume(ctx, cons, msgs)
	wg.Wait()
	for {
		select {
		case m := <-msgs: // handed over, taken by no worker: for another replica at once
			_ = m.Nak()
		default:
			return
		}
	}
}

func (in *Ingester) ensure(ctx context.Context) (jetstream.Consumer, error) {
	// A request sent while the connection is (re)connecting is dropped, not buffered: ask
	// only once connected rather than wait for an answer that cannot come.
	if !in.nc.IsConnected() {
		return nil, errors.New("not connected to NATS")
	}
	// An answer lost while NATS elects leaders (seen on clusters just formed) is given up
	// soon and asked again; the calls are idempotent.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return Ensure(ctx, in.js, in.cfg)
}

// pullHeartbeat is how often the servers confirm that a pull is still held while it has
// nothing to deliver. A pull the servers have dropped (its consumer's leader lost with a
// server) is noticed after two missed heartbeats and asked for again: the client's default,
// half the pull's 30 s expiry, left a replica idle for half a minute.
const pullHeartbeat = 2 * time.Second

// consume keeps one continuous pull handing messages to msgs until ctx ends, starting it
// again (after setting the stream and consumer up again) when it stops by itself: the
// consumer was deleted, NATS replaced, or a pull request went unanswered.
func (in *Ingester) consume(ctx context.Context, cons jetstream.Consumer, msgs chan<- jetstream.Msg) {
	retry := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	// The pull keeps at most a batch of messages, and a few batches' bytes, in flight to
	// this replica; a message larger than that must still fit.
	maxBytes := max(2*in.cfg.BatchBytes, int(in.nc.MaxPayload())+64<<10)
	for ctx.Err() == nil {
		started := time.Now()
		cc, err := cons.Consume(func(m jetstream.Msg) {
			select {
			case msgs <- m:
			case <-ctx.Done(): // stopping: another replica (or this one, restarted) takes it now
				_ = m.Nak()
			}
		}, jetstream.PullMaxMessagesWithBytesLimit(in.cfg.BatchMessages, maxBytes), jetstream.PullHeartbeat(pullHeartbeat),
			jetstream.ConsumeErrHandler(func(cc jetstream.ConsumeContext, err error) {
				switch {
				case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrServerShutdown):
					// A pull request published before the consumer's leader listens (just
					// created, or being elected) is answered 503 and dropped, and one held by a
					// server that shuts down is ended; either way the client still counts its
					// messages as coming and asks for no more until two heartbeats are missed.
					// Start over instead: draining hands what other pulls have already
					// buffered to the workers first.
					in.log.Info("event log: a pull was dropped by the servers; starting it again", "err", err)
					cc.Drain()
				case errors.Is(err, jetstream.ErrNoHeartbeat), errors.Is(err, jetstream.ErrConsumerLeadershipChanged):
					in.log.Debug("event log: pull", "err", err) // the client asks again by itself
				default:
					// Refused pulls (a limit of the consumer's) are asked for again and
					// refused again: an operator must see it.
					in.log.Warn("event log: pull", "err", err)
				}
			}))
		if err == nil {
			select {
			case <-ctx.Done():
				cc.Stop()
				return
			case <-cc.Closed():
				in.log.Warn("event log: the pull stopped; starting it again")
			}
		} else {
			in.log.Warn("event log: cannot pull; retrying", "err", err)
		}
		if time.Since(started) > time.Minute {
			retry.Reset() // a pull that ran for a while: this stop is not part of a series
		}
		if !retry.Wait(ctx, backoff.RealClock) {
			return
		}
		// The stream or the consumer may have been deleted, or NATS replaced: set up again.
		if c, err := in.ensure(ctx); err == nil {
			cons = c
		}
	}
}

// work takes batches from msgs and stores each in one transaction until ctx ends: a batch is
// what is waiting, up to BatchMessages and BatchBytes, topped up for at most FetchWait.
func (in *Ingester) work(ctx context.Context, msgs <-chan jetstream.Msg) {
	retry := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	linger := time.NewTimer(0)
	for {
		var batch []jetstream.Msg
		select {
		case m := <-msgs:
			batch = append(batch, m)
		case <-ctx.Done():
			return
		}
		size := len(batch[0].Data())
		linger.Reset(in.cfg.FetchWait)
	fill:
		for len(batch) < in.cfg.BatchMessages && size < in.cfg.BatchBytes {
			select {
			case m := <-msgs:
				batch = append(batch, m)
				size += len(m.Data())
			case <-linger.C:
				break fill
			case <-ctx.Done():
				break fill
			}
		}
		linger.Stop()
		if err := in.store1(ctx, batch); err != nil {
			in.messages.WithLabelValues("failed").Add(float64(len(batch)))
			delay := retry.Next()
			in.log.Warn("event log: storing a batch failed; it will be delivered again", "err", err, "messages", len(batch), "retry_in", delay)
			for _, m := range batch {
				_ = m.NakWithDelay(delay) // lost: the ack wait redelivers it
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		retry.Reset()
	}
}

// store1 stores one batch in one transaction and then acknowledges its messages. The
// transaction is not cut short when ctx ends (a graceful stop), only by StoreTimeout.
func (in *Ingester) store1(ctx context.Context, msgs []jetstream.Msg) error {
	records := make([][]byte, len(msgs))
	edges := make([]string, len(msgs))
	for i, m := range msgs {
		records[i] = m.Data()
		edges[i] = m.Headers().Get(eventlog.HeaderEdgeID)
	}
	storeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.StoreTimeout)
	defer cancel()
	if _, err := in.store.IngestRecords(storeCtx, records, edges); err != nil {
		return err
	}
	now := time.Now()
	for _, m := range msgs {
		// An acknowledgement lost on the way is harmless: the message comes again and is
		// found stored.
		if err := m.Ack(); err != nil {
			in.log.Debug("event log: ack failed", "err", err)
		}
		if md, err := m.Metadata(); err == nil {
			lag := now.Sub(md.Timestamp).Seconds()
			in.lag.Observe(lag)
			if in.Lag != nil {
				in.Lag.Observe(lag)
			}
		}
	}
	in.messages.WithLabelValues("stored").Add(float64(len(msgs)))
	return nil
}

// watchBacklog keeps the backlog gauge current: what operators watch to see ingestion keep up.
func (in *Ingester) watchBacklog(ctx context.Context, cons jetstream.Consumer) {
	for {
		infoCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if info, err := cons.Info(infoCtx); err == nil {
			in.pending.Set(float64(info.NumPending + uint64(info.NumAckPending)))
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

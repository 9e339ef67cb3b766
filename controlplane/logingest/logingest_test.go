package logingest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/controlplane/ingest"
	"github.com/flagedge/flagedge/controlplane/logingest"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/natstest"
	"github.com/flagedge/flagedge/internal/pgtest"
	"github.com/flagedge/flagedge/shared/eventlog"
	"github.com/flagedge/flagedge/shared/syncpb"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, postgres.Migrate)) }

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
var _ = io.Discard

// replica is one control plane's ingestion: its own NATS connection, database pool and
// sync server, as a separate process would have.
type replica struct {
	in        *logingest.Ingester
	reg       *prometheus.Registry
	cancel    context.CancelFunc
	done      chan struct{}
	consuming atomic.Bool // the replica logged that it consumes
}

// consumingLog is quiet's handler that also notes the replica's "event log: consuming".
type consumingLog struct {
	slog.Handler
	r *replica
}

func (h consumingLog) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "event log: consuming" {
		h.r.consuming.Store(true)
	}
	return h.Handler.Handle(ctx, rec)
}

func (h consumingLog) Enabled(context.Context, slog.Level) bool { return true }

// waitConsuming waits until the replica consumes the stream.
func (r *replica) waitConsuming(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !r.consuming.Load(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a replica did not start consuming within 30 s")
		}
	}
}

func startReplica(t *testing.T, natsURL, dbURL string, cfg logingest.Config) *replica {
	t.Helper()
	ctx := context.Background()
	db, err := postgres.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	nc, err := eventlog.Config{URL: natsURL}.Connect("test replica", quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	reg := prometheus.NewRegistry()
	srv := ingest.New(postgres.NewEventStore(db, quiet), quiet, reg)
	r := &replica{reg: reg}
	in, err := logingest.New(nc, srv, cfg, slog.New(consumingLog{Handler: quiet.Handler(), r: r}), reg)
	if err != nil {
		t.Fatal(err)
	}
	r.in = in
	ctx, cancel := context.WithCancel(ctx)
	r.cancel, r.done = cancel, make(chan struct{})
	go func() { in.Run(ctx); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// stored reads how many messages the replica stored, from its metric.
func (r *replica) stored(t *testing.T) float64 {
	t.Helper()
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "flagedge_controlplane_event_log_messages_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "stored" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// publisher publishes spool records as an edge does: one message per record on the
// project's subject, with the content hash as message id.
type publisher struct {
	t  *testing.T
	js jetstream.JetStream
}

func newPublisher(t *testing.T, url string) *publisher {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &publisher{t: t, js: js}
}

// publish retries until the stream acknowledges, as the forwarder does.
func (p *publisher) publish(project int64, record []byte) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		msg := nats.NewMsg(eventlog.Subject(project))
		msg.Data = record
		msg.Header.Set(eventlog.HeaderEdgeID, "edge-test")
		_, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(eventlog.MsgID(record)))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Errorf("publish: %v", err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitConsumer waits until the replicas have set up the stream and the consumer.
func waitConsumer(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.Consumer(ctx, eventlog.StreamName, eventlog.ConsumerName)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no consumer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func record(t *testing.T, project int64, ids []string) []byte {
	b := &syncpb.EventBatch{ProjectId: project}
	now := time.Now().UnixMicro()
	for i, id := range ids {
		b.Events = append(b.Events, &syncpb.CapturedEvent{Uuid: id, Event: "load", DistinctId: fmt.Sprintf("u%d", i%7),
			Properties: []byte(`{"n":1}`), TimestampUs: now, ReceivedUs: now})
	}
	raw, err := proto.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestTwoReplicasShareTheLogAndStoreOnce: two replicas consume one durable consumer of a
// stream replicated on three NATS servers; one server is killed mid-run. Every published
// event is stored exactly once, republished records (same message id, and records carrying
// uuids already stored) store nothing twice, a malformed message is dead-lettered instead
// of holding the consumer up, and both replicas take part.
func TestTwoReplicasShareTheLogAndStoreOnce(t *testing.T) {
	cluster := natstest.New(t, natstest.Options{})
	dbURL := pgtest.NewDatabase(t)
	ctx := context.Background()
	db, err := postgres.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	boot, err := postgres.Bootstrap(ctx, db, bcrypt.MinCost, "ops@example.com", "p")
	if err != nil {
		t.Fatal(err)
	}
	cfg := logingest.DefaultConfig()
	// Small batches, so that both replicas get some of this short run.
	cfg.Replicas, cfg.AckWait, cfg.MaxBytes, cfg.BatchMessages = 3, 2*time.Second, 64<<20, 20
	a, b := startReplica(t, cluster.URL(), dbURL, cfg), startReplica(t, cluster.URL(), dbURL, cfg)

	pub := newPublisher(t, cluster.URL())
	waitConsumer(t, pub.js)
	// Both replicas consuming before anything is published: one still setting up the stream
	// when a short run's messages arrive would get none of them.
	for _, r := range []*replica{a, b} {
		r.waitConsuming(t)
	}
	const records, perRecord = 400, 10
	var all []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < records; i += 4 {
				ids := make([]string, perRecord)
				for j := range ids {
					ids[j] = uuid.NewString()
				}
				rec := record(t, boot.ProjectID, ids)
				pub.publish(boot.ProjectID, rec)
				if i%10 == 0 {
					pub.publish(boot.ProjectID, rec) // the same message again: the stream drops it
					// The same events in a new message (past the duplicate window): stored once by
					// uuid. An unknown field makes it new; a second project_id would have the
					// batch refused.
					pub.publish(boot.ProjectID, protowire.AppendVarint(protowire.AppendTag(rec, 15, protowire.VarintType), 1))
				}
				if i == records/2 {
					cluster.Kill(0)
				}
				mu.Lock()
				all = append(all, ids...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	pub.publish(0, []byte{0xff, 0xff, 0xff}) // not an EventBatch at all

	var stored, distinct, missing, dead int
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM events WHERE event = 'load'), (SELECT count(DISTINCT uuid) FROM events WHERE event = 'load'),
			(SELECT count(*) FROM unnest($1::uuid[]) AS a(id) LEFT JOIN events e ON e.uuid = a.id WHERE e.uuid IS NULL),
			(SELECT count(*) FROM dead_letters)`, all).Scan(&stored, &distinct, &missing, &dead); err != nil {
			t.Fatal(err)
		}
		if (missing == 0 && dead == 1) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if missing != 0 || stored != distinct || stored != len(all) || dead != 1 {
		t.Fatalf("%d published, %d stored, %d duplicates, %d missing, %d dead letters (want 1)", len(all), stored, stored-distinct, missing, dead)
	}
	aStored, bStored := a.stored(t), b.stored(t)
	// Both replicas take part: a pull that one replica's first request lost (the consumer's
	// leader not yet listening, answered 503) or that went with the killed server is asked
	// for again within seconds, not left idle for the client's 30 s default.
	if aStored == 0 || bStored == 0 {
		t.Fatalf("not shared: replica a stored %v messages, b %v", aStored, bStored)
	}
	t.Logf("%d events published (and %d records again), one NATS server killed mid-run: %d stored, %d duplicates, 0 missing; messages stored by replica a %v, b %v; the malformed message dead-lettered",
		len(all), records/10*2, stored, stored-distinct, aStored, bStored)
}

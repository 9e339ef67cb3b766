package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/controlplane/ingest"
	"github.com/flagedge/flagedge/controlplane/logingest"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/internal/natstest"
	"github.com/flagedge/flagedge/internal/pgcluster"
	"github.com/flagedge/flagedge/shared/eventlog"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// The eventlog scenario measures the JetStream path on its own, end to end: records of 100
// events are published as an edge's forwarder publishes them (capture.JetStreamDestination)
// to a 3-node NATS cluster on loopback (stream replicated 3 times), and one or two ingesting
// replicas (logingest, each with its own NATS connection and PostgreSQL pool, as separate
// processes would have) store them in a throwaway PostgreSQL (fsync off, as the other
// ingestion figures). It needs no running flagedge: `go run ./bench --scenario eventlog`.

// lagObserver records each message's publish→commit lag, in microseconds.
type lagObserver struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func (o *lagObserver) Observe(seconds float64) {
	o.mu.Lock()
	_ = o.h.RecordValue(int64(seconds * 1e6))
	o.mu.Unlock()
}

type eventLogResult struct {
	direct            float64 // events/s of the same store calls without the log: the ceiling
	replicas          int
	events            int
	throughput        float64 // events stored per second, publishing as fast as possible
	pacedRate         int
	lagP50, lagP99    time.Duration // at pacedRate
	lagMax            time.Duration
	saturatedLagP99Ms float64
}

func eventLogScenario(cfg config) error {
	ctx := context.Background()
	progress("eventlog: starting PostgreSQL and a 3-node NATS cluster")
	pg, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return err
	}
	defer pg.Stop()
	natsDir, err := os.MkdirTemp("", "flagedge-bench-nats-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(natsDir)
	cluster, err := natstest.Start(ctx, natsDir, natstest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	load, _ := os.ReadFile("/proc/loadavg")
	var results []eventLogResult
	for _, replicas := range []int{1, 2} {
		res, err := eventLogRun(ctx, pg, cluster, replicas, cfg)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Event log (NATS JetStream, 3 nodes, stream replicas %d) → PostgreSQL\n\nmachine: %s\n\n", cfg.streamReplicas, machine())
	fmt.Fprintf(&b, "load average before the run: %s\n", strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Fprintf(&b, "the same events stored by direct calls (4,000 events per transaction, no log), same run: %.0f events/s\n\n", results[0].direct)
	fmt.Fprintf(&b, "| ingesting replicas | events | stored events/s (publishing flat out) | lag p99 flat out | paced rate | lag p50 | lag p99 | lag max |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.0f ms | %d events/s | %v | %v | %v |\n", r.replicas, r.events, r.throughput, r.saturatedLagP99Ms,
			r.pacedRate, r.lagP50.Round(100*time.Microsecond), r.lagP99.Round(100*time.Microsecond), r.lagMax.Round(time.Millisecond))
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.out, "eventlog.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Print("\n" + b.String())
	return nil
}

// eventLogRun measures with the given number of ingesting replicas on a fresh database and
// stream: first publishing a fixed number of events as fast as possible (throughput), then
// at a fixed rate below it (lag).
func eventLogRun(ctx context.Context, pg *pgcluster.Cluster, cluster *natstest.Cluster, replicas int, cfg config) (eventLogResult, error) {
	res := eventLogResult{replicas: replicas}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dbName := fmt.Sprintf("bench_eventlog_%d_%d", replicas, time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return res, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		return res, err
	}
	url := pg.URL(dbName)
	if err := postgres.Migrate(ctx, url); err != nil {
		return res, err
	}
	db, err := postgres.Open(ctx, url)
	if err != nil {
		return res, err
	}
	defer db.Close()
	boot, err := postgres.Bootstrap(ctx, db, "bench@example.com", "eventlog")
	if err != nil {
		return res, err
	}
	// A fresh stream per run, so that one run's backlog does not weigh on the next.
	nc, err := eventlog.Config{URL: cluster.URL()}.Connect("bench publisher", quiet)
	if err != nil {
		return res, err
	}
	defer nc.Close()
	ingestCfg := logingest.DefaultConfig()
	ingestCfg.Replicas, ingestCfg.MaxBytes = cfg.streamReplicas, 2<<30
	lags := &lagObserver{h: hdrhistogram.New(1, 120_000_000, 3)}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for i := range replicas {
		rdb, err := postgres.Open(ctx, url)
		if err != nil {
			return res, err
		}
		defer rdb.Close()
		rnc, err := eventlog.Config{URL: cluster.URL()}.Connect(fmt.Sprintf("bench replica %d", i), quiet)
		if err != nil {
			return res, err
		}
		defer rnc.Close()
		srv := ingest.New(postgres.NewEventStore(rdb, quiet), quiet, nil)
		in, err := logingest.New(rnc, srv, ingestCfg, quiet, nil)
		if err != nil {
			return res, err
		}
		in.Lag = lags
		wg.Go(func() { in.Run(runCtx) })
	}
	dest, err := capture.NewJetStreamDestination(nc, "bench-edge")
	if err != nil {
		return res, err
	}
	records := func(n int) [][]byte {
		out := make([][]byte, 0, n/100)
		now := time.Now().UnixMicro()
		for r := 0; r < n/100; r++ {
			b := &syncpb.EventBatch{ProjectId: boot.ProjectID}
			for j := range 100 {
				b.Events = append(b.Events, &syncpb.CapturedEvent{Uuid: uuid.NewString(), Event: "$pageview", DistinctId: fmt.Sprintf("user-%d", (r*100+j)%5000),
					Properties: []byte(`{"$current_url":"https://shop.example.com/p/42","$browser":"Chrome","$lib":"web"}`), TimestampUs: now, ReceivedUs: now})
			}
			raw, _ := proto.Marshal(b)
			out = append(out, raw)
		}
		return out
	}
	publish := func(recs [][]byte) error {
		for len(recs) > 0 {
			n := min(len(recs), 40) // 4,000 events per delivery, about what the forwarder sends at once
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := dest.Deliver(dctx, recs[:n])
			cancel()
			if err != nil {
				time.Sleep(100 * time.Millisecond) // the stream is still being set up
				continue
			}
			recs = recs[n:]
		}
		return nil
	}
	stored := func() (int, error) {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n)
		return n, err
	}
	waitStored := func(want int, limit time.Duration) error {
		deadline := time.Now().Add(limit)
		for {
			n, err := stored()
			if err != nil {
				return err
			}
			if n >= want {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("eventlog: %d of %d events stored after %v", n, want, limit)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if replicas == 1 {
		// The ceiling in this run's conditions: the store alone, as the direct gRPC path
		// calls it, on a database of its own.
		srv := ingest.New(postgres.NewEventStore(db, quiet), quiet, nil)
		direct := records(100_000)
		progress("eventlog: the store alone, 100000 events")
		start := time.Now()
		for i := 0; i < len(direct); i += 40 {
			recs := direct[i:min(i+40, len(direct))]
			if _, err := srv.IngestRecords(ctx, recs, make([]string, len(recs))); err != nil {
				return res, err
			}
		}
		res.direct = float64(len(direct)*100) / time.Since(start).Seconds()
		if _, err := db.Pool.Exec(ctx, `TRUNCATE events`); err != nil {
			return res, err
		}
	}
	// Warm-up: the stream and consumer are set up and the first batches stored.
	if err := publish(records(2000)); err != nil {
		return res, err
	}
	if err := waitStored(2000, time.Minute); err != nil {
		return res, err
	}
	lags.h.Reset()

	// Throughput: a fixed amount published as fast as possible while the replicas store.
	res.events = int(max(cfg.duration.Seconds(), 5) * 20_000)
	batch := records(res.events)
	progress(fmt.Sprintf("eventlog: %d replica(s), %d events flat out", replicas, res.events))
	start := time.Now()
	if err := publish(batch); err != nil {
		return res, err
	}
	if err := waitStored(2000+res.events, 3*time.Minute); err != nil {
		return res, err
	}
	res.throughput = float64(res.events) / time.Since(start).Seconds()
	res.saturatedLagP99Ms = float64(lags.h.ValueAtQuantile(99)) / 1000
	lags.h.Reset()

	// Lag at a steady rate well below the throughput: one record of 100 events at a time.
	res.pacedRate = int(res.throughput/2) / 100 * 100
	pacedEvents := int(float64(res.pacedRate) * max(cfg.duration.Seconds(), 5))
	paced := records(pacedEvents)
	progress(fmt.Sprintf("eventlog: %d replica(s), %d events/s paced", replicas, res.pacedRate))
	interval := time.Duration(float64(time.Second) * 100 / float64(res.pacedRate))
	next := time.Now()
	for _, r := range paced {
		time.Sleep(time.Until(next))
		next = next.Add(interval)
		if err := publish([][]byte{r}); err != nil {
			return res, err
		}
	}
	if err := waitStored(2000+res.events+len(paced)*100, time.Minute); err != nil {
		return res, err
	}
	res.lagP50 = time.Duration(lags.h.ValueAtQuantile(50)) * time.Microsecond
	res.lagP99 = time.Duration(lags.h.ValueAtQuantile(99)) * time.Microsecond
	res.lagMax = time.Duration(lags.h.Max()) * time.Microsecond
	stop()
	wg.Wait()
	// Leave no stream behind for the next run.
	js, _ := jetstreamFor(nc)
	if js != nil {
		_ = js.DeleteStream(ctx, eventlog.StreamName)
	}
	return res, nil
}

func jetstreamFor(nc *nats.Conn) (jetstream.JetStream, error) { return jetstream.New(nc) }

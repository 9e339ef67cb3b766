package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/internal/natstest"
)

// The eventlog scenario measures the product's own path through the JetStream event log, as
// an operator runs it: bin/edge with --event-log-url taking PostHog /batch bodies over HTTP,
// a 3-node NATS cluster on loopback (nats-server processes, natstest), bin/controlplane with
// --event-log-url ingesting into a throwaway PostgreSQL (fsync off, as the other ingestion
// figures). For each build (--edge-bin/--controlplane-bin pairs, "tree" built from this
// tree) and each stream replication (1 and 3), interleaved, --eventlog-rounds times, on a
// fresh stack each:
//
//   - flat out: eventLogSenders senders post /batch bodies of eventLogBatchEvents events
//     until eventLogFlatEvents are taken; stored events/s is that count over the time from
//     the first post until PostgreSQL holds all of them;
//   - paced: eventLogPacedRate events/s for the duration, for the lag of a log that keeps up.
//
// Lag is each event's time from the edge's capture (its created_at, the edge's receive time)
// to the commit of the transaction that stored it (pg_xact_commit_timestamp, with
// track_commit_timestamp on): capture → stored, every event counted.
//
//	go run ./bench --scenario eventlog --edge-bin /work/el-before/edge,tree --controlplane-bin /work/el-before/controlplane,tree
const (
	eventLogSenders     = 4
	eventLogBatchEvents = 500
	eventLogFlatEvents  = 200_000
	eventLogPacedRate   = 10_000
)

// eventLogResult is one run: one build at one replication.
type eventLogResult struct {
	Build    string `json:"build"`
	Replicas int    `json:"replicas"`
	Round    int    `json:"round"`
	// Flat out.
	Events       int     `json:"events"`
	TakenSeconds float64 `json:"taken_seconds"` // until the edge had taken every /batch
	// PublishedSeconds is until the edge's spool was empty: every event acknowledged by the
	// event log (to within 250 ms; at the latest when every event was stored).
	PublishedSeconds float64 `json:"published_seconds"`
	StoredPerSec     float64 `json:"stored_events_per_second"`
	FlatLagP50Ms     float64 `json:"flat_lag_p50_ms"`
	FlatLagP99Ms     float64 `json:"flat_lag_p99_ms"`
	// Paced.
	PacedRate     int     `json:"paced_rate"`
	PacedLagP50Ms float64 `json:"paced_lag_p50_ms"`
	PacedLagP99Ms float64 `json:"paced_lag_p99_ms"`
	PacedLagMaxMs float64 `json:"paced_lag_max_ms"`
}

// eventLogBuild is one edge and control plane binary pair to measure.
type eventLogBuild struct {
	name, edge, controlPlane string
}

func eventLogScenario(cfg config) error {
	ctx := context.Background()
	builds, cleanup, err := eventLogBuilds(ctx, cfg)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	load := loadAverage()
	var results []eventLogResult
	for round := 1; round <= cfg.eventLogRounds; round++ {
		for _, b := range builds {
			for _, replicas := range cfg.eventLogReplicas {
				progress(fmt.Sprintf("eventlog: round %d, %s, stream replicas %d", round, b.name, replicas))
				res, err := eventLogRun(ctx, b, replicas, round, cfg)
				if err != nil {
					return fmt.Errorf("%s R%d: %w", b.name, replicas, err)
				}
				progress(fmt.Sprintf("eventlog: %s R%d: %.0f events/s stored, lag p99 %.0f ms flat out, %.0f ms at %d/s",
					b.name, replicas, res.StoredPerSec, res.FlatLagP99Ms, res.PacedLagP99Ms, res.PacedRate))
				results = append(results, res)
			}
		}
	}
	report := eventLogMarkdown(results, builds, load)
	if err := writeScenarioReport(cfg.out, "eventlog", "results", results, report); err != nil {
		return err
	}
	fmt.Print("\n" + report)
	return nil
}

// eventLogBuilds pairs --edge-bin and --controlplane-bin (comma-separated, "tree" or empty:
// built from this tree once).
func eventLogBuilds(ctx context.Context, cfg config) ([]eventLogBuild, func(), error) {
	edges := strings.Split(cfg.edgeBin, ",")
	cps := strings.Split(cfg.controlPlaneBin, ",")
	if len(edges) != len(cps) {
		return nil, nil, fmt.Errorf("eventlog: --edge-bin and --controlplane-bin name %d and %d builds; give them in pairs", len(edges), len(cps))
	}
	dir, err := os.MkdirTemp("", "flagedge-bench-eventlog-bin-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	built := false
	var builds []eventLogBuild
	for i := range edges {
		b := eventLogBuild{name: "tree", edge: edges[i], controlPlane: cps[i]}
		tree := func(s string) bool { return s == "" || s == "tree" }
		if tree(b.edge) || tree(b.controlPlane) {
			if !built {
				if err := buildTree(ctx, "eventlog", dir, "./edge/cmd/edge", "./controlplane/cmd/controlplane"); err != nil {
					cleanup()
					return nil, nil, err
				}
				built = true
			}
			if tree(b.edge) {
				b.edge = filepath.Join(dir, "edge")
			}
			if tree(b.controlPlane) {
				b.controlPlane = filepath.Join(dir, "controlplane")
			}
		}
		if !tree(edges[i]) || !tree(cps[i]) {
			b.name = filepath.Dir(edges[i])
			if tree(edges[i]) {
				b.name = filepath.Dir(cps[i])
			}
		}
		builds = append(builds, b)
	}
	return builds, cleanup, nil
}

// eventLogRun starts a NATS cluster and a stack for one build and replication, and measures.
func eventLogRun(ctx context.Context, b eventLogBuild, replicas, round int, cfg config) (eventLogResult, error) {
	res := eventLogResult{Build: b.name, Replicas: replicas, Round: round, Events: eventLogFlatEvents, PacedRate: eventLogPacedRate}
	natsDir, err := os.MkdirTemp("", "flagedge-bench-nats-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(natsDir)
	cluster, err := natstest.Start(ctx, natsDir, natstest.Options{})
	if err != nil {
		return res, err
	}
	defer cluster.Stop()
	opts := stackOptions{name: "eventlog", edgeBin: b.edge, controlPlaneBin: b.controlPlane,
		pgSettings: []string{"track_commit_timestamp=on"},
		controlPlaneArgs: []string{"--event-log-url", cluster.URL(), "--event-log-replicas", strconv.Itoa(replicas),
			"--event-log-max-bytes", strconv.Itoa(2 << 30)}, // within the test cluster's 8 GB store
		edgeArgs: []string{"--event-log-url", cluster.URL()}}
	opts.controlPlaneArgs = append(opts.controlPlaneArgs, strings.Fields(cfg.eventLogCPArgs)...)
	opts.edgeArgs = append(opts.edgeArgs, strings.Fields(cfg.eventLogEdgeArgs)...)
	var edgePprof, cpPprof string
	if cfg.profile {
		if edgePprof, err = freeAddr(); err != nil {
			return res, err
		}
		if cpPprof, err = freeAddr(); err != nil {
			return res, err
		}
		opts.edgeArgs = append(opts.edgeArgs, "--pprof-addr", edgePprof)
		opts.controlPlaneArgs = append(opts.controlPlaneArgs, "--pprof-addr", cpPprof)
	}
	st, err := startSelfStack(ctx, opts)
	if err != nil {
		return res, err
	}
	defer st.close()
	tag := fmt.Sprintf("eventlog-%s-r%d-%d", filepath.Base(b.name), replicas, round)
	defer st.keepLogs(cfg.out, tag+"-")
	_, token, err := st.project()
	if err != nil {
		return res, err
	}
	db, err := pgx.Connect(ctx, st.dbURL)
	if err != nil {
		return res, err
	}
	defer db.Close(ctx)
	s := &eventLogSender{url: "http://" + st.edge.httpAddr + "/batch/", token: token, client: &fasthttp.Client{MaxConnsPerHost: eventLogSenders}}

	// Warm-up: the stream and the consumer set up, the first events stored.
	if err := s.send("warmup", 2*eventLogBatchEvents, 0, time.Minute); err != nil {
		return res, err
	}
	if err := waitEvents(ctx, db, "warmup", 2*eventLogBatchEvents, time.Minute, nil); err != nil {
		return res, err
	}

	var profiles sync.WaitGroup
	if cfg.profile {
		for name, addr := range map[string]string{"edge": edgePprof, "controlplane": cpPprof} {
			profiles.Go(func() {
				if err := fetchProfile(addr, 5, filepath.Join(cfg.out, tag+"-"+name+"-cpu.pprof")); err != nil {
					progress("eventlog: " + name + " profile: " + err.Error())
				}
			})
		}
	}
	start := time.Now()
	if err := s.send("flat", eventLogFlatEvents, 0, 3*time.Minute); err != nil {
		return res, err
	}
	res.TakenSeconds = time.Since(start).Seconds()
	metrics := "http://" + st.edge.metricsAddr
	if err := waitEvents(ctx, db, "flat", eventLogFlatEvents, 3*time.Minute, func(stored int) {
		m, _ := scrape(metrics)
		pending, ok := m["flagedge_edge_spool_pending_bytes"]
		if ok && pending == 0 && res.PublishedSeconds == 0 {
			res.PublishedSeconds = time.Since(start).Seconds()
		}
		progress(fmt.Sprintf("eventlog: %s R%d: %d of %d stored, %.1f MB in the edge's spool", b.name, replicas, stored, eventLogFlatEvents, pending/1e6))
	}); err != nil {
		return res, err
	}
	stored := time.Since(start).Seconds()
	res.StoredPerSec = float64(eventLogFlatEvents) / stored
	if res.PublishedSeconds == 0 { // the spool emptied after the last look: by the time all were stored
		res.PublishedSeconds = stored
	}
	profiles.Wait()
	if res.FlatLagP50Ms, res.FlatLagP99Ms, _, err = eventLag(ctx, db, "flat"); err != nil {
		return res, err
	}

	paced := int(max(cfg.duration.Seconds(), 5) * eventLogPacedRate)
	if err := s.send("paced", paced, eventLogPacedRate, time.Minute); err != nil {
		return res, err
	}
	if err := waitEvents(ctx, db, "paced", paced, time.Minute, nil); err != nil {
		return res, err
	}
	res.PacedLagP50Ms, res.PacedLagP99Ms, res.PacedLagMaxMs, err = eventLag(ctx, db, "paced")
	return res, err
}

// eventLogSender posts /batch bodies to one edge.
type eventLogSender struct {
	url, token string
	client     *fasthttp.Client
	seq        atomic.Int64
}

// send posts events named name, eventLogBatchEvents a body, from eventLogSenders senders:
// as fast as the edge takes them when rate is 0, else rate events per second (bodies sent on
// schedule). A 503 (spool full) is sent again after a pause; within limit.
func (s *eventLogSender) send(name string, events, rate int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	bodies := make(chan int, eventLogSenders)
	errs := make(chan error, eventLogSenders)
	var wg sync.WaitGroup
	for range eventLogSenders {
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			req.SetRequestURI(s.url)
			var body []byte
			for n := range bodies {
				body = s.batch(body[:0], name, n)
				req.SetBody(body)
				for pause := 20 * time.Millisecond; ; pause = min(2*pause, time.Second) {
					err := s.client.DoDeadline(req, resp, deadline)
					if err == nil && resp.StatusCode() == 200 {
						break
					}
					if err == nil && resp.StatusCode() != fasthttp.StatusServiceUnavailable {
						errs <- fmt.Errorf("POST /batch/: %d %s", resp.StatusCode(), resp.Body())
						return
					}
					if time.Now().Add(pause).After(deadline) {
						errs <- fmt.Errorf("POST /batch/: not taken within %v (last: %v, %d)", limit, err, resp.StatusCode())
						return
					}
					time.Sleep(pause)
				}
			}
		})
	}
	var err error
	next := time.Now()
	interval := time.Duration(0)
	if rate > 0 {
		interval = time.Second * eventLogBatchEvents / time.Duration(rate)
	}
feed:
	for left := events; left > 0; left -= eventLogBatchEvents {
		if interval > 0 {
			time.Sleep(time.Until(next))
			next = next.Add(interval)
		}
		select {
		case err = <-errs:
			break feed
		case bodies <- min(left, eventLogBatchEvents):
		}
	}
	close(bodies)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// batch appends a /batch body of n events named name: page views of 5,000 returning users.
func (s *eventLogSender) batch(dst []byte, name string, n int) []byte {
	dst = append(dst, `{"api_key":"`...)
	dst = append(dst, s.token...)
	dst = append(dst, `","batch":[`...)
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		seq := s.seq.Add(1)
		dst = append(dst, `{"event":"`...)
		dst = append(dst, name...)
		dst = append(dst, `","distinct_id":"user-`...)
		dst = strconv.AppendInt(dst, seq%5000, 10)
		dst = append(dst, `","properties":{"$current_url":"https://shop.example.com/p/`...)
		dst = strconv.AppendInt(dst, seq%100, 10)
		dst = append(dst, `","$browser":"Chrome","$lib":"bench"}}`...)
	}
	return append(dst, "]}"...)
}

// waitEvents waits until PostgreSQL holds want events named name, calling watch (when not
// nil) with the count about every 250 ms.
func waitEvents(ctx context.Context, db *pgx.Conn, name string, want int, limit time.Duration, watch func(stored int)) error {
	deadline := time.Now().Add(limit)
	var watched time.Time
	for {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM events WHERE event = $1`, name).Scan(&n); err != nil {
			return err
		}
		if watch != nil && time.Since(watched) >= 250*time.Millisecond {
			watch(n)
			watched = time.Now()
		}
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("eventlog: %d of %d %s events stored after %v", n, want, name, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventLag returns the p50, p99 and max of the events' capture → commit times, in ms.
func eventLag(ctx context.Context, db *pgx.Conn, name string) (p50, p99, maxMs float64, err error) {
	err = db.QueryRow(ctx, `WITH l AS (SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - created_at) * 1000 AS ms FROM events WHERE event = $1)
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms) FROM l`, name).Scan(&p50, &p99, &maxMs)
	return p50, p99, maxMs, err
}

// eventLogMarkdown is the report: every run, then the medians by build and replication.
func eventLogMarkdown(results []eventLogResult, builds []eventLogBuild, load string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Event log: edge /batch → NATS JetStream (3 nodes) → control plane → PostgreSQL\n\nmachine: %s\n\nload average before the run: %s\n\n", machine(), load)
	fmt.Fprintf(&b, "%d senders post /batch bodies of %d events; flat out: %d events, stored events/s from the first post until PostgreSQL holds the last; paced: %d events/s. Lag: the edge's capture → the commit that stored the event, every event.\n\n",
		eventLogSenders, eventLogBatchEvents, eventLogFlatEvents, eventLogPacedRate)
	fmt.Fprintf(&b, "| build | stream replicas | runs | stored events/s (median) | min–max | lag p50 / p99 flat out | lag p50 / p99 / max at %d/s | ÷ R1 |\n|---|---|---|---|---|---|---|---|\n", eventLogPacedRate)
	for _, bd := range builds {
		var r1 float64
		for _, replicas := range []int{1, 2, 3} {
			var rs []eventLogResult
			for _, r := range results {
				if r.Build == bd.name && r.Replicas == replicas {
					rs = append(rs, r)
				}
			}
			if len(rs) == 0 {
				continue
			}
			rate := median(rs, func(r eventLogResult) float64 { return r.StoredPerSec })
			lo, hi := rate, rate
			for _, r := range rs {
				lo, hi = min(lo, r.StoredPerSec), max(hi, r.StoredPerSec)
			}
			ratio := ""
			if replicas == 1 {
				r1 = rate
			} else if r1 > 0 {
				ratio = fmt.Sprintf("%.2f", rate/r1)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %.0f–%.0f | %.0f / %.0f ms | %.0f / %.0f / %.0f ms | %s |\n", bd.name, replicas, len(rs), rate, lo, hi,
				median(rs, func(r eventLogResult) float64 { return r.FlatLagP50Ms }), median(rs, func(r eventLogResult) float64 { return r.FlatLagP99Ms }),
				median(rs, func(r eventLogResult) float64 { return r.PacedLagP50Ms }), median(rs, func(r eventLogResult) float64 { return r.PacedLagP99Ms }),
				median(rs, func(r eventLogResult) float64 { return r.PacedLagMaxMs }), ratio)
		}
	}
	fmt.Fprintf(&b, "\nEvery run, in the order run:\n\n| round | build | replicas | stored events/s | taken by the edge in | published in | lag p99 flat out | lag p99 paced |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %s | %d | %.0f | %.1f s | %.1f s | %.0f ms | %.0f ms |\n", r.Round, r.Build, r.Replicas, r.StoredPerSec, r.TakenSeconds, r.PublishedSeconds, r.FlatLagP99Ms, r.PacedLagP99Ms)
	}
	return b.String()
}

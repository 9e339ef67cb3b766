package e2e

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/internal/natstest"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// The event log suite: edges publish to a 3-node NATS JetStream cluster (real nats-server
// processes), two control-plane replicas share its one durable consumer, and each test
// kills something mid-run. In each, every event an edge acknowledged is stored exactly once.

// logStack is a database, a NATS cluster, two control-plane replicas ingesting from it and
// an edge publishing to it.
type logStack struct {
	*stack
	nats     *natstest.Cluster
	replicas []*logReplica
	edge     *edge
}

type logReplica struct {
	*process
	httpAddr, grpcAddr string
}

func newLogStack(t *testing.T) *logStack {
	t.Helper()
	s := &stack{t: t, dbURL: pgtest.NewDatabase(t), httpAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", geoipDB: geoiptest.MustWrite(t)}
	s.bootstrap()
	ls := &logStack{stack: s, nats: natstest.New(t, natstest.Options{})}
	for i := range 2 {
		r := ls.startReplica(fmt.Sprintf("controlplane-%d", i+1))
		ls.replicas = append(ls.replicas, r)
	}
	s.cp, s.httpAddr, s.grpcAddr = ls.replicas[0].process, ls.replicas[0].httpAddr, ls.replicas[0].grpcAddr
	ls.edge = ls.startEdge("")
	return ls
}

// startReplica starts a control plane that stores what it takes from the event log; the
// acknowledgement wait is short so that a killed replica's batch comes back quickly.
func (ls *logStack) startReplica(name string) *logReplica {
	ls.t.Helper()
	p := start(ls.t, name, binaries.controlplane, "serve", "--database-url", ls.dbURL, "--http-addr", "127.0.0.1:0",
		"--grpc-addr", "127.0.0.1:0", "--drain-delay", "0s", "--event-log-url", ls.nats.URL(), "--event-log-replicas", "3",
		"--event-log-ack-wait", "2s", "--event-log-max-bytes", "268435456")
	addrs := p.listening("control plane listening")
	r := &logReplica{process: p, httpAddr: addrs["http_addr"].(string), grpcAddr: addrs["grpc_addr"].(string)}
	waitFor(ls.t, name+" ready", func() bool { return status("http://"+r.httpAddr+"/_ready") == 200 })
	return r
}

// startEdge starts the edge publishing to the event log, on dataDir ("" for a new one).
func (ls *logStack) startEdge(dataDir string) *edge {
	ls.t.Helper()
	return ls.stack.startEdge("edge", dataDir, true, "--event-log-url", ls.nats.URL(),
		"--control-plane", ls.replicas[0].grpcAddr+","+ls.replicas[1].grpcAddr)
}

// eventLoad sends batches of 10 events with known uuids to the edge until stopped, and
// keeps the uuids of those the edge acknowledged (answered 200).
type eventLoad struct {
	mu    sync.Mutex
	acked []string
	url   func() string
	stop  chan struct{}
	done  chan struct{}
}

func startEventLoad(token string, url func() string) *eventLoad {
	l := &eventLoad{url: url, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; i < 20000; i++ { // bounded; stopped earlier by the test
			select {
			case <-l.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ids := make([]string, 10)
			batch := make([]any, 10)
			for j := range ids {
				ids[j] = uuid.NewString()
				batch[j] = map[string]any{"event": "load", "distinct_id": fmt.Sprintf("l%d", j), "uuid": ids[j]}
			}
			if code, _ := postQuiet(l.url()+"/batch/", map[string]any{"api_key": token, "batch": batch}); code == 200 {
				l.mu.Lock()
				l.acked = append(l.acked, ids...)
				l.mu.Unlock()
			}
		}
	}()
	return l
}

// finish stops the load and returns the acknowledged uuids.
func (l *eventLoad) finish() []string {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

// checkExactlyOnce waits until every acknowledged event is stored, then checks that none is
// stored twice; it returns the counts for the test's log line.
func (ls *logStack) checkExactlyOnce(acked []string) (stored, duplicates int) {
	t := ls.t
	t.Helper()
	db := openDB(t, ls.dbURL)
	var distinct, missing int
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM events WHERE event = 'load'), (SELECT count(DISTINCT uuid) FROM events WHERE event = 'load'),
			(SELECT count(*) FROM unnest($1::uuid[]) AS a(id) LEFT JOIN events e ON e.uuid = a.id WHERE e.uuid IS NULL)`, acked).Scan(&stored, &distinct, &missing); err != nil {
			t.Fatal(err)
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // anything delivered twice would arrive by now
	if err := db.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT uuid) FROM events WHERE event = 'load'`).Scan(&stored, &distinct); err != nil {
		t.Fatal(err)
	}
	if len(acked) == 0 || missing != 0 || stored != distinct {
		t.Errorf("%d acknowledged, %d stored, %d duplicates, %d missing", len(acked), stored, stored-distinct, missing)
	}
	return stored, stored - distinct
}

// storedMessages reads a replica's count of event-log messages it stored.
func storedMessages(r *logReplica) float64 {
	resp, err := client.Get("http://" + r.httpAddr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `flagedge_controlplane_event_log_messages_total{result="stored"} `); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// TestEventLogNATSNodeKilled: with two replicas ingesting, one of the three NATS servers is
// killed (SIGKILL) mid-run and started again later. Capture never stops, every acknowledged
// event is stored once, and both replicas did part of the work.
func TestEventLogNATSNodeKilled(t *testing.T) {
	ls := newLogStack(t)
	load := startEventLoad(ls.token, func() string { return ls.edge.url })
	time.Sleep(time.Second)
	ls.nats.Kill(0)
	killed := time.Now()
	time.Sleep(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ls.nats.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	down := time.Since(killed)
	time.Sleep(time.Second)
	// Both replicas must take part; on a slow machine one may start consuming late, so the
	// load runs on until both have stored messages (or the wait gives up and the test fails).
	var a, b float64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		a, b = storedMessages(ls.replicas[0]), storedMessages(ls.replicas[1])
		if (a > 0 && b > 0) || time.Now().After(deadline) {
			break
		}
	}
	acked := load.finish()
	stored, dups := ls.checkExactlyOnce(acked)
	if a <= 0 || b <= 0 {
		t.Errorf("the replicas did not share the work: %v and %v messages stored", a, b)
	}
	a, b = storedMessages(ls.replicas[0]), storedMessages(ls.replicas[1])
	t.Logf("NATS server killed for %v: %d events acknowledged, %d stored, %d duplicates; messages stored by the replicas: %v and %v",
		down.Round(time.Millisecond), len(acked), stored, dups, a, b)
}

// TestEventLogReplicaKilledMidBatch: one of the two ingesting control planes is killed
// (SIGKILL) while events flow, so batches it had fetched are left unacknowledged or their
// transaction cut off; the other replica gets them after the acknowledgement wait, and
// every acknowledged event is stored once.
func TestEventLogReplicaKilledMidBatch(t *testing.T) {
	ls := newLogStack(t)
	load := startEventLoad(ls.token, func() string { return ls.edge.url })
	// The kill must find the replica at work: it waits until the replica has stored some of
	// the load, not for a fixed time a slow machine may spend before it starts.
	waitFor(t, "replica 2 storing events", func() bool { return storedMessages(ls.replicas[1]) > 0 })
	time.Sleep(300 * time.Millisecond)
	before := storedMessages(ls.replicas[1])
	ls.replicas[1].kill()
	time.Sleep(2 * time.Second)
	acked := load.finish()
	stored, dups := ls.checkExactlyOnce(acked)
	t.Logf("replica killed after storing %v messages: %d events acknowledged, %d stored, %d duplicates; the survivor stored %v messages",
		before, len(acked), stored, dups, storedMessages(ls.replicas[0]))
}

// TestEventLogEdgeKilledMidPublish: the edge is killed (SIGKILL) while it publishes, then
// started again on the same data directory: it publishes again what the stream had
// acknowledged but its spool had not recorded (the stream drops those by message id), and
// every acknowledged event is stored once.
func TestEventLogEdgeKilledMidPublish(t *testing.T) {
	ls := newLogStack(t)
	var mu sync.Mutex
	url := func() string { mu.Lock(); defer mu.Unlock(); return ls.edge.url }
	load := startEventLoad(ls.token, url)
	// The kill must find the edge publishing: it waits for the load to be under way (then
	// lets it run a while), not for a fixed time a slow machine may spend starting it.
	waitFor(t, "events acknowledged", func() bool {
		load.mu.Lock()
		defer load.mu.Unlock()
		return len(load.acked) > 0
	})
	time.Sleep(500 * time.Millisecond)
	ls.edge.kill()
	restarted := ls.startEdge(ls.edge.dataDir)
	mu.Lock()
	ls.edge = restarted
	mu.Unlock()
	time.Sleep(1500 * time.Millisecond)
	acked := load.finish()
	stored, dups := ls.checkExactlyOnce(acked)
	t.Logf("edge killed and restarted on its data directory: %d events acknowledged, %d stored, %d duplicates", len(acked), stored, dups)
}

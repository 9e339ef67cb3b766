package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// envInt and envDuration read the forwarding test's sizes, so that the full run can be
// made by hand: FLAGEDGE_E2E_FORWARD_EVENTS=100000 FLAGEDGE_E2E_FORWARD_OUTAGE=30s
// FLAGEDGE_E2E_FORWARD_THROTTLE=30s go test ./e2e -run TestForwardingToPostHog -timeout 30m
func envInt(t *testing.T, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("%s=%q: want a whole number of at least 2", name, v)
		}
		return n
	}
	return def
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		return d
	}
	return def
}

// faultProxy stands between the forwarding control plane and the receiving edge: it passes
// requests on, refuses bodies larger than maxBody with 413, answers 429 with Retry-After while
// throttling, and, while down, has no listener at all (connection refused). It counts the
// events of the batches the receiver accepted, duplicates included, and when the last arrived.
type faultProxy struct {
	t          *testing.T
	addr       string
	target     *url.URL
	maxBody    int64
	throttling atomic.Bool
	mu         sync.Mutex
	srv        *http.Server
	counts     sync.Map // outcome -> *atomic.Int64
	accepted   atomic.Int64
	lastAccept atomic.Int64 // unix nanoseconds
}

// batchLen is the context key of the number of events a passed request carries.
type batchLen struct{}

// countBatch reads the events of a gzip /batch/ body and gives the body back to the request.
func countBatch(r *http.Request) (int, error) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return 0, err
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	var body struct {
		Batch []json.RawMessage `json:"batch"`
	}
	err = json.NewDecoder(zr).Decode(&body)
	return len(body.Batch), err
}

func newFaultProxy(t *testing.T, target string, maxBody int64) *faultProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, addr: "127.0.0.1:0", target: u, maxBody: maxBody}
	p.up()
	t.Cleanup(p.down)
	return p
}

func (p *faultProxy) count(outcome string) int64 {
	v, _ := p.counts.LoadOrStore(outcome, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (p *faultProxy) inc(outcome string) {
	v, _ := p.counts.LoadOrStore(outcome, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// up listens again, on the same address after the first time.
func (p *faultProxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ln, err = net.Listen("tcp", p.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		p.t.Fatalf("proxy listen on %s: %v", p.addr, err)
	}
	p.addr = ln.Addr().String()
	rp := httputil.NewSingleHostReverseProxy(p.target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if n, ok := resp.Request.Context().Value(batchLen{}).(int); ok && resp.StatusCode == http.StatusOK {
			p.accepted.Add(int64(n))
			p.lastAccept.Store(time.Now().UnixNano())
		}
		return nil
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case p.throttling.Load():
			p.inc("429")
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"status": 429}`, http.StatusTooManyRequests)
		case r.ContentLength > p.maxBody:
			p.inc("413")
			http.Error(w, `{"status": 413}`, http.StatusRequestEntityTooLarge)
		default:
			p.inc("passed")
			n, err := countBatch(r)
			if err != nil {
				p.t.Errorf("the forwarded batch is not gzip JSON of PostHog's shape: %v", err)
			}
			rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), batchLen{}, n)))
		}
	}), ReadHeaderTimeout: 5 * time.Second}
	go p.srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed when down
}

// down closes the listener and every connection: connection refused until up.
func (p *faultProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		p.srv.Close()
		p.srv = nil
	}
}

// sendAll sends n events, in batches of 100, half to each edge, spread over about span,
// retrying a batch until an edge acknowledges it, and returns their uuids.
func sendAll(t *testing.T, token string, edges []string, n int, span time.Duration) []string {
	pace := span / time.Duration(max(n/100/len(edges), 1))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	var wg sync.WaitGroup
	for w, edgeURL := range edges {
		wg.Go(func() {
			for start := w * 100; start < n; start += 100 * len(edges) {
				end := min(start+100, n)
				batch := make([]any, 0, end-start)
				for j := start; j < end; j++ {
					batch = append(batch, map[string]any{"event": "forwarded", "distinct_id": fmt.Sprintf("u%d", j%500), "uuid": ids[j],
						"properties": map[string]any{"n": j, "$set": map[string]any{"bucket": j % 10}}})
				}
				time.Sleep(pace)
				for attempt := 0; ; attempt++ {
					if code, _ := callQuiet("POST", edgeURL+"/batch/", map[string]any{"api_key": token, "batch": batch}); code == 200 {
						break
					}
					if attempt > 100 {
						t.Errorf("batch at %d never acknowledged", start)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	return ids
}

// TestForwardingToPostHog forwards the events captured by two edges of one stack to another
// stack's edge, which speaks PostHog's capture API (/batch/, gzip), through a proxy that
// refuses large batches (413), is down for a while (connection refused) and then answers 429
// with Retry-After for a while; the forwarding control plane is also killed and restarted.
// Every acknowledged event arrives, and with the receiver's de-duplication by uuid exactly once;
// the source stores them as well, and its metrics count the retries and splits.
func TestForwardingToPostHog(t *testing.T) {
	events := envInt(t, "FLAGEDGE_E2E_FORWARD_EVENTS", 5000)
	outage := envDuration(t, "FLAGEDGE_E2E_FORWARD_OUTAGE", 5*time.Second)
	throttle := envDuration(t, "FLAGEDGE_E2E_FORWARD_THROTTLE", 5*time.Second)

	// The receiving stack: its edge's /batch/ is the destination.
	dst := newStack(t)
	dstEdge := dst.startEdge("receiver", "", true)
	proxy := newFaultProxy(t, dstEdge.url, 24<<10)

	// The forwarding stack, allowed to reach loopback, retrying fast.
	src := &stack{t: t, dbURL: pgtest.NewDatabase(t), httpAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", geoipDB: geoiptest.MustWrite(t)}
	src.bootstrap()
	forwardFlags := []string{"--forward-allow-private", "--forward-retry-base", "100ms", "--forward-retry-max", "2s", "--forward-poll", "50ms"}
	src.startControlPlane(forwardFlags...)
	a, b := src.startEdge("edge-a", "", true), src.startEdge("edge-b", "", true)
	cpAPI := func() string {
		return fmt.Sprintf("http://%s/api/projects/%d/event_destinations/", src.httpAddr, src.projectID)
	}
	code, created := call(t, "POST", cpAPI(), src.personal, map[string]any{"url": "http://" + proxy.addr, "api_key": dst.token})
	if code != 201 {
		t.Fatalf("create destination: %d %v", code, created)
	}
	destination := fmt.Sprintf("%s%d/", cpAPI(), int64(created["id"].(float64)))

	sent := make(chan []string, 1)
	started := time.Now()
	// The events keep coming through the outage, the 429s and the restart.
	go func() { sent <- sendAll(t, src.token, []string{a.url, b.url}, events, outage+throttle+3*time.Second) }()
	// The receiver goes down once it has taken some events, mid-stream.
	waitFor(t, "some events forwarded", func() bool { return proxy.accepted.Load() > 0 })

	proxy.down()
	t.Logf("receiver down for %v", outage)
	time.Sleep(outage)
	proxy.throttling.Store(true)
	proxy.up()
	t.Logf("receiver answering 429 for %v", throttle)
	time.Sleep(throttle)
	proxy.throttling.Store(false)
	// From here on the receiver takes everything: how fast the backlog built up during the
	// faults is sent is what an operator wants to know.
	recovered, acceptedBefore := time.Now(), proxy.accepted.Load()
	_, backlog := call(t, "GET", destination, src.personal, nil)
	t.Logf("faults over after %v: %v events queued for the destination, the oldest queued at %v",
		time.Since(started).Round(time.Second), backlog["queued_events"], backlog["oldest_queued_at"])
	metrics := httpGet(t, "http://"+src.httpAddr+"/metrics")
	// Events kept coming while the receiver was down and throttling: this replica retried.
	for _, sample := range []string{`flagedge_controlplane_forward_batches_total{outcome="retry"}`, `flagedge_controlplane_forward_events_total{outcome="retried"}`} {
		if metricValue(metrics, sample) <= 0 {
			t.Errorf("%s is %v after the faults", sample, metricValue(metrics, sample))
		}
	}

	src.cp.kill() // the forwarding control plane dies mid-run, and comes back
	src.startControlPlane(forwardFlags...)
	ids := <-sent

	// Every event arrives at the receiver, once per uuid. The receiver's count is watched
	// until it is complete (or stops growing for a minute), then each uuid is looked up once.
	pool := openDB(t, dst.dbURL)
	deadline := time.Now().Add(5*time.Minute + time.Duration(events/100)*time.Second)
	var stored, distinct, missing int
	for last, since := -1, time.Now(); ; time.Sleep(500 * time.Millisecond) {
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE project_id = $1 AND event = 'forwarded'`,
			dst.projectID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored != last {
			last, since = stored, time.Now()
		}
		if stored >= events || time.Since(since) > time.Minute || time.Now().After(deadline) {
			break
		}
	}
	drained := time.Unix(0, proxy.lastAccept.Load())
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT e.uuid),
		(SELECT count(*) FROM unnest($1::uuid[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM events x WHERE x.project_id = $2 AND x.uuid = a.id))
		FROM events e WHERE e.project_id = $2 AND e.event = 'forwarded'`, ids, dst.projectID).Scan(&stored, &distinct, &missing); err != nil {
		t.Fatal(err)
	}
	if missing != 0 || stored != events || distinct != events {
		_, d := call(t, "GET", destination, src.personal, nil)
		t.Fatalf("receiver: %d of %d events missing, %d stored for %d uuids; destination %v", missing, events, stored, distinct, d)
	}
	// The source keeps its own copy, and its queue drains.
	src.storedOnce("forwarded", ids)
	waitFor(t, "the forwarding queue drained", func() bool {
		_, d := call(t, "GET", destination, src.personal, nil)
		return d["queued_events"] == float64(0)
	})
	if proxy.count("429") == 0 || proxy.count("413") == 0 {
		t.Errorf("the proxy answered %d 429s and %d 413s: the faults were not exercised", proxy.count("429"), proxy.count("413"))
	}
	accepted := proxy.accepted.Load()
	t.Logf("%d events forwarded in %v; the receiver accepted %d, %d duplicates before its de-duplication; proxy: %d requests passed, %d 413, %d 429",
		events, drained.Sub(started).Round(time.Second), accepted, accepted-int64(events), proxy.count("passed"), proxy.count("413"), proxy.count("429"))
	if after := drained.Sub(recovered); after > 0 {
		t.Logf("after the faults (the control plane's restart included): %d events in %v, %.0f events/s",
			accepted-acceptedBefore, after.Round(100*time.Millisecond), float64(accepted-acceptedBefore)/after.Seconds())
	}
}

// metricValue reads a sample's value from a Prometheus text page (-1 when absent).
func metricValue(page, sample string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

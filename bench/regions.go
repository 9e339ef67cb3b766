package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/cpclient"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// The regions scenario measures an edge far from its control plane: 80 ms each way between
// them (a toxiproxy proxy, in process, with a latency toxic on both directions of the gRPC
// link), both programs as real processes built from this tree, its own throwaway
// PostgreSQL. It reports /decide latency for the users an edge sees (new ones without
// properties, returning ones, ones whose properties were just captured at this edge), how
// long a flag change takes to reach the edge, and what /decide answers while the control
// plane is stopped. It needs no running flagedge: `go run ./bench --scenario regions`.

// regionsOneWay is the delay added in each direction between the edge and the control
// plane: about a transatlantic link.
const regionsOneWay = 80 * time.Millisecond

// regionsUsers is the size of each set of returning users: small enough that warming them
// (one look-up each over the slow link) takes seconds, large enough that 16 connections
// rarely ask for the same user at once.
const regionsUsers = 256

// regionsMaxConnections caps the closed loop's connections: the scenario measures latency
// over the link, not the edge's throughput.
const regionsMaxConnections = 16

// regionsOutcome is what the scenario measured.
type regionsOutcome struct {
	results  []result
	targets  map[string]string
	markdown string
}

// regions is one run of the scenario: its processes, proxy and project.
type regions struct {
	cfg    config
	stack  *selfStack
	proxy  *toxiproxy.Proxy
	bench  *bench
	token  string       // a second edge credential, for the bench's own calls to the control plane
	flags  int          // flags in the bench project
	failed atomic.Int64 // flags marked failed in the answers of the load running now
	md     strings.Builder
}

// runRegions is `--scenario regions`: the scenario alone, with its report.
func runRegions(cfg config) error {
	out, err := regionsScenario(cfg)
	if err != nil {
		return err
	}
	r := report{Machine: machine(), StartedAt: time.Now().UTC().Format(time.RFC3339), Seed: cfg.seed, Results: out.results, Targets: out.targets}
	if err := r.write(cfg.out); err != nil {
		return err
	}
	fmt.Printf("\nreport: %s/regions.md, report.md, report.json\n", cfg.out)
	return nil
}

// regions runs the scenario at the end of the suite and adds its results to the report.
func (b *bench) regions() error {
	out, err := regionsScenario(b.cfg)
	if err != nil {
		return err
	}
	b.report.Results = append(b.report.Results, out.results...)
	maps.Copy(b.report.Targets, out.targets)
	return nil
}

// regionsScenario sets everything up, measures, tears it down, and writes regions.md into
// cfg.out (and prints it).
func regionsScenario(cfg config) (*regionsOutcome, error) {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return nil, err
	}
	r := &regions{cfg: cfg}
	r.cfg.connections = min(cfg.connections, regionsMaxConnections)
	out, err := r.run()
	r.close()
	if err != nil {
		return nil, fmt.Errorf("regions: %w (logs: %s/regions-*.log)", err, cfg.out)
	}
	if err := os.WriteFile(filepath.Join(cfg.out, "regions.md"), []byte(out.markdown), 0o644); err != nil {
		return nil, err
	}
	fmt.Print("\n" + out.markdown)
	return out, nil
}

func (r *regions) run() (*regionsOutcome, error) {
	ctx := context.Background()
	loadAvg, _ := os.ReadFile("/proc/loadavg")
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	rtt, err := r.roundTrips(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.seed(ctx); err != nil {
		return nil, err
	}
	out := &regionsOutcome{targets: map[string]string{}}
	b := r.bench
	fmt.Fprintf(&r.md, "## Regions: the edge %v each way from the control plane\n\nmachine: %s\n\n", regionsOneWay, machine())
	fmt.Fprintf(&r.md, "load average before the run: %s\n\n", strings.Join(strings.Fields(string(loadAvg))[:3], " "))
	fmt.Fprintf(&r.md, "The control plane and the edge run as processes built from this tree; the edge's gRPC link goes through a toxiproxy v2.5.0 proxy "+
		"(in the bench process) with a latency toxic of %d ms on the upstream and on the downstream stream. The edge runs with its defaults "+
		"(look-up timeout 300 ms, a found person cached 1 min, a missing one 10 s). The bench project holds %d flags (flagstest.RealisticProject), "+
		"most of which read person properties (targeted-*, experiment-*, regex-*, dates, versions, the cohort): "+
		"a request without person_properties needs the stored person. "+
		"Loads: closed loop, %d connections, at most %v and %d requests each.\n\n",
		regionsOneWay.Milliseconds(), r.flags, r.cfg.connections, r.cfg.duration, r.cfg.maxRequests)
	fmt.Fprintf(&r.md, "The link, measured with one gRPC LookupPerson call at a time (the edge's own client, edge/cpclient): "+
		"through the proxy %s (the first call, with the connection's set-up, %s); straight to the control plane %s.\n\n",
		rtt.proxied.Round(100*time.Microsecond), rtt.firstProxied.Round(time.Millisecond), rtt.direct.Round(10*time.Microsecond))

	up, err := r.connected()
	if err != nil {
		return nil, err
	}
	down, err := r.stopped()
	if err != nil {
		return nil, err
	}
	var downErrored int64
	for _, res := range down {
		downErrored += res.Errors["errorsWhileComputingFlags"]
	}
	out.results = slices.Clone(b.report.Results)
	out.targets["regions: new users without properties, p99 ≤ 2 ms"] = verdict(up.fresh.LatencyUs["p99"] <= 2000, fmt.Sprintf("%d µs", up.fresh.LatencyUs["p99"]))
	out.targets["regions: returning users, p99 ≤ 2 ms"] = verdict(up.returning.LatencyUs["p99"] <= 2000, fmt.Sprintf("%d µs", up.returning.LatencyUs["p99"]))
	out.targets["regions: a flag change reaches the edge in ≤ 80 ms + 50 ms"] = verdict(up.change.P99Ms <= 130, fmt.Sprintf("p99 %.1f ms", up.change.P99Ms))
	wrong := up.captured[0].Errors["wrong answer"] + up.captured[1].Errors["wrong answer"]
	out.targets["regions: /decide right after a capture follows it"] = verdict(wrong == 0, fmt.Sprintf("%d wrong answers", wrong))
	out.targets["regions: control plane stopped, no answer marked errored that needed no failed look-up"] = verdict(downErrored == 0,
		fmt.Sprintf("answers with errorsWhileComputingFlags: new users %d of %d, returning users %d of %d, all properties sent %d of %d",
			down[0].Errors["errorsWhileComputingFlags"], down[0].Requests, down[1].Errors["errorsWhileComputingFlags"], down[1].Requests,
			down[2].Errors["errorsWhileComputingFlags"], down[2].Requests))
	fmt.Fprintf(&r.md, "\ngoals:\n")
	for _, k := range slices.Sorted(maps.Keys(out.targets)) {
		fmt.Fprintf(&r.md, "- %s: %s\n", k, out.targets[k])
	}
	out.markdown = r.md.String()
	return out, nil
}

// connectedResults are what the goals are judged on while the control plane runs.
type connectedResults struct {
	fresh, returning result
	captured         []result // returning users, then new users, each after a capture
	change           *propagation
}

// connected measures /decide over the slow link (a–c) and a flag change's arrival (d).
func (r *regions) connected() (connectedResults, error) {
	var up connectedResults
	b := r.bench
	// The edge's own latency, for reference: every property the flags read is in the request.
	full := b.measure(r.load("regions: all properties sent", func(i int64) *request {
		return r.decide("full-"+strconv.FormatInt(i, 10), b.work.props[i%int64(len(b.work.props))])
	}, r.errored))
	// a. A new distinct id each request, nothing but the id: the edge asks the control plane.
	up.fresh = b.measure(r.load("regions: new users, no properties", func(i int64) *request {
		return r.decide("new-"+strconv.FormatInt(i, 10), nil)
	}, r.errored))
	// b. Returning users: stored at the control plane, looked up once before the load.
	if err := r.warm("ret-"); err != nil {
		return up, err
	}
	up.returning = b.measure(r.load("regions: returning users", func(i int64) *request {
		return r.decide("ret-"+strconv.FormatInt(i%regionsUsers, 10), nil)
	}, r.errored))
	// c. Properties just captured at this edge: a $set, then /decide without properties.
	c := newCaptureThenDecide(r, func(i int64) string { return "ret-" + strconv.FormatInt(i%regionsUsers, 10) }, regionsUsers)
	capturedReturning := b.measure(r.load("regions: returning users, email just captured", c.next, c.check))
	// The forwarder sends what the load captured over the same link as the look-ups: the
	// next load starts once it is done, so that each row measures one thing.
	drained, err := r.drain()
	if err != nil {
		return up, err
	}
	c = newCaptureThenDecide(r, func(i int64) string { return "identified-" + strconv.FormatInt(i, 10) }, 0)
	capturedNew := b.measure(r.load("regions: new users, email just captured", c.next, c.check))
	if _, err := r.drain(); err != nil {
		return up, err
	}
	// d. A flag change, PATCH at the control plane until the edge answers it.
	progress("regions: flag changes")
	change, err := b.propagation(20)
	if err != nil {
		return up, err
	}
	b.report.Results = append(b.report.Results, roundsResult("regions: flag change reaches the edge", change))

	fmt.Fprintf(&r.md, "| /decide (v3) | requests | req/s | p50 µs | p99 µs | p99.9 µs | max µs | errored answers | wrong answers |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, res := range []result{up.fresh, up.returning, capturedReturning, capturedNew, full} {
		r.row(res)
	}
	fmt.Fprintf(&r.md, "\n\"email just captured\": each request first sends POST /capture/ with a $set of the user's email to the edge (untimed), "+
		"then /decide for the user without properties; the answer of flag regex-email must follow the new email (a wrong one is counted). "+
		"Returning users are %d users per set, stored at the control plane before the loads (an Ingest call straight to it, as another edge "+
		"would have forwarded them) and looked up by this edge once before their load. After the %d captures of the returning users' load, "+
		"the edge's forwarder took %v more to deliver them over the link; the next load started after that (look-ups made while it sends "+
		"share the gRPC connection with it).\n\n", regionsUsers, capturedReturning.Requests, drained.Round(time.Millisecond))
	fmt.Fprintf(&r.md, "The tails of the fast rows are this machine's (the load generator, the edge, the control plane and PostgreSQL share %d CPUs "+
		"with other work): read them against \"all properties sent\", which needs no look-up.\n\n", runtime.NumCPU())
	fmt.Fprintf(&r.md, "Flag change (PATCH answered by the control plane → the edge answers the new value; the probe sends all properties), %d rounds: "+
		"p50 %.1f ms, p99 %.1f ms, max %.1f ms.\n\n", change.Rounds, change.P50Ms, change.P99Ms, change.MaxMs)

	up.captured, up.change = []result{capturedReturning, capturedNew}, change
	return up, nil
}

// stopped measures /decide with the control plane stopped (e): new users without
// properties, returning users, and requests with all properties.
func (r *regions) stopped() ([]result, error) {
	b := r.bench
	// e. The control plane stopped (SIGSTOP: it holds its connections but answers nothing,
	// as a hung process or a partitioned link does; look-ups wait their full timeout).
	if err := r.warm("down-"); err != nil {
		return nil, err
	}
	if err := r.stack.cp.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	var down []result
	var failed []int64
	for _, l := range []load{
		r.load("regions, control plane stopped: new users, no properties", func(i int64) *request {
			return r.decide("down-new-"+strconv.FormatInt(i, 10), nil)
		}, r.errored),
		r.load("regions, control plane stopped: returning users", func(i int64) *request {
			return r.decide("down-"+strconv.FormatInt(i%regionsUsers, 10), nil)
		}, r.errored),
		r.load("regions, control plane stopped: all properties sent", func(i int64) *request {
			return r.decide("down-full-"+strconv.FormatInt(i, 10), b.work.props[i%int64(len(b.work.props))])
		}, r.errored),
	} {
		r.failed.Store(0)
		down = append(down, b.measure(l))
		failed = append(failed, r.failed.Load())
	}
	if err := r.stack.cp.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return nil, err
	}
	fmt.Fprintf(&r.md, "With the control plane stopped (SIGSTOP after the returning users of this part were looked up; SIGCONT after):\n\n")
	fmt.Fprintf(&r.md, "| /decide (v3) | requests | p50 µs | p99 µs | max µs | answers with errorsWhileComputingFlags | flags marked failed (left out of featureFlags) |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for i, res := range down {
		n := res.Errors["errorsWhileComputingFlags"]
		fmt.Fprintf(&r.md, "| %s | %d | %d | %d | %d | %d | %d |\n", strings.TrimPrefix(res.Name, "regions, control plane stopped: "), res.Requests,
			res.LatencyUs["p50"], res.LatencyUs["p99"], res.LatencyUs["max"], n, failed[i])
	}
	return down, nil
}

// row writes one load's line of the main table.
func (r *regions) row(res result) {
	fmt.Fprintf(&r.md, "| %s | %d | %.0f | %d | %d | %d | %d | %d | %d |\n", strings.TrimPrefix(res.Name, "regions: "), res.Requests, res.Throughput,
		res.LatencyUs["p50"], res.LatencyUs["p99"], res.LatencyUs["p99.9"], res.LatencyUs["max"], res.Errors["errorsWhileComputingFlags"], res.Errors["wrong answer"])
}

// start starts the stack with the proxy on the edge's link to the control plane, then
// creates the bench project through the REST API.
func (r *regions) start(ctx context.Context) error {
	var err error
	r.stack, err = startSelfStack(ctx, stackOptions{name: "regions", controlPlaneLink: r.startProxy, edgeBin: r.cfg.edgeBin})
	if err != nil {
		return err
	}
	// The bench's own credential: the link probe and the returning users' storage.
	if r.token, err = r.stack.createEdge(ctx, "regions-bench"); err != nil {
		return err
	}
	cfg := r.cfg
	cfg.controlPlane, cfg.edges, cfg.personalKey = r.stack.controlPlaneURL(), []string{"http://" + r.stack.edge.httpAddr}, r.stack.personalKey
	cfg.edgeMetrics = "http://" + r.stack.edge.metricsAddr
	if r.bench, err = newBench(cfg); err != nil {
		return err
	}
	r.flags = len(r.bench.project.flags)
	return nil
}

// startProxy starts the proxy in front of the control plane's gRPC address and returns the
// address the edge dials: every byte between them waits regionsOneWay in each direction. No
// toxiproxy server: the proxy and its toxics are made in process.
func (r *regions) startProxy(grpcAddr string) (string, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	r.proxy = toxiproxy.NewProxy(server, "control-plane", "127.0.0.1:0", grpcAddr)
	if err := r.proxy.Start(); err != nil {
		return "", err
	}
	for _, stream := range []string{"upstream", "downstream"} {
		toxic := fmt.Sprintf(`{"name": "latency_%s", "type": "latency", "stream": %q, "attributes": {"latency": %d}}`, stream, stream, regionsOneWay.Milliseconds())
		if _, err := r.proxy.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			return "", fmt.Errorf("toxic %s: %w", stream, err)
		}
	}
	return r.proxy.Listen, nil
}

// linkTimes are single gRPC calls over the link.
type linkTimes struct {
	firstProxied, proxied, direct time.Duration
}

// roundTrips checks that the proxy delays: a person look-up through it and straight to the
// control plane, with the edge's own client.
func (r *regions) roundTrips(ctx context.Context) (linkTimes, error) {
	var t linkTimes
	call := func(addr string) (first, median time.Duration, err error) {
		conn, err := cpclient.Dial(cpclient.Config{Addrs: addr, Token: r.token})
		if err != nil {
			return 0, 0, err
		}
		defer conn.Close()
		client := syncpb.NewSyncClient(conn)
		var times []time.Duration
		for range 4 {
			start := time.Now()
			if _, err := client.LookupPerson(ctx, &syncpb.LookupPersonRequest{ProjectId: r.bench.project.id, DistinctId: "link-probe"}); err != nil {
				return 0, 0, fmt.Errorf("look-up through %s: %w", addr, err)
			}
			times = append(times, time.Since(start))
		}
		rest := times[1:]
		slices.Sort(rest)
		return times[0], rest[len(rest)/2], nil
	}
	progress("regions: measuring the link")
	var err error
	if t.firstProxied, t.proxied, err = call(r.proxy.Listen); err != nil {
		return t, err
	}
	_, t.direct, err = call(r.proxy.Upstream)
	return t, err
}

// seed stores the two sets of returning users ("ret-", "down-") at the control plane: a
// $set of full properties for each, sent straight to its sync service as another edge's
// forwarder would have sent it earlier, so this edge holds nothing about them yet.
func (r *regions) seed(ctx context.Context) error {
	progress("regions: storing returning users")
	conn, err := cpclient.Dial(cpclient.Config{Addrs: r.proxy.Upstream, Token: r.token})
	if err != nil {
		return err
	}
	defer conn.Close()
	client := syncpb.NewSyncClient(conn)
	b := r.bench
	now := time.Now().UnixMicro()
	for _, prefix := range []string{"ret-", "down-"} {
		batch := &syncpb.EventBatch{ProjectId: b.project.id}
		for u := range regionsUsers {
			batch.Events = append(batch.Events, &syncpb.CapturedEvent{Uuid: uuid.NewString(), Event: "$set", DistinctId: prefix + strconv.Itoa(u),
				Properties: []byte(`{"$set":` + string(b.work.props[u%len(b.work.props)]) + `}`), TimestampUs: now, ReceivedUs: now})
		}
		raw, err := proto.Marshal(batch)
		if err != nil {
			return err
		}
		resp, err := client.Ingest(ctx, &syncpb.IngestRequest{Batches: [][]byte{raw}, EdgeId: "regions-bench"})
		if err != nil {
			return fmt.Errorf("seed returning users: %w", err)
		}
		if resp.Stored != regionsUsers {
			return fmt.Errorf("seed returning users: %d of %d stored", resp.Stored, regionsUsers)
		}
	}
	return nil
}

// drain waits until the edge's forwarder has delivered every captured record to the control
// plane, and returns how long that took.
func (r *regions) drain() (time.Duration, error) {
	progress("regions: waiting for the forwarder")
	start := time.Now()
	for {
		pending, err := r.bench.edgeMetric("flagedge_edge_spool_pending_records")
		if err != nil {
			return 0, err
		}
		if pending == 0 {
			return time.Since(start), nil
		}
		// A load captures at most a few hundred thousand events; the forwarder sends 4 MiB
		// per round trip, so two minutes means it is stuck.
		if time.Since(start) > 2*time.Minute {
			return 0, fmt.Errorf("the edge still holds %.0f records to forward after 2 minutes", pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// warm asks /decide once for each user of a set, so that the edge has looked them up.
func (r *regions) warm(prefix string) error {
	// A minute is far more than regionsUsers look-ups of one round trip each need.
	res := run(r.bench.edge, load{name: "regions: looking up " + prefix + "users", connections: r.cfg.connections, duration: time.Minute,
		maxRequests: regionsUsers, expectStatus: 200, check: r.errored,
		next: func(i int64) *request { return r.decide(prefix+strconv.FormatInt(i, 10), nil) }}, progress)
	if len(res.Errors) > 0 || res.Requests != regionsUsers {
		return fmt.Errorf("warming %susers: %d requests, errors %v", prefix, res.Requests, res.Errors)
	}
	return nil
}

// load is a closed loop of the scenario's size.
func (r *regions) load(name string, next func(int64) *request, check func(int64, []byte) string) load {
	return load{name: name, connections: r.cfg.connections, duration: r.cfg.duration, maxRequests: r.cfg.maxRequests,
		next: next, check: check, expectStatus: 200}
}

// decide is a /decide (v3) request for distinctID, with props as person_properties unless nil.
func (r *regions) decide(distinctID string, props []byte) *request {
	body := make([]byte, 0, 128+len(props))
	body = append(body, `{"api_key":"`...)
	body = append(body, r.bench.project.token...)
	body = append(body, `","distinct_id":"`...)
	body = append(body, distinctID...)
	body = append(body, '"')
	if props != nil {
		body = append(body, `,"person_properties":`...)
		body = append(body, props...)
	}
	body = append(body, '}')
	return &request{method: "POST", url: "http://" + r.bench.work.edge + "/decide/?v=3", body: body,
		headers: [][2]string{{"Content-Type", "application/json"}}}
}

// errored counts an answer with errorsWhileComputingFlags, and the flags it left out (a
// failed flag is not in featureFlags).
func (r *regions) errored(_ int64, body []byte) string {
	if body == nil || !bytes.Contains(body, []byte(`"errorsWhileComputingFlags":true`)) {
		return ""
	}
	var answer struct {
		FeatureFlags map[string]json.RawMessage `json:"featureFlags"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return "undecodable answer"
	}
	r.failed.Add(int64(r.flags - len(answer.FeatureFlags)))
	return "errorsWhileComputingFlags"
}

// post sends body to the edge's path and returns the status and answer.
func (r *regions) post(path string, body []byte) (int, []byte, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.SetRequestURI("http://" + r.bench.work.edge + path)
	req.SetBody(body)
	if err := r.bench.edge.Do(req, resp); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), slices.Clone(resp.Body()), nil
}

// captureThenDecide is the load of users whose properties just changed at this edge: the
// i-th request first captures a $set of the user's email (untimed, in next), then asks
// /decide for the user without properties; flag regex-email (email matches
// ^[a-z]+\d*@example\.com$) must follow the email: on for even i, off for odd i.
type captureThenDecide struct {
	r    *regions
	user func(i int64) string
	// locks hold a repeating user from its capture until its answer is checked, so two
	// connections never interleave one user's capture and /decide.
	locks   []sync.Mutex
	pending sync.Map // i → "" or why the capture failed
}

// newCaptureThenDecide returns the load's functions; users > 0 when user(i) repeats every
// users requests.
func newCaptureThenDecide(r *regions, user func(int64) string, users int) *captureThenDecide {
	return &captureThenDecide{r: r, user: user, locks: make([]sync.Mutex, users)}
}

func (c *captureThenDecide) next(i int64) *request {
	if len(c.locks) > 0 {
		c.locks[i%int64(len(c.locks))].Lock()
	}
	email := fmt.Sprintf("c%d@example.com", i)
	if i%2 == 1 {
		email = fmt.Sprintf("c%d@corp.io", i)
	}
	user := c.user(i)
	body, _ := json.Marshal(map[string]any{"api_key": c.r.bench.project.token, "event": "$set", "distinct_id": user,
		"properties": map[string]any{"$set": map[string]any{"email": email}}})
	verdict := ""
	if status, _, err := c.r.post("/capture/", body); err != nil || status != 200 {
		verdict = "capture failed"
	}
	c.pending.Store(i, verdict)
	return c.r.decide(user, nil)
}

func (c *captureThenDecide) check(i int64, body []byte) string {
	v, _ := c.pending.LoadAndDelete(i)
	if len(c.locks) > 0 {
		c.locks[i%int64(len(c.locks))].Unlock()
	}
	if failed, _ := v.(string); failed != "" {
		return failed
	}
	if e := c.r.errored(i, body); e != "" || body == nil {
		return e
	}
	if !bytes.Contains(body, []byte(`"regex-email":`+strconv.FormatBool(i%2 == 0))) {
		return "wrong answer"
	}
	return ""
}

// roundsResult gives the flag-change rounds the shape of a load's result.
func roundsResult(name string, p *propagation) result {
	sorted := slices.Clone(p.RawMs)
	slices.Sort(sorted)
	at := func(q float64) int64 {
		return int64(1000 * sorted[min(len(sorted)-1, int(q/100*float64(len(sorted))))])
	}
	res := result{Name: name, Mode: "sequential rounds", Connections: 1, Requests: int64(p.Rounds),
		LatencyUs: map[string]int64{"p50": at(50), "p90": at(90), "p99": at(99), "p99.9": at(99.9), "max": at(100)}}
	for _, q := range []float64{0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 100} {
		res.Percentiles = append(res.Percentiles, [2]float64{q, float64(at(q))})
	}
	return res
}

// close stops what the run started, keeping the processes' logs beside the report: the
// stack (the edge first), then the proxy.
func (r *regions) close() {
	if r.stack != nil {
		r.stack.keepLogs(r.cfg.out, "regions-")
		r.stack.close()
	}
	if r.proxy != nil {
		r.proxy.Stop()
	}
}

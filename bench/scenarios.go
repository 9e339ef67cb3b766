package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/shared/flags/flagstest"
)

// bench holds one run's setup.
type bench struct {
	cfg     config
	api     *api
	project *project
	work    *workload
	edge    *fasthttp.HostClient
	report  report
	ceiling float64 // baseline requests per second
}

func newBench(cfg config) (*bench, error) {
	edgeAddr, err := hostPort(cfg.edges[0])
	if err != nil {
		return nil, err
	}
	a := &api{base: strings.TrimRight(cfg.controlPlane, "/"), key: cfg.personalKey, http: httpClient}
	progress("creating a project of 50 flags through the REST API")
	p, err := createProject(a, fmt.Sprintf("bench %d %s", cfg.seed, time.Now().UTC().Format(time.RFC3339)), 50)
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, api: a, project: p, work: newWorkload(cfg.seed, p.token, edgeAddr, cfg.users, cfg.overrides),
		edge:   newClient(edgeAddr, max(cfg.connections, 64)),
		report: report{Machine: machine(), StartedAt: time.Now().UTC().Format(time.RFC3339), Seed: cfg.seed, Targets: map[string]string{}}}
	if err := b.waitEdges(); err != nil {
		return nil, err
	}
	return b, nil
}

func progress(msg string) { fmt.Fprintf(os.Stderr, "\r\033[K%s", msg) }

// waitEdges waits until every edge serves the project's 50 flags.
func (b *bench) waitEdges() error {
	deadline := time.Now().Add(30 * time.Second)
	for _, e := range b.cfg.edges {
		addr, err := hostPort(e)
		if err != nil {
			return err
		}
		c := newClient(addr, 1)
		for {
			n, err := b.flagCount(c, addr)
			if err == nil && n == len(b.project.flags) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("edge %s does not serve the bench project (%d flags, %v)", e, n, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func (b *bench) flagCount(c *fasthttp.HostClient, addr string) (int, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("http://" + addr + "/decide/?v=3")
	req.SetBodyString(`{"api_key":"` + b.project.token + `","distinct_id":"probe"}`)
	if err := c.Do(req, resp); err != nil {
		return 0, err
	}
	var answer struct {
		FeatureFlags map[string]any `json:"featureFlags"`
	}
	if err := json.Unmarshal(resp.Body(), &answer); err != nil {
		return 0, err
	}
	return len(answer.FeatureFlags), nil
}

func (b *bench) load(name string, rate int, next func(int64) *request) load {
	return load{name: name, connections: b.cfg.connections, rate: rate, duration: b.cfg.duration, maxRequests: b.cfg.maxRequests,
		next: next, expectStatus: 200}
}

func (b *bench) measure(l load) result {
	res := run(b.edge, l, progress)
	if b.ceiling > 0 && res.Mode == "closed-loop" {
		res.Ratio = res.Throughput / b.ceiling
	}
	b.report.Results = append(b.report.Results, res)
	return res
}

// measureBaseline runs decide requests against a bare server answering a body of the size
// of a decide answer: the ceiling for this machine and client.
func (b *bench) measureBaseline() error {
	size, err := b.decideSize()
	if err != nil {
		return err
	}
	bl, err := startBaseline(size)
	if err != nil {
		return err
	}
	defer bl.close()
	c := newClient(bl.addr(), max(b.cfg.connections, 64))
	l := b.load(fmt.Sprintf("baseline (bare fasthttp, %d B)", size), 0, func(i int64) *request {
		r := b.work.decide(i, "/decide/?v=3", 0)
		r.url = "http://" + bl.addr() + "/decide/?v=3"
		return r
	})
	res := run(c, l, progress)
	res.Ratio = 1
	b.ceiling = res.Throughput
	b.report.Results = append(b.report.Results, res)
	return nil
}

func (b *bench) decideSize() (int, error) {
	r := b.work.decide(0, "/decide/?v=3", 0)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI(r.url)
	req.SetBody(r.body)
	if err := b.edge.Do(req, resp); err != nil {
		return 0, err
	}
	if resp.StatusCode() != 200 {
		return 0, fmt.Errorf("decide: %d %s", resp.StatusCode(), resp.Body())
	}
	return len(resp.Body()), nil
}

func (b *bench) single(name string) error {
	if b.cfg.baseline && name != "propagation" && name != "rss" {
		if err := b.measureBaseline(); err != nil {
			return err
		}
	}
	switch name {
	case "decide":
		b.measure(b.load("decide v3, new user each request", b.cfg.rate, func(i int64) *request { return b.work.decide(i, "/decide/?v=3", 0) }))
	case "decide-repeat":
		b.measure(b.load("decide v3, 100 repeat users", b.cfg.rate, func(i int64) *request { return b.work.decide(i, "/decide/?v=3", 100) }))
	case "flags":
		b.measure(b.load("flags v2, new user each request", b.cfg.rate, func(i int64) *request { return b.work.decide(i, "/flags/?v=2", 0) }))
	case "capture":
		for _, size := range []int{100, 10, 1} {
			for _, enc := range []string{"gzip", "plain"} {
				b.measure(b.load(fmt.Sprintf("capture batch %d %s", size, enc), b.cfg.rate, func(i int64) *request { return b.work.captureBatch(i, size, enc) }))
			}
		}
	case "mixed":
		b.measure(b.load("mixed (1 decide : 10 events)", b.cfg.rate, b.work.mixed))
	case "propagation":
		p, err := b.propagation(20)
		b.report.Propagation = p
		return err
	case "rss":
		return b.rss(b.cfg.rssProjects)
	default:
		return fmt.Errorf("unknown scenario %q", name)
	}
	return nil
}

// suite is the standard run: every scenario once, bounded: about four minutes of loads, then
// the rss scenario (about three minutes with its default million persons) and regions.
func (b *bench) suite() error {
	d := b.cfg.duration
	if err := b.measureBaseline(); err != nil {
		return err
	}
	b.measure(b.load("decide v3, new user each request", 0, func(i int64) *request { return b.work.decide(i, "/decide/?v=3", 0) }))
	b.measure(b.load("decide v3, 100 repeat users", 0, func(i int64) *request { return b.work.decide(i, "/decide/?v=3", 100) }))
	b.measure(b.load("flags v2, new user each request", 0, func(i int64) *request { return b.work.decide(i, "/flags/?v=2", 0) }))
	open := b.measure(b.load("decide v3 open loop", 5000, func(i int64) *request { return b.work.decide(i, "/decide/?v=3", 0) }))
	// The same with every request carrying its person properties: no control-plane look-up,
	// the edge's own latency.
	full := newWorkload(b.cfg.seed, b.project.token, b.work.edge, b.cfg.users, 1)
	openLocal := b.measure(b.load("decide v3 open loop, all properties sent", 5000, func(i int64) *request { return full.decide(i, "/decide/?v=3", 0) }))
	b.measure(b.load("decide v3, all properties sent", 0, func(i int64) *request { return full.decide(i, "/decide/?v=3", 0) }))
	b.cfg.duration = d / 2
	var capture100 result
	for _, size := range []int{100, 10, 1} {
		for _, enc := range []string{"gzip", "plain"} {
			res := b.measure(b.load(fmt.Sprintf("capture batch %d %s", size, enc), 0, func(i int64) *request { return b.work.captureBatch(i, size, enc) }))
			if size == 100 && enc == "plain" {
				capture100 = res
			}
		}
	}
	b.cfg.duration = d
	b.measure(b.load("mixed (1 decide : 10 events)", 0, b.work.mixed))
	p, err := b.propagation(20)
	if err != nil {
		return err
	}
	b.report.Propagation = p
	if b.cfg.rssProjects > 0 {
		if err := b.rss(b.cfg.rssProjects); err != nil {
			return err
		}
	}
	// Last, self-contained: an edge of its own 80 ms from a control plane of its own.
	if err := b.regions(); err != nil {
		return err
	}
	decide := b.report.Results[1]
	b.report.Targets["decide closed loop ≥ 60% of the bare ceiling"] = verdict(decide.Ratio >= 0.6, fmt.Sprintf("%.0f%%", 100*decide.Ratio))
	b.report.Targets["decide open loop at 5,000/s: p99 ≤ 1 ms, p99.9 ≤ 5 ms"] = verdict(open.LatencyUs["p99"] <= 1000 && open.LatencyUs["p99.9"] <= 5000,
		fmt.Sprintf("p99 %d µs, p99.9 %d µs; with all properties sent p99 %d µs, p99.9 %d µs", open.LatencyUs["p99"], open.LatencyUs["p99.9"],
			openLocal.LatencyUs["p99"], openLocal.LatencyUs["p99.9"]))
	b.report.Targets["capture ≥ 100k events/s (batches of 100)"] = verdict(capture100.EventsRate >= 100_000, fmt.Sprintf("%.0f events/s", capture100.EventsRate))
	if p := b.report.Propagation; p != nil {
		b.report.Targets["propagation p99 ≤ 50 ms"] = verdict(p.P99Ms <= 50, fmt.Sprintf("%.1f ms", p.P99Ms))
	}
	if s := b.report.RSS; s != nil {
		b.report.Targets[s.goal()] = verdict(s.RSSMB <= 150, fmt.Sprintf("%.1f MB", s.RSSMB))
	}
	return nil
}

func verdict(ok bool, value string) string {
	if ok {
		return "met (" + value + ")"
	}
	return "missed (" + value + ")"
}

// propagation is when every edge answers a flag's new value after a PATCH answered.
type propagation struct {
	Rounds int       `json:"rounds"`
	P50Ms  float64   `json:"p50_ms"`
	P99Ms  float64   `json:"p99_ms"`
	MaxMs  float64   `json:"max_ms"`
	RawMs  []float64 `json:"rounds_ms"`
}

// propagation measures rounds flag changes: from the PATCH's answer until every edge
// answers the new value.
func (b *bench) propagation(rounds int) (*propagation, error) {
	id := b.project.flags["kill-switch"]
	var delays []float64
	for i := range rounds {
		progress(fmt.Sprintf("propagation: round %d of %d", i+1, rounds))
		want := i%2 == 1
		pct := 0
		if want {
			pct = 100
		}
		if err := b.api.call("PATCH", fmt.Sprintf("/api/projects/%d/feature_flags/%d/", b.project.id, id),
			map[string]any{"filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": pct}}}}, nil); err != nil {
			return nil, err
		}
		answered := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, len(b.cfg.edges))
		for _, e := range b.cfg.edges {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- b.waitValue(e, want, answered)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return nil, err
			}
		}
		delays = append(delays, float64(time.Since(answered).Microseconds())/1000)
	}
	sorted := slices.Clone(delays)
	slices.Sort(sorted)
	return &propagation{Rounds: rounds, RawMs: delays, P50Ms: sorted[len(sorted)/2],
		P99Ms: sorted[min(len(sorted)-1, len(sorted)*99/100)], MaxMs: sorted[len(sorted)-1]}, nil
}

func (b *bench) waitValue(edge string, want bool, since time.Time) error {
	addr, err := hostPort(edge)
	if err != nil {
		return err
	}
	c := newClient(addr, 1)
	needle := `"kill-switch":` + strconv.FormatBool(want)
	// The probe carries every person property the flags read, so its answer never waits for
	// a person look-up at the control plane: only the snapshot's arrival is measured.
	props, _ := json.Marshal(flagstest.RealisticPersonProperties())
	body := `{"api_key":"` + b.project.token + `","distinct_id":"propagation-probe","person_properties":` + string(props) + `}`
	for time.Since(since) < 10*time.Second {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://" + addr + "/decide/?v=3")
		req.SetBodyString(body)
		err := c.Do(req, resp)
		ok := err == nil && strings.Contains(string(resp.Body()), needle)
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		if ok {
			return nil
		}
		time.Sleep(200 * time.Microsecond)
	}
	return fmt.Errorf("edge %s did not answer the new value within 10 s", edge)
}

// edgeMetric reads one series from the first edge's /metrics.
func (b *bench) edgeMetric(name string) (float64, error) {
	m, err := scrape(b.cfg.edgeMetrics)
	if err != nil {
		return 0, err
	}
	v, ok := m[name]
	if !ok {
		return 0, errors.New("metric " + name + " not found")
	}
	return v, nil
}

// scrape reads the Prometheus text page at base/metrics: every sample by its series, the
// name with its labels as the page prints them (`flagedge_edge_membership_checks_total{result="absent"}`).
func scrape(base string) (map[string]float64, error) {
	resp, err := httpClient.Get(strings.TrimRight(base, "/") + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		cut := strings.LastIndexByte(line, ' ') // promhttp writes no timestamps: the value is last
		if line == "" || line[0] == '#' || cut < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[cut+1:], 64); err == nil {
			out[line[:cut]] = v
		}
	}
	return out, sc.Err()
}

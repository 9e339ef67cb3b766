package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The rss scenario measures the edge's resident memory as issue #17 states the goal: holding
// --rss-projects projects of 50 flags, then again once the control plane stores
// --rss-persons more distinct ids and the edge's membership filters hold them. The persons are
// captured through the edge's /batch, as SDKs would send them, so the edge spools and forwards
// them, the control plane stores them and announces them, and the edge receives the filters
// and their additions: every part of the edge that grows with known persons is in the figure.

// rssBatchEvents is the events of one /batch request: large batches, as a server-side SDK
// sends them, about 150 KB each, far below the edge's 20 MB bound.
const rssBatchEvents = 1000

// rssCaptureConnections is how many /batch requests are in flight at once: the edge answers
// a batch once it is in its spool, and the rest of the work (forwarding, storing) is behind
// it, so more connections only queue on this machine's cores.
const rssCaptureConnections = 4

// rssPersonsTimeout bounds storing the persons and waiting for the filters to hold them:
// ingestion runs at roughly 40–60k events/s here, so a million take about half a minute; a
// quarter of an hour allows for a machine busy with other work, and beyond it something is
// stuck.
const rssPersonsTimeout = 15 * time.Minute

// rssSample is how many of the new distinct ids /decide is asked about once the filters are
// said to hold them: each must be found present (a look-up), never absent.
const rssSample = 1000

// rssResult is the edge's memory holding many projects, and many known persons if asked.
type rssResult struct {
	Projects        int     `json:"projects"`
	FlagsPerProject int     `json:"flags_per_project"`
	RSSMB           float64 `json:"rss_mb"` // at the end: with the persons, when there are any
	HeapMB          float64 `json:"heap_in_use_mb"`
	// ProjectsRSSMB is the RSS holding the projects, before the persons were stored.
	ProjectsRSSMB float64     `json:"rss_projects_only_mb,omitempty"`
	Persons       *rssPersons `json:"persons,omitempty"`
	// Returning is the returning users' workload (--self-contained).
	Returning *rssReturning `json:"returning,omitempty"`
	// GoMemStats are the edge's go_memstats_* gauges (bytes) at the end, without the prefix.
	GoMemStats map[string]float64 `json:"edge_go_memstats_bytes,omitempty"`
}

// rssPersons is what storing the persons took and what the filters hold afterwards.
type rssPersons struct {
	Persons         int     `json:"persons"`
	Projects        int     `json:"projects"` // projects they were spread over
	Largest         int     `json:"largest_project_persons"`
	Spread          string  `json:"spread"`
	CaptureSeconds  float64 `json:"capture_seconds"`
	EventsPerSecond float64 `json:"capture_events_per_second"`
	// WaitSeconds runs from the last batch's answer until the edge's filters held them all.
	WaitSeconds             float64 `json:"wait_seconds"`
	EdgeFilterBytes         float64 `json:"edge_filter_bytes"`
	EdgeFilterProjects      float64 `json:"edge_filter_projects"`
	ControlPlaneFilterBytes float64 `json:"controlplane_filter_bytes"`
	ControlPlaneRebuilds    float64 `json:"controlplane_filter_rebuilds"`
	// SampledPresent and SampledAbsent are the edge's membership checks of rssSample of the
	// new ids, asked through /decide: an absent one is a stored person the filter lacks.
	SampledPresent float64 `json:"sampled_present"`
	SampledAbsent  float64 `json:"sampled_absent"`
	run            string  // names the persons (personID)
}

// rss creates projects of 50 flags until the edge holds n (counting those it had), reads its
// resident memory from /metrics (process_resident_memory_bytes, VmRSS as /proc/PID/status
// gives it), then, with --rss-persons, stores that many persons and reads it again.
func (b *bench) rss(n int) error {
	created, err := b.createProjects(n)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // let the last snapshots settle
	res := &rssResult{Projects: n, FlagsPerProject: 50}
	if err := res.read(b); err != nil {
		return err
	}
	if persons := b.cfg.rssPersons; persons > 0 {
		res.ProjectsRSSMB = res.RSSMB
		if res.Persons, err = b.storePersons(append([]*project{b.project}, created...), persons); err != nil {
			return err
		}
		time.Sleep(2 * time.Second) // as above: what the edge holds at rest, not mid-update
		if err := res.read(b); err != nil {
			return err
		}
	}
	b.report.RSS = res
	return nil
}

// read takes the edge's RSS and Go heap figures from its /metrics.
func (res *rssResult) read(b *bench) error {
	m, err := scrape(b.cfg.edgeMetrics)
	if err != nil {
		return err
	}
	rss, ok := m["process_resident_memory_bytes"]
	if !ok {
		return errors.New("the edge's /metrics has no process_resident_memory_bytes")
	}
	res.RSSMB, res.HeapMB = rss/1e6, m["go_memstats_heap_inuse_bytes"]/1e6
	res.GoMemStats = map[string]float64{}
	for _, name := range []string{"heap_alloc_bytes", "heap_inuse_bytes", "heap_idle_bytes", "heap_released_bytes", "heap_sys_bytes",
		"stack_inuse_bytes", "sys_bytes", "next_gc_bytes"} {
		if v, ok := m["go_memstats_"+name]; ok {
			res.GoMemStats[name] = v
		}
	}
	return nil
}

// createProjects creates projects of 50 flags until the edge holds n, and returns those it
// created.
func (b *bench) createProjects(n int) ([]*project, error) {
	held, err := b.edgeMetric("flagedge_edge_projects")
	if err != nil {
		return nil, err
	}
	missing := n - int(held)
	jobs := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := make([]*project, max(missing, 0))
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				p, err := createProject(b.api, fmt.Sprintf("rss %d", j), 50)
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				mu.Lock()
				created[j] = p
				mu.Unlock()
			}
		}()
	}
	for j := range max(missing, 0) {
		if j%20 == 0 {
			progress(fmt.Sprintf("rss: creating project %d of %d", j+1, missing))
		}
		select {
		case err := <-errs:
			close(jobs)
			return nil, err
		case jobs <- j:
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		held, err := b.edgeMetric("flagedge_edge_projects")
		if err != nil {
			return nil, err
		}
		if int(held) >= n {
			return created, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the edge holds %d projects, not %d", int(held), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// spreadPersons divides n persons over projects as a service's projects hold them: half in
// the first (the bench project: one large app), the other half over the rest by Zipf's law
// (the k-th gets a share ∝ 1/k: a few large projects, a long tail of small ones).
func spreadPersons(n, projects int) []int {
	counts := make([]int, projects)
	var harmonic float64
	for k := 1; k < projects; k++ {
		harmonic += 1 / float64(k)
	}
	given := 0
	for k := 1; k < projects; k++ {
		counts[k] = int(float64(n/2) / (float64(k) * harmonic))
		given += counts[k]
	}
	counts[0] = n - given
	return counts
}

// personID is the distinct id of the i-th new person of project p in run.
func personID(dst []byte, run string, p, i int) []byte {
	dst = append(dst, "rss-"...)
	dst = append(dst, run...)
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, int64(p), 10)
	dst = append(dst, '-')
	return strconv.AppendInt(dst, int64(i), 10)
}

// storePersons captures one event (a $pageview with a $set) for each of n new distinct ids
// spread over projects, then waits until the edge's membership filters hold them all and
// checks a sample through /decide.
func (b *bench) storePersons(projects []*project, n int) (*rssPersons, error) {
	deadline := time.Now().Add(rssPersonsTimeout)
	counts := spreadPersons(n, len(projects))
	out := &rssPersons{Persons: n, Projects: len(projects), Largest: counts[0],
		Spread: "half in the bench project, half over the other projects by Zipf's law (the k-th ∝ 1/k)"}
	// Whatever earlier loads captured is stored first, so the control plane's count of
	// announced keys moves only with these persons from here on.
	if err := b.waitForwarded(deadline); err != nil {
		return nil, err
	}
	cp, err := scrape(b.cfg.controlPlane)
	if err != nil {
		return nil, err
	}
	announcedBefore := cp["flagedge_controlplane_membership_announced_keys_total"]
	run := strconv.FormatInt(time.Now().UnixMilli(), 36) // a second run on the same stack stores new persons
	out.run = run
	start := time.Now()
	if err := b.capturePersons(projects, counts, run, deadline); err != nil {
		return nil, err
	}
	out.CaptureSeconds = time.Since(start).Seconds()
	out.EventsPerSecond = float64(n) / out.CaptureSeconds
	captured := time.Now()
	if err := b.waitFilters(announcedBefore+float64(n), countNonZero(counts), deadline, out); err != nil {
		return nil, err
	}
	out.WaitSeconds = time.Since(captured).Seconds()
	return out, b.samplePersons(projects, counts, run, out)
}

func countNonZero(xs []int) int {
	n := 0
	for _, x := range xs {
		if x > 0 {
			n++
		}
	}
	return n
}

// capturePersons sends the persons' events to the edge's /batch, rssBatchEvents a request
// over rssCaptureConnections connections, each batch again until the edge takes it (a full
// spool answers 503).
func (b *bench) capturePersons(projects []*project, counts []int, run string, deadline time.Time) error {
	type batch struct{ p, from, to int }
	batches := make(chan batch)
	errs := make(chan error, rssCaptureConnections)
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range rssCaptureConnections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body []byte
			for bt := range batches {
				body = personsBatch(body[:0], projects[bt.p].token, run, bt.p, bt.from, bt.to)
				if err := b.postUntilTaken("/batch/", body, deadline); err != nil {
					errs <- err
					return
				}
				sent.Add(int64(bt.to - bt.from))
			}
		}()
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		total := 0
		for _, c := range counts {
			total += c
		}
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				progress(fmt.Sprintf("rss: captured %d of %d persons", sent.Load(), total))
			}
		}
	}()
	var err error
feed:
	for p, c := range counts {
		for from := 0; from < c; from += rssBatchEvents {
			select {
			case err = <-errs:
				break feed
			case batches <- batch{p: p, from: from, to: min(from+rssBatchEvents, c)}:
			}
		}
	}
	close(batches)
	wg.Wait()
	close(stop)
	if err != nil {
		return err
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// personsBatch appends a /batch body: a $pageview with a $set for persons from to to-1 of
// project p.
func personsBatch(dst []byte, token, run string, p, from, to int) []byte {
	dst = append(dst, `{"api_key":"`...)
	dst = append(dst, token...)
	dst = append(dst, `","batch":[`...)
	for i := from; i < to; i++ {
		if i > from {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"event":"$pageview","distinct_id":"`...)
		dst = personID(dst, run, p, i)
		dst = append(dst, `","properties":{"$current_url":"https://shop.example.com/","$lib":"bench","$set":{"plan":"`...)
		dst = append(dst, []string{"free", "pro", "enterprise", "team"}[i%4]...)
		dst = append(dst, `"}}}`...)
	}
	return append(dst, "]}"...)
}

// postUntilTaken posts body to the edge's path until it answers 200: a 503 (spool full) or a
// transport error is tried again after a pause, until deadline; another status is an error.
func (b *bench) postUntilTaken(path string, body []byte, deadline time.Time) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.SetRequestURI("http://" + b.work.edge + path)
	req.SetBody(body)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		err := b.edge.Do(req, resp)
		if err == nil && resp.StatusCode() == 200 {
			return nil
		}
		if err == nil && resp.StatusCode() != fasthttp.StatusServiceUnavailable {
			return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode(), resp.Body())
		}
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("POST %s: not taken within %v (last: %v, %d)", path, rssPersonsTimeout, err, resp.StatusCode())
		}
		time.Sleep(pause)
	}
}

// waitForwarded waits until the edge's spool holds nothing left to forward.
func (b *bench) waitForwarded(deadline time.Time) error {
	for {
		pending, err := b.edgeMetric("flagedge_edge_spool_pending_records")
		if err != nil {
			return err
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the edge still holds %.0f records to forward", pending)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitFilters waits until the control plane has announced announced keys in all (every
// stored person is one) and the edge's filters hold them: a filter for each of projects, as
// many bytes as the control plane's (more while additions sit in small layers), and no
// change over a second. It records the filters' figures in out.
func (b *bench) waitFilters(announced float64, projects int, deadline time.Time, out *rssPersons) error {
	if err := b.waitForwarded(deadline); err != nil {
		return err
	}
	lastBytes := -1.0
	for {
		cp, err := scrape(b.cfg.controlPlane)
		if err != nil {
			return err
		}
		edge, err := scrape(b.cfg.edgeMetrics)
		if err != nil {
			return err
		}
		got := cp["flagedge_controlplane_membership_announced_keys_total"]
		out.EdgeFilterBytes, out.EdgeFilterProjects = edge["flagedge_edge_membership_filter_bytes"], edge["flagedge_edge_membership_projects"]
		out.ControlPlaneFilterBytes, out.ControlPlaneRebuilds = cp["flagedge_controlplane_membership_filter_bytes"], cp["flagedge_controlplane_membership_rebuilds_total"]
		progress(fmt.Sprintf("rss: control plane announced %.0f of %.0f keys; edge filters %.0f B in %.0f projects (control plane %.0f B)",
			got, announced, out.EdgeFilterBytes, out.EdgeFilterProjects, out.ControlPlaneFilterBytes))
		if refused := edge["flagedge_edge_membership_filters_refused_total"]; refused > 0 {
			return fmt.Errorf("the edge refused %.0f membership filters (over --membership-max-bytes): they will never hold the persons", refused)
		}
		if got >= announced && out.EdgeFilterProjects >= float64(projects) && out.EdgeFilterBytes >= out.ControlPlaneFilterBytes &&
			out.EdgeFilterBytes == lastBytes {
			return nil
		}
		lastBytes = out.EdgeFilterBytes
		if time.Now().After(deadline) {
			return fmt.Errorf("the filters did not settle within %v: the control plane announced %.0f of %.0f keys, the edge holds %.0f B of filters in %.0f projects (control plane %.0f B)",
				rssPersonsTimeout, got, announced, out.EdgeFilterBytes, out.EdgeFilterProjects, out.ControlPlaneFilterBytes)
		}
		time.Sleep(time.Second)
	}
}

// samplePersons asks /decide, without properties, about rssSample of the new ids spread
// evenly over them, and records how the edge's membership checks answered.
func (b *bench) samplePersons(projects []*project, counts []int, run string, out *rssPersons) error {
	series := func(r string) string { return `flagedge_edge_membership_checks_total{result="` + r + `"}` }
	before, err := scrape(b.cfg.edgeMetrics)
	if err != nil {
		return err
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	var body []byte
	for s := range min(rssSample, total) {
		at := int(math.Round(float64(s) * float64(total) / float64(min(rssSample, total))))
		p := 0
		for at >= counts[p] {
			at -= counts[p]
			p++
		}
		body = append(body[:0], `{"api_key":"`...)
		body = append(body, projects[p].token...)
		body = append(body, `","distinct_id":"`...)
		body = personID(body, run, p, at)
		body = append(body, `"}`...)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetRequestURI("http://" + b.work.edge + "/decide/?v=3")
		req.SetBody(body)
		err := b.edge.Do(req, resp)
		status := resp.StatusCode()
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		if err != nil || status != 200 {
			return fmt.Errorf("decide for a stored person: %d, %v", status, err)
		}
	}
	after, err := scrape(b.cfg.edgeMetrics)
	if err != nil {
		return err
	}
	out.SampledPresent = after[series("present")] - before[series("present")]
	out.SampledAbsent = after[series("absent")] - before[series("absent")]
	return nil
}

// goal is the suite's target line for this result.
func (res *rssResult) goal() string {
	g := fmt.Sprintf("edge RSS ≤ 150 MB with %d projects × %d flags", res.Projects, res.FlagsPerProject)
	if p := res.Persons; p != nil {
		g += fmt.Sprintf(" and %d more known persons", p.Persons)
	}
	return g
}

// markdown is the result's part of report.md.
func (res *rssResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nedge RSS holding %d projects × %d flags", res.Projects, res.FlagsPerProject)
	p := res.Persons
	if p == nil {
		fmt.Fprintf(&b, ": %.1f MB (Go heap in use %.1f MB)\n", res.RSSMB, res.HeapMB)
		return b.String()
	}
	fmt.Fprintf(&b, ": %.1f MB before the persons; with %d more known persons: %.1f MB (Go heap in use %.1f MB)\n\n",
		res.ProjectsRSSMB, p.Persons, res.RSSMB, res.HeapMB)
	fmt.Fprintf(&b, "- persons: %d new distinct ids over %d projects (%s; the largest %d), one $pageview with a $set each, "+
		"captured through the edge's /batch in batches of %d: %.1f s, %.0f events/s; then %.1f s until the edge's filters held them\n",
		p.Persons, p.Projects, p.Spread, p.Largest, rssBatchEvents, p.CaptureSeconds, p.EventsPerSecond, p.WaitSeconds)
	fmt.Fprintf(&b, "- membership filters: edge %.2f MB in %.0f projects, control plane %.2f MB (%.0f filters rebuilt as they grew)\n",
		p.EdgeFilterBytes/1e6, p.EdgeFilterProjects, p.ControlPlaneFilterBytes/1e6, p.ControlPlaneRebuilds)
	fmt.Fprintf(&b, "- %d of the new ids asked through /decide without properties: the filter said present %.0f, absent %.0f (absent would be a stored person missed)\n",
		min(rssSample, p.Persons), p.SampledPresent, p.SampledAbsent)
	if len(res.GoMemStats) > 0 {
		b.WriteString("- edge go_memstats (MB):")
		for _, k := range slices.Sorted(maps.Keys(res.GoMemStats)) {
			fmt.Fprintf(&b, " %s %.1f;", strings.TrimSuffix(k, "_bytes"), res.GoMemStats[k]/1e6)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// rssReturning is the returning users' workload after the persons are stored: /decide
// without properties for persons of the bench project drawn by Zipf's law (a few come back
// often, most rarely), so that each needs the person's stored properties: from the cache, or
// looked up at the control plane.
type rssReturning struct {
	Requests  int     `json:"requests"`
	Users     int     `json:"users"` // drawn from
	Exponent  float64 `json:"zipf_exponent"`
	Hits      float64 `json:"person_cache_hits"`
	Misses    float64 `json:"person_cache_misses"`
	HitRate   float64 `json:"person_cache_hit_rate"`
	RSSMB     float64 `json:"rss_after_mb"`
	PerSecond float64 `json:"requests_per_second"`
}

// rssReturningRequests bounds the returning users' workload: at a few thousand requests a
// second (each miss is a look-up), well under a minute.
const rssReturningRequests = 100_000

// returning runs the returning users' workload over the first project's persons of run.
func (b *bench) returning(project *project, users int, run string) (*rssReturning, error) {
	const exponent = 1.1
	out := &rssReturning{Requests: rssReturningRequests, Users: users, Exponent: exponent}
	series := func(r string) string { return `flagedge_edge_cache_lookups_total{cache="persons",result="` + r + `"}` }
	before, err := scrape(b.cfg.edgeMetrics)
	if err != nil {
		return nil, err
	}
	zipf := rand.NewZipf(rand.New(rand.NewSource(int64(b.cfg.seed))), exponent, 1, uint64(users-1))
	ids := make(chan uint64, 1024)
	go func() {
		defer close(ids)
		for range rssReturningRequests {
			ids <- zipf.Uint64()
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body []byte
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for i := range ids {
				body = append(body[:0], `{"api_key":"`...)
				body = append(body, project.token...)
				body = append(body, `","distinct_id":"`...)
				body = personID(body, run, 0, int(i))
				body = append(body, `"}`...)
				req.Header.SetMethod("POST")
				req.Header.SetContentType("application/json")
				req.SetRequestURI("http://" + b.work.edge + "/decide/?v=3")
				req.SetBody(body)
				if err := b.edge.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	out.PerSecond = rssReturningRequests / time.Since(start).Seconds()
	if n := failed.Load(); n > 0 {
		return nil, fmt.Errorf("returning users: %d requests failed", n)
	}
	after, err := scrape(b.cfg.edgeMetrics)
	if err != nil {
		return nil, err
	}
	out.Hits, out.Misses = after[series("hit")]-before[series("hit")], after[series("miss")]-before[series("miss")]
	if out.Hits+out.Misses > 0 {
		out.HitRate = out.Hits / (out.Hits + out.Misses)
	}
	out.RSSMB = after["process_resident_memory_bytes"] / 1e6
	return out, nil
}

// rssSelfContained is `--scenario rss --self-contained`: for each edge binary of --edge-bin
// (comma-separated; "tree" or empty builds the tree's), its own PostgreSQL, control plane and
// edge, the rss scenario, then the returning users' workload; the results side by side.
func rssSelfContained(cfg config) error {
	var md strings.Builder
	md.WriteString("| edge | RSS, projects only MB | RSS after persons MB | heap in use MB | returning users: person cache hit rate (hits / misses) | RSS after MB |\n|---|---:|---:|---:|---|---:|\n")
	var all []*rssResult
	for _, bin := range strings.Split(cfg.edgeBin, ",") {
		name := bin
		if bin == "tree" || bin == "" {
			bin, name = "", "this tree"
		}
		res, err := rssOnce(cfg, bin)
		if err != nil {
			return err
		}
		all = append(all, res)
		ret := res.Returning
		fmt.Fprintf(&md, "| %s | %.0f | %.0f | %.0f | %.1f%% (%.0f / %.0f) | %.0f |\n", name, res.ProjectsRSSMB, res.RSSMB, res.HeapMB,
			100*ret.HitRate, ret.Hits, ret.Misses, ret.RSSMB)
		fmt.Fprintln(os.Stderr, "\n"+md.String())
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(map[string]any{"machine": machine(), "results": all}, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.out, "rss.json"), raw, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.out, "rss.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	fmt.Print("\n" + md.String())
	return nil
}

func rssOnce(cfg config, edgeBin string) (*rssResult, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stack, err := startSelfStack(ctx, stackOptions{name: "rss", edgeBin: edgeBin})
	if err != nil {
		return nil, err
	}
	defer stack.close()
	cfg.controlPlane, cfg.edges, cfg.personalKey = stack.controlPlaneURL(), []string{"http://" + stack.edge.httpAddr}, stack.personalKey
	cfg.edgeMetrics = "http://" + stack.edge.metricsAddr
	b, err := newBench(cfg)
	if err != nil {
		return nil, err
	}
	if err := b.rss(cfg.rssProjects); err != nil {
		return nil, err
	}
	res := b.report.RSS
	if res.Persons == nil {
		return nil, errors.New("rss --self-contained needs --rss-persons > 0")
	}
	if res.Returning, err = b.returning(b.project, res.Persons.Largest, res.Persons.run); err != nil {
		return nil, err
	}
	return res, nil
}

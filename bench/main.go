// Command bench measures what a flagedge edge sustains: /decide and /flags latency and
// throughput (closed loop at C connections, or open loop at a constant rate with latency
// counted from each request's scheduled time), capture throughput, a browser-like mix, flag
// propagation to every edge, and the edge's memory holding many projects and known persons.
// Every result is also given as a ratio to a bare fasthttp server measured in the same run
// with the same client. It drives loopback addresses only, and every load is bounded in time
// and count.
//
//	go run ./bench --control-plane http://127.0.0.1:8000 --edge http://127.0.0.1:8080 --personal-key phx_… --suite
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

type config struct {
	controlPlane string
	edges        []string
	edgeMetrics  string // base URL of the first edge's /metrics (its --metrics-addr)
	personalKey  string
	suite        bool
	scenario     string
	duration     time.Duration
	connections  int
	rate         int
	maxRequests  int64
	users        int
	overrides    float64
	seed         uint64
	baseline     bool
	out          string
	goBench      bool
	rssProjects  int
	rssPersons   int
	// forwardEvents is how many events the forwarding scenario captures and forwards.
	forwardEvents int
	// eventLogRounds is how many times the eventlog scenario measures each build at each
	// stream replication, interleaved.
	eventLogRounds int
	// eventLogReplicas are the stream replications the eventlog scenario measures.
	eventLogReplicas []int
	// eventLogCPArgs and eventLogEdgeArgs are added to the eventlog scenario's control plane
	// and edge command lines (space-separated): to try knobs.
	eventLogCPArgs, eventLogEdgeArgs string
	// edgeBin is the edge binary the self-contained scenarios (pinned, regions) run instead of
	// building one from the tree: to measure another build side by side.
	edgeBin string
	// edgesCount and edgesRounds are the edges scenario's simulated edges and flag changes;
	// controlPlaneBin its control plane binaries, comma-separated ("tree": built from the tree).
	edgesCount      int
	edgesRounds     int
	controlPlaneBin string
	edgesAck        bool
	// edgesRelays puts that many relays (edge --serve-edges) between the control plane and the
	// simulated edges, which connect to them in turn; 0: straight to the control plane.
	edgesRelays int
	// sseStreams is how many OFREP change streams the sse scenario opens.
	sseStreams int
	// profile takes a CPU profile of the edge in the pinned scenario.
	profile bool
	// pinnedFlags is how many flags of the realistic mix the pinned scenario's project holds,
	// and pinnedRepeat makes every request of a run the same (a returning user).
	pinnedFlags  int
	pinnedRepeat bool
}

func main() {
	if err := runBench(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func envOr(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

func runBench(args []string) error {
	if handled, err := childMode(args); handled {
		return err
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var cfg config
	var edges string
	fs.StringVar(&cfg.controlPlane, "control-plane", envOr("FLAGEDGE", "http://127.0.0.1:8000"), "management API URL (env FLAGEDGE)")
	fs.StringVar(&edges, "edge", envOr("EDGE", "http://127.0.0.1:8080"), "edge URLs, comma-separated; load goes to the first (env EDGE)")
	fs.StringVar(&cfg.edgeMetrics, "edge-metrics", envOr("EDGE_METRICS", "http://127.0.0.1:9181"), "the first edge's --metrics-addr, as a URL (env EDGE_METRICS)")
	fs.StringVar(&cfg.personalKey, "personal-key", os.Getenv("KEY"), "personal API key with scope * (env KEY)")
	fs.BoolVar(&cfg.suite, "suite", false, "run the standard suite (what make bench runs)")
	fs.StringVar(&cfg.scenario, "scenario", "decide", "decide, decide-repeat, flags, capture, mixed, propagation, rss (self-contained with --self-contained), eventlog (self-contained: its own PostgreSQL, 3-node NATS cluster, control plane and edge with --event-log-url, /batch senders; builds paired from --edge-bin and --controlplane-bin), edges (self-contained: its own PostgreSQL and control plane, and --edges simulated edges over gRPC), regions (self-contained: its own PostgreSQL, control plane and edge, 80 ms apart), sse (self-contained: OFREP change streams on one edge, their memory and a change's fan-out), pinned (self-contained: the edge vs a bare responder on one pinned core, with wrk), logins (self-contained: the management API's latency during console login floods), hostile (self-contained: the edge's peak memory under the worst bodies, and /decide among 10,000 half-sent requests), webhooks (self-contained: a flag write's delivery to a webhook receiver, p50/p99 over 100 writes), forwarding (self-contained: --forward-events events captured at an edge and forwarded to a PostHog /batch/ receiver, events per second), or scheduled (self-contained: 100 scheduled changes with two control-plane replicas and an edge, their lateness and when the edge answers them)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long each load runs")
	fs.IntVar(&cfg.connections, "connections", 32, "concurrent connections (closed loop)")
	fs.IntVar(&cfg.rate, "rate", 0, "requests per second for an open-loop run; 0 is closed loop")
	fs.Int64Var(&cfg.maxRequests, "max-requests", 5_000_000, "most requests of one load")
	fs.IntVar(&cfg.users, "users", 100_000, "distinct users the capture workload spreads over")
	fs.IntVar(&cfg.forwardEvents, "forward-events", 100_000, "events the forwarding scenario captures at the edge and forwards to its /batch/ receiver")
	fs.Float64Var(&cfg.overrides, "overrides-share", 0.9, "share of decide requests carrying person properties")
	fs.Uint64Var(&cfg.seed, "seed", 42, "workload seed: the same seed gives the same requests")
	fs.BoolVar(&cfg.baseline, "baseline", true, "also measure a bare fasthttp server with the same client")
	fs.StringVar(&cfg.out, "out", "bench/results/"+time.Now().UTC().Format("20060102-150405"), "where the report goes")
	fs.BoolVar(&cfg.goBench, "go-bench", false, "also run the Go micro-benchmarks once and include them")
	fs.IntVar(&cfg.rssProjects, "rss-projects", 1000, "projects (of 50 flags) the rss scenario creates")
	fs.IntVar(&cfg.rssPersons, "rss-persons", 1_000_000, "distinct ids the rss scenario then has the control plane store, through the edge's /batch (0: none)")
	fs.StringVar(&cfg.edgeBin, "edge-bin", "", "pinned, regions, eventlog and rss --self-contained: run this edge binary instead of one built from the tree (compare builds)")
	combine := fs.String("plot", "", "only draw combined-* plots into --out from these report.json / pinned.json files (comma-separated)")
	fs.BoolVar(&cfg.profile, "profile", false, "pinned: also take a CPU profile of the edge under load (pinned-edge-cpu.pprof and .txt); edges: of each control plane during the changes (edges-cp-N-cpu.pprof and .txt), and of the first relay with --edges-relays (edges-relay-N-cpu.pprof and .txt); eventlog: of the edge and the control plane in the flat-out phase")
	fs.IntVar(&cfg.pinnedFlags, "pinned-flags", 50, "pinned: flags in the bench project (flagstest.RealisticProjectOf: RealisticProject's mix of 50, repeated with rollouts of their own)")
	fs.BoolVar(&cfg.pinnedRepeat, "pinned-repeat", false, "pinned: every request of a run the same user and body (a returning user), instead of a new user each request")
	fs.IntVar(&cfg.sseStreams, "sse-streams", 10_000, "OFREP change streams the sse scenario opens on its edge")
	fs.IntVar(&cfg.eventLogRounds, "eventlog-rounds", 3, "eventlog: runs of each build at stream replication 1 and 3, interleaved (the report gives medians)")
	fs.IntVar(&cfg.edgesCount, "edges", 10_000, "edges: simulated edges, each with its own gRPC connection and Watch stream")
	fs.IntVar(&cfg.edgesRounds, "edges-rounds", 5, "edges: flag changes timed until every simulated edge has them")
	fs.BoolVar(&cfg.edgesAck, "edges-ack", true, "edges: the simulated edges acknowledge the versions they receive, as edges do (control planes that track rollouts)")
	fs.IntVar(&cfg.edgesRelays, "edges-relays", 0, "edges: relay processes (edge --serve-edges, built from this tree) between the control plane and the simulated edges, which connect to them in turn, each with GOMAXPROCS of its share of the machine's cores (at least 1); 0: the edges connect to the control plane")
	fs.StringVar(&cfg.controlPlaneBin, "controlplane-bin", "tree", "edges and eventlog: control plane binaries run one after the other, comma-separated (tree: built from this tree), to compare builds in one run")
	selfContained := fs.Bool("self-contained", false, "rss: start its own PostgreSQL, control plane and edge (each of --edge-bin, comma-separated, tree: built from the tree) and also measure returning users' person-cache hit rate")
	fs.StringVar(&cfg.eventLogCPArgs, "eventlog-controlplane-args", "", "eventlog: added to the control plane's serve command line (space-separated), e.g. to try knobs")
	fs.StringVar(&cfg.eventLogEdgeArgs, "eventlog-edge-args", "", "eventlog: added to the edge's command line (space-separated)")
	replicas := fs.String("eventlog-replicas", "1,3", "eventlog: stream replications measured, comma-separated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, r := range strings.Split(*replicas, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n < 1 || n > 3 {
			return fmt.Errorf("--eventlog-replicas: %q is not 1, 2 or 3", r)
		}
		cfg.eventLogReplicas = append(cfg.eventLogReplicas, n)
	}
	if *combine != "" {
		return combinePlots(*combine, cfg.out)
	}
	cfg.edges = strings.Split(edges, ",")
	if cfg.scenario == "eventlog" { // self-contained: its own PostgreSQL and NATS cluster
		return eventLogScenario(cfg)
	}
	if cfg.scenario == "rss" && *selfContained { // its own PostgreSQL, control plane and edge
		return rssSelfContained(cfg)
	}
	if cfg.scenario == "edges" { // self-contained: its own PostgreSQL and control plane
		return edgesScenario(cfg)
	}
	if cfg.scenario == "regions" { // self-contained: its own PostgreSQL, control plane, proxy and edge
		return runRegions(cfg)
	}
	if cfg.scenario == "sse" { // self-contained: its own PostgreSQL, control plane and edge
		return sseScenario(cfg)
	}
	if cfg.scenario == "pinned" { // self-contained: its own PostgreSQL, control plane and edge
		return pinnedScenario(cfg)
	}
	if cfg.scenario == "logins" { // self-contained: its own PostgreSQL, control plane and edge
		return loginsScenario(cfg)
	}
	if cfg.scenario == "scheduled" { // self-contained: its own PostgreSQL, two control planes and an edge
		return scheduledScenario(cfg)
	}
	if cfg.scenario == "webhooks" { // self-contained: its own PostgreSQL, control plane and receiver
		return webhooksScenario(cfg)
	}
	if cfg.scenario == "forwarding" { // self-contained: its own PostgreSQL, control plane, edge and receiver
		return forwardingScenario(cfg)
	}
	if cfg.scenario == "hostile" { // self-contained: its own PostgreSQL, control plane and edge
		return hostileScenario(cfg)
	}
	if cfg.personalKey == "" {
		return errors.New("--personal-key (or KEY) is required: the bench creates its own project")
	}
	b, err := newBench(cfg)
	if err != nil {
		return err
	}
	if cfg.suite {
		err = b.suite()
	} else {
		err = b.single(cfg.scenario)
	}
	if err != nil {
		return err
	}
	if cfg.goBench {
		b.report.GoBench = goBenchmarks()
	}
	if err := b.report.write(cfg.out); err != nil {
		return err
	}
	fmt.Print("\n" + b.report.table())
	fmt.Printf("\nreport: %s/report.md, report.json, latency, throughput and compare plots (.svg, .png)\n", cfg.out)
	return nil
}

func machine() string {
	host, _ := os.Hostname()
	model := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				model = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs (%s), %s/%s", host, runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH)
}

// goBenchmarks runs the micro-benchmarks next to the code once, with -benchmem.
func goBenchmarks() string {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-count", "1", "-benchtime", "500ms",
		"./shared/flags/", "./edge/httpapi/", "./edge/spool/", "./edge/capture/", "./controlplane/postgres/")
	out, err := cmd.CombinedOutput()
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "Benchmark") || strings.HasPrefix(line, "FAIL") {
			keep = append(keep, line)
		}
	}
	if err != nil {
		keep = append(keep, "error: "+err.Error())
	}
	return strings.Join(keep, "\n") + "\n"
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// The pinned scenario measures /decide throughput and tail with the server alone on one
// core: `go run ./bench --scenario pinned`. It is self-contained: it builds the control plane
// and the edge, starts a throwaway PostgreSQL, the control plane and one edge, and creates
// the bench project through the REST API: --pinned-flags of the realistic mix (50 by default).
// Every request is a new user, or with --pinned-repeat the same returning user and body. The server under test — the edge, or a bare
// fasthttp responder in a process of its own answering a body of the same size — runs on
// CPU 1 with GOMAXPROCS=1; the load generator runs on CPU 0: wrk (one thread, 16
// connections) for the closed-loop runs, alternating bare, edge, bare, edge, and bench's own
// open-loop generator (GOMAXPROCS=1, in a child process) for the tail at a fixed rate.

const (
	serverCPU, clientCPU = "1", "0"
	pinnedConnections    = 16
	pinnedRounds         = 2 // bare, edge, bare, edge
	pinnedOpenLoopRate   = 5000
	wrkEntryCount        = 4096
)

// pinnedRun is one measurement with the CPU the server and the generator used in it, as
// shares of one core, and how busy each of the two CPUs was with anything (other processes
// on a shared machine, or the hypervisor's steal, show as busy beyond the server's share).
type pinnedRun struct {
	result
	Server    string  `json:"server"` // "edge" or "bare"
	ServerCPU float64 `json:"server_cpu_share"`
	// ServerSystem is the part of ServerCPU spent in the kernel, and ServerReads and
	// ServerWrites the server's read and write system calls per request: together they
	// tell whether a server's extra CPU is its own code or more work asked of the kernel.
	ServerSystem  float64 `json:"server_system_share"`
	ServerReads   float64 `json:"server_reads_per_request"`
	ServerWrites  float64 `json:"server_writes_per_request"`
	reads, writes int64   // the server's system calls in the run, made per request by perRequest
	GeneratorCPU  float64 `json:"generator_cpu_share"`
	ServerCPUBusy float64 `json:"server_cpu_busy"`
	ClientCPUBusy float64 `json:"client_cpu_busy"`
}

// pinnedReport is what pinned.json holds.
type pinnedReport struct {
	Machine    string `json:"machine"`
	StartedAt  string `json:"started_at"`
	Command    string `json:"command"`
	LoadBefore string `json:"load_average_before"`
	LoadAfter  string `json:"load_average_after"`
	Commit     string `json:"commit"`
	Wrk        string `json:"wrk"`
	GeoIP      bool   `json:"geoip"`
	BodyBytes  int    `json:"body_bytes"`
	Seed       uint64 `json:"seed"`
	Flags      int    `json:"flags"`
	// Repeat is set when every request of a run was the same (--pinned-repeat).
	Repeat     bool        `json:"repeat"`
	Runs       []pinnedRun `json:"runs"`
	EdgeMedian float64     `json:"edge_median_rps"`
	BareMedian float64     `json:"bare_median_rps"`
	Ratio      float64     `json:"ratio"`
	// Per CPU-second the server process used: less sensitive to neighbours on a shared
	// machine, though not the goal's measure.
	EdgePerCPU float64    `json:"edge_median_rps_per_server_cpu"`
	BarePerCPU float64    `json:"bare_median_rps_per_server_cpu"`
	EdgeP99Us  float64    `json:"edge_median_p99_us"`
	BareP99Us  float64    `json:"bare_median_p99_us"`
	OpenLoop   *pinnedRun `json:"open_loop"`
	// OpenLoopBare is the same open-loop run against the bare responder.
	OpenLoopBare *pinnedRun `json:"open_loop_bare"`
	EdgeGOGC     string     `json:"edge_gogc,omitempty"`
	EdgeMemLim   string     `json:"edge_gomemlimit,omitempty"`
	Environment  string     `json:"environment"`
}

// childMode runs the processes the pinned scenario starts from the bench binary itself:
// `--serve-bare ADDR --body-bytes N` (the bare responder) and `--open-loop-child …` (the
// open-loop generator). handled is false for an ordinary bench command line.
func childMode(args []string) (handled bool, err error) {
	if len(args) == 0 {
		return false, nil
	}
	switch args[0] {
	case "--serve-bare", "-serve-bare":
		return true, serveBare(args)
	case "--open-loop-child", "-open-loop-child":
		return true, openLoopChild(args[1:])
	}
	return false, nil
}

// serveBare answers every request with a body of --body-bytes until SIGTERM, logging the
// address it bound as a JSON line, as the edge does.
func serveBare(args []string) error {
	fs := flag.NewFlagSet("serve-bare", flag.ContinueOnError)
	addr := fs.String("serve-bare", "127.0.0.1:0", "address to listen on")
	size := fs.Int("body-bytes", 1400, "size of every answer's body")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := listenBaseline(*addr, *size)
	if err != nil {
		return err
	}
	line, _ := json.Marshal(map[string]any{"msg": "bare listening", "http_addr": b.addr(), "body_bytes": *size, "gomaxprocs": runtime.GOMAXPROCS(0)})
	fmt.Println(string(line))
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	<-stop
	b.close()
	return nil
}

// openLoopChild runs the decide workload (all properties sent, a new user each request, or
// with --repeat the same request every time) at a fixed rate against an edge and prints the result as JSON on stdout.
func openLoopChild(args []string) error {
	fs := flag.NewFlagSet("open-loop-child", flag.ContinueOnError)
	addr := fs.String("edge", "", "edge host:port")
	token := fs.String("token", "", "project API token")
	seed := fs.Uint64("seed", 42, "workload seed")
	rate := fs.Int("rate", pinnedOpenLoopRate, "requests per second")
	duration := fs.Duration("duration", 10*time.Second, "how long")
	name := fs.String("name", "open loop", "the result's name")
	repeat := fs.Bool("repeat", false, "send the workload's first request every time (a returning user)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w := newWorkload(*seed, *token, *addr, 1, 1)
	next := func(i int64) *request { return w.decide(i, "/decide/?v=3", 0) }
	if *repeat {
		next = func(int64) *request { return w.decide(0, "/decide/?v=3", 0) }
	}
	res := run(newClient(*addr, 64), load{name: *name, connections: 64, rate: *rate, duration: *duration,
		maxRequests: int64(*rate) * int64(duration.Seconds()+1), expectStatus: 200, next: next}, progress)
	return json.NewEncoder(os.Stdout).Encode(res)
}

func pinnedScenario(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if runtime.NumCPU() < 2 {
		return errors.New("pinned: needs two CPUs (server on CPU 1, load generator on CPU 0)")
	}
	for _, tool := range []string{"taskset", "wrk"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("pinned: %s not found (make deps installs it): %w", tool, err)
		}
	}
	if cfg.pinnedFlags < 1 {
		return fmt.Errorf("pinned: --pinned-flags %d: the project needs a flag", cfg.pinnedFlags)
	}
	rep := &pinnedReport{Machine: machine(), StartedAt: time.Now().UTC().Format(time.RFC3339), Seed: cfg.seed,
		Flags: cfg.pinnedFlags, Repeat: cfg.pinnedRepeat,
		Command: "go run ./bench " + strings.Join(os.Args[1:], " "), LoadBefore: loadAverage(),
		EdgeGOGC: os.Getenv("GOGC"), EdgeMemLim: os.Getenv("GOMEMLIMIT")}
	wrkVersion, _ := exec.Command("wrk", "--version").CombinedOutput()
	rep.Wrk, _, _ = strings.Cut(strings.SplitN(string(wrkVersion), "\n", 2)[0], " Copyright")
	st, err := startPinnedStack(ctx, cfg.seed, cfg.edgeBin, cfg.profile, rep)
	if err != nil {
		return err
	}
	defer st.close()
	script := filepath.Join(st.dir, "decide.lua")
	entries, err := wrkEntries(st.work, wrkEntryCount)
	if err != nil {
		return err
	}
	if err := os.WriteFile(script, []byte(wrkScript(entries, cfg.pinnedRepeat)), 0o644); err != nil {
		return err
	}
	wrkSeconds := max(int(cfg.duration.Round(time.Second)/time.Second), 1)
	servers := map[string]*process{"edge": st.edge, "bare": st.bare}
	wrkRun := func(server string, seconds int, base int64) (pinnedRun, error) {
		proc := servers[server]
		progress(fmt.Sprintf("pinned: wrk against the %s server for %ds", server, seconds))
		before := sampleCPU(proc.cmd.Process.Pid)
		cmd := exec.CommandContext(ctx, "taskset", "-c", clientCPU, "wrk", "-t1", fmt.Sprintf("-c%d", pinnedConnections),
			fmt.Sprintf("-d%ds", seconds), "--latency", "-s", script, "http://"+proc.httpAddr, "--", strconv.FormatInt(base, 10))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return pinnedRun{}, fmt.Errorf("wrk: %v\n%s", err, out)
		}
		run := before.until(sampleCPU(proc.cmd.Process.Pid), cmd.ProcessState)
		name := "edge, pinned"
		if server == "bare" {
			name = fmt.Sprintf("bare fasthttp, pinned, %d B", rep.BodyBytes)
		}
		if run.result, err = parseWrk(name, pinnedConnections, string(out)); err != nil {
			return pinnedRun{}, err
		}
		run.Server = server
		run.perRequest()
		return run, nil
	}
	// Warm-up, not reported: the edge's caches (group look-ups, GeoIP pages) and both
	// servers' connections. Distinct ids of each run start at a multiple of 10^10 of its
	// own: no run sees another's users, nor the open-loop run's (which start at 0).
	if _, err := wrkRun("edge", 2, 99e10); err != nil {
		return err
	}
	if _, err := wrkRun("bare", 1, 98e10); err != nil {
		return err
	}
	for r := range pinnedRounds {
		for _, server := range []string{"bare", "edge"} {
			run, err := wrkRun(server, wrkSeconds, int64(len(rep.Runs)+1)*1e10)
			if err != nil {
				return err
			}
			run.Name += fmt.Sprintf(", run %d", r+1)
			rep.Runs = append(rep.Runs, run)
		}
	}
	if st.pprofAddr != "" {
		if err := profileEdge(ctx, st, cfg.out, func(seconds int) error {
			_, err := wrkRun("edge", seconds, 97e10)
			return err
		}); err != nil {
			return err
		}
	}
	rate := pinnedOpenLoopRate
	if cfg.rate > 0 {
		rate = cfg.rate
	}
	progress(fmt.Sprintf("pinned: open loop at %d/s against the edge", rate))
	open, err := openLoopRun(ctx, st, "edge", st.edge, rate, time.Duration(wrkSeconds)*time.Second, cfg.pinnedRepeat)
	if err != nil {
		return err
	}
	rep.OpenLoop = &open
	// The same generator against the bare responder: the floor the generator and the loopback
	// put under any server's open-loop latency on these cores.
	progress(fmt.Sprintf("pinned: open loop at %d/s against the bare responder", rate))
	bareOpen, err := openLoopRun(ctx, st, "bare", st.bare, rate, time.Duration(wrkSeconds)*time.Second, cfg.pinnedRepeat)
	if err != nil {
		return err
	}
	rep.OpenLoopBare = &bareOpen
	rep.LoadAfter = loadAverage()
	rep.summarise()
	return rep.write(cfg.out)
}

// pinnedStack is what the pinned scenario runs: the self-contained stack with its edge on
// serverCPU, and the bare responder beside it, with the bench project on the edge.
type pinnedStack struct {
	*selfStack
	self string // the bench binary, for its child modes
	// pprofAddr is the edge's --pprof-addr with --profile, else "".
	pprofAddr string
	bare      *process
	token     string
	work      *workload
}

// startPinnedStack starts the stack (with edgeBin as the edge when set), the servers under test on serverCPU with GOMAXPROCS=1
// (the control plane and PostgreSQL idle during the runs, since every request carries its
// properties; the control plane is kept off the server's CPU all the same), creates the bench
// project, and starts the bare responder answering as many bytes as the edge.
func startPinnedStack(ctx context.Context, seed uint64, edgeBin string, profile bool, rep *pinnedReport) (_ *pinnedStack, err error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output(); err == nil {
		rep.Commit = strings.TrimSpace(string(out))
	}
	st := &pinnedStack{}
	if st.self, err = os.Executable(); err != nil {
		return nil, err
	}
	opts := stackOptions{name: "pinned", controlPlaneCPU: clientCPU, edgeCPU: serverCPU, edgeEnv: []string{"GOMAXPROCS=1"}, edgeBin: edgeBin}
	// GeoIP as make run and make bench have it, when deploy/fetch-geoip.sh can get it.
	if out, err := exec.CommandContext(ctx, "bash", filepath.Join(root, "deploy/fetch-geoip.sh"), filepath.Join(root, ".run/geoip")).Output(); err == nil {
		if path := strings.TrimSpace(string(out)); path != "" {
			opts.edgeArgs = []string{"--geoip-db", path}
			rep.GeoIP = true
		}
	}
	if profile {
		if st.pprofAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		opts.edgeArgs = append(opts.edgeArgs, "--pprof-addr", st.pprofAddr)
	}
	if st.selfStack, err = startSelfStack(ctx, opts); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	progress(fmt.Sprintf("pinned: creating a project of %d flags through the REST API", rep.Flags))
	a := st.api()
	p, err := createProject(a, fmt.Sprintf("bench pinned %d", seed), rep.Flags)
	if err != nil {
		return nil, err
	}
	st.token = p.token
	st.work = newWorkload(seed, p.token, st.edge.httpAddr, 1, 1) // every request carries its person properties
	if rep.BodyBytes, err = decideAnswerSize(ctx, st.work, len(p.flags)); err != nil {
		return nil, err
	}
	st.bare, err = startProcess(ctx, st.dir, command{name: "bare", cpu: serverCPU, env: []string{"GOMAXPROCS=1"}, listening: "bare listening",
		bin: st.self, args: []string{"--serve-bare", "127.0.0.1:0", "--body-bytes", strconv.Itoa(rep.BodyBytes)}})
	return st, err
}

func (st *pinnedStack) close() {
	if st.bare != nil {
		st.bare.stop()
	}
	st.selfStack.close()
}

// write saves pinned.md, pinned.json and the pinned-* plots in dir and prints pinned.md.
func (r *pinnedReport) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pinned.json"), raw, 0o644); err != nil {
		return err
	}
	var results []result
	for _, run := range r.allRuns() {
		results = append(results, run.result)
	}
	plots, err := writePlots(dir, "pinned-", results)
	if err != nil {
		return err
	}
	md := r.markdown() + "\nPlots: " + strings.Join(plots, ", ") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "pinned.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print("\n" + md)
	fmt.Printf("\nreport: %s/pinned.md, pinned.json\n", dir)
	return nil
}

// openLoopRun runs bench's open-loop generator in a child process on the client CPU with
// GOMAXPROCS=1 against the stack's edge; with repeat, every request the same.
func openLoopRun(ctx context.Context, st *pinnedStack, server string, proc *process, rate int, d time.Duration, repeat bool) (pinnedRun, error) {
	before := sampleCPU(proc.cmd.Process.Pid)
	cmd := exec.CommandContext(ctx, "taskset", "-c", clientCPU, st.self, "--open-loop-child", "--edge", proc.httpAddr, "--token", st.token,
		"--seed", strconv.FormatUint(st.work.seed, 10), "--rate", strconv.Itoa(rate), "--duration", d.String(),
		"--name", server+", pinned, open loop (bench generator)", "--repeat="+strconv.FormatBool(repeat))
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return pinnedRun{}, fmt.Errorf("open-loop generator: %w", err)
	}
	run := before.until(sampleCPU(proc.cmd.Process.Pid), cmd.ProcessState)
	if err := json.Unmarshal(out, &run.result); err != nil {
		return pinnedRun{}, fmt.Errorf("open-loop generator printed %q: %w", out, err)
	}
	run.Server = server
	run.perRequest()
	return run, nil
}

// perRequest sets the system calls per request from the run's totals and its requests.
func (r *pinnedRun) perRequest() {
	if r.Requests > 0 {
		r.ServerReads, r.ServerWrites = float64(r.reads)/float64(r.Requests), float64(r.writes)/float64(r.Requests)
	}
}

// decideAnswerSize waits until the edge serves the project's flags and returns the mean size
// of its answers to the workload's requests: the bare responder answers as many bytes.
func decideAnswerSize(ctx context.Context, w *workload, flags int) (int, error) {
	c := newClient(w.edge, 1)
	deadline := time.Now().Add(30 * time.Second)
	total, n := 0, 0
	for i := int64(0); n < 64; i++ {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		r := w.decide(97e10+i, "/decide/?v=3", 0)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod(r.method)
		req.SetRequestURI(r.url)
		req.SetBody(r.body)
		err := c.Do(req, resp)
		status, body := resp.StatusCode(), slices.Clone(resp.Body())
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		var answer struct {
			FeatureFlags map[string]any `json:"featureFlags"`
		}
		switch {
		case err == nil && status == 200 && json.Unmarshal(body, &answer) == nil && len(answer.FeatureFlags) == flags:
			total += len(body)
			n++
		case time.Now().After(deadline):
			return 0, fmt.Errorf("pinned: the edge does not serve the bench project's %d flags (%d, %v: %s)", flags, status, err, body)
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
	return total / n, nil
}

func (r *pinnedReport) summarise() {
	var edge, bare []pinnedRun
	for _, run := range r.Runs {
		if run.Server == "edge" {
			edge = append(edge, run)
		} else {
			bare = append(bare, run)
		}
	}
	rps := func(x pinnedRun) float64 { return x.Throughput }
	p99 := func(x pinnedRun) float64 { return float64(x.LatencyUs["p99"]) }
	r.EdgeMedian, r.BareMedian = median(edge, rps), median(bare, rps)
	r.EdgeP99Us, r.BareP99Us = median(edge, p99), median(bare, p99)
	perCPU := func(x pinnedRun) float64 { return x.Throughput / max(x.ServerCPU, 0.01) }
	r.EdgePerCPU, r.BarePerCPU = median(edge, perCPU), median(bare, perCPU)
	if r.BareMedian > 0 {
		r.Ratio = r.EdgeMedian / r.BareMedian
	}
}

func median[T any](xs []T, f func(T) float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func (r *pinnedReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## /decide on one pinned core: the edge vs a bare fasthttp responder\n\n")
	fmt.Fprintf(&b, "- command: `%s` (commit %s), started %s\n", r.Command, r.Commit, r.StartedAt)
	fmt.Fprintf(&b, "- machine: %s\n", r.Machine)
	fmt.Fprintf(&b, "- load average (1, 5, 15 min) before the run: %s; after: %s\n", r.LoadBefore, r.LoadAfter)
	gc := "Go's defaults"
	if r.EdgeGOGC != "" || r.EdgeMemLim != "" {
		gc = fmt.Sprintf("GOGC=%q GOMEMLIMIT=%q", r.EdgeGOGC, r.EdgeMemLim)
	}
	users := "a new user each request"
	if r.Repeat {
		users = "every request the same returning user and body (--pinned-repeat)"
	}
	fmt.Fprintf(&b, "- server under test on CPU %s (taskset), GOMAXPROCS=1, %s: the edge (%d flags, GeoIP %v) or the bare responder (its own process, %d B answers, the edge's mean answer size)\n",
		serverCPU, gc, r.Flags, r.GeoIP, r.BodyBytes)
	fmt.Fprintf(&b, "- load generator on CPU %s: %s, `-t1 -c%d --latency`, Lua script generated from bench's workload (decide v3, %s, all person properties sent, seed %d); the open-loop run: bench's own generator, GOMAXPROCS=1, latency counted from each request's scheduled time\n",
		clientCPU, r.Wrk, pinnedConnections, users, r.Seed)
	fmt.Fprintf(&b, "- control plane (CPU %s) and PostgreSQL idle during the runs\n", clientCPU)
	fmt.Fprintf(&b, "- server and generator: the share of one core each process used during the run; CPU %s and CPU %s busy: with anything (other processes, steal) — busy well beyond the server's share means the machine was not quiet\n\n", serverCPU, clientCPU)
	fmt.Fprintf(&b, "| run | req/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | errors | server | CPU %s busy | generator | CPU %s busy |\n", serverCPU, clientCPU)
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, run := range r.allRuns() {
		var errs int64
		for _, n := range run.Errors {
			errs += n
		}
		name := run.Name
		if run.TargetRate > 0 {
			name += fmt.Sprintf(" at %d/s", run.TargetRate)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %d | %d | %d | %d | %d | %d | %.0f%% | %.0f%% | %.0f%% | %.0f%% |\n", name, run.Throughput, run.LatencyUs["p50"], run.LatencyUs["p90"],
			run.LatencyUs["p99"], run.LatencyUs["p99.9"], run.LatencyUs["max"], errs, 100*run.ServerCPU, 100*run.ServerCPUBusy, 100*run.GeneratorCPU, 100*run.ClientCPUBusy)
	}
	fmt.Fprintf(&b, "\nWhere the server's CPU went, per request (user and system from /proc/PID/stat, in 10 ms ticks; system calls from /proc/PID/io):\n\n")
	fmt.Fprintf(&b, "| run | CPU µs | of it user µs | system µs | reads | writes |\n|---|---:|---:|---:|---:|---:|\n")
	for _, run := range r.allRuns() {
		if run.Throughput <= 0 {
			continue
		}
		perReq := 1e6 / run.Throughput
		calls := func(n float64) string {
			if run.reads == 0 && run.writes == 0 { // /proc/PID/io could not be read
				return "n/a"
			}
			return strconv.FormatFloat(n, 'f', 2, 64)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %s | %s |\n", run.Name, run.ServerCPU*perReq,
			(run.ServerCPU-run.ServerSystem)*perReq, run.ServerSystem*perReq, calls(run.ServerReads), calls(run.ServerWrites))
	}
	worst, worstRun := 0.0, ""
	for _, run := range r.allRuns() {
		if other := run.ServerCPUBusy - run.ServerCPU; other > worst {
			worst, worstRun = other, run.Name
		}
	}
	if worst > 0.15 {
		fmt.Fprintf(&b, "\n**Not a quiet machine**: other processes took up to %.0f%% of CPU %s (in %q); the server did not have its core, and these figures do not measure it. Re-run when the load average is near 0.\n",
			100*worst, serverCPU, worstRun)
	}
	fmt.Fprintf(&b, "\n| goal | result |\n|---|---|\n")
	fmt.Fprintf(&b, "| edge ≥ 0.60 × bare (median req/s of %d runs each) | %s |\n", pinnedRounds,
		verdict(r.Ratio >= 0.6, fmt.Sprintf("%.2f: edge %.0f req/s, bare %.0f req/s", r.Ratio, r.EdgeMedian, r.BareMedian)))
	if r.BarePerCPU > 0 {
		fmt.Fprintf(&b, "| (not a goal) the same per CPU-second the server used, less sensitive to neighbours | %.2f: edge %.0f, bare %.0f |\n",
			r.EdgePerCPU/r.BarePerCPU, r.EdgePerCPU, r.BarePerCPU)
	}
	fmt.Fprintf(&b, "| edge p99 at %d connections ≤ 3 × bare p99 (medians) | %s |\n", pinnedConnections,
		verdict(r.EdgeP99Us <= 3*r.BareP99Us, fmt.Sprintf("edge %.0f µs, bare %.0f µs × 3 = %.0f µs", r.EdgeP99Us, r.BareP99Us, 3*r.BareP99Us)))
	o := r.OpenLoop
	fmt.Fprintf(&b, "| open loop at %d/s: p99 ≤ 1 ms, p99.9 ≤ 5 ms | %s |\n", o.TargetRate,
		verdict(o.LatencyUs["p99"] <= 1000 && o.LatencyUs["p99.9"] <= 5000, fmt.Sprintf("p50 %d µs, p99 %d µs, p99.9 %d µs, %.0f req/s",
			o.LatencyUs["p50"], o.LatencyUs["p99"], o.LatencyUs["p99.9"], o.Throughput)))
	if ob := r.OpenLoopBare; ob != nil {
		fmt.Fprintf(&b, "| (not a goal) the same open loop against the bare responder: the generator's floor | p50 %d µs, p99 %d µs, p99.9 %d µs |\n",
			ob.LatencyUs["p50"], ob.LatencyUs["p99"], ob.LatencyUs["p99.9"])
	}
	for _, run := range r.Runs {
		if run.Server == "bare" && run.GeneratorCPU > 0.9 {
			fmt.Fprintf(&b, "\nwrk used %.0f%% of its core against the bare responder in %q: the generator may be its limit, which flatters the ratio.\n", 100*run.GeneratorCPU, run.Name)
		}
	}
	return b.String()
}

// allRuns is every run: the closed-loop ones, then the open-loop ones.
func (r *pinnedReport) allRuns() []pinnedRun {
	runs := append(slices.Clone(r.Runs), *r.OpenLoop)
	if r.OpenLoopBare != nil {
		runs = append(runs, *r.OpenLoopBare)
	}
	return runs
}

// cpuSample is the CPU time the server process and each CPU had used at one moment.
type cpuSample struct {
	at        time.Time
	server    time.Duration
	system    time.Duration
	reads     int64 // the server's read and write system calls so far (/proc/PID/io)
	writes    int64
	serverCPU [2]int64 // busy and total jiffies of the server's CPU
	clientCPU [2]int64
}

func sampleCPU(serverPID int) cpuSample {
	s := cpuSample{at: time.Now()}
	s.server, s.system = procCPU(serverPID)
	s.reads, s.writes = procSyscalls(serverPID)
	s.serverCPU, s.clientCPU = cpuJiffies(serverCPU), cpuJiffies(clientCPU)
	return s
}

// until is the run between s and end, the generator having exited with state.
func (s cpuSample) until(end cpuSample, generator *os.ProcessState) pinnedRun {
	wall := end.at.Sub(s.at).Seconds()
	share := func(a, b [2]int64) float64 {
		if b[1] <= a[1] {
			return 0
		}
		return float64(b[0]-a[0]) / float64(b[1]-a[1])
	}
	return pinnedRun{ServerCPU: (end.server - s.server).Seconds() / wall,
		ServerSystem: (end.system - s.system).Seconds() / wall,
		reads:        end.reads - s.reads, writes: end.writes - s.writes,
		GeneratorCPU:  (generator.UserTime() + generator.SystemTime()).Seconds() / wall,
		ServerCPUBusy: share(s.serverCPU, end.serverCPU), ClientCPUBusy: share(s.clientCPU, end.clientCPU)}
}

// procCPU is the CPU time (user + system, all threads) process pid has used and the
// system part of it, from /proc/PID/stat in clock ticks of 10 ms (USER_HZ is 100 on Linux).
func procCPU(pid int) (all, system time.Duration) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces: state is
	// field 3, utime 14 and stime 15.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(fields) < 13 {
		return 0, 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond, time.Duration(stime) * 10 * time.Millisecond
}

// procSyscalls is the number of read and write system calls process pid has made
// (syscr and syscw of /proc/PID/io; 0, 0 when it cannot be read).
func procSyscalls(pid int) (reads, writes int64) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(raw)) {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ": ")
		n, _ := strconv.ParseInt(value, 10, 64)
		switch name {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// cpuJiffies returns the busy and total time of CPU cpu from /proc/stat: busy is all but
// idle and iowait, so it counts every process on the CPU and the hypervisor's steal.
func cpuJiffies(cpu string) [2]int64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return [2]int64{}
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "cpu"+cpu {
			continue
		}
		var total, idle int64
		for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
			if i == 3 || i == 4 {
				idle += n
			}
		}
		return [2]int64{total - idle, total}
	}
	return [2]int64{}
}

func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// profileEdge takes a CPU profile of the edge while load runs against it (not reported as a
// run), and writes it with its top functions into dir: pinned-edge-cpu.pprof and .txt.
func profileEdge(ctx context.Context, st *pinnedStack, dir string, load func(seconds int) error) error {
	const seconds = 5
	progress("pinned: profiling the edge under load")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "pinned-edge-cpu.pprof")
	done := make(chan error, 1)
	go func() { done <- fetchProfile(st.pprofAddr, seconds, path) }()
	if err := load(seconds + 1); err != nil {
		return err
	}
	if err := <-done; err != nil {
		return fmt.Errorf("edge profile: %w", err)
	}
	return writeTop(ctx, path, filepath.Join(dir, "pinned-edge-cpu.txt"))
}

// fetchProfile takes a CPU profile of seconds from a process's pprof endpoints at addr into
// path.
func fetchProfile(addr string, seconds int, path string) error {
	client := &http.Client{Timeout: time.Duration(seconds+30) * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// writeTop writes the top functions of the profile at path into out.
func writeTop(ctx context.Context, path, out string) error {
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount", "40", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go tool pprof: %v\n%s", err, top)
	}
	return os.WriteFile(out, top, 0o644)
}

// freeAddr returns a loopback address with a port free at the moment.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

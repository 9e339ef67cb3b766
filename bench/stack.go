package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flagedge/flagedge/internal/pgcluster"
)

// A self-contained stack is what the regions and pinned scenarios run against instead of
// `make run`: bin/controlplane and bin/edge built from this module into a temporary
// directory, a throwaway PostgreSQL, the control plane and one edge as child processes that
// listen on port 0 and log the addresses they bound. The scenarios differ only in what
// stackOptions says: where the processes run, what the edge dials and what it is given.

// stackOptions is what differs between the scenarios' stacks.
type stackOptions struct {
	// name prefixes the temporary directory and names the bootstrap's project, the edge's
	// credential and its --edge-id (name+"-edge").
	name string
	// controlPlaneCPU and edgeCPU pin the processes with taskset -c; "" runs them anywhere.
	controlPlaneCPU, edgeCPU string
	// edgeEnv is added to bench's own environment for the edge (e.g. GOMAXPROCS=1).
	edgeEnv []string
	// edgeArgs are added to the edge's command line (e.g. --geoip-db).
	edgeArgs []string
	// edgeBin, when set, is the edge binary to run instead of the one built from the tree
	// (to measure another build of the edge against this control plane).
	edgeBin string
	// controlPlaneBin, when set, is the control plane binary to run instead of the one built
	// from the tree (to measure another build of it); controlPlaneArgs are added to its serve
	// command line (e.g. --grpc-tls-cert, --trusted-proxies).
	controlPlaneBin  string
	controlPlaneArgs []string
	// pgSettings are added to PostgreSQL's settings (name=value each).
	pgSettings []string
	// noEdge starts no edge: the scenario brings its own clients (edges).
	noEdge bool
	// controlPlaneLink, when set, returns the address the edge dials for the control plane's
	// gRPC address — a proxy in front of it (regions); nil: the edge dials it directly.
	controlPlaneLink func(grpcAddr string) (string, error)
}

// selfStack is a running self-contained stack. Close stops it and removes its directory.
type selfStack struct {
	opts        stackOptions
	dir         string // binaries, logs and the edge's data directory
	pg          *pgcluster.Cluster
	dbURL       string
	personalKey string // the bootstrap's personal API key (scope *)
	cpBin       string // the control plane binary run
	cp, edge    *process
}

// startSelfStack builds the binaries and starts PostgreSQL, the control plane and the edge,
// and waits until the edge is ready (it has its first snapshot). On error, what was started
// is stopped.
func startSelfStack(ctx context.Context, opts stackOptions) (_ *selfStack, err error) {
	s := &selfStack{opts: opts}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.dir, err = os.MkdirTemp("", "flagedge-bench-"+opts.name+"-"); err != nil {
		return nil, err
	}
	// Built from the tree: the binaries for which no other is given.
	var pkgs []string
	if opts.controlPlaneBin == "" {
		pkgs = append(pkgs, "./controlplane/cmd/controlplane")
	}
	if !opts.noEdge && opts.edgeBin == "" {
		pkgs = append(pkgs, "./edge/cmd/edge")
	}
	if len(pkgs) > 0 {
		if err := buildTree(ctx, opts.name, s.dir, pkgs...); err != nil {
			return nil, err
		}
	}
	progress(opts.name + ": starting PostgreSQL")
	if s.pg, err = pgcluster.Start(ctx, pgcluster.Options{Settings: opts.pgSettings}); err != nil {
		return nil, err
	}
	s.dbURL = s.pg.URL("postgres")
	var keys struct {
		PersonalAPIKey string `json:"personal_api_key"`
	}
	cpBin := filepath.Join(s.dir, "controlplane")
	if opts.controlPlaneBin != "" {
		cpBin = opts.controlPlaneBin
	}
	s.cpBin = cpBin
	if err := s.controlplane(ctx, &keys, "bootstrap", "--email", "bench@example.com", "--project-name", opts.name); err != nil {
		return nil, err
	}
	s.personalKey = keys.PersonalAPIKey
	if s.cp, err = s.startControlPlane(ctx, "controlplane", opts.controlPlaneCPU, opts.controlPlaneArgs...); err != nil {
		return nil, err
	}
	if opts.noEdge {
		return s, nil
	}
	edgeToken, err := s.createEdge(ctx, opts.name+"-edge")
	if err != nil {
		return nil, err
	}
	link := s.cp.grpcAddr
	if opts.controlPlaneLink != nil {
		if link, err = opts.controlPlaneLink(s.cp.grpcAddr); err != nil {
			return nil, err
		}
	}
	edgeArgs := append([]string{"--http-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--control-plane", link, "--edge-token", edgeToken,
		"--data-dir", filepath.Join(s.dir, "edge-data"), "--edge-id", opts.name + "-edge", "--drain-delay", "0s"}, opts.edgeArgs...)
	edgeBin := filepath.Join(s.dir, "edge")
	if opts.edgeBin != "" {
		edgeBin = opts.edgeBin
	}
	if s.edge, err = startProcess(ctx, s.dir, command{name: "edge", cpu: opts.edgeCPU, env: opts.edgeEnv, listening: "edge listening",
		bin: edgeBin, args: edgeArgs}); err != nil {
		return nil, err
	}
	if err := s.edge.waitListening("metrics listening"); err != nil {
		return nil, err
	}
	if err := waitReady("http://" + s.edge.httpAddr + "/_ready"); err != nil {
		return nil, fmt.Errorf("%w; the edge logged:\n%s", err, s.edge.logTail())
	}
	return s, nil
}

// project returns the id and API token of the stack's project (the bootstrap's).
func (s *selfStack) project() (id int64, token string, err error) {
	var projects struct {
		Results []struct {
			ID       int64  `json:"id"`
			APIToken string `json:"api_token"`
		} `json:"results"`
	}
	if err := getJSON(s.controlPlaneURL()+"/api/projects/", s.personalKey, &projects); err != nil || len(projects.Results) == 0 {
		return 0, "", fmt.Errorf("list projects: %v %v", projects, err)
	}
	return projects.Results[0].ID, projects.Results[0].APIToken, nil
}

// controlPlaneURL is the management API's base URL.
func (s *selfStack) controlPlaneURL() string { return "http://" + s.cp.httpAddr }

// api is the management API of the stack's control plane, called with its personal key.
func (s *selfStack) api() *api {
	return &api{base: s.controlPlaneURL(), key: s.personalKey, http: httpClient}
}

// createEdge makes a new edge credential (`controlplane edges create`) and returns its token.
func (s *selfStack) createEdge(ctx context.Context, name string) (string, error) {
	var edge struct {
		EdgeToken string `json:"edge_token"`
	}
	err := s.controlplane(ctx, &edge, "edges", "create", "--name", name)
	return edge.EdgeToken, err
}

// controlplane runs a bin/controlplane subcommand on the stack's database and decodes its
// JSON output into out.
func (s *selfStack) controlplane(ctx context.Context, out any, args ...string) error {
	return runJSON(ctx, out, s.cpBin, append(args, "--database-url", s.dbURL)...)
}

// keepLogs copies the processes' logs into dir as <prefix><process>.log.
func (s *selfStack) keepLogs(dir, prefix string) {
	for _, p := range []*process{s.cp, s.edge} {
		if p == nil {
			continue
		}
		if data, err := os.ReadFile(p.log); err == nil {
			_ = os.WriteFile(filepath.Join(dir, prefix+p.name+".log"), data, 0o644)
		}
	}
}

// close stops the edge, the control plane and PostgreSQL, in that order, and removes the
// directory (logs included: keepLogs first). Safe on a partly started stack.
func (s *selfStack) close() {
	for _, p := range []*process{s.edge, s.cp} {
		if p != nil {
			p.stop()
		}
	}
	if s.pg != nil {
		s.pg.Stop()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// command is how to start one child process.
type command struct {
	name      string // names its log file, <dir>/<name>.log, and errors
	bin       string
	args      []string
	cpu       string   // taskset -c cpu; "" for any
	env       []string // added to bench's own environment
	listening string   // msg of the JSON log line that gives the addresses it bound
}

// process is a started child whose output goes to a log file.
type process struct {
	name     string
	cmd      *exec.Cmd
	log      string
	done     chan struct{}
	httpAddr string // from its "… listening" log line
	grpcAddr string // the control plane's, from the same line; a relay's, from "relay listening"
	// metricsAddr is the edge's --metrics-addr, from its "metrics listening" line.
	metricsAddr string
}

// startProcess starts c and waits for its listening line: the binaries listen on port 0 and
// say which addresses they bound. The child is stopped when ctx is done, and killed if bench
// dies.
func startProcess(ctx context.Context, dir string, c command) (*process, error) {
	bin, args := c.bin, c.args
	if c.cpu != "" {
		bin, args = "taskset", append([]string{"-c", c.cpu, c.bin}, c.args...) // taskset execs bin: the PID is bin's
	}
	p := &process{name: c.name, cmd: exec.Command(bin, args...), log: filepath.Join(dir, c.name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(os.Environ(), c.env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			p.stop()
		case <-p.done:
		}
	}()
	if err := p.waitListening(c.listening); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitListening waits for the JSON log line whose msg is msg and takes its addresses.
func (p *process) waitListening(msg string) error {
	// Either binary starts in well under a second; 30 s allows for a machine busy compiling.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		data, _ := os.ReadFile(p.log)
		for _, line := range strings.Split(string(data), "\n") {
			var entry struct {
				Msg         string `json:"msg"`
				HTTPAddr    string `json:"http_addr"`
				GRPCAddr    string `json:"grpc_addr"`
				MetricsAddr string `json:"metrics_addr"`
				ServeEdges  string `json:"serve_edges_addr"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == msg {
				switch {
				case entry.MetricsAddr != "":
					p.metricsAddr = entry.MetricsAddr
				case entry.ServeEdges != "":
					p.grpcAddr = entry.ServeEdges // a relay's sync service
				default:
					p.httpAddr, p.grpcAddr = entry.HTTPAddr, entry.GRPCAddr
				}
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before listening:\n%s", p.name, p.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not log %q:\n%s", p.name, msg, p.logTail())
}

// logTail is the end of the process's log, for errors.
func (p *process) logTail() string {
	data, _ := os.ReadFile(p.log)
	if len(data) > 4096 {
		data = data[len(data)-4096:]
	}
	return string(data)
}

// stop sends SIGCONT (a scenario may have stopped it with SIGSTOP) and SIGTERM, and waits;
// after 20 s (the binaries' own shutdown bound is 15 s), SIGKILL. Safe to call twice.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// runJSON runs a command and decodes its JSON output into out.
func runJSON(ctx context.Context, out any, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), args[0], err, stderr.String())
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s printed %q: %w", filepath.Base(bin), args[0], raw, err)
	}
	return nil
}

// waitReady waits until url answers 200.
func waitReady(url string) error {
	// Readiness comes with the first snapshot over the link: a few round trips.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := httpClient.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New(url + " is not ready after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startControlPlane starts a replica of the stack's control plane (the stack's own, or another
// beside it) on its database, on any free ports, with extra arguments.
func (s *selfStack) startControlPlane(ctx context.Context, name, cpu string, extra ...string) (*process, error) {
	return startProcess(ctx, s.dir, command{name: name, cpu: cpu, listening: "control plane listening", bin: s.cpBin,
		args: append([]string{"serve", "--database-url", s.dbURL, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--drain-delay", "0s"}, extra...)})
}

// buildTree builds pkgs of this module's tree into dir, saying so as scenario.
func buildTree(ctx context.Context, scenario, dir string, pkgs ...string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	progress(scenario + ": building " + strings.Join(pkgs, " "))
	build := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// moduleRoot is the directory of the go.mod bench is run from.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run bench from inside the flagedge module (go run ./bench)")
	}
	return filepath.Dir(mod), nil
}

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	mrand "math/rand/v2"
	"net"
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/cpclient"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// The edges scenario measures how many edges one control-plane replica serves, as an operator
// running a large fleet would see it: the real control plane binary with its own PostgreSQL,
// TLS on its gRPC port and an edge token, and --edges lightweight edge clients in this
// process, each with its own connection and Watch stream (real gRPC over loopback). It takes
// the time until every client has its initial sync, then changes a flag through the
// management API --edges-rounds times and takes, for each client, the time until it has
// received the project's new version; and the control plane's CPU seconds and resident
// memory (from /proc) per connected edge.
//
// A client is light where an edge is heavy: it decodes of each message only the projects'
// ids and versions (a codec of its own), and applies nothing. What it costs the control plane
// is what an edge costs it.

// edgesConnecting bounds the clients connecting at once: a fleet reconnecting after a
// control-plane restart comes back in waves, and the listen backlog (somaxconn, 4,096 here)
// would drop a burst of 10,000 SYNs, each retried only after a second.
const edgesConnecting = 256

// edgesTimeout bounds each phase: the initial sync of every client, and each change reaching
// every client.
const edgesTimeout = 2 * time.Minute

// edgesResult is one control plane's figures.
type edgesResult struct {
	ControlPlane string `json:"control_plane"`
	Edges        int    `json:"edges"`
	Synced       int    `json:"synced"`
	// SyncSeconds runs from the first client's dial until every client has its initial sync.
	SyncSeconds float64 `json:"initial_sync_seconds"`
	// SyncP50Ms and SyncP99Ms are each client's time from its dial to its initial sync.
	SyncP50Ms float64 `json:"initial_sync_p50_ms"`
	SyncP99Ms float64 `json:"initial_sync_p99_ms"`
	// SyncConfirmedMs runs from every client having its initial sync until rollout_status
	// confirms the version they hold on every edge (0 when it cannot: no acknowledgements):
	// the changes are timed after it, so that the first one does not also carry the
	// sessions' reports of the initial sync.
	SyncConfirmedMs float64 `json:"initial_sync_confirmed_ms"`
	// Change*Ms are the times from the PATCH being sent until each client has the project's
	// new version, over every client of every round.
	Rounds      int       `json:"rounds"`
	ChangeP50Ms float64   `json:"change_p50_ms"`
	ChangeP99Ms float64   `json:"change_p99_ms"`
	ChangeMaxMs float64   `json:"change_max_ms"`
	RoundMaxMs  []float64 `json:"round_max_ms"`
	Missed      int       `json:"change_missed"` // clients a change did not reach within edgesTimeout
	// ConfirmedMs are, for each change, the times from the PATCH being sent until the control
	// plane's rollout_status answered that every edge serves it (edges acknowledging only).
	ConfirmedMs []float64 `json:"rollout_confirmed_ms,omitempty"`
	// ConfirmMissed counts the changes rollout_status did not confirm (it failed, or answered
	// 408 after 30 s).
	ConfirmMissed int `json:"rollout_confirm_missed"`
	// The control plane's resident memory before any client, once all are synced, and after
	// the changes; KB per edge is (synced − before) ÷ edges.
	RSSBeforeMB     float64 `json:"cp_rss_before_mb"`
	RSSSyncedMB     float64 `json:"cp_rss_synced_mb"`
	RSSAfterMB      float64 `json:"cp_rss_after_changes_mb"`
	RSSPerEdgeKB    float64 `json:"cp_rss_per_edge_kb"`
	SyncCPUSeconds  float64 `json:"cp_cpu_seconds_initial_sync"`
	ChangeCPUPerRnd float64 `json:"cp_cpu_seconds_per_change"`
	SnapshotBytes   int     `json:"snapshot_bytes"` // the changed project's snapshot as sent
	AckErrors       int64   `json:"acknowledgement_errors"`
	// Where the memory per edge is, from the control plane's /metrics once all are synced:
	// goroutines, and Go's heap and stack bytes, per edge (minus before any client).
	GoroutinesPerEdge float64 `json:"cp_goroutines_per_edge"`
	HeapKBPerEdge     float64 `json:"cp_heap_inuse_kb_per_edge"`
	StackKBPerEdge    float64 `json:"cp_stack_inuse_kb_per_edge"`
	// Relays is how many relays (edge --serve-edges) the edges connect to (0: none, straight
	// to the control plane); RelayRSSMB each one's resident memory once all are synced, and
	// RelayKBPerEdge their memory (synced − before, all together) per edge behind them.
	Relays         int       `json:"relays"`
	RelayRSSMB     []float64 `json:"relay_rss_synced_mb,omitempty"`
	RelayKBPerEdge float64   `json:"relay_rss_per_edge_kb,omitempty"`
}

// edgesScenario runs the scenario against each control plane binary of --controlplane-bin
// (comma-separated; "" or "tree" builds the tree's), one after the other, each with a fresh
// PostgreSQL, and writes the results side by side.
func edgesScenario(cfg config) error {
	if err := raiseFileLimit(); err != nil {
		return err
	}
	var results []*edgesResult
	for i, bin := range strings.Split(cfg.controlPlaneBin, ",") {
		if bin == "tree" {
			bin = ""
		}
		res, err := edgesRun(cfg, bin, i+1)
		if err != nil {
			return err
		}
		results = append(results, res)
		fmt.Fprintf(os.Stderr, "\n%s\n", res.row())
	}
	var md strings.Builder
	md.WriteString(edgesHeader)
	for _, r := range results {
		md.WriteString(r.row() + "\n")
	}
	if err := writeScenarioReport(cfg.out, "edges", "results", results, md.String()); err != nil {
		return err
	}
	fmt.Print("\n" + md.String())
	fmt.Printf("\nreport: %s/edges.md, edges.json\n", cfg.out)
	return nil
}

const edgesHeader = "| control plane | relays (RSS synced MB; KB per edge behind) | edges synced | initial sync s (p50 / p99 per client, ms; then confirmed by rollout_status, ms) | change to all p50 / p99 / max ms | CP RSS before / synced / after MB | KB per edge (heap, stacks; goroutines) | CP CPU s: sync, per change | snapshot B as sent (deflated when both sides can) | rollout_status 200 after, ms per change |\n" +
	"|---|---|---:|---|---|---|---|---|---:|---|\n"

func (r *edgesResult) row() string {
	relays := "–"
	if r.Relays > 0 {
		relays = fmt.Sprintf("%d (%s; %.1f)", r.Relays, joinFloats(r.RelayRSSMB, 0), r.RelayKBPerEdge)
	}
	return fmt.Sprintf("| %s | %s | %d of %d | %.2f (%.0f / %.0f; %.0f) | %.0f / %.0f / %.0f (%d rounds, %d missed) | %.0f / %.0f / %.0f | %.1f (%.1f, %.1f; %.1f) | %.2f, %.2f | %d | %s |",
		r.ControlPlane, relays, r.Synced, r.Edges, r.SyncSeconds, r.SyncP50Ms, r.SyncP99Ms, r.SyncConfirmedMs, r.ChangeP50Ms, r.ChangeP99Ms, r.ChangeMaxMs, r.Rounds, r.Missed,
		r.RSSBeforeMB, r.RSSSyncedMB, r.RSSAfterMB, r.RSSPerEdgeKB, r.HeapKBPerEdge, r.StackKBPerEdge, r.GoroutinesPerEdge,
		r.SyncCPUSeconds, r.ChangeCPUPerRnd, r.SnapshotBytes, msList(r.ConfirmedMs, r.ConfirmMissed))
}

// msList formats milliseconds as "12, 340, 560", with how many are missing ("12, 340 (1
// missed)"), or "–" when there are none.
func msList(ms []float64, missed int) string {
	if len(ms) == 0 && missed == 0 {
		return "–"
	}
	out := joinFloats(ms, 0)
	if missed > 0 {
		out += fmt.Sprintf(" (%d missed)", missed)
	}
	return out
}

// raiseFileLimit raises this process's open-file limit to its hard limit: one descriptor per
// client. Set explicitly, it is also what the control plane started from here inherits.
func raiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	lim.Cur = lim.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// edgesRun is one control plane's run, the nth of the scenario (its profile's name with
// --profile).
func edgesRun(cfg config, cpBin string, nth int) (*edgesResult, error) {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil { // the logs kept go there
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := cpBin
	if name == "" {
		name = "this tree"
	}
	dir, err := os.MkdirTemp("", "flagedge-bench-edges-tls-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	certFile, keyFile, pool, err := selfSignedCert(dir)
	if err != nil {
		return nil, err
	}
	cpArgs := []string{"--grpc-tls-cert", certFile, "--grpc-tls-key", keyFile}
	var pprofAddr string
	if cfg.profile {
		if pprofAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		cpArgs = append(cpArgs, "--pprof-addr", pprofAddr)
	}
	stack, err := startSelfStack(ctx, stackOptions{name: "edges", noEdge: true, controlPlaneBin: cpBin,
		controlPlaneArgs: cpArgs})
	if err != nil {
		return nil, err
	}
	defer stack.close()
	defer stack.keepLogs(cfg.out, "edges-")
	token, err := stack.createEdge(ctx, "bench-edges")
	if err != nil {
		return nil, err
	}
	a := stack.api()
	progress("edges: creating a project of 50 flags")
	p, err := createProject(a, "edges", 50)
	if err != nil {
		return nil, err
	}
	pid := stack.cp.cmd.Process.Pid
	time.Sleep(time.Second) // the control plane at rest before the first client
	res := &edgesResult{ControlPlane: name, Edges: cfg.edgesCount, Rounds: cfg.edgesRounds}
	rss, _ := procStat(pid)
	res.RSSBeforeMB = rss / 1e6
	metricsBefore, err := scrape(stack.controlPlaneURL())
	if err != nil {
		return nil, err
	}

	upstreams := []string{stack.cp.grpcAddr}
	var relays []*process
	var relayPprof string // the first relay's, with --profile
	if cfg.edgesRelays > 0 {
		if cfg.profile {
			if relayPprof, err = freeAddr(); err != nil {
				return nil, err
			}
		}
		if relays, err = startRelays(ctx, cfg.edgesRelays, stack, dir, certFile, keyFile, relayPprof); err != nil {
			return nil, err
		}
		defer func() {
			for _, r := range relays {
				r.stop()
				if data, err := os.ReadFile(r.log); err == nil { // as keepLogs does the control plane's
					_ = os.WriteFile(filepath.Join(cfg.out, "edges-"+r.name+".log"), data, 0o644)
				}
			}
		}()
		upstreams = upstreams[:0]
		for _, r := range relays {
			upstreams = append(upstreams, r.grpcAddr)
		}
		res.Relays = len(relays)
	}
	relaysBefore := relaysRSS(relays)

	fleet := newFleet(cfg.edgesCount, p.id, cfg.edgesAck)
	defer fleet.close()
	_, cpu0 := procStat(pid)
	start := time.Now()
	if err := fleet.connect(ctx, upstreams, token, pool); err != nil {
		return nil, err
	}
	synced := fleet.waitSynced(start, edgesTimeout)
	res.SyncSeconds = time.Since(start).Seconds()
	res.Synced = synced
	_, cpu1 := procStat(pid)
	res.SyncCPUSeconds = cpu1 - cpu0
	if synced < cfg.edgesCount {
		return nil, fmt.Errorf("%s: %d of %d clients synced within %s; the control plane logged:\n%s", name, synced, cfg.edgesCount, edgesTimeout, stack.cp.logTail())
	}
	sync := fleet.syncTimes()
	res.SyncP50Ms, res.SyncP99Ms = quantile(sync, 0.5), quantile(sync, 0.99)
	if fleet.sessions.Load() && fleet.ack {
		held := fleet.held()
		if res.SyncConfirmedMs = rolloutConfirmed(a, p.id, strconv.FormatInt(held, 10), time.Now()); res.SyncConfirmedMs == 0 {
			return nil, fmt.Errorf("%s: rollout_status did not confirm the initial version %d", name, held)
		}
	}
	time.Sleep(2 * time.Second) // what the streams hold at rest
	rss, _ = procStat(pid)
	res.RSSSyncedMB = rss / 1e6
	res.RSSPerEdgeKB = (res.RSSSyncedMB - res.RSSBeforeMB) * 1e3 / float64(cfg.edgesCount)
	if len(relays) > 0 {
		res.RelayRSSMB = relaysRSS(relays)
		var before, synced float64
		for i := range relays {
			before, synced = before+relaysBefore[i], synced+res.RelayRSSMB[i]
		}
		res.RelayKBPerEdge = (synced - before) * 1e3 / float64(cfg.edgesCount)
	}
	if m, err := scrape(stack.controlPlaneURL()); err == nil {
		per := func(name string) float64 { return (m[name] - metricsBefore[name]) / float64(cfg.edgesCount) }
		res.GoroutinesPerEdge, res.HeapKBPerEdge, res.StackKBPerEdge = per("go_goroutines"),
			per("go_memstats_heap_inuse_bytes")/1e3, per("go_memstats_stack_inuse_bytes")/1e3
	}
	res.SnapshotBytes = int(fleet.snapshotBytes.Load())

	flagID := p.flags["kill-switch"]
	var all []float64
	profiled := make(chan error, 1)
	profilePath := filepath.Join(cfg.out, fmt.Sprintf("edges-cp-%d-cpu.pprof", nth))
	if pprofAddr != "" {
		if err := os.MkdirAll(cfg.out, 0o755); err != nil {
			return nil, err
		}
		// A round takes about three seconds: the change, its confirmation by rollout_status
		// (one to two seconds with 10,000 edges), then a second at rest.
		go func() { profiled <- fetchProfile(pprofAddr, 3*cfg.edgesRounds, profilePath) }()
	}
	relayProfiled := make(chan error, 1)
	relayProfilePath := filepath.Join(cfg.out, fmt.Sprintf("edges-relay-%d-cpu.pprof", nth))
	if relayPprof != "" {
		go func() { relayProfiled <- fetchProfile(relayPprof, 3*cfg.edgesRounds, relayProfilePath) }()
	}
	_, cpu2 := procStat(pid)
	for round := range cfg.edgesRounds {
		progress(fmt.Sprintf("edges: change %d of %d", round+1, cfg.edgesRounds))
		fleet.expect()
		sent := time.Now()
		pct := 100 * (round % 2)
		header, err := a.send("PATCH", fmt.Sprintf("/api/projects/%d/feature_flags/%d/", p.id, flagID),
			map[string]any{"filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": pct}}}}, nil)
		if err != nil {
			return nil, err
		}
		tracking := fleet.sessions.Load() && fleet.ack // rollout_status can confirm the change
		confirmed := make(chan float64, 1)
		if tracking {
			go func() { confirmed <- rolloutConfirmed(a, p.id, header.Get("X-Flagedge-Snapshot-Version"), sent) }()
		}
		times, missed := fleet.waitChange(sent, edgesTimeout)
		if tracking {
			if ms := <-confirmed; ms > 0 {
				res.ConfirmedMs = append(res.ConfirmedMs, ms)
			} else {
				res.ConfirmMissed++
			}
		}
		res.Missed += missed
		all = append(all, times...)
		res.RoundMaxMs = append(res.RoundMaxMs, quantile(times, 1))
		time.Sleep(time.Second)
	}
	_, cpu3 := procStat(pid)
	res.ChangeCPUPerRnd = (cpu3 - cpu2 - float64(cfg.edgesRounds)*cpuAtRest(pid)) / float64(cfg.edgesRounds)
	res.ChangeP50Ms, res.ChangeP99Ms, res.ChangeMaxMs = quantile(all, 0.5), quantile(all, 0.99), quantile(all, 1)
	rss, _ = procStat(pid)
	res.RSSAfterMB = rss / 1e6
	res.AckErrors = fleet.ackErrors.Load()
	if pprofAddr != "" {
		if err := <-profiled; err != nil {
			return nil, fmt.Errorf("control-plane profile: %w", err)
		}
		if err := writeTop(ctx, profilePath, strings.TrimSuffix(profilePath, ".pprof")+".txt"); err != nil {
			return nil, err
		}
	}
	if relayPprof != "" {
		if err := <-relayProfiled; err != nil {
			return nil, fmt.Errorf("relay profile: %w", err)
		}
		if err := writeTop(ctx, relayProfilePath, strings.TrimSuffix(relayProfilePath, ".pprof")+".txt"); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// startRelays builds the edge from the tree into dir and starts n relays of it (edge
// --serve-edges), each with its own token, over TLS both ways with the scenario's
// certificate, and waits until each holds the snapshots. The first serves Go's pprof on
// pprofAddr unless it is "".
func startRelays(ctx context.Context, n int, stack *selfStack, dir, certFile, keyFile, pprofAddr string) ([]*process, error) {
	if err := buildTree(ctx, "edges", dir, "./edge/cmd/edge"); err != nil {
		return nil, err
	}
	var relays []*process
	for i := range n {
		name := fmt.Sprintf("relay-%d", i+1)
		progress("edges: starting " + name)
		token, err := stack.createEdge(ctx, "bench-"+name)
		if err != nil {
			return relays, err
		}
		args := []string{
			"--http-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--control-plane", stack.cp.grpcAddr,
			"--control-plane-ca", certFile, "--edge-token", token, "--data-dir", filepath.Join(dir, name), "--edge-id", name,
			"--drain-delay", "0s",
			"--serve-edges", "127.0.0.1:0", "--serve-edges-tls-cert", certFile, "--serve-edges-tls-key", keyFile}
		if i == 0 && pprofAddr != "" {
			args = append(args, "--pprof-addr", pprofAddr)
		}
		// Each relay's share of the cores, as an operator sets it for processes sharing a
		// machine (and as Go does from a container's CPU limit): four relays with a P per
		// core each kept more threads runnable than the two cores could run, and the change
		// reached the last edge 10-15% later (bench/RESULTS.md, round 3).
		share := fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.NumCPU()/n))
		r, err := startProcess(ctx, dir, command{name: name, bin: filepath.Join(dir, "edge"), listening: "edge listening", args: args, env: []string{share}})
		if err != nil {
			return relays, err
		}
		relays = append(relays, r)
		if err := r.waitListening("relay listening"); err != nil {
			return relays, err
		}
		if err := waitReady("http://" + r.httpAddr + "/_ready"); err != nil {
			return relays, fmt.Errorf("%w; %s logged:\n%s", err, name, r.logTail())
		}
	}
	return relays, nil
}

// relaysRSS returns each relay's resident memory in MB.
func relaysRSS(relays []*process) []float64 {
	out := make([]float64, len(relays))
	for i, r := range relays {
		rss, _ := procStat(r.cmd.Process.Pid)
		out[i] = rss / 1e6
	}
	return out
}

// rolloutConfirmed asks the control plane's rollout_status to answer once every connected edge
// serves version, and returns the milliseconds from sent until it did (0 if it did not).
func rolloutConfirmed(a *api, projectID int64, version string, sent time.Time) float64 {
	if version == "" {
		return 0
	}
	if err := a.call("GET", fmt.Sprintf("/api/projects/%d/rollout_status?version=%s&timeout=30s", projectID, version), nil, nil); err != nil {
		fmt.Fprintf(os.Stderr, "\nrollout_status: %v\n", err)
		return 0
	}
	return float64(time.Since(sent).Microseconds()) / 1e3
}

// cpuAtRest is the control plane's CPU seconds in one second with nothing changing
// (keepalives, the edge-token refresh): taken out of the per-change figure, which includes a
// second of rest after each change.
func cpuAtRest(pid int) float64 {
	_, a := procStat(pid)
	time.Sleep(time.Second)
	_, b := procStat(pid)
	return b - a
}

// procStat returns a process's resident memory (bytes) and CPU seconds (user + system),
// from /proc.
func procStat(pid int) (rss, cpu float64) {
	mib, _ := vmRSSMB(pid) // in units of 1024 kB
	all, _ := procCPU(pid)
	return mib * (1 << 20), all.Seconds()
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key into dir, and returns them
// with a pool that trusts the certificate.
func selfSignedCert(dir string) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flagedge bench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", nil, err
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool, nil
}

// fleet is the simulated edges.
type fleet struct {
	project int64 // the project whose changes are timed
	clients []*edgeClient
	// base is the project's version when a change is expected: a client has the change once
	// it holds a newer one. 0: no change expected.
	base          atomic.Int64
	syncedCount   atomic.Int64
	snapshotBytes atomic.Int64
	ack           bool         // acknowledge versions, as edges do, where the stream names a session
	ackErrors     atomic.Int64 // acknowledgements that failed
	sessions      atomic.Bool  // some stream named a session: the control plane tracks rollouts
	wg            sync.WaitGroup
	cancel        context.CancelFunc
}

// edgeClient is one simulated edge.
type edgeClient struct {
	conn      *grpc.ClientConn
	dialed    time.Time
	syncedAt  atomic.Int64 // unix ns of the initial sync; 0 before
	version   atomic.Int64 // the timed project's version held
	changedAt atomic.Int64 // unix ns the expected change arrived; 0 before
}

func newFleet(n int, project int64, ack bool) *fleet {
	f := &fleet{project: project, clients: make([]*edgeClient, n), ack: ack}
	for i := range f.clients {
		f.clients[i] = &edgeClient{}
	}
	return f
}

// connect starts every client's Watch stream, to the addresses in turn (the control plane, or
// relays), at most edgesConnecting connecting at once (a client counts as connecting until
// its initial sync); it returns once all have started.
func (f *fleet) connect(ctx context.Context, addrs []string, token string, pool *x509.CertPool) error {
	ctx, f.cancel = context.WithCancel(ctx)
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	slots := make(chan struct{}, edgesConnecting)
	for i, c := range f.clients {
		if i%500 == 0 {
			progress(fmt.Sprintf("edges: connecting client %d of %d (%d synced)", i+1, len(f.clients), f.syncedCount.Load()))
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		conn, err := grpc.NewClient(addrs[i%len(addrs)], grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(bearer(token)),
			// As an edge does (edge/cpclient), but with small buffers: this process holds them
			// all, and they are not what is measured.
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 15 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
			grpc.WithReadBufferSize(8<<10), grpc.WithWriteBufferSize(8<<10), grpc.WithSharedWriteBuffer(true),
			grpc.WithInitialWindowSize(cpclient.WindowBytes), grpc.WithInitialConnWindowSize(cpclient.WindowBytes),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.ForceCodecV2(lightCodec{})))
		if err != nil {
			return err
		}
		c.conn, c.dialed = conn, time.Now()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			released := false
			release := func() {
				if !released {
					released = true
					<-slots
				}
			}
			defer release()
			f.watch(ctx, i, c, release)
		}()
	}
	return nil
}

// watch runs one client's stream until ctx ends. A stream that fails is not retried: the
// client then counts as not synced or missing the change. When the stream names a session
// (a control plane that tracks rollouts), the client acknowledges the versions it receives,
// as an edge does once it has applied them: one call at a time, after the delay the control
// plane asks for (a random point between ack_delay_ms and twice it), what arrived meanwhile
// in the same call.
func (f *fleet) watch(ctx context.Context, i int, c *edgeClient, synced func()) {
	client := syncpb.NewSyncClient(c.conn)
	stream, err := client.Watch(ctx, &syncpb.WatchRequest{ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1,
		EdgeId: "bench-edge-" + strconv.Itoa(i), AcceptsDeflatedSnapshots: true})
	if err != nil {
		return
	}
	var session string
	var delay time.Duration
	var mu sync.Mutex
	var pending map[int64]int64 // versions received and not yet acknowledged
	var ack func()
	ack = func() {
		mu.Lock()
		req := &syncpb.AcknowledgeRequest{SessionId: session, Versions: pending}
		pending = nil
		mu.Unlock()
		_, err := client.Acknowledge(ctx, req)
		if err == nil || ctx.Err() != nil {
			return
		}
		// As an edge does: what failed goes again, with what arrived meanwhile, 200 ms later.
		if f.ackErrors.Add(1) == 1 {
			fmt.Fprintf(os.Stderr, "\nclient %d: first failed acknowledgement: %v\n", i, err)
		}
		mu.Lock()
		rearm := pending == nil
		if rearm {
			pending = map[int64]int64{}
		}
		for id, v := range req.Versions {
			pending[id] = max(pending[id], v)
		}
		mu.Unlock()
		if rearm {
			time.AfterFunc(200*time.Millisecond, ack)
		}
	}
	for {
		var m lightResponse
		if err := stream.RecvMsg(&m); err != nil {
			if ctx.Err() == nil && c.syncedAt.Load() == 0 {
				fmt.Fprintf(os.Stderr, "\nclient %d: %v\n", i, err)
			}
			return
		}
		if m.sessionID != "" {
			session = m.sessionID
			f.sessions.Store(true)
		}
		if m.sessionID != "" || len(m.versions) > 0 {
			delay = m.ackDelay
		}
		f.apply(c, &m, synced)
		if session == "" || !f.ack || len(m.versions) == 0 {
			continue
		}
		mu.Lock()
		first := pending == nil
		if first {
			pending = map[int64]int64{}
		}
		maps.Copy(pending, m.versions)
		mu.Unlock()
		if first {
			wait := delay
			if delay > 0 {
				wait += mrand.N(delay)
			}
			time.AfterFunc(wait, ack)
		}
	}
}

// apply records what a client received: the timed project's version (and when it was a
// change expected), and the initial sync.
func (f *fleet) apply(c *edgeClient, m *lightResponse, synced func()) {
	if v, ok := m.versions[f.project]; ok {
		c.version.Store(v)
		if base := f.base.Load(); base > 0 && v > base && c.changedAt.Load() == 0 {
			c.changedAt.Store(time.Now().UnixNano())
		}
		if size := m.sizes[f.project]; size > 0 {
			f.snapshotBytes.Store(int64(size))
		}
	}
	if m.initialSyncDone && c.syncedAt.Load() == 0 {
		c.syncedAt.Store(time.Now().UnixNano())
		f.syncedCount.Add(1)
		synced()
	}
}

// waitSynced waits until every client has its initial sync or timeout passes, and returns
// how many have it.
func (f *fleet) waitSynced(start time.Time, timeout time.Duration) int {
	for time.Since(start) < timeout {
		n := int(f.syncedCount.Load())
		if n == len(f.clients) {
			return n
		}
		progress(fmt.Sprintf("edges: %d of %d synced", n, len(f.clients)))
		time.Sleep(10 * time.Millisecond)
	}
	return int(f.syncedCount.Load())
}

// syncTimes are each client's milliseconds from its dial to its initial sync.
func (f *fleet) syncTimes() []float64 {
	var out []float64
	for _, c := range f.clients {
		if at := c.syncedAt.Load(); at > 0 {
			out = append(out, float64(at-c.dialed.UnixNano())/1e6)
		}
	}
	return out
}

// expect starts timing a change: from now on a client that receives a version newer than the
// one the fleet holds has it.
func (f *fleet) expect() {
	for _, c := range f.clients {
		c.changedAt.Store(0)
	}
	f.base.Store(f.held())
}

// held is the newest version of the timed project any client holds.
func (f *fleet) held() int64 {
	var v int64
	for _, c := range f.clients {
		v = max(v, c.version.Load())
	}
	return v
}

// waitChange waits until every client has the expected change or timeout passes, and returns
// the clients' milliseconds from sent, and how many did not get it.
func (f *fleet) waitChange(sent time.Time, timeout time.Duration) ([]float64, int) {
	deadline := sent.Add(timeout)
	for time.Now().Before(deadline) {
		done := 0
		for _, c := range f.clients {
			if c.changedAt.Load() > 0 {
				done++
			}
		}
		if done == len(f.clients) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	var times []float64
	missed := 0
	for _, c := range f.clients {
		if at := c.changedAt.Load(); at > 0 {
			times = append(times, float64(at-sent.UnixNano())/1e6)
		} else {
			missed++
		}
	}
	f.base.Store(0)
	return times, missed
}

func (f *fleet) close() {
	if f.cancel != nil {
		f.cancel()
	}
	for _, c := range f.clients {
		if c.conn != nil {
			c.conn.Close()
		}
	}
	f.wg.Wait()
}

// bearer is the edge token as gRPC per-call credentials.
type bearer string

func (t bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

// lightResponse is what a simulated edge reads of a WatchResponse.
type lightResponse struct {
	versions        map[int64]int64 // project id → snapshot version
	initialSyncDone bool
	sizes           map[int64]int // project id → bytes of its snapshot
	sessionID       string
	ackDelay        time.Duration // the control plane's ack_delay_ms
}

// lightCodec marshals requests as protobuf and reads of a WatchResponse only the snapshots'
// project ids and versions and initial_sync_done, skipping the rest: 10,000 clients in one
// process must cost it little. Deflated snapshots are not inflated (an edge inflates each, some
// tens of microseconds): their ids and versions are outside the compressed bytes.
type lightCodec struct{}

func (lightCodec) Name() string { return "proto" }

func (lightCodec) Marshal(v any) (mem.BufferSlice, error) {
	raw, err := proto.Marshal(v.(proto.Message))
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(raw)}, nil
}

func (lightCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*lightResponse)
	if !ok { // the answers to acknowledgements
		return encoding.GetCodecV2("proto").Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 10) && typ == protowire.BytesType: // snapshots, deflated_snapshots (both begin with project_id and version)
			snap, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			id, version, err := snapshotVersion(snap)
			if err != nil {
				return err
			}
			if m.versions == nil {
				m.versions, m.sizes = map[int64]int64{}, map[int64]int{}
			}
			m.versions[id], m.sizes[id] = version, len(snap)
			b = b[n:]
		case num == 8 && typ == protowire.BytesType: // session_id
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			m.sessionID = string(v)
			b = b[n:]
		case num == 9 && typ == protowire.VarintType: // ack_delay_ms
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			m.ackDelay = time.Duration(v) * time.Millisecond
			b = b[n:]
		case num == 3 && typ == protowire.VarintType: // initial_sync_done
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			m.initialSyncDone = v != 0
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

// snapshotVersion reads a ProjectSnapshot's or DeflatedSnapshot's project_id (1) and version (2).
func snapshotVersion(b []byte) (id, version int64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, protowire.ParseError(n)
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, protowire.ParseError(n)
			}
			if num == 1 {
				id = int64(v)
			} else {
				version = int64(v)
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if id == 0 {
		return 0, 0, errors.New("a snapshot without a project id")
	}
	return id, version, nil
}

var _ encoding.CodecV2 = lightCodec{}

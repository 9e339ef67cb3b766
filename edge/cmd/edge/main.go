// Command edge serves flagedge's public endpoints close to users: /decide and /flags from an
// in-memory snapshot pushed by the control plane, the SDKs' flag definitions, and capture
// into a durable spool forwarded to the control plane.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // served only on --pprof-addr
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/flagedge/flagedge/edge/admit"
	"github.com/flagedge/flagedge/edge/answercache"
	"github.com/flagedge/flagedge/edge/bloomset"
	"github.com/flagedge/flagedge/edge/cache"
	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/edge/cpclient"
	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/edge/evalcount"
	"github.com/flagedge/flagedge/edge/geocache"
	"github.com/flagedge/flagedge/edge/httpapi"
	"github.com/flagedge/flagedge/edge/ofrep"
	"github.com/flagedge/flagedge/edge/persons"
	"github.com/flagedge/flagedge/edge/reqbody"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/geoip"
	"github.com/flagedge/flagedge/internal/daemon"
	"github.com/flagedge/flagedge/internal/version"
	"github.com/flagedge/flagedge/shared/clientip"
	"github.com/flagedge/flagedge/shared/eventlog"
	"github.com/flagedge/flagedge/shared/snapshotbundle"
	"github.com/flagedge/flagedge/shared/syncpb"
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "edge:", err)
		os.Exit(2)
	}
}

// config is the edge's configuration; every field has a flag and an environment variable.
type config struct {
	EvalReportInterval time.Duration
	HTTPAddr           string
	ControlPlane       cpclient.Config
	TLSCert            string
	TLSKey             string
	TrustedProxies     string
	MetricsAddr        string
	DataDir            string
	GeoIPDB            string
	EdgeID             string
	LookupTimeout      time.Duration
	PersonTTL          time.Duration
	PersonMissTTL      time.Duration
	MembershipMax      int64
	PersonMax          int64
	GroupMax           int64
	OverlayMax         int64
	AnswerCacheMax     int64
	MemoryLimit        int64
	SpoolFsync         string
	PprofAddr          string
	SpoolQuota         int64
	LogLevel           string
	DrainDelay         time.Duration
	ShutdownTimeout    time.Duration
	EventLog           eventlog.Config
	BootstrapBundle    string
	BundlePublicKey    string
	// Serving edges (a relay): the address, and its TLS.
	ServeEdges         string
	ServeEdgesCert     string
	ServeEdgesKey      string
	ServeEdgesInsecure bool
	// OFREP change streams.
	Streams       bool
	StreamKey     string
	StreamMax     int64
	StreamMaxAddr int64

	// Hostile traffic (docs/operations.md).
	MaxInflightBytes int64
	DeadLetterMax    int64
	// PublishWindow is how many spool batches the forwarder has in flight to the event log.
	PublishWindow int64
	Rate          admit.RateConfig
	Conn          httpapi.ConnConfig
}

func parseConfig(args []string, stderr io.Writer) (*config, error) {
	fs := daemon.NewFlags("edge", stderr)
	host, _ := os.Hostname()
	cfg := &config{}
	fs.String(&cfg.HTTPAddr, "http-addr", "FLAGEDGE_EDGE_ADDR", "127.0.0.1:8080", "address of the public HTTP endpoints")
	fs.String(&cfg.ControlPlane.Addrs, "control-plane", "FLAGEDGE_CONTROL_PLANE", "127.0.0.1:9000", "address of the upstream's gRPC sync service — a control plane, or a relay (an edge with --serve-edges) — or a comma-separated list of them, replicas and relays mixed (or a DNS name with several records): the edge fails over between them")
	fs.String(&cfg.ControlPlane.Fallback, "control-plane-fallback", "FLAGEDGE_CONTROL_PLANE_FALLBACK", "", "comma-separated upstreams used only while none of --control-plane answers (e.g. the control plane behind a tier of relays): the edge moves back to --control-plane when the fallback's connection ends; empty: none")
	fs.String(&cfg.ServeEdges, "serve-edges", "FLAGEDGE_SERVE_EDGES", "", "serve the sync protocol to other edges on this address (a relay): they are given it as --control-plane and get this edge's snapshots; empty: off")
	fs.String(&cfg.ServeEdgesCert, "serve-edges-tls-cert", "FLAGEDGE_SERVE_EDGES_TLS_CERT", "", "certificate (PEM) for TLS on --serve-edges; with --serve-edges-tls-key")
	fs.String(&cfg.ServeEdgesKey, "serve-edges-tls-key", "FLAGEDGE_SERVE_EDGES_TLS_KEY", "", "private key (PEM) of --serve-edges-tls-cert")
	fs.Bool(&cfg.ServeEdgesInsecure, "serve-edges-insecure", "FLAGEDGE_SERVE_EDGES_INSECURE", false, "serve --serve-edges without TLS on an address that is not loopback (only behind something that encrypts)")
	fs.String(&cfg.ControlPlane.Token, "edge-token", "FLAGEDGE_EDGE_TOKEN", "", "this edge's credential, from controlplane edges create")
	fs.String(&cfg.ControlPlane.CAFile, "control-plane-ca", "FLAGEDGE_CONTROL_PLANE_CA", "", "CA certificate (PEM) of the control plane's TLS certificate; default: the system's roots (TLS is used unless every address is loopback)")
	fs.Bool(&cfg.ControlPlane.Insecure, "control-plane-insecure", "FLAGEDGE_CONTROL_PLANE_INSECURE", false, "talk plaintext to a control plane that is not on loopback (only behind something that encrypts; pairs with controlplane --grpc-insecure)")
	fs.String(&cfg.TLSCert, "tls-cert", "FLAGEDGE_TLS_CERT", "", "certificate (PEM) for HTTPS on --http-addr; with --tls-key")
	fs.String(&cfg.TLSKey, "tls-key", "FLAGEDGE_TLS_KEY", "", "private key (PEM) of --tls-cert")
	fs.String(&cfg.TrustedProxies, "trusted-proxies", "FLAGEDGE_TRUSTED_PROXIES", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed (the client is the right-most address that is not one of them); empty: the header's first address is believed from anyone")
	// /metrics is costly to render and a map of the deployment: off the public listener.
	fs.String(&cfg.MetricsAddr, "metrics-addr", "FLAGEDGE_METRICS_ADDR", "127.0.0.1:9181",
		"serve /metrics on this address of its own (loopback unless set otherwise); empty: on --http-addr, public")
	fs.String(&cfg.DataDir, "data-dir", "FLAGEDGE_DATA_DIR", "flagedge-edge-data", "directory for the snapshot copy and the capture spool")
	fs.String(&cfg.GeoIPDB, "geoip-db", "FLAGEDGE_GEOIP_DB", "", "MaxMind City database; without it no $geoip_* properties")
	fs.String(&cfg.EdgeID, "edge-id", "FLAGEDGE_EDGE_ID", host, "name of this edge in the control plane's logs")
	fs.Duration(&cfg.LookupTimeout, "lookup-timeout", "FLAGEDGE_LOOKUP_TIMEOUT", persons.DefaultConfig().Timeout, "longest wait for stored properties before answering the flags that need them as failed")
	fs.Duration(&cfg.PersonTTL, "person-cache-ttl", "FLAGEDGE_PERSON_CACHE_TTL", persons.DefaultConfig().TTL, "how long stored person and group properties are reused before they are fetched again")
	fs.Duration(&cfg.PersonMissTTL, "person-cache-miss-ttl", "FLAGEDGE_PERSON_CACHE_MISS_TTL", persons.DefaultConfig().NegativeTTL, "how long \"no such person or group\" is reused")
	fs.String(&cfg.SpoolFsync, "spool-fsync", "FLAGEDGE_SPOOL_FSYNC", "10ms", "when captured events are fsynced: always, never, or an interval such as 10ms")
	fs.Int64(&cfg.MembershipMax, "membership-max-bytes", "FLAGEDGE_MEMBERSHIP_MAX_BYTES", persons.DefaultConfig().MembershipMaxBytes,
		"most bytes all membership filters may take (about 2.4 MB per million distinct ids); past it the largest projects look up every key; 0: no cap")
	fs.Int64(&cfg.PersonMax, "person-cache-max-bytes", "FLAGEDGE_PERSON_CACHE_MAX_BYTES", persons.DefaultConfig().PersonMaxBytes,
		"most bytes the cache of looked-up persons may hold (estimated from their properties), whatever the number of users")
	fs.Int64(&cfg.GroupMax, "group-cache-max-bytes", "FLAGEDGE_GROUP_CACHE_MAX_BYTES", persons.DefaultConfig().GroupMaxBytes,
		"most bytes the cache of looked-up groups may hold")
	fs.Int64(&cfg.OverlayMax, "person-overlay-max-bytes", "FLAGEDGE_PERSON_OVERLAY_MAX_BYTES", persons.DefaultConfig().OverlayMaxBytes,
		"most bytes kept of what this edge captured about persons until the control plane stores it (their properties, and which persons it created)")
	fs.Int64(&cfg.AnswerCacheMax, "answer-cache-bytes", "FLAGEDGE_ANSWER_CACHE_BYTES", defaultAnswerCacheBytes,
		"most bytes of /decide and /flags answers kept for returning users, who are then answered without evaluating (docs/operations.md, \"The answer cache\"); 0: off")
	fs.Int64(&cfg.MemoryLimit, "memory-limit", "FLAGEDGE_MEMORY_LIMIT", defaultMemoryLimit(),
		"Go's soft memory limit in bytes: the garbage collector works harder as the heap nears it, rather than letting it double (it is not a cap); 0: Go's own (GOMEMLIMIT, else none); default 160 MiB unless GOMEMLIMIT is set; a relay (--serve-edges) adds 64 KiB for each edge watching through it")
	fs.Int64(&cfg.SpoolQuota, "spool-quota", "FLAGEDGE_SPOOL_QUOTA", 1<<30, "most bytes the capture spool may hold; beyond it capture answers 503")
	fs.String(&cfg.PprofAddr, "pprof-addr", "FLAGEDGE_PPROF_ADDR", "", "address for Go's pprof endpoints (off when empty; keep it on loopback)")
	fs.String(&cfg.LogLevel, "log-level", "FLAGEDGE_LOG_LEVEL", "info", "debug, info, warn or error")
	// Load balancers probe every few seconds; 5 s of 503 on /_ready lets them stop sending
	// before the listener closes.
	fs.Duration(&cfg.EvalReportInterval, "evaluation-report-interval", "FLAGEDGE_EVALUATION_REPORT_INTERVAL", 5*time.Second, "how often the counts of flag evaluations are sent to the control plane")
	fs.Duration(&cfg.DrainDelay, "drain-delay", "FLAGEDGE_DRAIN_DELAY", 5*time.Second, "after SIGTERM, how long /_ready answers 503 while requests are still served")
	// Decide requests take microseconds; 15 s drains any in-flight request and is bounded.
	fs.Duration(&cfg.ShutdownTimeout, "shutdown-timeout", "FLAGEDGE_SHUTDOWN_TIMEOUT", 15*time.Second, "how long finishing in-flight requests may take")
	fs.String(&cfg.BootstrapBundle, "bootstrap-bundle", "FLAGEDGE_BOOTSTRAP_BUNDLE", "", "a signed snapshot bundle (controlplane snapshots export) to serve from when the data directory holds no snapshot; the control plane's snapshots replace it as soon as it answers")
	fs.String(&cfg.BundlePublicKey, "bundle-public-key", "FLAGEDGE_BUNDLE_PUBLIC_KEY", "", "the Ed25519 public key (PEM, from controlplane snapshots keygen) that --bootstrap-bundle must be signed with")
	fs.Bool(&cfg.Streams, "ofrep-streams", "FLAGEDGE_OFREP_STREAMS", false,
		"serve OFREP change streams (server-sent events) and announce them in bulk evaluations, so browsers see flag changes within a second")
	fs.String(&cfg.StreamKey, "ofrep-stream-key", "FLAGEDGE_OFREP_STREAM_KEY", "",
		"secret that signs OFREP stream URLs; every edge behind one address needs the same (at least 32 characters); empty: a random key of this process")
	fs.Int64(&cfg.StreamMax, "ofrep-stream-max", "FLAGEDGE_OFREP_STREAM_MAX", int64(ofrep.DefaultStreamConfig().MaxStreams),
		"most OFREP change streams this edge keeps open (about 15 KB each); more are refused with 429")
	fs.Int64(&cfg.StreamMaxAddr, "ofrep-stream-max-per-ip", "FLAGEDGE_OFREP_STREAM_MAX_PER_IP", int64(ofrep.DefaultStreamConfig().MaxPerAddr),
		"most OFREP change streams open from one client address (as --trusted-proxies finds it: without it, a client that sends a new X-Forwarded-For each time escapes this limit); more are refused with 429")
	cfg.EventLog.Register(fs)
	fs.Int64(&cfg.PublishWindow, "event-log-publish-window", "FLAGEDGE_EVENT_LOG_PUBLISH_WINDOW", 4,
		"spool batches (up to 4 MiB each) published to the event log and awaiting acknowledgement at once; the spool advances only past acknowledged batches, in order")
	registerLimits(fs, cfg)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return cfg, cfg.validate()
}

// defaultAnswerCacheBytes is --answer-cache-bytes' default: 32 MiB holds the answers of
// about 1,500 returning users at 1,000 flags (21 KB each) and of 30,000 at 50;
// defaultMemoryLimit counts it.
const defaultAnswerCacheBytes = 32 << 20

// defaultMemoryLimit is --memory-limit's default: 160 MiB, the caches' default budgets
// (persons.DefaultConfig()'s 88 MiB and the answer cache's 32 MiB: 120 MiB) and 1,000
// projects of 50 flags (about 30 MB) with a little room, so that the heap does not grow to
// twice what is live after a burst of captures, and the collector does not run without pause
// once the caches are full (as it would under a limit below what they hold); none of ours
// when GOMEMLIMIT is set.
func defaultMemoryLimit() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	return 160 << 20
}

// registerLimits registers the flags that bound what clients may take of the edge.
func registerLimits(fs *daemon.Flags, cfg *config) {
	fs.Int64(&cfg.MaxInflightBytes, "max-inflight-bytes", "FLAGEDGE_MAX_INFLIGHT_BYTES", 256<<20,
		"most bytes request bodies in flight may hold, with what decoding and parsing them costs; beyond it a request waits up to 1s, then gets 503 with Retry-After; 0: no bound")
	fs.Int64(&cfg.DeadLetterMax, "dead-letter-max-bytes", "FLAGEDGE_DEAD_LETTER_MAX_BYTES", 256<<20,
		"most bytes the dead-letter file and its rotated predecessor hold together; the oldest records beyond are dropped and counted; 0: no bound")
	fs.Float64(&cfg.Rate.PerAddr, "rate-limit-per-ip", "FLAGEDGE_RATE_LIMIT_PER_IP", 0,
		"requests per second each client address (as --trusted-proxies finds it: without it, a client that sends a new X-Forwarded-For each time escapes this limit) may make; beyond it 429 with Retry-After; 0: off")
	fs.Float64(&cfg.Rate.PerProject, "rate-limit-per-project", "FLAGEDGE_RATE_LIMIT_PER_PROJECT", 0,
		"requests per second the /decide, /flags and capture endpoints take for each project; beyond it 429 with Retry-After; 0: off")
	fs.Int(&cfg.Rate.Burst, "rate-limit-burst", "FLAGEDGE_RATE_LIMIT_BURST", 20, "requests an address or a project may make at once above its rate")
	// 5 s: an SDK sends its headers in one packet; a client that takes longer holds a
	// connection for nothing (slowloris).
	fs.Duration(&cfg.Conn.HeaderTimeout, "header-timeout", "FLAGEDGE_HEADER_TIMEOUT", 5*time.Second,
		"longest a client may take to send a request's headers; then its connection is closed")
	fs.Duration(&cfg.Conn.IdleTimeout, "idle-timeout", "FLAGEDGE_IDLE_TIMEOUT", 60*time.Second,
		"how long a kept-alive connection may wait for its next request")
	fs.Int(&cfg.Conn.MaxHeaderBytes, "max-header-bytes", "FLAGEDGE_MAX_HEADER_BYTES", 8<<10,
		"largest request line and headers (a GET's ?data= included); larger get 431")
	fs.Int(&cfg.Conn.MaxConnsPerAddr, "max-conns-per-ip", "FLAGEDGE_MAX_CONNS_PER_IP", 0,
		"most connections one peer address may hold open (behind a load balancer, the balancer's); 0: no bound")
	// Capture batches may be 20 MB from a slow link; answers are small.
	cfg.Conn.BodyTimeout, cfg.Conn.WriteTimeout = 30*time.Second, 30*time.Second
}

func (cfg *config) validate() error {
	if _, _, err := net.SplitHostPort(cfg.HTTPAddr); err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	if err := cfg.ControlPlane.Validate(); err != nil {
		return err
	}
	if _, err := clientip.NewResolver(cfg.TrustedProxies); err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	if cfg.EvalReportInterval <= 0 {
		return errors.New("--evaluation-report-interval must be positive")
	}
	if cfg.MembershipMax < 0 || cfg.MemoryLimit < 0 || cfg.AnswerCacheMax < 0 {
		return errors.New("--membership-max-bytes, --memory-limit and --answer-cache-bytes must not be negative")
	}
	if cfg.PersonMax <= 0 || cfg.GroupMax <= 0 || cfg.OverlayMax <= 0 {
		return errors.New("--person-cache-max-bytes, --group-cache-max-bytes and --person-overlay-max-bytes must be positive")
	}
	if cfg.LookupTimeout <= 0 || cfg.PersonTTL <= 0 || cfg.PersonMissTTL <= 0 {
		return errors.New("--lookup-timeout, --person-cache-ttl and --person-cache-miss-ttl must be positive")
	}
	if cfg.MaxInflightBytes < 0 || cfg.Rate.PerAddr < 0 || cfg.Rate.PerProject < 0 || cfg.Rate.Burst < 1 || cfg.Conn.MaxConnsPerAddr < 0 {
		return errors.New("--max-inflight-bytes, --rate-limit-per-ip, --rate-limit-per-project and --max-conns-per-ip must not be negative, --rate-limit-burst at least 1")
	}
	if cfg.Conn.HeaderTimeout <= 0 || cfg.Conn.IdleTimeout <= 0 || cfg.Conn.MaxHeaderBytes < 1<<10 {
		return errors.New("--header-timeout and --idle-timeout must be positive, --max-header-bytes at least 1024")
	}
	if cfg.DeadLetterMax != 0 && cfg.DeadLetterMax < capture.MinDeadLetterBytes {
		return fmt.Errorf("--dead-letter-max-bytes must be 0 or at least %d", capture.MinDeadLetterBytes)
	}
	if cfg.DrainDelay < 0 {
		return errors.New("--drain-delay must not be negative")
	}
	if cfg.StreamKey != "" && len(cfg.StreamKey) < 32 {
		return errors.New("--ofrep-stream-key must have at least 32 characters")
	}
	if cfg.StreamMax <= 0 || cfg.StreamMaxAddr <= 0 {
		return errors.New("--ofrep-stream-max and --ofrep-stream-max-per-ip must be positive")
	}
	if cfg.ServeEdges != "" {
		if _, _, err := net.SplitHostPort(cfg.ServeEdges); err != nil {
			return fmt.Errorf("--serve-edges: %w", err)
		}
		if cfg.ServeEdgesCert == "" && cfg.ServeEdgesKey == "" && !cfg.ServeEdgesInsecure && !daemon.IsLoopback(cfg.ServeEdges) {
			return fmt.Errorf("--serve-edges %s is not a loopback address: give --serve-edges-tls-cert and --serve-edges-tls-key, or --serve-edges-insecure to serve it in plaintext", cfg.ServeEdges)
		}
	}
	if cfg.DataDir == "" {
		return errors.New("--data-dir is required: it holds the snapshot copy and the capture spool")
	}
	if cfg.BootstrapBundle != "" && cfg.BundlePublicKey == "" {
		return errors.New("--bootstrap-bundle needs --bundle-public-key: an edge serves no bundle it cannot verify")
	}
	if _, _, err := spool.ParseSyncPolicy(cfg.SpoolFsync); err != nil {
		return fmt.Errorf("--spool-fsync: %w", err)
	}
	if cfg.PublishWindow < 1 || cfg.PublishWindow > 64 {
		return errors.New("--event-log-publish-window must be 1 to 64")
	}
	return cfg.EventLog.Validate()
}

// edge is the assembled program: what run serves and, in order, shuts down.
type edge struct {
	cfg       *config
	log       *slog.Logger
	reg       *prometheus.Registry
	tls       *tls.Config // for --http-addr; nil: plain HTTP
	holder    *state.Holder
	spool     *spool.Spool
	client    syncpb.SyncClient
	members   *bloomset.Set // filled by the snapshot stream, read by look-ups
	api       *httpapi.Server
	refusals  *admit.Refusals
	streams   *ofrep.Hub // nil when streaming is off
	forwarder *capture.Forwarder
	relay     *relaying           // nil unless --serve-edges
	counts    *evalcount.Registry // evaluations by project, flag and value, reported upstream
	closers   []func()            // in the order they are to run
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		_, err := fmt.Fprintln(stdout, version.String())
		return err
	}
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	log, err := daemon.NewLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	if msg := cfg.spoofableLimits(); msg != "" {
		log.Warn(msg)
	}
	if cfg.MemoryLimit > 0 {
		debug.SetMemoryLimit(cfg.MemoryLimit)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	e, err := assemble(cfg, log)
	defer func() {
		for i := len(e.closers) - 1; i >= 0; i-- {
			e.closers[i]()
		}
	}()
	if err != nil {
		return err
	}
	return e.serve(ctx)
}

// spoofableLimits returns the warning for per-address limits in force without
// --trusted-proxies, or "": the client address is then X-Forwarded-For's first entry from
// anyone, so a client that rotates the header escapes every per-address limit.
func (cfg *config) spoofableLimits() string {
	if cfg.TrustedProxies != "" {
		return ""
	}
	limits := []string{"--ofrep-stream-max-per-ip"} // always on
	if cfg.Rate.PerAddr > 0 {
		limits = append(limits, "--rate-limit-per-ip")
	}
	return fmt.Sprintf("per-address limits (%s) take the client address from X-Forwarded-For, which any client may write: without --trusted-proxies a client that sends a new address each time escapes them; set --trusted-proxies to the proxies in front of this edge, or to 127.0.0.1/32 when clients reach it directly",
		strings.Join(limits, ", "))
}

// assemble opens the edge's state (snapshots, spool, GeoIP, the control-plane client) and
// builds its handlers. What it opened is released by e.closers, also on error.
func assemble(cfg *config, log *slog.Logger) (e *edge, err error) {
	e = &edge{cfg: cfg, log: log}
	reg := daemon.NewRegistry()
	e.reg = reg
	if e.tls, err = daemon.LoadTLS(cfg.TLSCert, cfg.TLSKey, "tls"); err != nil {
		return e, err
	}
	cacheMetrics := cache.NewMetrics(reg)
	conn, err := cpclient.Dial(cfg.ControlPlane)
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, func() { conn.Close() })
	e.client = syncpb.NewSyncClient(conn)

	e.holder = state.NewHolder(filepath.Join(cfg.DataDir, "snapshots"), log, reg)
	e.counts = evalcount.NewRegistry()
	e.holder.CountEvaluations(e.counts)
	if cfg.ServeEdges != "" {
		if e.relay, err = newRelaying(cfg, e.client, e.holder, log); err != nil {
			return e, err
		}
		e.closers = append(e.closers, e.relay.members.Close)
	}
	n, err := e.holder.Load()
	if err != nil {
		log.Error("some snapshots on disk could not be loaded", "err", err)
	}
	log.Info("loaded snapshots from disk", "projects", n, "dir", cfg.DataDir)
	if cfg.BootstrapBundle != "" {
		if err := bootstrapFromBundle(cfg, e.holder, n, log); err != nil {
			return e, err
		}
	}
	policy, interval, _ := spool.ParseSyncPolicy(cfg.SpoolFsync)
	if e.spool, err = spool.Open(spool.Options{Dir: filepath.Join(cfg.DataDir, "spool"), QuotaBytes: cfg.SpoolQuota,
		Sync: policy, SyncInterval: interval, Registry: reg}); err != nil {
		return e, err
	}
	e.closers = append(e.closers, func() { e.spool.Close() })

	locator, err := openGeoIP(cfg.GeoIPDB, cacheMetrics, e)
	if err != nil {
		return e, err
	}

	storeCfg := persons.DefaultConfig()
	storeCfg.Timeout, storeCfg.TTL, storeCfg.NegativeTTL = cfg.LookupTimeout, cfg.PersonTTL, cfg.PersonMissTTL
	storeCfg.MembershipMaxBytes = cfg.MembershipMax
	storeCfg.PersonMaxBytes, storeCfg.GroupMaxBytes, storeCfg.OverlayMaxBytes = cfg.PersonMax, cfg.GroupMax, cfg.OverlayMax
	store, err := persons.NewStore(e.client, storeCfg, cacheMetrics, log, reg)
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, store.Close)
	e.members = store.Membership()

	ips, _ := clientip.NewResolver(cfg.TrustedProxies) // validated
	e.refusals = admit.NewRefusals(reg)
	limiter, err := admit.NewLimiter(cfg.Rate, e.refusals, cacheMetrics)
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, limiter.Close)
	budget := reqbody.NewBudget(cfg.MaxInflightBytes)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_inflight_bytes",
		Help: "Bytes held by request bodies in flight and what decoding them costs, of --max-inflight-bytes."},
		func() float64 { return float64(budget.Held()) }))
	if cfg.Streams {
		sc := ofrep.DefaultStreamConfig()
		sc.Key, sc.MaxStreams, sc.MaxPerAddr = []byte(cfg.StreamKey), int(cfg.StreamMax), int(cfg.StreamMaxAddr)
		if cfg.StreamKey == "" {
			sc.Key = make([]byte, 32)
			rand.Read(sc.Key)
			log.Info("OFREP stream URLs are signed with a key of this process: set --ofrep-stream-key when several edges share an address")
		}
		e.streams = ofrep.NewHub(sc, e.holder, ips, log, reg)
	}
	dec := decide.NewHandler(e.holder, store, locator, ips, budget, limiter, log)
	answers, err := answercache.New(cfg.AnswerCacheMax, true, cacheMetrics, reg)
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, answers.Close)
	dec.KeepAnswers(answers)
	e.api = httpapi.New(httpapi.Config{
		State:     e.holder,
		Decide:    dec,
		OFREP:     ofrep.New(ofrep.Config{State: e.holder, Decide: dec, Streams: e.streams, Logger: log}),
		Capture:   capture.NewHandler(e.holder, e.spool, locator, ips, budget, limiter, store, log, reg),
		Logger:    log,
		Registry:  reg,
		NoMetrics: cfg.MetricsAddr != "",
		Limiter:   limiter,
		IPs:       ips,
		Refusals:  e.refusals,
	})
	deadLetters, err := capture.OpenDeadLetters(filepath.Join(cfg.DataDir, "dead-letters.jsonl"), cfg.DeadLetterMax, reg)
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, func() { deadLetters.Close() })
	dest, err := forwardTo(cfg, e, log)
	if err != nil {
		return e, err
	}
	e.forwarder = capture.NewForwarder(e.spool, dest, deadLetters, cfg.EdgeID, log, reg)
	e.forwarder.Window = int(cfg.PublishWindow)
	return e, nil
}

// bootstrapFromBundle serves the signed bundle when the disk held no snapshot. The bundle is
// verified whenever it is configured, needed or not: a tampered or wrongly signed bundle is a
// misconfiguration to find at the start, not during the outage it was meant for.
func bootstrapFromBundle(cfg *config, h *state.Holder, onDisk int, log *slog.Logger) error {
	keyPEM, err := os.ReadFile(cfg.BundlePublicKey)
	if err != nil {
		return fmt.Errorf("--bundle-public-key: %w", err)
	}
	key, err := snapshotbundle.ParsePublicKey(keyPEM)
	if err != nil {
		return fmt.Errorf("--bundle-public-key: %w", err)
	}
	data, err := os.ReadFile(cfg.BootstrapBundle)
	if err != nil {
		return fmt.Errorf("--bootstrap-bundle: %w", err)
	}
	msg, err := snapshotbundle.Decode(key, data)
	if err != nil {
		return fmt.Errorf("--bootstrap-bundle %s refused: %w", cfg.BootstrapBundle, err)
	}
	if onDisk > 0 {
		log.Info("bootstrap bundle verified and not needed: the data directory holds snapshots", "bundle", cfg.BootstrapBundle)
		return nil
	}
	n, err := h.Bootstrap(msg)
	if err != nil {
		log.Error("some projects of the bootstrap bundle could not be served", "err", err)
	}
	log.Info("serving from the bootstrap bundle until the control plane answers", "projects", n,
		"bundle", cfg.BootstrapBundle, "database_id", msg.DatabaseId)
	return nil
}

// forwardTo is where captured events go: the JetStream event log when --event-log-url is
// set, else the control plane's Ingest call.
func forwardTo(cfg *config, e *edge, log *slog.Logger) (capture.Destination, error) {
	if !cfg.EventLog.Enabled() {
		return capture.NewIngestDestination(e.client, cfg.EdgeID), nil
	}
	nc, err := cfg.EventLog.Connect("flagedge-edge "+cfg.EdgeID, log)
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, nc.Close)
	return capture.NewJetStreamDestination(nc, cfg.EdgeID)
}

// openGeoIP opens the GeoIP database behind its cache; without a path, the edge knows no
// locations.
func openGeoIP(path string, m *cache.Metrics, e *edge) (*geocache.Locator, error) {
	if path == "" {
		return nil, nil
	}
	reader, err := geoip.Open(path)
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { reader.Close() })
	locator, err := geocache.NewLocator(reader, 100_000, m)
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, locator.Close)
	return locator, nil
}

// serve runs the edge until ctx ends, then shuts down in order: /_ready answers 503 for the
// drain delay while requests are still served, the listener closes and in-flight requests
// finish, the spool is made durable, and last the watch and the forwarder stop.
func (e *edge) serve(ctx context.Context) error {
	srv := e.api.NewFastHTTPServer(e.cfg.Conn, e.log)
	ln, err := net.Listen("tcp", e.cfg.HTTPAddr)
	if err != nil {
		return err
	}
	ln = httpapi.Listen(ln, e.cfg.Conn.MaxConnsPerAddr, e.refusals)
	e.log.Info("edge listening", "http_addr", ln.Addr().String(), "https", e.tls != nil, "control_plane", e.cfg.ControlPlane.Addrs, "edge_id", e.cfg.EdgeID,
		"event_log", e.cfg.EventLog.Enabled())
	if e.tls != nil {
		ln = tls.NewListener(ln, e.tls)
	}

	// The watch and the forwarder outlive the HTTP server during shutdown: they stop last.
	background, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	g, gctx := errgroup.WithContext(ctx)
	if e.cfg.MetricsAddr != "" {
		if err := daemon.ServeMetrics(gctx, g, e.cfg.MetricsAddr, e.reg, e.log); err != nil {
			ln.Close()
			return err
		}
	}
	if e.cfg.PprofAddr != "" {
		if _, err := daemon.ServeHTTP(gctx, g, e.cfg.PprofAddr, http.DefaultServeMux); err != nil {
			ln.Close()
			return fmt.Errorf("--pprof-addr: %w", err)
		}
	}
	g.Go(func() error {
		state.Watch(background, e.client, e.holder, e.members, e.cfg.EdgeID, e.log)
		return nil
	})
	g.Go(func() error {
		e.forwarder.Run(background)
		return nil
	})
	if e.relay != nil {
		if err := e.relay.serve(gctx, g, background, e.spool); err != nil {
			ln.Close()
			return err
		}
	}
	reporter := evalcount.NewReporter(e.counts, e.client, e.cfg.EdgeID, e.cfg.EvalReportInterval, e.log, e.reg)
	g.Go(func() error {
		reporter.Run(gctx) // a last report as shutdown begins
		return nil
	})
	if e.streams != nil {
		g.Go(func() error {
			e.streams.Run(gctx) // closes the streams when shutdown begins, so pages reconnect elsewhere
			return nil
		})
	}
	g.Go(func() error { return srv.Serve(ln) })
	g.Go(func() error {
		<-gctx.Done()
		e.log.Info("shutting down: draining", "drain_delay", e.cfg.DrainDelay)
		e.api.Drain()
		if ctx.Err() != nil { // a signal, not a failed server: give load balancers time
			time.Sleep(e.cfg.DrainDelay)
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), e.cfg.ShutdownTimeout)
		defer cancel()
		err := srv.ShutdownWithContext(shutdownCtx)
		// Every acknowledged event is in the spool; make it durable before exiting.
		if cerr := e.spool.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		stopBackground()
		return err
	})
	return g.Wait()
}

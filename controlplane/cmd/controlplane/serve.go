package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // served only on --pprof-addr
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/pgxpoolprometheus"
	"github.com/google/uuid"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/approvalwatch"
	"github.com/flagedge/flagedge/controlplane/bloomhub"
	"github.com/flagedge/flagedge/controlplane/console"
	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/controlplane/forward"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/ingest"
	"github.com/flagedge/flagedge/controlplane/logingest"
	"github.com/flagedge/flagedge/controlplane/loginlimit"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/releaser"
	"github.com/flagedge/flagedge/controlplane/rollout"
	"github.com/flagedge/flagedge/controlplane/scheduler"
	"github.com/flagedge/flagedge/controlplane/syncserver"
	"github.com/flagedge/flagedge/controlplane/webhook"
	"github.com/flagedge/flagedge/internal/daemon"
	"github.com/flagedge/flagedge/internal/version"
	"github.com/flagedge/flagedge/shared/clientip"
	"github.com/flagedge/flagedge/shared/eventlog"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// serveConfig is the configuration of `controlplane serve`; every field has a flag and an
// environment variable.
type serveConfig struct {
	HTTPAddr        string
	GRPCAddr        string
	DatabaseURL     string
	PublicURL       string
	LogLevel        string
	TLSCert         string
	TLSKey          string
	GRPCTLSCert     string
	GRPCTLSKey      string
	GRPCInsecure    bool
	MetricsAddr     string
	PprofAddr       string
	DrainDelay      time.Duration
	ShutdownTimeout time.Duration
	EventLog        eventlog.Config
	LogReplicas     int64
	LogWorkers      int64
	LogMaxBytes     int64
	LogMaxAge       time.Duration
	LogAckWait      time.Duration
	LogBatchBytes   int64
	LogBatchWait    time.Duration
	TrustedProxies  string
	HeaderTimeout   time.Duration
	ReadTimeout     time.Duration
	IdleTimeout     time.Duration
	MaxHeaderBytes  int64
	LoginPerAddress int64
	LoginPerEmail   int64
	LoginWindow     time.Duration
	LoginMaxHashes  int64
	BcryptCost      int
	Webhooks        webhookFlags
	// ReleasePlanInterval is how often release plans are evaluated.
	ReleasePlanInterval time.Duration
	Forward             forwardFlags
}

// forwardFlags configure the dispatcher of this replica that forwards events to the projects'
// event destinations.
type forwardFlags struct {
	AllowPrivate bool
	Workers      int64
	BatchSize    int64
	Timeout      time.Duration
	RetryBase    time.Duration
	RetryMax     time.Duration
	Poll         time.Duration
}

// webhookFlags configure the webhook dispatcher of this replica.
type webhookFlags struct {
	AllowPrivate bool
	Concurrency  int64
	PerHook      int64
	Timeout      time.Duration
	RetryBase    time.Duration
	RetryMax     time.Duration
}

func parseServeConfig(args []string, stderr io.Writer) (*serveConfig, error) {
	fs := daemon.NewFlags("serve", stderr)
	cfg := &serveConfig{}
	fs.String(&cfg.HTTPAddr, "http-addr", "FLAGEDGE_HTTP_ADDR", "127.0.0.1:8000", "address of the management API and the console")
	fs.String(&cfg.GRPCAddr, "grpc-addr", "FLAGEDGE_GRPC_ADDR", "127.0.0.1:9000", "address of the gRPC sync service that edges connect to")
	fs.String(&cfg.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection URL")
	fs.String(&cfg.PublicURL, "public-url", "FLAGEDGE_PUBLIC_URL", "", "scheme and host of absolute URLs in responses; default: the request's Host")
	fs.String(&cfg.LogLevel, "log-level", "FLAGEDGE_LOG_LEVEL", "info", "debug, info, warn or error")
	fs.String(&cfg.TLSCert, "tls-cert", "FLAGEDGE_TLS_CERT", "", "certificate (PEM) for HTTPS on --http-addr; with --tls-key")
	fs.String(&cfg.TLSKey, "tls-key", "FLAGEDGE_TLS_KEY", "", "private key (PEM) of --tls-cert")
	fs.String(&cfg.GRPCTLSCert, "grpc-tls-cert", "FLAGEDGE_GRPC_TLS_CERT", "", "certificate (PEM) for TLS on --grpc-addr; with --grpc-tls-key")
	fs.String(&cfg.GRPCTLSKey, "grpc-tls-key", "FLAGEDGE_GRPC_TLS_KEY", "", "private key (PEM) of --grpc-tls-cert")
	fs.Bool(&cfg.GRPCInsecure, "grpc-insecure", "FLAGEDGE_GRPC_INSECURE", false, "serve gRPC without TLS on an address that is not loopback (only behind something that encrypts, such as a service mesh)")
	fs.String(&cfg.MetricsAddr, "metrics-addr", "FLAGEDGE_METRICS_ADDR", "", "serve /metrics on this address of its own instead of --http-addr")
	fs.String(&cfg.PprofAddr, "pprof-addr", "FLAGEDGE_PPROF_ADDR", "", "address for Go's pprof endpoints (off when empty; keep it on loopback)")
	// Load balancers probe every few seconds; 5 s of 503 on /_ready lets them stop sending
	// before the listeners close.
	fs.Duration(&cfg.DrainDelay, "drain-delay", "FLAGEDGE_DRAIN_DELAY", 5*time.Second, "after SIGTERM, how long /_ready answers 503 while requests are still served")
	// In-flight management requests are short; 15 s is ample and bounded for orchestrators.
	fs.Duration(&cfg.ShutdownTimeout, "shutdown-timeout", "FLAGEDGE_SHUTDOWN_TIMEOUT", 15*time.Second, "how long finishing in-flight requests may take")
	cfg.EventLog.Register(fs)
	d := logingest.DefaultConfig()
	fs.Int64(&cfg.LogReplicas, "event-log-replicas", "FLAGEDGE_EVENT_LOG_REPLICAS", int64(d.Replicas), "copies of the event log's stream across NATS servers (3 survives losing one); the control plane creates or updates the stream at start")
	fs.Int64(&cfg.LogWorkers, "event-log-workers", "FLAGEDGE_EVENT_LOG_WORKERS", int64(d.Workers), "ingestion workers of this replica on the event log, each storing one batch at a time")
	fs.Int64(&cfg.LogMaxBytes, "event-log-max-bytes", "FLAGEDGE_EVENT_LOG_MAX_BYTES", d.MaxBytes, "most bytes the event log's stream holds while ingestion lags; beyond it edges keep events in their spools")
	fs.Duration(&cfg.LogMaxAge, "event-log-max-age", "FLAGEDGE_EVENT_LOG_MAX_AGE", d.MaxAge, "oldest an unstored event in the event log's stream may get before it is dropped")
	fs.Int64(&cfg.LogBatchBytes, "event-log-batch-bytes", "FLAGEDGE_EVENT_LOG_BATCH_BYTES", int64(d.BatchBytes), "most bytes of messages a worker stores in one transaction (the replica's pull keeps twice that on its way)")
	fs.Duration(&cfg.LogBatchWait, "event-log-batch-wait", "FLAGEDGE_EVENT_LOG_BATCH_WAIT", d.FetchWait, "longest a worker waits for more messages once a batch has begun: the lag added when traffic is light, for fewer, larger transactions when it is not")
	fs.Duration(&cfg.LogAckWait, "event-log-ack-wait", "FLAGEDGE_EVENT_LOG_ACK_WAIT", d.AckWait, "how long a batch taken from the event log may stay unacknowledged before another worker gets it (what a replica dying mid-batch delays)")
	fs.String(&cfg.TrustedProxies, "trusted-proxies", "FLAGEDGE_TRUSTED_PROXIES", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed for the client address of logins (the right-most address that is not one of them); empty: the connection's peer, no header believed")
	// Connection hygiene: a client must finish its headers within 10 s and its whole request
	// within a minute (console forms and API bodies are at most a few MiB), an idle
	// keep-alive connection is closed after a minute, and headers are at most 64 KiB (a
	// browser's are a few KiB; Go's default is 1 MiB).
	fs.Duration(&cfg.ReleasePlanInterval, "release-plan-interval", "FLAGEDGE_RELEASE_PLAN_INTERVAL", releaser.DefaultInterval, "how often release plans (guarded rollouts) are evaluated: a rollback follows the evidence within this")
	fs.Duration(&cfg.HeaderTimeout, "read-header-timeout", "FLAGEDGE_READ_HEADER_TIMEOUT", 10*time.Second, "how long a client may take to send a request's headers on --http-addr before its connection is closed")
	fs.Duration(&cfg.ReadTimeout, "read-timeout", "FLAGEDGE_READ_TIMEOUT", time.Minute, "how long a client may take to send a whole request (headers and body) on --http-addr")
	fs.Duration(&cfg.IdleTimeout, "idle-timeout", "FLAGEDGE_IDLE_TIMEOUT", time.Minute, "how long an idle keep-alive connection to --http-addr stays open")
	fs.Int64(&cfg.MaxHeaderBytes, "max-header-bytes", "FLAGEDGE_MAX_HEADER_BYTES", 64<<10, "largest request header block accepted on --http-addr (larger: 431)")
	l := loginlimit.Defaults()
	fs.Int64(&cfg.LoginPerAddress, "login-failures-per-address", "FLAGEDGE_LOGIN_FAILURES_PER_ADDRESS", int64(l.PerAddress), "failed console logins one client address may have (whatever the emails) within --login-failure-window before its logins get 429")
	fs.Int64(&cfg.LoginPerEmail, "login-failures-per-email", "FLAGEDGE_LOGIN_FAILURES_PER_EMAIL", int64(l.PerEmail), "failed console logins one email may have (from every address) within --login-failure-window before its logins get 429")
	fs.Duration(&cfg.LoginWindow, "login-failure-window", "FLAGEDGE_LOGIN_FAILURE_WINDOW", l.Window, "how long a failed login counts (between one and two windows)")
	fs.Int(&cfg.BcryptCost, "bcrypt-cost", "FLAGEDGE_BCRYPT_COST", postgres.DefaultBcryptCost, bcryptCostUsage)
	fs.Int64(&cfg.LoginMaxHashes, "login-max-concurrent-hashes", "FLAGEDGE_LOGIN_MAX_CONCURRENT_HASHES", int64(l.MaxHashes), "password hashes (bcrypt, a few hundred ms of a core each) running at once; a login finding them busy waits up to 1s, then gets 429")
	w := webhook.DefaultConfig()
	fs.Bool(&cfg.Webhooks.AllowPrivate, "webhook-allow-private", "FLAGEDGE_WEBHOOK_ALLOW_PRIVATE", false, "let webhooks reach private, loopback, link-local and other non-public addresses (refused by default, when a hook is saved and on the address each delivery dials)")
	fs.Int64(&cfg.Webhooks.Concurrency, "webhook-concurrency", "FLAGEDGE_WEBHOOK_CONCURRENCY", int64(w.Concurrency), "webhook deliveries this replica attempts at once")
	fs.Int64(&cfg.Webhooks.PerHook, "webhook-per-hook-concurrency", "FLAGEDGE_WEBHOOK_PER_HOOK_CONCURRENCY", int64(w.PerHook), "webhook deliveries of one hook attempted at once by all replicas together, so that a slow or dead receiver holds only that many slots; keep it below --webhook-concurrency")
	fs.Duration(&cfg.Webhooks.Timeout, "webhook-timeout", "FLAGEDGE_WEBHOOK_TIMEOUT", w.Timeout, "how long one webhook delivery attempt may take (connect, send, answer)")
	fs.Duration(&cfg.Webhooks.RetryBase, "webhook-retry-base", "FLAGEDGE_WEBHOOK_RETRY_BASE", w.RetryBase, "delay before a failed webhook delivery's first retry; each further one doubles (with jitter) up to --webhook-retry-max, for 24h from the event")
	fs.Duration(&cfg.Webhooks.RetryMax, "webhook-retry-max", "FLAGEDGE_WEBHOOK_RETRY_MAX", w.RetryMax, "longest delay between two attempts of a webhook delivery")
	f := forward.DefaultConfig()
	fs.Bool(&cfg.Forward.AllowPrivate, "forward-allow-private", "FLAGEDGE_FORWARD_ALLOW_PRIVATE", false, "let event destinations reach private, loopback, link-local and other non-public addresses (refused by default, when a destination is saved and on the address each batch dials)")
	fs.Int64(&cfg.Forward.Workers, "forward-workers", "FLAGEDGE_FORWARD_WORKERS", int64(f.Workers), "event destinations this replica sends batches to at once (each destination one batch at a time across replicas)")
	fs.Int64(&cfg.Forward.BatchSize, "forward-batch-size", "FLAGEDGE_FORWARD_BATCH_SIZE", int64(f.BatchSize), "most events one batch to an event destination's /batch/ holds")
	fs.Duration(&cfg.Forward.Timeout, "forward-timeout", "FLAGEDGE_FORWARD_TIMEOUT", f.Timeout, "how long one request to an event destination may take (connect, send, answer)")
	fs.Duration(&cfg.Forward.RetryBase, "forward-retry-base", "FLAGEDGE_FORWARD_RETRY_BASE", f.RetryBase, "delay before retrying a batch an event destination could not take (429, 503, network error); each further one doubles (with jitter) up to --forward-retry-max; a longer Retry-After is honoured")
	fs.Duration(&cfg.Forward.RetryMax, "forward-retry-max", "FLAGEDGE_FORWARD_RETRY_MAX", f.RetryMax, "longest delay between two attempts to send to an event destination")
	fs.Duration(&cfg.Forward.Poll, "forward-poll", "FLAGEDGE_FORWARD_POLL", f.Poll, "how often an idle forwarding worker looks for newly queued events (the most an event waits before it is sent)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return cfg, cfg.validate()
}

func (c *serveConfig) validate() error {
	if err := requireDatabase(c.DatabaseURL); err != nil {
		return err
	}
	for name, addr := range map[string]string{"--http-addr": c.HTTPAddr, "--grpc-addr": c.GRPCAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if _, err := clientip.NewResolver(c.TrustedProxies); err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	if c.LoginPerAddress < 1 || c.LoginPerEmail < 1 || c.LoginWindow < time.Second || c.LoginMaxHashes < 1 || c.LoginMaxHashes > 1024 {
		return errors.New("--login-failures-per-address, --login-failures-per-email and --login-max-concurrent-hashes must be at least 1 (hashes at most 1024), --login-failure-window at least 1s")
	}
	if err := checkBcryptCost(c.BcryptCost); err != nil {
		return err
	}
	if c.ReleasePlanInterval < 10*time.Millisecond || c.ReleasePlanInterval > time.Hour {
		return errors.New("--release-plan-interval must be between 10ms and 1h")
	}
	if c.HeaderTimeout <= 0 || c.ReadTimeout < c.HeaderTimeout || c.IdleTimeout <= 0 || c.MaxHeaderBytes < 4096 {
		return errors.New("--read-header-timeout and --idle-timeout must be positive, --read-timeout at least --read-header-timeout, --max-header-bytes at least 4096")
	}
	if w := c.Webhooks; w.Concurrency < 1 || w.Concurrency > 256 || w.PerHook < 1 || w.PerHook > 256 || w.Timeout < 100*time.Millisecond || w.RetryBase < 10*time.Millisecond || w.RetryMax < w.RetryBase {
		return errors.New("--webhook-concurrency and --webhook-per-hook-concurrency must be 1 to 256, --webhook-timeout at least 100ms, --webhook-retry-base at least 10ms and --webhook-retry-max at least --webhook-retry-base")
	}
	if f := c.Forward; f.Workers < 1 || f.Workers > 64 || f.BatchSize < 1 || f.BatchSize > 50_000 || f.Timeout < 100*time.Millisecond ||
		f.RetryBase < 10*time.Millisecond || f.RetryMax < f.RetryBase || f.Poll < 10*time.Millisecond {
		return errors.New("--forward-workers must be 1 to 64, --forward-batch-size 1 to 50000, --forward-timeout at least 100ms, --forward-retry-base and --forward-poll at least 10ms, --forward-retry-max at least --forward-retry-base")
	}
	if c.DrainDelay < 0 {
		return errors.New("--drain-delay must not be negative")
	}
	if err := c.EventLog.Validate(); err != nil {
		return err
	}
	if c.LogReplicas < 1 || c.LogReplicas > 5 || c.LogWorkers < 1 || c.LogMaxBytes < 1<<20 || c.LogMaxAge < time.Minute || c.LogAckWait < time.Second ||
		c.LogBatchBytes < 64<<10 || c.LogBatchBytes > 256<<20 || c.LogBatchWait < 0 || c.LogBatchWait > 10*time.Second {
		return errors.New("--event-log-replicas must be 1 to 5, --event-log-workers at least 1, --event-log-max-bytes at least 1 MiB, --event-log-max-age at least 1m, --event-log-ack-wait at least 1s, --event-log-batch-bytes 64 KiB to 256 MiB and --event-log-batch-wait 0 to 10s")
	}
	// The sync service carries every project's flags and key hashes, person properties and
	// events: in plaintext it may only be reachable from this machine.
	if c.GRPCTLSCert == "" && c.GRPCTLSKey == "" && !c.GRPCInsecure && !daemon.IsLoopback(c.GRPCAddr) {
		return fmt.Errorf("--grpc-addr %s is not a loopback address: give --grpc-tls-cert and --grpc-tls-key, or --grpc-insecure to serve it in plaintext", c.GRPCAddr)
	}
	return nil
}

// logins is the login limiter's configuration from the flags, counting failures in store
// with every other replica.
func (c *serveConfig) logins(store loginlimit.Store, logger *slog.Logger) loginlimit.Config {
	l := loginlimit.Defaults()
	l.PerAddress, l.PerEmail, l.Window, l.MaxHashes = int(c.LoginPerAddress), int(c.LoginPerEmail), c.LoginWindow, int(c.LoginMaxHashes)
	l.Store, l.Logger = store, logger
	return l
}

// errDraining makes /_ready answer 503 while the server shuts down.
var errDraining = errors.New("draining: shutting down")

// controlPlane is the assembled server: what serve runs and shuts down.
type controlPlane struct {
	cfg      *serveConfig
	log      *slog.Logger
	reg      *prometheus.Registry
	db       *postgres.DB
	draining atomic.Bool
	http     *http.Server
	grpc     *grpc.Server
	sync     *syncserver.Server
	ingest   *ingest.Ingester // the one owner of ingestion: the sync service and the event log call it
	// plans is ingestion's set of the projects with an active release plan, kept by LISTEN.
	plans   *postgres.ActivePlans
	members *bloomhub.Hub
	edges   *syncserver.EdgeAuth
	// sessions records this replica's edges and what they serve (replicaID: this process);
	// rollout waits on every replica's.
	sessions  *postgres.EdgeSessionStore
	replicaID string
	rollout   *rollout.Watcher
	// scheduler runs due scheduled changes; every replica runs one (they claim changes in
	// the database, so each runs once).
	scheduler *scheduler.Scheduler
	// approvals expires overdue change requests and confirms applied ones live on every
	// edge; every replica runs one (the store does each step once).
	approvals *approvalwatch.Watcher
	// releaser evaluates running release plans; every replica runs one (they claim plans in
	// the database, so one acts on a plan at a time).
	releaser *releaser.Releaser
	logIn    *logingest.Ingester // nil without --event-log-url
	hooks    *webhook.Dispatcher
	forward  *forward.Dispatcher
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseServeConfig(args, stderr)
	if err != nil {
		return err
	}
	logger, err := daemon.NewLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := postgres.Migrate(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	db, err := postgres.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	cp, err := assemble(cfg, db, logger)
	if err != nil {
		return err
	}
	closeLog, err := cp.connectEventLog()
	if err != nil {
		return err
	}
	defer closeLog()
	return cp.run(ctx)
}

// assemble builds the HTTP and gRPC servers over the database.
func assemble(cfg *serveConfig, db *postgres.DB, logger *slog.Logger) (*controlPlane, error) {
	cp := &controlPlane{cfg: cfg, log: logger, reg: daemon.NewRegistry(), db: db}
	cp.reg.MustRegister(pgxpoolprometheus.NewCollector(db.Pool, map[string]string{"db": "flagedge"}))
	ready := func(ctx context.Context) error {
		if cp.draining.Load() {
			return errDraining
		}
		return db.Ping(ctx)
	}
	cp.sessions, cp.replicaID = postgres.NewEdgeSessionStore(db), uuid.NewString()
	cp.rollout = rollout.New(cp.sessions)
	release, _ := version.Get()
	policy := &webhook.Policy{AllowPrivate: cfg.Webhooks.AllowPrivate}
	// The dispatcher is a system actor: it acts for no user and alone holds the unchecked
	// outbox of every project's deliveries, which users' writes enqueued.
	cp.hooks = webhook.New(postgres.NewSystemWebhookOutbox(db), httpapi.WebhookObjects{}, policy, webhook.Config{
		Concurrency: int(cfg.Webhooks.Concurrency), PerHook: int(cfg.Webhooks.PerHook), Timeout: cfg.Webhooks.Timeout,
		RetryBase: cfg.Webhooks.RetryBase, RetryMax: cfg.Webhooks.RetryMax,
		UserAgent: "flagedge-webhooks/" + release,
	}, logger, cp.reg)
	forwardPolicy := &webhook.Policy{AllowPrivate: cfg.Forward.AllowPrivate}
	// The forwarding dispatcher is a system actor too: it alone holds the queue of every
	// project's events, which ingestion filled.
	cp.forward = forward.New(postgres.NewSystemForwardQueue(db), forwardPolicy, forward.Config{
		Workers: int(cfg.Forward.Workers), BatchSize: int(cfg.Forward.BatchSize), Timeout: cfg.Forward.Timeout,
		RetryBase: cfg.Forward.RetryBase, RetryMax: cfg.Forward.RetryMax, Poll: cfg.Forward.Poll,
		UserAgent: "flagedge-forward/" + release,
	}, logger, cp.reg)
	handler, err := newHTTPHandler(db, cfg, ready, logger, cp.reg, cp.sessions, cp.rollout, policy, forwardPolicy)
	if err != nil {
		return nil, err
	}
	httpTLS, err := daemon.LoadTLS(cfg.TLSCert, cfg.TLSKey, "tls")
	if err != nil {
		return nil, err
	}
	cp.http = &http.Server{Handler: handler, TLSConfig: httpTLS, ReadHeaderTimeout: cfg.HeaderTimeout, ReadTimeout: cfg.ReadTimeout,
		IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: int(cfg.MaxHeaderBytes), ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	grpcTLS, err := daemon.LoadTLS(cfg.GRPCTLSCert, cfg.GRPCTLSKey, "grpc-tls")
	if err != nil {
		return nil, err
	}
	cp.members = bloomhub.NewHub(postgres.NewMemberStore(db), logger, cp.reg)
	events := postgres.NewEventStore(db, logger)
	cp.plans = events.ActivePlans()
	cp.ingest = ingest.New(events, logger, cp.reg)
	cp.edges = syncserver.NewEdgeAuth(postgres.NewEdgeService(db), logger, cp.reg)
	cp.sync = syncserver.NewServer(postgres.NewSnapshotStore(db), postgres.NewPersonStore(db), cp.ingest, logger, cp.reg,
		syncserver.WithMembership(cp.members), syncserver.WithSessions(cp.sessions, cp.replicaID),
		syncserver.WithEvaluations(postgres.NewEvaluationStore(db)), syncserver.WithRelays(cp.edges))
	cp.scheduler = scheduler.New(postgres.NewScheduleStore(db), postgres.NewFlagService(db), logger, cp.reg)
	cp.approvals = approvalwatch.New(postgres.NewChangeRequestUpkeep(db), logger, cp.reg)
	cp.releaser = releaser.New(postgres.NewReleasePlanStore(db), cfg.ReleasePlanInterval, logger, cp.reg)
	cp.grpc = newGRPCServer(cp.sync, cp.edges, grpcTLS, cp.reg)
	return cp, nil
}

// announceMembers applies one membership announcement of the database. A payload that does
// not decode would leave the filters without keys the database has: it is handled as missed
// announcements (an error makes the listener reconnect and rebuild every filter).
func (cp *controlPlane) announceMembers(ctx context.Context, payload string) error {
	projectID, keys, rebuild, err := postgres.ParseMembershipNotice(payload)
	if err != nil {
		return err
	}
	return cp.members.Announce(ctx, projectID, keys, rebuild)
}

// connectEventLog connects to the event log's NATS servers when --event-log-url is set and
// prepares this replica's ingestion workers; the connection is closed by the returned func.
func (cp *controlPlane) connectEventLog() (func(), error) {
	cfg := cp.cfg
	if !cfg.EventLog.Enabled() {
		return func() {}, nil
	}
	host, _ := os.Hostname()
	nc, err := cfg.EventLog.Connect("flagedge-controlplane "+host, cp.log)
	if err != nil {
		return nil, err
	}
	lc := logingest.DefaultConfig()
	lc.Replicas, lc.Workers, lc.MaxBytes, lc.MaxAge, lc.AckWait = int(cfg.LogReplicas), int(cfg.LogWorkers), cfg.LogMaxBytes, cfg.LogMaxAge, cfg.LogAckWait
	lc.BatchBytes, lc.FetchWait = int(cfg.LogBatchBytes), cfg.LogBatchWait
	if cp.logIn, err = logingest.New(nc, cp.ingest, lc, cp.log, cp.reg); err != nil {
		nc.Close()
		return nil, err
	}
	return nc.Close, nil
}

// run serves until ctx ends, then shuts down in order: /_ready answers 503 for the drain
// delay while requests are still served, HTTP finishes its requests, then the sync service's
// streams (which never end by themselves) are stopped.
func (cp *controlPlane) run(ctx context.Context) error {
	cfg := cp.cfg
	// Bind both listeners before serving, so that "address in use" fails at start.
	httpLn, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return err
	}
	grpcLn, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		httpLn.Close()
		return err
	}
	cp.log.Info("control plane listening", "http_addr", httpLn.Addr().String(), "grpc_addr", grpcLn.Addr().String(),
		"https", cp.http.TLSConfig != nil, "grpc_tls", cfg.GRPCTLSCert != "", "event_log", cfg.EventLog.Enabled())
	cp.sync.SetReplicaName(replicaName(grpcLn.Addr().String()))

	g, gctx := errgroup.WithContext(ctx)
	if cfg.PprofAddr != "" {
		if _, err := daemon.ServeHTTP(gctx, g, cfg.PprofAddr, http.DefaultServeMux); err != nil {
			httpLn.Close()
			grpcLn.Close()
			return fmt.Errorf("--pprof-addr: %w", err)
		}
	}
	if cfg.MetricsAddr != "" {
		if err := daemon.ServeMetrics(gctx, g, cfg.MetricsAddr, cp.reg, cp.log); err != nil {
			httpLn.Close()
			grpcLn.Close()
			return err
		}
	}
	g.Go(func() error {
		return postgres.Listen(gctx, cfg.DatabaseURL, postgres.SnapshotChannel, cp.log,
			func(_ context.Context, payload string) error { cp.sync.Notify(payload); return nil },
			func(context.Context) error { cp.sync.Resync(); return nil }, nil)
	})
	g.Go(func() error {
		return postgres.Listen(gctx, cfg.DatabaseURL, postgres.MembershipChannel, cp.log, cp.announceMembers, cp.members.Resync, cp.members.Lost)
	})
	g.Go(func() error {
		return postgres.Listen(gctx, cfg.DatabaseURL, postgres.PlanChannel, cp.log, cp.plans.Notify, cp.plans.Resync, cp.plans.Lost)
	})
	// A notification on channel, or a reconnection after which one may have been missed,
	// wakes whoever waits for it.
	wakeOn := func(channel string, wake func()) func() error {
		return func() error {
			return postgres.Listen(gctx, cfg.DatabaseURL, channel, cp.log,
				func(context.Context, string) error { wake(); return nil },
				func(context.Context) error { wake(); return nil }, nil)
		}
	}
	g.Go(wakeOn(postgres.EdgeAckChannel, func() { cp.rollout.Notify(); cp.approvals.Wake() }))
	g.Go(func() error { cp.approvals.Run(gctx); return nil })
	g.Go(wakeOn(postgres.ScheduleChannel, cp.scheduler.Wake))
	g.Go(func() error { cp.scheduler.Run(gctx); return nil })
	g.Go(func() error { cp.releaser.Run(gctx); return nil })
	g.Go(wakeOn(postgres.WebhookChannel, cp.hooks.Wake))
	g.Go(func() error { cp.hooks.Run(gctx); return nil })
	g.Go(func() error { cp.forward.Run(gctx); return nil })
	g.Go(func() error { cp.heartbeat(gctx); return nil })
	g.Go(func() error { cp.edges.Run(gctx); return nil })
	if cp.logIn != nil {
		// Stops fetching when the server shuts down; a batch being stored is finished and
		// acknowledged first.
		g.Go(func() error { cp.logIn.Run(gctx); return nil })
	}
	g.Go(func() error {
		if cp.http.TLSConfig != nil {
			httpLn = tls.NewListener(httpLn, cp.http.TLSConfig)
		}
		if err := cp.http.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error { return cp.grpc.Serve(grpcLn) })
	g.Go(func() error {
		<-gctx.Done()
		cp.log.Info("shutting down: draining", "drain_delay", cfg.DrainDelay)
		cp.draining.Store(true)
		if ctx.Err() != nil { // a signal, not a failed server: give load balancers time
			time.Sleep(cfg.DrainDelay)
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		err := cp.http.Shutdown(shutdownCtx)
		cp.grpc.Stop()
		return err
	})
	return g.Wait()
}

// newHTTPHandler builds the management API over the database's services, and the web console
// on top of it.
func newHTTPHandler(db *postgres.DB, cfg *serveConfig, ready func(context.Context) error, logger *slog.Logger, reg *prometheus.Registry,
	sessions controlplane.EdgeSessionStore, waiter *rollout.Watcher, policy, forwardPolicy *webhook.Policy) (http.Handler, error) {
	stores := postgres.NewServices(db, cfg.BcryptCost)
	stores.Webhooks = webhook.Checked(stores.Webhooks, policy)
	stores.EventDestinations = forward.Checked(stores.EventDestinations, forwardPolicy)
	services, personStore := stores, postgres.NewPersonStore(db)
	evaluator := &flageval.Evaluator{Snapshots: postgres.NewSnapshotStore(db), Persons: personStore, Scanner: personStore}
	usage := postgres.NewEvaluationStore(db)
	api := httpapi.New(httpapi.Config{
		Services:     services,
		Evaluator:    evaluator,
		Ready:        ready,
		PublicURL:    cfg.PublicURL,
		Logger:       logger,
		Registry:     reg,
		NoMetrics:    cfg.MetricsAddr != "",
		EdgeSessions: sessions,
		Rollout:      waiter,
		Usage:        usage,
	})
	clientIP := clientip.Peer
	if cfg.TrustedProxies != "" {
		proxies, err := clientip.NewResolver(cfg.TrustedProxies)
		if err != nil {
			return nil, err
		}
		clientIP = proxies.RequestIP
	}
	web, err := console.New(console.Config{Services: services, Evaluator: evaluator, PublicURL: cfg.PublicURL, Logger: logger,
		EdgeSessions: sessions, Rollout: waiter, Usage: usage,
		SecureCookies: strings.HasPrefix(cfg.PublicURL, "https://") || cfg.TLSCert != "",
		Logins:        loginlimit.New(cfg.logins(postgres.NewLoginFailureStore(db), logger), reg), ClientIP: clientIP})
	if err != nil {
		return nil, err
	}
	return api.WithConsole(web), nil
}

// replicaName names this replica in the edges' list: its host and sync address.
func replicaName(grpcAddr string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + " " + grpcAddr
}

// heartbeat keeps this replica's edge sessions counted as connected, until ctx ends.
func (cp *controlPlane) heartbeat(ctx context.Context) {
	tick := time.NewTicker(postgres.SessionTTL / 5)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := cp.sessions.Heartbeat(ctx, cp.replicaID); err != nil && ctx.Err() == nil {
			cp.log.Warn("edge session heartbeat failed", "err", err)
		}
	}
}

// newGRPCServer returns the sync service's gRPC server: TLS when configured, every call
// authenticated as a live edge, and per-method metrics.
func newGRPCServer(sync syncpb.SyncServer, edges *syncserver.EdgeAuth, tlsConfig *tls.Config, reg *prometheus.Registry) *grpc.Server {
	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(metrics)
	opts := append(syncpb.ServerOptions(tlsConfig != nil),
		// Ingest calls carry up to a few MiB of events; allow a whole 20 MB capture batch.
		grpc.MaxRecvMsgSize(64<<20),
		// Edges keep one Watch stream open for good: keepalives find dead peers behind NATs.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(metrics.UnaryServerInterceptor(), edges.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(metrics.StreamServerInterceptor(), edges.StreamInterceptor()),
	)
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	srv := grpc.NewServer(opts...)
	syncpb.RegisterSyncServer(srv, sync)
	metrics.InitializeMetrics(srv)
	return srv
}

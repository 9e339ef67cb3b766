// Command edge serves flagedge's public endpoints close to users: /decide and /flags from an
// in-memory snapshot pushed by the control plane, the SDKs' flag definitions, and capture
// into a durable spool forwarded to the control plane.
package main

import (
	"context"
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
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/flagedge/flagedge/edge/cache"
	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/edge/geocache"
	"github.com/flagedge/flagedge/edge/httpapi"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/geoip"
	"github.com/flagedge/flagedge/internal/daemon"
	"github.com/flagedge/flagedge/shared/syncpb"
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "edge:", err)
		os.Exit(2)
	}
}

// config is the edge's configuration; every field has a flag and an environment variable.
type config struct {
	HTTPAddr        string
	ControlPlane    string
	DataDir         string
	GeoIPDB         string
	EdgeID          string
	LookupTimeout   time.Duration
	SpoolFsync      string
	PprofAddr       string
	SpoolQuota      int64
	LogLevel        string
	ShutdownTimeout time.Duration
}

func parseConfig(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	cfg := &config{}
	fs.StringVar(&cfg.HTTPAddr, "http-addr", daemon.EnvOr("FLAGEDGE_EDGE_ADDR", "127.0.0.1:8080"), "address of the public HTTP endpoints (env FLAGEDGE_EDGE_ADDR)")
	fs.StringVar(&cfg.ControlPlane, "control-plane", daemon.EnvOr("FLAGEDGE_CONTROL_PLANE", "127.0.0.1:9000"), "address of the control plane's gRPC sync service (env FLAGEDGE_CONTROL_PLANE)")
	fs.StringVar(&cfg.DataDir, "data-dir", daemon.EnvOr("FLAGEDGE_DATA_DIR", "flagedge-edge-data"), "directory for the snapshot copy (env FLAGEDGE_DATA_DIR)")
	fs.StringVar(&cfg.GeoIPDB, "geoip-db", daemon.EnvOr("FLAGEDGE_GEOIP_DB", ""), "MaxMind City database; without it no $geoip_* properties (env FLAGEDGE_GEOIP_DB)")
	fs.StringVar(&cfg.EdgeID, "edge-id", daemon.EnvOr("FLAGEDGE_EDGE_ID", host), "name of this edge in the control plane's logs (env FLAGEDGE_EDGE_ID)")
	fs.DurationVar(&cfg.LookupTimeout, "lookup-timeout", decide.DefaultStoreConfig.Timeout, "longest wait for stored properties before answering the flags that need them as failed")
	fs.StringVar(&cfg.SpoolFsync, "spool-fsync", daemon.EnvOr("FLAGEDGE_SPOOL_FSYNC", "10ms"), "when captured events are fsynced: always, never, or an interval such as 10ms (env FLAGEDGE_SPOOL_FSYNC)")
	fs.Int64Var(&cfg.SpoolQuota, "spool-quota", 1<<30, "most bytes the capture spool may hold; beyond it capture answers 503")
	fs.StringVar(&cfg.PprofAddr, "pprof-addr", daemon.EnvOr("FLAGEDGE_PPROF_ADDR", ""), "address for Go's pprof endpoints (off when empty; keep it on loopback) (env FLAGEDGE_PPROF_ADDR)")
	fs.StringVar(&cfg.LogLevel, "log-level", daemon.EnvOr("FLAGEDGE_LOG_LEVEL", "info"), "debug, info, warn or error (env FLAGEDGE_LOG_LEVEL)")
	// Decide requests take microseconds; 15 s drains any in-flight request and is bounded.
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "how long a graceful shutdown may take")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for name, addr := range map[string]string{"--http-addr": cfg.HTTPAddr, "--control-plane": cfg.ControlPlane} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if cfg.LookupTimeout <= 0 {
		return nil, errors.New("--lookup-timeout must be positive")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("--data-dir is required: it holds the snapshot copy and the capture spool")
	}
	if _, _, err := spool.ParseSyncPolicy(cfg.SpoolFsync); err != nil {
		return nil, fmt.Errorf("--spool-fsync: %w", err)
	}
	return cfg, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	log, err := daemon.NewLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := daemon.NewRegistry()
	cacheMetrics := cache.NewMetrics(reg)

	holder := state.NewHolder(filepath.Join(cfg.DataDir, "snapshots"), log, reg)
	n, err := holder.Load()
	if err != nil {
		log.Error("some snapshots on disk could not be loaded", "err", err)
	}
	log.Info("loaded snapshots from disk", "projects", n, "dir", cfg.DataDir)
	policy, interval, _ := spool.ParseSyncPolicy(cfg.SpoolFsync)
	sp, err := spool.Open(spool.Options{Dir: filepath.Join(cfg.DataDir, "spool"), QuotaBytes: cfg.SpoolQuota,
		Sync: policy, SyncInterval: interval, Registry: reg})
	if err != nil {
		return err
	}
	defer sp.Close()

	var locator *geocache.Locator
	if cfg.GeoIPDB != "" {
		reader, err := geoip.Open(cfg.GeoIPDB)
		if err != nil {
			return err
		}
		defer reader.Close()
		if locator, err = geocache.NewLocator(reader, 100_000, cacheMetrics); err != nil {
			return err
		}
		defer locator.Close()
	}

	conn, err := grpc.NewClient(cfg.ControlPlane,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The Watch stream lives for good: keepalives notice a dead control plane quickly.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 15 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
	)
	if err != nil {
		return fmt.Errorf("control plane client: %w", err)
	}
	defer conn.Close()
	client := syncpb.NewSyncClient(conn)

	storeCfg := decide.DefaultStoreConfig
	storeCfg.Timeout = cfg.LookupTimeout
	store, err := decide.NewStore(client, storeCfg, cacheMetrics)
	if err != nil {
		return err
	}
	defer store.Close()

	api := httpapi.New(httpapi.Config{
		State:    holder,
		Decide:   decide.NewHandler(holder, store, locator, log, reg),
		Capture:  capture.NewHandler(holder, sp, locator, store, log, reg),
		Logger:   log,
		Registry: reg,
	})
	forwarder := capture.NewForwarder(sp, client, cfg.EdgeID, log, reg)
	srv := &fasthttp.Server{
		Handler: api.Handler(), Name: "flagedge-edge",
		// Bounds on slow or idle clients; batch capture bodies may be up to 20 MB.
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second,
		MaxRequestBodySize: 21 << 20, NoDefaultServerHeader: true,
		Logger: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return err
	}
	log.Info("edge listening", "http_addr", ln.Addr().String(), "control_plane", cfg.ControlPlane, "edge_id", cfg.EdgeID)

	// The watch and the forwarder outlive the HTTP server during shutdown: they stop last.
	background, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		state.Watch(background, client, holder, cfg.EdgeID, log)
		return nil
	})
	g.Go(func() error {
		forwarder.Run(background)
		return nil
	})
	g.Go(func() error { return srv.Serve(ln) })
	if cfg.PprofAddr != "" {
		pprofLn, err := net.Listen("tcp", cfg.PprofAddr)
		if err != nil {
			return err
		}
		pprofSrv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			if err := pprofSrv.Serve(pprofLn); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			return pprofSrv.Close()
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down: draining")
		api.Drain()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		err := srv.ShutdownWithContext(shutdownCtx)
		// Every acknowledged event is in the spool; make it durable before exiting.
		if cerr := sp.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		stopBackground()
		return err
	})
	return g.Wait()
}

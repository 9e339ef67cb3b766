// Command controlplane runs flagedge's control plane: the management REST API and the gRPC
// sync service for edges, over Postgres.
//
//	controlplane serve      run the server (applies pending migrations first)
//	controlplane migrate    apply pending migrations and exit
//	controlplane bootstrap  create an organisation, admin, project and key; print them as JSON
//	controlplane keys create  issue a personal API key and print it
//	controlplane users create add a user to an organisation and print it
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/flagedge/flagedge/controlplane/console"
	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/syncserver"
	"github.com/flagedge/flagedge/internal/daemon"
	"github.com/flagedge/flagedge/shared/syncpb"
)

const usage = `Usage: controlplane <command> [flags]

Commands:
  serve                 run the management API (applies pending migrations first)
  migrate               apply pending migrations and exit
  bootstrap             create (idempotently) an organisation, an admin user, a project and a new
                        personal key with scope *; print {"project_id", "project_api_key",
                        "personal_api_key", "secret_api_key", "email"} as one JSON line, with a
                        generated console "password" when it created the user
  keys create           issue a personal API key for a user and print it
  users create          add a user to the organisation of an existing one; print it as JSON
  users set-password    set a user's console password from stdin, or generate and print one

Run "controlplane <command> -h" for the flags of a command.
`

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return nil
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "migrate":
		return migrateCmd(ctx, args[1:], stderr)
	case "bootstrap":
		return bootstrap(ctx, args[1:], stdout, stderr)
	case "keys":
		if len(args) < 2 || args[1] != "create" {
			return errors.New(`usage: controlplane keys create --email E --scopes a,b [--projects 1,2]`)
		}
		return createKey(ctx, args[2:], stdout, stderr)
	case "users":
		if len(args) >= 2 && args[1] == "set-password" {
			return setPassword(ctx, args[2:], os.Stdin, stdout, stderr)
		}
		if len(args) < 2 || args[1] != "create" {
			return errors.New(`usage: controlplane users create --email E --organization-of ADMIN_EMAIL [--admin] | users set-password --email E`)
		}
		return createUser(ctx, args[2:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// newFlagSet returns a flag set that reports errors and usage on stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func databaseFlag(fs *flag.FlagSet) *string {
	url, _ := os.LookupEnv("DATABASE_URL")
	return fs.String("database-url", url, "PostgreSQL connection URL, e.g. postgres://user@127.0.0.1:5432/flagedge (env DATABASE_URL)")
}

// openDatabase connects to the database a command was given.
func openDatabase(ctx context.Context, url string) (*postgres.DB, error) {
	if err := requireDatabase(url); err != nil {
		return nil, err
	}
	return postgres.Open(ctx, url)
}

func requireDatabase(url string) error {
	if url == "" {
		return errors.New("--database-url (or DATABASE_URL) is required")
	}
	return nil
}

func migrateCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("migrate", stderr)
	dbURL := databaseFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := requireDatabase(*dbURL); err != nil {
		return err
	}
	return postgres.Migrate(ctx, *dbURL)
}

func bootstrap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bootstrap", stderr)
	dbURL := databaseFlag(fs)
	email := fs.String("email", "", "email of the admin user (required)")
	projectName := fs.String("project-name", "Default Project", "name of the project")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := requireDatabase(*dbURL); err != nil {
		return err
	}
	if err := postgres.Migrate(ctx, *dbURL); err != nil {
		return err
	}
	db, err := openDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := postgres.Bootstrap(ctx, db, *email, *projectName)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

func createKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keys create", stderr)
	dbURL := databaseFlag(fs)
	email := fs.String("email", "", "email of the user who owns the key (required)")
	scopes := fs.String("scopes", "", "comma-separated scopes, e.g. feature_flag:read,annotation:write or * (required)")
	projects := fs.String("projects", "", "comma-separated project ids the key is limited to (default: every project)")
	label := fs.String("label", "cli", "a label for the key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var projectIDs []int64
	if *projects != "" {
		for _, p := range strings.Split(*projects, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
			if err != nil {
				return fmt.Errorf("--projects: %q is not a project id", p)
			}
			projectIDs = append(projectIDs, id)
		}
	}
	var scopeList []string
	for _, s := range strings.Split(*scopes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			scopeList = append(scopeList, s)
		}
	}
	db, err := openDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	key, err := postgres.NewAuthService(db).CreatePersonalKey(ctx, *email, *label, scopeList, projectIDs)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, key.Secret)
	return err
}

func createUser(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("users create", stderr)
	dbURL := databaseFlag(fs)
	email := fs.String("email", "", "email of the new user (required)")
	orgOf := fs.String("organization-of", "", "email of a user of the organisation to join (required)")
	firstName := fs.String("first-name", "", "first name (default: the email's local part)")
	admin := fs.Bool("admin", false, "make the user an organisation admin")
	if err := fs.Parse(args); err != nil {
		return err
	}
	db, err := openDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	u, err := postgres.CreateUser(ctx, db, *orgOf, *email, *firstName, *admin)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(map[string]any{"id": u.ID, "uuid": u.UUID, "email": u.Email, "org_role": u.OrgRole})
}

// serveConfig is the configuration of `controlplane serve`; every field has a flag and an
// environment variable.
type serveConfig struct {
	HTTPAddr        string
	GRPCAddr        string
	DatabaseURL     string
	PublicURL       string
	LogLevel        string
	DrainDelay      time.Duration
	ShutdownTimeout time.Duration
}

func parseServeConfig(args []string, stderr io.Writer) (*serveConfig, error) {
	fs := daemon.NewFlags("serve", stderr)
	cfg := &serveConfig{}
	fs.String(&cfg.HTTPAddr, "http-addr", "FLAGEDGE_HTTP_ADDR", "127.0.0.1:8000", "address of the management API")
	fs.String(&cfg.GRPCAddr, "grpc-addr", "FLAGEDGE_GRPC_ADDR", "127.0.0.1:9000", "address of the gRPC sync service that edges connect to")
	fs.String(&cfg.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection URL")
	fs.String(&cfg.PublicURL, "public-url", "FLAGEDGE_PUBLIC_URL", "", "scheme and host of absolute URLs in responses; default: the request's Host")
	fs.String(&cfg.LogLevel, "log-level", "FLAGEDGE_LOG_LEVEL", "info", "debug, info, warn or error")
	// Load balancers probe every few seconds; 5 s of 503 on /_ready lets them stop sending
	// before the listeners close.
	fs.Duration(&cfg.DrainDelay, "drain-delay", "FLAGEDGE_DRAIN_DELAY", 5*time.Second, "after SIGTERM, how long /_ready answers 503 while requests are still served")
	// In-flight management requests are short; 15 s is ample and bounded for orchestrators.
	fs.Duration(&cfg.ShutdownTimeout, "shutdown-timeout", "FLAGEDGE_SHUTDOWN_TIMEOUT", 15*time.Second, "how long finishing in-flight requests may take")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return cfg, cfg.validate()
}

func (c *serveConfig) validate() error {
	if err := requireDatabase(c.DatabaseURL); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	if c.DrainDelay < 0 {
		return errors.New("--drain-delay must not be negative")
	}
	return nil
}

// errDraining makes /_ready answer 503 while the server shuts down.
var errDraining = errors.New("draining: shutting down")

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

	reg := daemon.NewRegistry()
	var draining atomic.Bool
	ready := func(ctx context.Context) error {
		if draining.Load() {
			return errDraining
		}
		return db.Ping(ctx)
	}
	handler, err := newHTTPHandler(db, cfg, ready, logger, reg)
	if err != nil {
		return err
	}
	syncServer := syncserver.NewServer(postgres.NewSnapshotStore(db), postgres.NewPersonStore(db), postgres.NewEventStore(db, logger), logger, reg)
	grpcServer := newGRPCServer(syncServer)

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
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	logger.Info("control plane listening", "http_addr", httpLn.Addr().String(), "grpc_addr", grpcLn.Addr().String())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return postgres.Listen(gctx, cfg.DatabaseURL, postgres.SnapshotChannel, logger, syncServer.Notify, syncServer.Resync)
	})
	g.Go(func() error {
		if err := srv.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error { return grpcServer.Serve(grpcLn) })
	g.Go(func() error {
		<-gctx.Done()
		logger.Info("shutting down: draining", "drain_delay", cfg.DrainDelay)
		draining.Store(true)
		if ctx.Err() != nil { // a signal, not a failed server: give load balancers time
			time.Sleep(cfg.DrainDelay)
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		// Watch streams never end by themselves: stop them once HTTP has drained.
		err := srv.Shutdown(shutdownCtx)
		grpcServer.Stop()
		return err
	})
	return g.Wait()
}

// newHTTPHandler builds the management API over the database's services, and the web console
// on top of it.
func newHTTPHandler(db *postgres.DB, cfg *serveConfig, ready func(context.Context) error, logger *slog.Logger, reg *prometheus.Registry) (http.Handler, error) {
	flagStore, personStore, userStore := postgres.NewFlagService(db), postgres.NewPersonStore(db), postgres.NewUserService(db, 0)
	api := httpapi.New(httpapi.Config{
		Auth:        postgres.NewAuthService(db),
		Projects:    postgres.NewProjectService(db),
		Flags:       flagStore,
		Activity:    postgres.NewActivityService(db),
		Events:      postgres.NewEventReader(db),
		Annotations: postgres.NewAnnotationService(db),
		Roles:       postgres.NewRoleService(db),
		Cohorts:     postgres.NewCohortService(db),
		Dashboards:  flagStore,
		Users:       userStore,
		Keys:        postgres.NewKeyService(db),
		Evaluator:   &flageval.Evaluator{Snapshots: postgres.NewSnapshotStore(db), Persons: personStore, Scanner: personStore},
		Ready:       ready,
		PublicURL:   cfg.PublicURL,
		Logger:      logger,
		Registry:    reg,
	})
	web, err := console.New(console.Config{API: api, Users: userStore, Sessions: postgres.NewSessionService(db), Logger: logger,
		SecureCookies: strings.HasPrefix(cfg.PublicURL, "https://")})
	if err != nil {
		return nil, err
	}
	return api.WithConsole(web), nil
}

// newGRPCServer returns the gRPC server of the sync service.
func newGRPCServer(sync syncpb.SyncServer) *grpc.Server {
	srv := grpc.NewServer(
		// Ingest calls carry up to a few MiB of events; allow a whole 20 MB capture batch.
		grpc.MaxRecvMsgSize(64<<20),
		// Edges keep one Watch stream open for good: keepalives find dead peers behind NATs.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	syncpb.RegisterSyncServer(srv, sync)
	return srv
}

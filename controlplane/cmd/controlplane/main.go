// Command controlplane runs flagedge's control plane: the management REST API and the gRPC
// sync service for edges, over Postgres.
//
//	controlplane serve      run the server (applies pending migrations first)
//	controlplane migrate    apply pending migrations and exit
//	controlplane bootstrap  create an organisation, admin, project and key; print them as JSON
//	controlplane keys create  issue a personal API key and print it
//	controlplane users create add a user to an organisation and print it
//	controlplane users set-password  set a user's console password
//	controlplane edges create|list|revoke  manage the edges' credentials
//	controlplane wait-for-edges  wait until every connected edge serves a project version
//	controlplane snapshots keygen|export  signed snapshot bundles for edges that start offline
//	controlplane flags export|plan|apply  keep a project's flags in a YAML file, through the API
//	controlplane import posthog           bring a PostHog project in, through both APIs
//	controlplane --version  print the build
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/version"
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
  edges create --name N issue an edge's credential; print {"edge_id", "name", "edge_token"}
  edges list            list the edges, live and revoked, one JSON line each
  edges revoke --name N revoke an edge's credential (its streams close within a second)
  users set-password    set a user's console password from stdin, or generate and print one
  wait-for-edges --project P --version N [--timeout 30s]
                        wait until every connected edge serves version N of project P, through
                        the API (--url, --api-key); exit status 0 when they do, 1 at the
                        timeout; print the last rollout status as JSON
  snapshots keygen --private-key F --public-key F
                        write an Ed25519 key pair for signing snapshot bundles
  snapshots export --signing-key F (--project N | --all)
                        write a signed bundle of the projects' snapshots to stdout, for edges'
                        --bootstrap-bundle
  flags export [-o FILE]
                        write the project's flags, the cohorts they use and its early access
                        features as one YAML file, through the API (--url, --api-key, --project)
  flags plan -f FILE [--prune]
                        print what apply would change; exit status 0 when nothing, 2 when
                        something, 1 on error
  flags apply -f FILE [--prune] [--wait]
                        make the project match the file; changes held for approval are printed
                        with their change requests; --wait returns once the edges serve it
  import posthog --from-url URL --from-project N --from-key phx_… [--dry-run]
                        bring a PostHog project's flags, cohorts, early access features and
                        annotations into the project (--url, --api-key, --project); re-run it
                        to sync; flags flagedge cannot serve exactly are imported inactive

Run "controlplane <command> -h" for the flags of a command, "controlplane --version" for the
build.
`

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	var exit *exitError
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &exit):
		if exit.err != nil {
			fmt.Fprintln(os.Stderr, "controlplane:", exit.err)
		}
		os.Exit(exit.code)
	case errors.Is(err, errNotLive):
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
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
	case "--version", "-version", "version":
		_, err := fmt.Fprintln(stdout, version.String())
		return err
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
	case "edges":
		return edgesCmd(ctx, args[1:], stdout, stderr)
	case "wait-for-edges":
		return waitForEdges(ctx, args[1:], stdout, stderr)
	case "snapshots":
		return snapshotsCmd(ctx, args[1:], stdout, stderr)
	case "flags":
		return flagsCmd(ctx, args[1:], stdout, stderr)
	case "import":
		return importCmd(ctx, args[1:], stdout, stderr)
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

// bcryptCostFlag registers --bcrypt-cost, the work factor of the password hashes a command
// writes; a lower one than the default is for tests, where a cost-12 hash takes seconds under
// the race detector.
func bcryptCostFlag(fs *flag.FlagSet) *int {
	return fs.Int("bcrypt-cost", postgres.DefaultBcryptCost, bcryptCostUsage)
}

const bcryptCostUsage = "bcrypt work factor of console password hashes, 4 to 31 (each step doubles a hash's time); lower than 12 only for tests"

// checkBcryptCost refuses a work factor bcrypt does not take.
func checkBcryptCost(cost int) error {
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		return fmt.Errorf("--bcrypt-cost must be %d to %d", bcrypt.MinCost, bcrypt.MaxCost)
	}
	return nil
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
	cost := bcryptCostFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkBcryptCost(*cost); err != nil {
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
	res, err := postgres.Bootstrap(ctx, db, *cost, *email, *projectName)
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

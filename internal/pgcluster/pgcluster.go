// Package pgcluster starts and stops a throwaway PostgreSQL cluster from the server binaries
// installed on the machine (found with pg_config). As root it runs them as the postgres
// user, since initdb refuses to run as root.
package pgcluster

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// Options configure a cluster.
type Options struct {
	// Port to listen on at 127.0.0.1; 0 means the cluster listens only on its Unix socket.
	Port int
	// Durable keeps fsync on; test clusters turn it off for speed.
	Durable bool
	// Settings are further server settings, name=value each (the eventlog bench turns
	// track_commit_timestamp on to time each event from capture to commit).
	Settings []string
}

// Cluster is a running throwaway cluster.
type Cluster struct {
	dir      string
	bindir   string
	port     int
	settings string     // the server options it was started with
	asUser   *user.User // nil when not switching users
}

// Start creates a cluster in a new temporary directory and starts it.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bindir, err := findBindir(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "flagedge-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bindir: bindir, port: opts.Port}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.asUser = u
	}
	data := filepath.Join(dir, "data")
	if err := c.run(ctx, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	listen := "''"
	portOpt := ""
	if opts.Port != 0 {
		listen = "127.0.0.1"
		portOpt = " -p " + strconv.Itoa(opts.Port)
	}
	settings := "-c listen_addresses=" + listen + " -c unix_socket_directories=" + dir + portOpt + " -c max_connections=300"
	if !opts.Durable {
		settings += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	for _, kv := range opts.Settings {
		settings += " -c " + kv
	}
	c.settings = settings
	if err := c.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	if err := c.run(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-o", c.settings, "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60", "start"); err != nil {
		logText, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("%w\n%s", err, logText)
	}
	return nil
}

// Crash stops the server at once, as a crash would (connections are cut, nothing is shut
// down cleanly), and keeps its files; Restart brings it back.
func (c *Cluster) Crash(ctx context.Context) error {
	return c.run(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop")
}

// Restart starts a crashed server again on the same files; it recovers from its log.
func (c *Cluster) Restart(ctx context.Context) error { return c.start(ctx) }

// URL returns a connection URL for the named database: over TCP when the cluster has a port,
// else over its Unix socket.
func (c *Cluster) URL(database string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + database}
	q := url.Values{}
	if c.port != 0 {
		u.Host = "127.0.0.1:" + strconv.Itoa(c.port)
	} else {
		q.Set("host", c.dir)
	}
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// Stop shuts the cluster down at once and deletes its files. It is safe to call twice.
func (c *Cluster) Stop() {
	if c.dir == "" {
		return
	}
	_ = c.run(context.Background(), "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop")
	os.RemoveAll(c.dir)
	c.dir = ""
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	bin := filepath.Join(c.bindir, name)
	var cmd *exec.Cmd
	if c.asUser != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, bin, args...)
	}
	cmd.Dir = c.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(out.String()))
	}
	return nil
}

func findBindir(ctx context.Context) (string, error) {
	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", fmt.Errorf("no PostgreSQL server binaries found (install postgresql-15)")
}

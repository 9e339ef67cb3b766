// Package natstest gives tests (and the benchmark) a real NATS JetStream cluster: nodes of
// nats-server, built from the module this repository pins, started as processes on loopback,
// each with its own store directory, so a test can kill one (SIGKILL, as a crash) and start
// it again from its store, as production meets it.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options shape a cluster.
type Options struct {
	// Nodes in the cluster; 3 when zero (the smallest that survives losing one).
	Nodes int
	// MaxPayload is the servers' largest message in bytes; the servers' default (1 MiB)
	// when zero.
	MaxPayload int
}

// Cluster is a running JetStream cluster.
type Cluster struct {
	dir   string
	bin   string
	Nodes []*Node
}

// Node is one server of a cluster.
type Node struct {
	Name        string
	ClientPort  int
	clusterPort int
	conf        string
	logPath     string
	mu          sync.Mutex // guards cmd and done
	cmd         *exec.Cmd
	done        chan struct{}
}

// URL is the node's client URL.
func (n *Node) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.ClientPort) }

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary returns the nats-server to run: $FLAGEDGE_NATS_SERVER when set, else one built
// (once per process, from Go's build cache after the first time) from the
// github.com/nats-io/nats-server/v2 module that go.mod pins as a tool.
func Binary() (string, error) {
	if p := os.Getenv("FLAGEDGE_NATS_SERVER"); p != "" {
		return p, nil
	}
	buildOnce.Do(func() {
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
			buildErr = fmt.Errorf("natstest: not inside the flagedge module (go env GOMOD: %q, %v)", gomod, err)
			return
		}
		// One place per user, so test binaries do not each leave a copy behind; built to a
		// temporary name and renamed, so test binaries building at once never run a half
		// written file. Go's build cache makes the rebuild a link.
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "flagedge-natstest")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		tmp, err := os.CreateTemp(dir, "nats-server-*.tmp")
		if err != nil {
			buildErr = err
			return
		}
		tmp.Close()
		cmd := exec.Command("go", "build", "-o", tmp.Name(), "github.com/nats-io/nats-server/v2")
		cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Remove(tmp.Name())
			buildErr = fmt.Errorf("natstest: build nats-server: %v\n%s", err, out)
			return
		}
		binPath = filepath.Join(dir, "nats-server")
		if err := os.Rename(tmp.Name(), binPath); err != nil {
			os.Remove(tmp.Name())
			buildErr = err
		}
	})
	return binPath, buildErr
}

// Start starts a cluster whose stores and logs live under dir and waits until JetStream
// answers on every node.
func Start(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin}
	// Every node names all the others' route ports in its configuration, so the ports are
	// chosen before any node starts (and kept across a restart, as a host's would be).
	ports, err := freePorts(2 * opts.Nodes)
	if err != nil {
		return nil, err
	}
	for i := range opts.Nodes {
		n := &Node{Name: fmt.Sprintf("n%d", i+1), ClientPort: ports[2*i], clusterPort: ports[2*i+1]}
		n.conf = filepath.Join(dir, n.Name+".conf")
		n.logPath = filepath.Join(dir, n.Name+".log")
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		var routes []string
		for _, o := range c.Nodes {
			if o != n {
				routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", o.clusterPort)))
			}
		}
		payload := ""
		if opts.MaxPayload > 0 {
			payload = fmt.Sprintf("max_payload: %d\n", opts.MaxPayload)
		}
		conf := fmt.Sprintf(`server_name: %q
host: "127.0.0.1"
port: %d
%sjetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 8GB
}
cluster {
  name: "flagedge-test"
  host: "127.0.0.1"
  port: %d
  routes: [%s]
}
`, n.Name, n.ClientPort, payload, filepath.Join(dir, n.Name), n.clusterPort, strings.Join(routes, ", "))
		if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
			return nil, err
		}
	}
	for _, n := range c.Nodes {
		if err := c.start(n); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// New starts a 3-node cluster for a test and stops it when the test ends.
func New(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	// Built before the start-up's clock runs: on a fresh machine the first build takes ~30 s
	// here and can take minutes on a loaded one while other packages' tests build it too; go
	// test's -timeout bounds it. Start-up itself is given 2 minutes.
	if _, err := Binary(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, tb.TempDir(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Stop()
		if tb.Failed() {
			for _, n := range c.Nodes {
				tb.Logf("%s log (tail):\n%s", n.Name, c.LogTail(n, 40000))
			}
		}
	})
	return c
}

// URL is every node's client URL, comma-separated, as --event-log-url takes it.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

func (c *Cluster) start(n *Node) error {
	logFile, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, "-c", n.conf)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("natstest: start %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait() //nolint:errcheck // killed on purpose, or stopped
		logFile.Close()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return nil
}

// Kill kills node i with SIGKILL, as a crash, and waits for it to be gone.
func (c *Cluster) Kill(i int) {
	n := c.Nodes[i]
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts node i again from its store, on the same ports, after a Kill, and waits
// until JetStream answers on every node.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if err := c.start(c.Nodes[i]); err != nil {
		return err
	}
	return c.WaitReady(ctx)
}

// WaitReady waits until every running node answers JetStream requests and a stream
// replicated on every running node can be created: the cluster has a meta leader that knows
// all its peers (before that, creating a replicated stream fails with "no suitable peers").
func (c *Cluster) WaitReady(ctx context.Context) error {
	live := 0
	for _, n := range c.Nodes {
		select {
		case <-n.done:
		default:
			live++
		}
	}
	for _, n := range c.Nodes {
		select {
		case <-n.done:
			continue // killed
		default:
		}
		var last error
		for {
			last = ping(ctx, n.URL(), live)
			if last == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("natstest: %s not ready: %v\n%s", n.Name, last, c.LogTail(n, 2000))
			case <-n.done:
				return fmt.Errorf("natstest: %s exited:\n%s", n.Name, c.LogTail(n, 2000))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// ping asks the node for account information, then creates and deletes a probe stream with
// the given replicas.
func ping(ctx context.Context, url string, replicas int) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err = js.AccountInfo(ctx); err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "NATSTEST_READY", Subjects: []string{"natstest.ready"},
		Replicas: replicas, Storage: jetstream.MemoryStorage}); err != nil {
		return err
	}
	return js.DeleteStream(ctx, "NATSTEST_READY")
}

// Stop kills every node. The stores stay in the directory given to Start.
func (c *Cluster) Stop() {
	for i := range c.Nodes {
		c.Kill(i)
	}
}

// LogTail returns the last bytes of a node's log, for failure reports.
func (c *Cluster) LogTail(n *Node, bytes int) string {
	data, err := os.ReadFile(n.logPath)
	if err != nil {
		return err.Error()
	}
	if len(data) > bytes {
		data = data[len(data)-bytes:]
	}
	return string(data)
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("natstest: no free port"), err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

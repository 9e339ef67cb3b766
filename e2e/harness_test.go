// Package e2e runs flagedge as its operators do: the controlplane and edge binaries as real
// processes on loopback, a real PostgreSQL, and real clients (HTTP, the official SDKs).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// binaries are built once per test run.
var binaries struct {
	controlplane, edge string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flagedge-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binaries.controlplane = filepath.Join(dir, "controlplane")
	binaries.edge = filepath.Join(dir, "edge")
	for out, pkg := range map[string]string{binaries.controlplane: "./controlplane/cmd/controlplane", binaries.edge: "./edge/cmd/edge"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = ".."
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, b)
			os.Exit(1)
		}
	}
	// Every control plane the tests start hashes console passwords at bcrypt's least cost: the
	// production cost, 12, spends a quarter of a second of a core on each start, login and
	// bootstrap.
	if err := os.Setenv("FLAGEDGE_BCRYPT_COST", "4"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := pgtest.Main(m, postgres.Migrate)
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is a running binary.
type process struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

func start(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{t: t, name: name, cmd: exec.Command(bin, args...), logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.logs.String())
		}
	})
	return p
}

// stop sends SIGTERM and waits for a graceful exit.
func (p *process) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if !p.cmd.ProcessState.Success() {
			p.t.Errorf("%s exited with %v after SIGTERM:\n%s", p.name, p.cmd.ProcessState, p.logs.String())
		}
	case <-time.After(20 * time.Second):
		p.t.Errorf("%s did not stop within 20s of SIGTERM", p.name)
		p.kill()
	}
}

// kill sends SIGKILL and waits.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// listening waits for the process's "… listening" log line and returns its fields: the
// binaries are started on port 0 and say which addresses they bound, so no port is ever
// picked and then lost to another process.
func (p *process) listening(msg string) map[string]any {
	p.t.Helper()
	// Start-up (migrations included) is given a minute: a wait, not a measure, and a loaded
	// machine running several packages' tests at once may take many seconds.
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.logs.String(), "\n") {
			var entry map[string]any
			if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == msg {
				return entry
			}
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s exited before listening:\n%s", p.name, p.logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	p.t.Fatalf("%s did not log %q", p.name, msg)
	return nil
}

// stack is a control plane with its database and bootstrapped project.
type stack struct {
	t                  *testing.T
	dbURL              string
	cp                 *process
	httpAddr, grpcAddr string
	projectID          int64
	token, personal    string
	secret             string
	geoipDB            string
	cpArgs             []string // extra flags of the control plane's serve
}

func newStack(t *testing.T, cpArgs ...string) *stack {
	t.Helper()
	s := &stack{t: t, dbURL: pgtest.NewDatabase(t), httpAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", geoipDB: geoiptest.MustWrite(t),
		cpArgs: cpArgs}
	s.bootstrap()
	s.startControlPlane()
	return s
}

// bootstrap creates the project and keys in the stack's database.
func (s *stack) bootstrap() {
	t := s.t
	t.Helper()
	out, err := exec.Command(binaries.controlplane, "bootstrap", "--database-url", s.dbURL, "--email", "ops@example.com", "--bcrypt-cost", "4").Output()
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	var keys struct {
		ProjectID      int64  `json:"project_id"`
		ProjectAPIKey  string `json:"project_api_key"`
		PersonalAPIKey string `json:"personal_api_key"`
		SecretAPIKey   string `json:"secret_api_key"`
	}
	if err := json.Unmarshal(out, &keys); err != nil {
		t.Fatalf("bootstrap printed %q: %v", out, err)
	}
	s.projectID, s.token, s.personal, s.secret = keys.ProjectID, keys.ProjectAPIKey, keys.PersonalAPIKey, keys.SecretAPIKey
}

// startControlPlane starts the control plane with extra flags: on new ports the first time,
// on the same ones after a stop (edges reconnect to its address).
func (s *stack) startControlPlane(extra ...string) {
	s.t.Helper()
	s.cp = start(s.t, "controlplane", binaries.controlplane, slices.Concat([]string{"serve", "--database-url", s.dbURL,
		"--http-addr", s.httpAddr, "--grpc-addr", s.grpcAddr, "--log-level", "info", "--drain-delay", "0s"}, s.cpArgs, extra)...)
	addrs := s.cp.listening("control plane listening")
	s.httpAddr, s.grpcAddr = addrs["http_addr"].(string), addrs["grpc_addr"].(string)
	waitFor(s.t, "control plane ready", func() bool { return status("http://"+s.httpAddr+"/_ready") == 200 })
}

// edge is a running edge.
type edge struct {
	*process
	url        string
	metricsURL string // its /metrics, on a listener of its own
	dataDir    string
	addr       string
}

// startEdge starts an edge with extra flags; dataDir "" gives it a new one.
func (s *stack) startEdge(name, dataDir string, waitReady bool, extra ...string) *edge {
	s.t.Helper()
	if dataDir == "" {
		dataDir = s.t.TempDir()
	}
	e := &edge{dataDir: dataDir}
	args := []string{"--http-addr", "127.0.0.1:0", "--control-plane", s.grpcAddr,
		"--data-dir", dataDir, "--geoip-db", s.geoipDB, "--edge-id", name, "--log-level", "info", "--drain-delay", "0s"}
	if !slices.Contains(extra, "--edge-token") {
		args = append(args, "--edge-token", s.edgeToken(name))
	}
	if !slices.Contains(extra, "--metrics-addr") {
		args = append(args, "--metrics-addr", "127.0.0.1:0") // several edges run at once
	}
	args = append(args, extra...)
	e.process = start(s.t, name, binaries.edge, args...)
	e.addr = e.listening("edge listening")["http_addr"].(string)
	e.url = "http://" + e.addr
	if addr, ok := e.listening("metrics listening")["metrics_addr"].(string); ok {
		e.metricsURL = "http://" + addr + "/metrics"
	}
	if waitReady {
		waitFor(s.t, name+" ready", func() bool { return status(e.url+"/_ready") == 200 })
	}
	return e
}

// edgeToken issues a credential for an edge (named uniquely, as a restarted edge may get
// its own) and returns the token.
func (s *stack) edgeToken(name string) string {
	s.t.Helper()
	return s.namedEdgeToken(fmt.Sprintf("%s-%d", name, edgeSeq.Add(1)))
}

// namedEdgeToken issues a credential for the edge named name and returns the token.
func (s *stack) namedEdgeToken(name string) string {
	s.t.Helper()
	out, err := exec.Command(binaries.controlplane, "edges", "create", "--database-url", s.dbURL, "--name", name).Output()
	if err != nil {
		s.t.Fatalf("edges create: %v", err)
	}
	var created struct {
		EdgeToken string `json:"edge_token"`
	}
	if err := json.Unmarshal(out, &created); err != nil || created.EdgeToken == "" {
		s.t.Fatalf("edges create printed %q: %v", out, err)
	}
	return created.EdgeToken
}

var edgeSeq atomic.Int64

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

func status(url string) int {
	resp, err := client.Get(url)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// call sends a JSON request and decodes a JSON answer.
func call(t *testing.T, method, url, bearer string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: bad JSON %q", method, url, raw)
		}
	}
	return resp.StatusCode, out
}

// createFlag creates a flag through the management API and returns its id.
func (s *stack) createFlag(body map[string]any) int64 {
	s.t.Helper()
	code, out := call(s.t, "POST", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/", s.httpAddr, s.projectID), s.personal, body)
	if code != 201 {
		s.t.Fatalf("create flag: %d %v", code, out)
	}
	return int64(out["id"].(float64))
}

func (s *stack) patchFlag(id int64, body map[string]any) {
	s.t.Helper()
	code, out := call(s.t, "PATCH", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/%d/", s.httpAddr, s.projectID, id), s.personal, body)
	if code != 200 {
		s.t.Fatalf("patch flag: %d %v", code, out)
	}
}

// decide asks an edge for flags (decide v3) and returns the whole answer.
func (s *stack) decide(e *edge, body map[string]any) map[string]any {
	s.t.Helper()
	if body["api_key"] == nil {
		body["api_key"] = s.token
	}
	code, out := call(s.t, "POST", e.url+"/decide/?v=3", "", body)
	if code != 200 {
		s.t.Fatalf("decide: %d %v", code, out)
	}
	return out
}

func featureFlags(answer map[string]any) map[string]any {
	ff, _ := answer["featureFlags"].(map[string]any)
	return ff
}

// flagEnabled reads a flag's enabled from a /flags?v=2 answer.
func flagEnabled(answer map[string]any, key string) bool {
	all, _ := answer["flags"].(map[string]any)
	f, _ := all[key].(map[string]any)
	return f["enabled"] == true
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// openDB connects to a test database directly, for checks the API does not offer.
func openDB(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func execOutput(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	return string(out), err
}

// load sends batches of events with known uuids to edges until stopped, and keeps the uuids
// of the batches an edge acknowledged.
type load struct {
	mu    sync.Mutex
	acked []string
	stop  chan struct{}
	wg    sync.WaitGroup
}

// startLoad sends batches of size events named event to each edge URL, one batch per pace
// per edge, at most 5,000 batches per edge.
func (s *stack) startLoad(urls []string, event string, size int, pace time.Duration) *load {
	l := &load{stop: make(chan struct{})}
	for _, u := range urls {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for range 5000 {
				select {
				case <-l.stop:
					return
				case <-time.After(pace):
				}
				ids := make([]string, size)
				batch := make([]any, size)
				for j := range size {
					ids[j] = uuid.NewString()
					batch[j] = map[string]any{"event": event, "distinct_id": fmt.Sprintf("u%d", j), "uuid": ids[j]}
				}
				if code, _ := callQuiet("POST", u+"/batch/", map[string]any{"api_key": s.token, "batch": batch}); code == 200 {
					l.mu.Lock()
					l.acked = append(l.acked, ids...)
					l.mu.Unlock()
				}
			}
		}()
	}
	return l
}

// waitAcked waits until at least n events were acknowledged: tests that break something
// "in the middle of" a load wait for the load to be under way, not for a fixed time that a
// slower machine may spend starting it.
func (l *load) waitAcked(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d events acknowledged", n), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.acked) >= n
	})
}

// finish stops the load and returns the acknowledged uuids.
func (l *load) finish() []string {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

// storedOnce waits until the acknowledged events of name are stored and counts them: stored
// rows, duplicates, and acknowledged uuids missing.
func (s *stack) storedOnce(name string, acked []string) (stored, duplicates, missing int) {
	s.t.Helper()
	waitFor(s.t, "acknowledged events stored", func() bool { return s.eventCount(name) >= len(acked) })
	var distinct int
	if err := openDB(s.t, s.dbURL).QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM events WHERE event = $2), (SELECT count(DISTINCT uuid) FROM events WHERE event = $2),
		(SELECT count(*) FROM unnest($1::uuid[]) AS a(id) LEFT JOIN events e ON e.uuid = a.id WHERE e.uuid IS NULL)`, acked, name).Scan(&stored, &distinct, &missing); err != nil {
		s.t.Fatal(err)
	}
	if missing != 0 || stored != distinct {
		s.t.Errorf("%s: %d acknowledged, %d missing, %d stored for %d uuids", name, len(acked), missing, stored, distinct)
	}
	return stored, stored - distinct, missing
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The sse scenario measures OFREP's change streams on one edge: the memory that many open
// streams cost it, and how long a flag change takes to reach every one of them. Its own
// throwaway PostgreSQL, control plane and edge (--ofrep-streams): `go run ./bench --scenario
// sse [--sse-streams 10000]`.

// sseRounds is how many flag changes the scenario times.
const sseRounds = 5

// sseResult is what the scenario measured.
type sseResult struct {
	Streams                   int       `json:"streams"`
	RSSBeforeMB, RSSOpenMB    float64   `json:"-"`
	PerStreamKB               float64   `json:"-"`
	P50Ms, P99Ms, MaxMs       float64   `json:"-"`
	RoundMaxMs                []float64 `json:"-"`
	OpenSeconds               float64   `json:"-"`
	MissedEvents, LostStreams int64     `json:"-"`
}

// sseClients are the open streams, each read by a goroutine that notes when events arrive.
type sseClients struct {
	conns    []net.Conn
	arrivals []atomic.Int64 // unix ns of each stream's last refetchEvaluation event
	got      atomic.Int64   // events received in the current round
	lost     atomic.Int64   // streams that ended
}

func sseScenario(cfg config) error {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	n := cfg.sseStreams
	ctx := context.Background()
	stack, err := startSelfStack(ctx, stackOptions{name: "sse", edgeBin: cfg.edgeBin,
		edgeArgs: []string{"--ofrep-streams", "--ofrep-stream-max", strconv.Itoa(n + 100), "--ofrep-stream-max-per-ip", strconv.Itoa(n + 100)}})
	if err != nil {
		return err
	}
	defer stack.close()
	defer stack.keepLogs(cfg.out, "sse-")
	bcfg := cfg
	bcfg.controlPlane, bcfg.edges, bcfg.personalKey = stack.controlPlaneURL(), []string{"http://" + stack.edge.httpAddr}, stack.personalKey
	b, err := newBench(bcfg)
	if err != nil {
		return err
	}
	url, err := sseStreamURL(stack.edge.httpAddr, b.project.token)
	if err != nil {
		return err
	}
	pid := stack.edge.cmd.Process.Pid
	time.Sleep(2 * time.Second)
	res := &sseResult{Streams: n}
	if res.RSSBeforeMB, err = vmRSSMB(pid); err != nil {
		return err
	}
	start := time.Now()
	c, err := openSSEClients(url, n)
	if err != nil {
		return err
	}
	defer c.close()
	res.OpenSeconds = time.Since(start).Seconds()
	time.Sleep(3 * time.Second) // let the edge settle: goroutines parked, buffers returned
	if res.RSSOpenMB, err = vmRSSMB(pid); err != nil {
		return err
	}
	res.PerStreamKB = (res.RSSOpenMB - res.RSSBeforeMB) * 1024 / float64(n)

	id := b.project.flags["kill-switch"]
	var all []float64
	for round := range sseRounds {
		progress(fmt.Sprintf("sse: change %d of %d to %d streams", round+1, sseRounds, n))
		c.got.Store(0)
		sent := time.Now()
		if err := b.api.call("PATCH", fmt.Sprintf("/api/projects/%d/feature_flags/%d/", b.project.id, id),
			map[string]any{"filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100 * (round % 2)}}}}, nil); err != nil {
			return err
		}
		deadline := time.Now().Add(10 * time.Second)
		for c.got.Load() < int64(n) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		res.MissedEvents += int64(n) - c.got.Load()
		var roundMax float64
		for i := range c.arrivals {
			at := c.arrivals[i].Load()
			if at < sent.UnixNano() {
				continue // missed: counted above
			}
			ms := float64(at-sent.UnixNano()) / 1e6
			all = append(all, ms)
			roundMax = max(roundMax, ms)
		}
		res.RoundMaxMs = append(res.RoundMaxMs, roundMax)
		time.Sleep(500 * time.Millisecond)
	}
	res.LostStreams = c.lost.Load()
	if len(all) == 0 {
		return errors.New("sse: no event reached any stream")
	}
	slices.Sort(all)
	res.P50Ms, res.P99Ms, res.MaxMs = all[len(all)/2], all[min(len(all)-1, len(all)*99/100)], all[len(all)-1]

	md := res.markdown()
	fmt.Print("\n" + md)
	return os.WriteFile(filepath.Join(cfg.out, "sse.md"), []byte(md), 0o644)
}

func (r *sseResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## OFREP change streams: %d open streams on one edge\n\nmachine: %s\n\n", r.Streams, machine())
	fmt.Fprintf(&b, "The control plane, the edge (--ofrep-streams) and PostgreSQL run as processes built from this tree; the bench process opens "+
		"%d streams (GET /ofrep/v1/stream with the URL a bulk evaluation announced, plain HTTP/1.1 over loopback, one goroutine reading each), "+
		"then changes a flag through the management API %d times. Latency is from sending the PATCH to the refetchEvaluation event read by a "+
		"stream: the control plane's write and notification, the snapshot's way to the edge and the fan-out are all in it.\n\n", r.Streams, sseRounds)
	fmt.Fprintf(&b, "| measure | value |\n|---|---:|\n")
	fmt.Fprintf(&b, "| streams opened in | %.1f s |\n", r.OpenSeconds)
	fmt.Fprintf(&b, "| edge RSS before the streams | %.1f MB |\n", r.RSSBeforeMB)
	fmt.Fprintf(&b, "| edge RSS with the streams open | %.1f MB |\n", r.RSSOpenMB)
	fmt.Fprintf(&b, "| per stream | %.1f KB |\n", r.PerStreamKB)
	fmt.Fprintf(&b, "| change → event, p50 | %.1f ms |\n", r.P50Ms)
	fmt.Fprintf(&b, "| change → event, p99 | %.1f ms |\n", r.P99Ms)
	fmt.Fprintf(&b, "| change → event, max | %.1f ms |\n", r.MaxMs)
	fmt.Fprintf(&b, "| change → last stream, per change | %s ms |\n", joinFloats(r.RoundMaxMs, 1))
	fmt.Fprintf(&b, "| events missed / streams lost | %d / %d |\n", r.MissedEvents, r.LostStreams)
	fmt.Fprintf(&b, "\ngoals:\n- %d streams cost the edge < 200 MB: %s\n- a change reaches all of them in < 1 s: %s\n", r.Streams,
		verdict(r.RSSOpenMB < 200, fmt.Sprintf("%.1f MB", r.RSSOpenMB)),
		verdict(r.MaxMs < 1000 && r.MissedEvents == 0, fmt.Sprintf("slowest %.1f ms, %d missed", r.MaxMs, r.MissedEvents)))
	return b.String()
}

// joinFloats writes fs with the given decimals, separated by commas.
func joinFloats(fs []float64, decimals int) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = strconv.FormatFloat(f, 'f', decimals, 64)
	}
	return strings.Join(parts, ", ")
}

// sseStreamURL asks the edge for a bulk evaluation and returns the stream it announces.
func sseStreamURL(edgeAddr, token string) (string, error) {
	req, err := http.NewRequest("POST", "http://"+edgeAddr+"/ofrep/v1/evaluate/flags", strings.NewReader(`{"context":{"targetingKey":"sse-bench"}}`))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		EventStreams []struct {
			URL string `json:"url"`
		} `json:"eventStreams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.EventStreams) != 1 {
		return "", fmt.Errorf("bulk evaluation: %d, %v, streams %v", resp.StatusCode, err, out.EventStreams)
	}
	return out.EventStreams[0].URL, nil
}

// openSSEClients opens n streams to url, 64 at a time, and reads each in a goroutine.
func openSSEClients(url string, n int) (*sseClients, error) {
	hostPath := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(hostPath, "/")
	request := []byte("GET /" + path + " HTTP/1.1\r\nHost: " + host + "\r\nAccept: text/event-stream\r\n\r\n")
	c := &sseClients{conns: make([]net.Conn, n), arrivals: make([]atomic.Int64, n)}
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex // guards firstErr
	var firstErr error
	for i := range n {
		if i%500 == 0 {
			progress(fmt.Sprintf("sse: opening streams %d of %d", i, n))
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := c.open(i, host, request)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			go c.read(i, r)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		c.close()
		return nil, fmt.Errorf("open streams: %w", firstErr)
	}
	return c, nil
}

func (c *sseClients) open(i int, host string, request []byte) (*bufio.Reader, error) {
	conn, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.conns[i] = conn
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(request); err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(conn, 512)
	status, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		return nil, fmt.Errorf("stream %d: %q %v", i, status, err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if line == "\r\n" {
			break
		}
	}
	conn.SetDeadline(time.Time{})
	return r, nil
}

func (c *sseClients) read(i int, r *bufio.Reader) {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			c.lost.Add(1)
			return
		}
		if strings.HasPrefix(string(line), "data: ") {
			c.arrivals[i].Store(time.Now().UnixNano())
			c.got.Add(1)
		}
	}
}

func (c *sseClients) close() {
	for _, conn := range c.conns {
		if conn != nil {
			conn.Close()
		}
	}
}

// vmRSSMB is a process's resident memory from /proc/PID/status, in MB.
func vmRSSMB(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

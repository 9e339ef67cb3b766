package main

// The hostile scenario measures what the worst input the issue names (#23) takes of an edge:
// `go run ./bench --scenario hostile`. It is self-contained (its own PostgreSQL, control
// plane and edge, built from the tree or --edge-bin) and has two parts:
//
//   - memory: four 20 MB /batch bodies of tiny events and four 1 MiB /decide bodies of tiny
//     person properties, sent together; the edge's peak resident memory (VmHWM, reset just
//     before) against its resident size before, and every request's answer;
//   - connections: /decide's latency alone, then with 10,000 connections that each sent half
//     a request's headers and nothing more, and how long the edge held those connections.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	hostileBatchBytes  = 20 << 20
	hostileDecideBytes = 1 << 20
	hostileBodies      = 4
	hostileIdleConns   = 10_000
	hostileProbes      = 2000 // /decide requests per latency measurement
)

type hostileResult struct {
	RSSBeforeMB       float64        `json:"rss_before_mb"`
	PeakMB            float64        `json:"peak_rss_mb"`
	PeakGrowthMB      float64        `json:"peak_growth_mb"`
	Answers           map[string]int `json:"answers"` // "path status" → count
	DecideIdleP50Us   float64        `json:"decide_idle_p50_us"`
	DecideIdleP99Us   float64        `json:"decide_idle_p99_us"`
	DecideSlowP50Us   float64        `json:"decide_with_idle_conns_p50_us"`
	DecideSlowP99Us   float64        `json:"decide_with_idle_conns_p99_us"`
	IdleConnsOpened   int            `json:"idle_conns_opened"`
	IdleConnsClosedIn float64        `json:"idle_conns_all_closed_within_s"`
	StillOpen         int            `json:"idle_conns_still_open_after_15s"`
}

func hostileScenario(cfg config) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := startSelfStack(ctx, stackOptions{name: "hostile", edgeBin: cfg.edgeBin})
	if err != nil {
		return err
	}
	defer s.close()
	_, token, err := s.project()
	if err != nil {
		return err
	}
	edge := s.edge.httpAddr
	probe := `{"api_key":"` + token + `","distinct_id":"probe"}`
	if err := hostileWaitProject(edge, probe); err != nil {
		return err
	}
	pid := s.edge.cmd.Process.Pid
	var res hostileResult

	progress("hostile: memory")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset the edge's VmHWM: %w", err)
	}
	before, _, err := procMemory(pid)
	if err != nil {
		return err
	}
	res.Answers = map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	send := func(path, prefix, item string, count int, suffix string) {
		defer wg.Done()
		status := hostileSend(edge, path, prefix, item, count, suffix)
		mu.Lock()
		res.Answers[path+" "+status]++
		mu.Unlock()
	}
	for range hostileBodies {
		wg.Add(2)
		go send("/batch/", `{"api_key":"`+token+`","batch":[`, `{"event":"e","distinct_id":"d"}`, (hostileBatchBytes-200)/32, `]}`)
		go send("/decide/?v=3", `{"api_key":"`+token+`","distinct_id":"d","person_properties":{`, `"p":1`, (hostileDecideBytes-200)/6, `}}`)
	}
	wg.Wait()
	_, peak, err := procMemory(pid)
	if err != nil {
		return err
	}
	res.RSSBeforeMB, res.PeakMB, res.PeakGrowthMB = mb(before), mb(peak), mb(peak-before)

	progress("hostile: /decide alone")
	if res.DecideIdleP50Us, res.DecideIdleP99Us, err = hostileDecideLatency(edge, probe); err != nil {
		return err
	}
	progress(fmt.Sprintf("hostile: opening %d half-sent requests", hostileIdleConns))
	conns, opened := hostileHalfSent(edge, hostileIdleConns)
	res.IdleConnsOpened = len(conns)
	closed := make(chan time.Duration, len(conns))
	for _, c := range conns {
		go func() {
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			_, err := io.Copy(io.Discard, c) // until the edge closes it
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				closed <- -1 // still open
			} else {
				closed <- time.Since(opened)
			}
			c.Close()
		}()
	}
	progress("hostile: /decide with the half-sent requests open")
	if res.DecideSlowP50Us, res.DecideSlowP99Us, err = hostileDecideLatency(edge, probe); err != nil {
		return err
	}
	var longest time.Duration
	for range conns {
		d := <-closed
		if d < 0 {
			res.StillOpen++
		}
		longest = max(longest, d)
	}
	res.IdleConnsClosedIn = longest.Seconds()
	progress("")
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(out))
	return nil
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// procMemory reads a process's VmRSS and VmHWM in bytes.
func procMemory(pid int) (rss, hwm int64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB")), 10, 64)
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}

// hostileWaitProject waits for the edge to know the project (its snapshot arrives after start).
func hostileWaitProject(edge, body string) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, status, err := hostileRequest(edge, "/decide/?v=3", body); err == nil && status == 200 {
			return nil
		}
	}
	return errors.New("the edge does not know the project after 30 s")
}

// hostileSend posts prefix, count items separated by commas, and suffix to path, writing the
// body as it goes (the sender holds one item), and returns the answer's status, or the error.
func hostileSend(edge, path, prefix, item string, count int, suffix string) string {
	c, err := net.Dial("tcp", edge)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(120 * time.Second))
	n := len(prefix) + count*(len(item)+1) - 1 + len(suffix)
	answer := make(chan string, 1)
	go func() {
		r := bufio.NewReader(c)
		line, err := r.ReadString('\n')
		if err != nil {
			answer <- "no answer: " + err.Error()
			return
		}
		if f := strings.Fields(line); len(f) >= 2 {
			answer <- f[1]
			return
		}
		answer <- "bad answer " + line
	}()
	w := bufio.NewWriterSize(c, 256<<10)
	fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, n, prefix)
	for i := range count {
		if i > 0 {
			w.WriteByte(',')
		}
		if _, err := w.WriteString(item); err != nil {
			break // the edge answered and closed: the answer says why
		}
	}
	w.WriteString(suffix)
	w.Flush()
	return <-answer
}

// hostileRequest makes one request on a new connection and returns its latency and status.
func hostileRequest(edge, path, body string) (time.Duration, int, error) {
	start := time.Now()
	c, err := net.Dial("tcp", edge)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", path, len(body), body)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("bad answer %q", line)
	}
	status, _ := strconv.Atoi(f[1])
	return time.Since(start), status, nil
}

// hostileDecideLatency measures /decide's p50 and p99 over hostileProbes requests, each on a
// new connection (as a new client would), four at a time.
func hostileDecideLatency(edge, body string) (p50, p99 float64, err error) {
	lat := make([]time.Duration, hostileProbes)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < hostileProbes; i += 4 {
				d, status, err := hostileRequest(edge, "/decide/?v=3", body)
				if err == nil && status != 200 {
					err = fmt.Errorf("/decide: %d", status)
				}
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
				lat[i] = d
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	slices.Sort(lat)
	us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Microsecond) }
	return us(0.5), us(0.99), nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// hostileHalfSent opens n connections that each send the start of a request's headers and
// nothing more, and returns them with when the last was opened.
func hostileHalfSent(edge string, n int) ([]net.Conn, time.Time) {
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", edge)
		if err != nil {
			break // out of descriptors or ports: measure with what was opened
		}
		c.Write([]byte("POST /decide/ HTTP/1.1\r\nHost: edge\r\nContent-Le"))
		conns = append(conns, c)
	}
	return conns, time.Now()
}

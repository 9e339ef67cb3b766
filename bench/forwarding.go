package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/gzip"
)

// The forwarding scenario measures how fast a control plane forwards captured events to an
// event destination (PostHog's /batch/): a self-contained stack (its own PostgreSQL, control
// plane started with --forward-allow-private, and edge), a receiver on 127.0.0.1 in this process
// that decodes each gzip batch and answers 200 at once (a PostHog that is never the
// bottleneck), and --forward-events events sent to the edge's /batch/ in batches of 100 by 8
// senders. It reports the capture rate (edge acknowledgements), the forwarding rate (first to
// last event at the receiver), the lag from the last acknowledgement to the last arrival, and
// the destination's lag at its worst (the control plane's flagedge_controlplane_forward_lag_seconds,
// the age of the oldest queued event, sampled every half second).
// It needs no running flagedge: `go run ./bench --scenario forwarding --forward-events 100000`.

// forwardingResult is the scenario's report.
type forwardingResult struct {
	Events            int     `json:"events"`
	Received          int     `json:"received"`
	Duplicates        int     `json:"duplicates"`
	Requests          int64   `json:"requests"`
	CaptureSeconds    float64 `json:"capture_seconds"`
	CapturePerSecond  float64 `json:"capture_events_per_second"`
	ForwardSeconds    float64 `json:"forward_seconds"`
	ForwardPerSecond  float64 `json:"forward_events_per_second"`
	DrainAfterCapture float64 `json:"drain_after_capture_seconds"`
	MaxLag            float64 `json:"max_lag_seconds"`
}

// maxLag samples the control plane's forwarding lag every half second until stop is closed,
// and then answers the largest it saw; it gives up when ctx ends.
func maxLag(ctx context.Context, controlPlaneURL string, stop <-chan struct{}) <-chan float64 {
	out := make(chan float64, 1)
	go func() {
		worst := 0.0
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			if m, err := scrape(controlPlaneURL); err == nil {
				for series, v := range m {
					if strings.HasPrefix(series, "flagedge_controlplane_forward_lag_seconds{") {
						worst = max(worst, v)
					}
				}
			}
			select {
			case <-stop:
				out <- worst
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// forwardingScenario is `--scenario forwarding`.
func forwardingScenario(cfg config) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := startSelfStack(ctx, stackOptions{name: "forwarding", controlPlaneArgs: []string{"--forward-allow-private"}})
	if err != nil {
		return err
	}
	defer s.close()
	projectID, token, err := s.project()
	if err != nil {
		return err
	}

	// The receiver: every uuid it was sent, and when the first and last arrived.
	var mu sync.Mutex
	seen := map[string]int{}
	var first, last time.Time
	var requests atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, `{"status": 400}`, http.StatusBadRequest)
			return
		}
		var body struct {
			Batch []struct {
				UUID string `json:"uuid"`
			} `json:"batch"`
		}
		if err := json.NewDecoder(zr).Decode(&body); err != nil {
			http.Error(w, `{"status": 400}`, http.StatusBadRequest)
			return
		}
		now := time.Now()
		mu.Lock()
		if first.IsZero() {
			first = now
		}
		last = now
		for _, e := range body.Batch {
			seen[e.UUID]++
		}
		mu.Unlock()
		w.Write([]byte(`{"status": 1}`)) //nolint:errcheck // the client's problem
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()

	if err := s.api().call("POST", fmt.Sprintf("/api/projects/%d/event_destinations/", projectID),
		map[string]any{"url": "http://" + ln.Addr().String(), "api_key": "phc_bench"}, nil); err != nil {
		return err
	}

	stopLag := make(chan struct{})
	lag := maxLag(ctx, s.controlPlaneURL(), stopLag)
	n := cfg.forwardEvents
	edgeURL := "http://" + s.edge.httpAddr + "/batch/"
	var next atomic.Int64
	var sendErr atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				from := int(next.Add(100)) - 100
				if from >= n {
					return
				}
				batch := make([]map[string]any, 0, 100)
				for j := from; j < min(from+100, n); j++ {
					batch = append(batch, map[string]any{"event": "$pageview", "distinct_id": fmt.Sprintf("user-%d", j%cfg.users),
						"uuid": uuid.NewString(), "properties": map[string]any{"$current_url": "https://shop.example.com/p/42", "n": j}})
				}
				if err := postBatch(edgeURL, token, batch); err != nil {
					sendErr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	captured := time.Now()
	if err, ok := sendErr.Load().(error); ok {
		return fmt.Errorf("capture: %w", err)
	}
	deadline := captured.Add(10 * time.Minute)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		progress(fmt.Sprintf("forwarding: %d/%d events at the receiver", got, n))
		if got >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stopLag)
	worstLag := <-lag
	mu.Lock()
	res := forwardingResult{MaxLag: worstLag, Events: n, Received: len(seen), Requests: requests.Load(),
		CaptureSeconds: captured.Sub(start).Seconds(), ForwardSeconds: last.Sub(first).Seconds(),
		DrainAfterCapture: last.Sub(captured).Seconds()}
	for _, c := range seen {
		res.Duplicates += c - 1
	}
	mu.Unlock()
	res.CapturePerSecond = float64(n) / res.CaptureSeconds
	if res.ForwardSeconds > 0 {
		res.ForwardPerSecond = float64(res.Received) / res.ForwardSeconds
	}
	md := fmt.Sprintf(`| forwarding %d events to a /batch/ receiver | |
|---|---|
| captured at the edge (8 senders, batches of 100) | %.0f events/s (%.1f s) |
| forwarded, first to last at the receiver | %.0f events/s (%.1f s, %d requests) |
| last arrival after the last acknowledgement | %.1f s |
| the destination's lag at its worst (oldest queued event, every 0.5 s) | %.1f s |

%d of %d events received, %d duplicates.
`, n, res.CapturePerSecond, res.CaptureSeconds, res.ForwardPerSecond, res.ForwardSeconds, res.Requests, res.DrainAfterCapture,
		res.MaxLag, res.Received, n, res.Duplicates)
	fmt.Print("\n" + md)
	if err := writeScenarioReport(cfg.out, "forwarding", "result", res, md); err != nil {
		return err
	}
	if res.Received != n {
		return fmt.Errorf("only %d of %d events were forwarded", res.Received, n)
	}
	fmt.Printf("\nreport: %s/forwarding.md, forwarding.json\n", cfg.out)
	return nil
}

// postBatch sends one /batch/ request and expects 200.
func postBatch(url, token string, batch []map[string]any) error {
	body, err := json.Marshal(map[string]any{"api_key": token, "batch": batch})
	if err != nil {
		return err
	}
	resp, err := httpClient.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/batch/ answered %d", resp.StatusCode)
	}
	return nil
}

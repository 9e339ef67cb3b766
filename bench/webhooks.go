package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// The webhooks scenario measures how long a flag change takes to reach a webhook receiver:
// a self-contained stack (its own PostgreSQL and control plane, started with
// --webhook-allow-private), a receiver on 127.0.0.1 in this process, a hook subscribed to
// feature_flag.updated, and webhooksWrites flag updates through the API one after the other.
// For each, the time from sending the PATCH (the commit happens before its answer) and from
// its answer to the receiver having the delivery; and the writes' own latency. It needs no
// running flagedge: `go run ./bench --scenario webhooks`.

const (
	webhooksWrites = 100
	webhooksPause  = 20 * time.Millisecond
)

// webhooksResult is the scenario's report.
type webhooksResult struct {
	Writes           int     `json:"writes"`
	Delivered        int     `json:"delivered"`
	FromRequestP50Ms float64 `json:"from_request_p50_ms"`
	FromRequestP99Ms float64 `json:"from_request_p99_ms"`
	FromAnswerP50Ms  float64 `json:"from_answer_p50_ms"`
	FromAnswerP99Ms  float64 `json:"from_answer_p99_ms"`
	WriteP50Ms       float64 `json:"write_p50_ms"`
	WriteP99Ms       float64 `json:"write_p99_ms"`
}

// webhooksScenario is `--scenario webhooks`.
func webhooksScenario(cfg config) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := startSelfStack(ctx, stackOptions{name: "webhooks", noEdge: true, controlPlaneArgs: []string{"--webhook-allow-private"}})
	if err != nil {
		return err
	}
	defer s.close()
	projectID, _, err := s.project()
	if err != nil {
		return err
	}

	// The receiver: when each flag name arrived.
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Data struct {
				Name string `json:"name"`
			} `json:"data"`
		}
		err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body)
		now := time.Now()
		if err == nil {
			mu.Lock()
			arrived[body.Data.Name] = now
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()

	a, proj := s.api(), fmt.Sprintf("/api/projects/%d", projectID)
	var hook, flag struct {
		ID int64 `json:"id"`
	}
	if err := a.call("POST", proj+"/webhooks/", map[string]any{"url": "http://" + ln.Addr().String() + "/hook",
		"events": []string{"feature_flag.updated"}, "secret": "bench-secret-0123456789"}, &hook); err != nil {
		return err
	}
	if err := a.call("POST", proj+"/feature_flags/", map[string]any{"key": "webhooked"}, &flag); err != nil {
		return err
	}
	sent, answered := map[string]time.Time{}, map[string]time.Time{}
	var writes []float64
	for i := range webhooksWrites {
		progress(fmt.Sprintf("webhooks: write %d/%d", i+1, webhooksWrites))
		name := fmt.Sprintf("write-%d", i)
		start := time.Now()
		if err := a.call("PATCH", fmt.Sprintf(proj+"/feature_flags/%d/", flag.ID), map[string]any{"name": name}, nil); err != nil {
			return err
		}
		end := time.Now()
		sent[name], answered[name] = start, end
		writes = append(writes, ms(end.Sub(start)))
		time.Sleep(webhooksPause)
	}
	_ = waitFor(10*time.Second, func() bool { // a shortfall is reported below
		mu.Lock()
		defer mu.Unlock()
		return len(arrived) >= webhooksWrites
	})
	mu.Lock()
	var fromRequest, fromAnswer []float64
	for name, at := range arrived {
		if s, ok := sent[name]; ok {
			fromRequest = append(fromRequest, ms(at.Sub(s)))
			fromAnswer = append(fromAnswer, ms(at.Sub(answered[name])))
		}
	}
	mu.Unlock()
	res := webhooksResult{Writes: webhooksWrites, Delivered: len(fromRequest),
		FromRequestP50Ms: quantile(fromRequest, 0.5), FromRequestP99Ms: quantile(fromRequest, 0.99),
		FromAnswerP50Ms: quantile(fromAnswer, 0.5), FromAnswerP99Ms: quantile(fromAnswer, 0.99),
		WriteP50Ms: quantile(writes, 0.5), WriteP99Ms: quantile(writes, 0.99)}
	md := fmt.Sprintf(`| webhook delivery, %d flag updates one at a time | p50 | p99 |
|---|---|---|
| PATCH sent → receiver has the delivery | %.1f ms | %.1f ms |
| PATCH answered (committed) → receiver has it | %.1f ms | %.1f ms |
| the PATCH itself | %.1f ms | %.1f ms |

%d of %d writes delivered.
`, res.Writes, res.FromRequestP50Ms, res.FromRequestP99Ms, res.FromAnswerP50Ms, res.FromAnswerP99Ms, res.WriteP50Ms, res.WriteP99Ms,
		res.Delivered, res.Writes)
	fmt.Print("\n" + md)
	if err := writeScenarioReport(cfg.out, "webhooks", "result", res, md); err != nil {
		return err
	}
	if res.Delivered != res.Writes {
		return fmt.Errorf("only %d of %d writes were delivered", res.Delivered, res.Writes)
	}
	fmt.Printf("\nreport: %s/webhooks.md, webhooks.json\n", cfg.out)
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// report is everything a run measured.
type report struct {
	Machine     string            `json:"machine"`
	StartedAt   string            `json:"started_at"`
	Seed        uint64            `json:"seed"`
	Results     []result          `json:"results"`
	Propagation *propagation      `json:"propagation,omitempty"`
	RSS         *rssResult        `json:"rss,omitempty"`
	GoBench     string            `json:"go_benchmarks,omitempty"`
	Targets     map[string]string `json:"targets"`
}

func (r *report) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "flagedge bench — %s, seed %d, %s\n\n", r.Machine, r.Seed, r.StartedAt)
	fmt.Fprintf(&b, "| scenario | mode | req/s | events/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | errors | × baseline |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, res := range r.Results {
		mode := res.Mode
		if res.TargetRate > 0 {
			mode += fmt.Sprintf(" %d/s", res.TargetRate)
		} else {
			mode += fmt.Sprintf(" c=%d", res.Connections)
		}
		var errs int64
		for _, n := range res.Errors {
			errs += n
		}
		ratio := ""
		if res.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", res.Ratio)
		}
		events := ""
		if res.EventsRate > 0 {
			events = fmt.Sprintf("%.0f", res.EventsRate)
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %d | %d | %d | %d | %d | %d | %s |\n", res.Name, mode, res.Throughput, events,
			res.LatencyUs["p50"], res.LatencyUs["p90"], res.LatencyUs["p99"], res.LatencyUs["p99.9"], res.LatencyUs["max"], errs, ratio)
	}
	if p := r.Propagation; p != nil {
		fmt.Fprintf(&b, "\npropagation (PATCH answered → every edge answers the new value), %d rounds: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
			p.Rounds, p.P50Ms, p.P99Ms, p.MaxMs)
	}
	if s := r.RSS; s != nil {
		b.WriteString(s.markdown())
	}
	if len(r.Targets) > 0 {
		fmt.Fprintf(&b, "\ntargets:\n")
		for _, k := range slices.Sorted(maps.Keys(r.Targets)) {
			fmt.Fprintf(&b, "- %s: %s\n", k, r.Targets[k])
		}
	}
	return b.String()
}

// write saves report.json, report.md and the plots (plots.go) in dir.
func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	md := r.table()
	if r.GoBench != "" {
		md += "\nGo micro-benchmarks (-benchmem, one run):\n\n```\n" + r.GoBench + "```\n"
	}
	for name, data := range map[string][]byte{"report.json": raw, "report.md": []byte(md)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	_, err = writePlots(dir, "", r.Results)
	return err
}

// writeScenarioReport writes a self-contained scenario's report into dir: name.json (what it
// measured, under key, with the machine and the time) and name.md (its table, md).
func writeScenarioReport(dir, name, key string, measured any, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(map[string]any{"machine": machine(), "started_at": time.Now().UTC().Format(time.RFC3339), key: measured}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), raw, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644)
}

package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
		fmt.Fprintf(&b, "\nedge RSS holding %d projects × %d flags: %.1f MB (Go heap in use %.1f MB)\n", s.Projects, s.FlagsPerProject, s.RSSMB, s.HeapMB)
	}
	if len(r.Targets) > 0 {
		fmt.Fprintf(&b, "\ntargets:\n")
		for _, k := range slices.Sorted(maps.Keys(r.Targets)) {
			fmt.Fprintf(&b, "- %s: %s\n", k, r.Targets[k])
		}
	}
	return b.String()
}

// write saves report.json, report.md and latency.svg in dir.
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
	for name, data := range map[string][]byte{"report.json": raw, "report.md": []byte(md), "latency.svg": []byte(r.svg())} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// svg draws two panels: latency by percentile (log scale of 1/(1-p)) per scenario, and
// throughput over time per scenario.
func (r *report) svg() string {
	const w, h, pad = 960, 380, 60
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, w, 2*h+20)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`)
	// Panel 1: percentile curve.
	maxLat := 1.0
	for _, res := range r.Results {
		for _, p := range res.Percentiles {
			maxLat = math.Max(maxLat, p[1])
		}
	}
	xOf := func(q float64) float64 { // 0 → 0, 99.99 → 4 on a log of 1/(1-q)
		q = math.Min(q, 99.99)
		return pad + (w-2*pad)*math.Log10(1/(1-q/100))/4
	}
	yOf := func(us float64) float64 {
		return h - pad - (h-2*pad)*math.Log10(math.Max(us, 1))/math.Log10(maxLat*1.2)
	}
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">Latency by percentile (µs, log scale)</text>`, pad)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`,
		pad, h-pad, w-pad, h-pad, pad, pad, pad, h-pad)
	for _, q := range []float64{0, 90, 99, 99.9, 99.99} {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">p%g</text>`, xOf(q), h-pad+15, q)
	}
	for _, us := range []float64{10, 100, 1000, 10000, 100000} {
		if us < maxLat*1.2 {
			fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%g</text><line x1="%d" x2="%d" y1="%.0f" y2="%.0f" stroke="#eee"/>`,
				pad-4, yOf(us)+4, us, pad, w-pad, yOf(us), yOf(us))
		}
	}
	for i, res := range r.Results {
		var pts []string
		for _, p := range res.Percentiles {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(p[0]), yOf(p[1])))
		}
		c := colors[i%len(colors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, c, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`, w-pad-220, pad+12*i, c, res.Name)
	}
	// Panel 2: throughput over time.
	off := h + 20
	maxTP, maxT := 1.0, 1
	for _, res := range r.Results {
		for _, n := range res.PerSecond {
			maxTP = math.Max(maxTP, float64(n))
		}
		maxT = max(maxT, len(res.PerSecond))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14">Requests per second over time (max %.0f)</text>`, pad, off+20, maxTP)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`,
		pad, off+h-pad, w-pad, off+h-pad, pad, off+pad, pad, off+h-pad)
	for i, res := range r.Results {
		var pts []string
		for s, n := range res.PerSecond {
			x := pad + float64(w-2*pad)*float64(s)/float64(max(maxT-1, 1))
			y := float64(off+h-pad) - float64(h-2*pad)*float64(n)/maxTP
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, colors[i%len(colors)], strings.Join(pts, " "))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">seconds</text></svg>`, w/2, off+h-pad+25)
	return b.String()
}

package main

import (
	"strings"
	"testing"
)

// TestPinnedSummary: the ratio is of the medians of the alternating runs, and the goals are
// judged against them.
func TestPinnedSummary(t *testing.T) {
	run := func(server string, rps float64, p99 int64) pinnedRun {
		return pinnedRun{Server: server, result: result{Name: server, Throughput: rps, LatencyUs: map[string]int64{"p99": p99}}}
	}
	r := &pinnedReport{Runs: []pinnedRun{run("bare", 100_000, 300), run("edge", 60_000, 800), run("bare", 80_000, 500), run("edge", 70_000, 1000)}}
	open := run("edge", 5000, 900)
	open.TargetRate, open.LatencyUs["p99.9"] = 5000, 4000
	r.OpenLoop = &open
	r.summarise()
	if r.BareMedian != 90_000 || r.EdgeMedian != 65_000 || r.EdgeP99Us != 900 || r.BareP99Us != 400 {
		t.Fatalf("medians: %+v", r)
	}
	md := r.markdown()
	for _, want := range []string{"met (0.72: edge 65000 req/s, bare 90000 req/s)", "met (edge 900 µs, bare 400 µs × 3 = 1200 µs)", "| open loop at 5000/s: p99 ≤ 1 ms, p99.9 ≤ 5 ms | met ("} {
		if !strings.Contains(md, want) {
			t.Errorf("pinned.md lacks %q:\n%s", want, md)
		}
	}
	if median([]float64{3, 1, 2}, func(x float64) float64 { return x }) != 2 {
		t.Error("median of an odd count")
	}
}

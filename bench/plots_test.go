package main

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func syntheticResult(name string, rps float64, seconds float64, perSecond []int64, p50 int64) result {
	res := result{Name: name, Mode: "closed-loop", Connections: 16, Requests: int64(rps * seconds), Seconds: seconds, Throughput: rps,
		PerSecond: perSecond, LatencyUs: map[string]int64{"p50": p50, "p90": 2 * p50, "p99": 4 * p50, "p99.9": 9 * p50, "max": 20 * p50}}
	for _, q := range []float64{0, 50, 90, 99, 99.9, 99.99, 100} {
		res.Percentiles = append(res.Percentiles, [2]float64{q, float64(p50) * (1 + q/10)})
	}
	return res
}

// TestRateSeriesPartialSecond: the last interval of a run is as long as the run lasted past
// its last whole second; its count becomes a rate over that length, or is left out when it is
// too short to be one — never a drop towards 0.
func TestRateSeriesPartialSecond(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seconds float64
		counts  []int64
		want    []float64
	}{
		{"drain after the deadline left out", 3.01, []int64{1000, 1000, 1000, 12}, []float64{1000, 1000, 1000}},
		{"last 0.6 s scaled", 3.6, []int64{1000, 1000, 1000, 600}, []float64{1000, 1000, 1000, 1000}},
		{"half-second run", 1.5, []int64{1000, 500}, []float64{1000, 1000}},
		{"whole seconds", 2, []int64{1000, 1000}, []float64{1000, 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pts := rateSeries(result{Seconds: tc.seconds, PerSecond: tc.counts})
			var got []float64
			for _, p := range pts {
				got = append(got, math.Round(p.Y*1000)/1000)
				if p.X > tc.seconds {
					t.Errorf("point at %.2f s, after the run's end at %.2f s", p.X, tc.seconds)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rates %v, want %v", got, tc.want)
			}
		})
	}
}

func TestKind(t *testing.T) {
	for name, want := range map[string]string{
		"baseline (bare fasthttp, 1437 B)": "bare", "bare fasthttp, pinned, run 1": "bare",
		"regions new users": "regions", "decide v3, new user each request": "edge",
	} {
		if got := kind(name); got != want {
			t.Errorf("kind(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestWritePlots draws a small report with the three kinds of results (and one without
// requests, which is left out) and checks every file is a well-formed SVG or a PNG.
func TestWritePlots(t *testing.T) {
	r := report{Machine: "test", Results: []result{
		syntheticResult("baseline (bare fasthttp, 1437 B)", 56000, 4.002, []int64{56000, 56000, 56000, 56000, 8}, 500),
		syntheticResult("decide v3, new user each request", 18000, 4.3, []int64{18000, 18000, 18000, 18000, 5400}, 1400),
		syntheticResult("regions new users", 5000, 4, []int64{5000, 5000, 5000, 5000}, 900),
		{Name: "failed", LatencyUs: map[string]int64{}},
	}, Targets: map[string]string{}}
	r.Results[2].TargetRate = 5000
	dir := t.TempDir()
	if err := r.write(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"report.md", "report.json", "latency.svg", "latency.png", "throughput.svg", "throughput.png", "compare.svg", "compare.png"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(name) {
		case ".svg":
			checkSVG(t, name, data)
		case ".png":
			if _, err := png.Decode(bytes.NewReader(data)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	// Results without per-second counts (wrk's) get no throughput plot, and a prefix keeps
	// plots of two runs apart in one directory.
	wrkOnly := r.Results[:1]
	wrkOnly[0].PerSecond = nil
	written, err := writePlots(dir, "pinned-", wrkOnly)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"pinned-latency.svg", "pinned-latency.png", "pinned-compare.svg", "pinned-compare.png"}; !slices.Equal(written, want) {
		t.Errorf("wrote %v, want %v", written, want)
	}
}

func checkSVG(t *testing.T, name string, data []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: not well-formed XML: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element %q, want svg", name, root)
	}
}

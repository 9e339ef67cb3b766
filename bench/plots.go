package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The report's pictures, drawn with gonum.org/v1/plot from any list of results (the suite's,
// the pinned scenario's, the regions scenario's), each as SVG and PNG:
//
//   - latency: each result's latency by percentile, on log scales both ways;
//   - throughput: each result's requests per second over time, from its per-second counts;
//   - compare: p50/p99/p99.9 and throughput side by side, coloured by what was measured
//     (the edge, the bare responder, or the edge across a slow link in the regions scenario).

// plotFormats are the files written for each plot.
var plotFormats = []string{"svg", "png"}

// writePlots draws the plots of results into dir, each file name starting with prefix, and
// returns the names written. Results without requests are left out.
func writePlots(dir, prefix string, results []result) ([]string, error) {
	results = slices.DeleteFunc(slices.Clone(results), func(r result) bool { return r.Requests == 0 })
	if len(results) == 0 {
		return nil, nil
	}
	var written []string
	save := func(name string, w, h vg.Length, draw func(format string) (vg.CanvasWriterTo, error)) error {
		for _, format := range plotFormats {
			c, err := draw(format)
			if err != nil {
				return fmt.Errorf("plot %s: %w", name, err)
			}
			file := prefix + name + "." + format
			if err := writeCanvas(filepath.Join(dir, file), c); err != nil {
				return err
			}
			written = append(written, file)
		}
		return nil
	}
	single := func(p *plot.Plot, w, h vg.Length) func(string) (vg.CanvasWriterTo, error) {
		return func(format string) (vg.CanvasWriterTo, error) {
			c, err := draw.NewFormattedCanvas(w, h, format)
			if err != nil {
				return nil, err
			}
			p.Draw(draw.New(c))
			return c, nil
		}
	}
	const plotW, plotH = 9 * vg.Inch, 6 * vg.Inch
	if err := save("latency", plotW, plotH, single(latencyPlot(results, plotH), plotW, plotH)); err != nil {
		return written, err
	}
	if tp := throughputPlot(results, plotH); tp != nil {
		if err := save("throughput", plotW, plotH, single(tp, plotW, plotH)); err != nil {
			return written, err
		}
	}
	w, h := 11*vg.Inch, vg.Length(1.4+0.32*float64(len(results)))*vg.Inch
	if err := save("compare", w, h, comparePlot(results, w, h)); err != nil {
		return written, err
	}
	return written, nil
}

func writeCanvas(path string, c vg.CanvasWriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = c.WriteTo(f)
	return errors.Join(err, f.Close())
}

// percentileX places a percentile on an axis that gives each "nine" the same room:
// log10(1/(1-q)), so p90 is at 1, p99 at 2, p99.9 at 3. p100 has no place; the table has it.
func percentileX(q float64) float64 { return math.Log10(1 / (1 - min(q, 99.99)/100)) }

func latencyPlot(results []result, h vg.Length) *plot.Plot {
	p := plot.New()
	p.Title.Text = "Latency by percentile"
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency"
	var ticks []plot.Tick
	for _, q := range []float64{0, 50, 90, 99, 99.9, 99.99} {
		ticks = append(ticks, plot.Tick{Value: percentileX(q), Label: "p" + strconv.FormatFloat(q, 'f', -1, 64)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = 0, percentileX(99.99)
	lo, hi := math.Inf(1), 1.0
	for i, res := range results {
		var pts plotter.XYs
		for _, pc := range res.Percentiles {
			if pc[0] >= 100 {
				continue
			}
			us := max(pc[1], 1) // a log axis has no 0; the histograms start at 1 µs anyway
			pts = append(pts, plotter.XY{X: percentileX(pc[0]), Y: us})
			lo, hi = math.Min(lo, us), math.Max(hi, us)
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			continue
		}
		l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i/7), vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(legendName(res), l)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	latencyAxis(&p.Y, lo, hi, legendShare(len(results), h))
	return p
}

// latencyAxis makes ax a log axis from the decade below lo to above hi µs, leaving the top
// share reserve of the axis free (for a legend). It is labelled at 1, 2 and 5 of each decade
// in µs, ms or s, or at 1 and 3 when that would crowd the axis.
func latencyAxis(ax *plot.Axis, lo, hi, reserve float64) {
	if math.IsInf(lo, 1) {
		lo = 1
	}
	ax.Scale = plot.LogScale{}
	ax.Min = math.Pow10(int(math.Floor(math.Log10(max(lo, 1)))))
	hi = max(hi, ax.Min*10)
	ax.Max = ax.Min * math.Pow(hi/ax.Min, 1/(1-reserve))
	ax.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick {
		labelled := []int{1, 2, 5}
		if decades := math.Log10(max / min); decades > 4 {
			labelled = []int{1}
		} else if decades > 2 {
			labelled = []int{1, 3}
		}
		var ticks []plot.Tick
		for decade := min; decade < max*1.0001; decade *= 10 {
			for m := 1; m <= 9; m++ {
				v := decade * float64(m)
				if v > max*1.0001 {
					break
				}
				t := plot.Tick{Value: v}
				if slices.Contains(labelled, m) {
					t.Label = formatMicros(v)
				}
				ticks = append(ticks, t)
			}
		}
		return ticks
	})
}

// legendShare is the share of a plot's height its legend of n entries takes, for a plot h
// high.
func legendShare(n int, h vg.Length) float64 {
	return math.Min(0.6, float64(vg.Length(n)*vg.Points(10.5)+vg.Points(10))/float64(h-vg.Points(70)))
}

func formatMicros(us float64) string {
	switch {
	case us >= 1e6:
		return strconv.FormatFloat(us/1e6, 'g', 3, 64) + " s"
	case us >= 1e3:
		return strconv.FormatFloat(us/1e3, 'g', 3, 64) + " ms"
	default:
		return strconv.FormatFloat(us, 'g', 3, 64) + " µs"
	}
}

// rateSeries turns a result's per-second counts into requests per second, each point at the
// middle of the interval it covers. The last interval ends when the run ended, not on a whole
// second: its count is divided by its real length, and it is left out when shorter than half
// a second (then it holds mostly the drain of requests in flight at the deadline, which is
// not a rate).
func rateSeries(res result) plotter.XYs {
	var pts plotter.XYs
	for i, n := range res.PerSecond {
		width := math.Min(1, res.Seconds-float64(i))
		if width < 0.5 {
			continue
		}
		pts = append(pts, plotter.XY{X: float64(i) + width/2, Y: float64(n) / width})
	}
	return pts
}

// throughputPlot is nil when no result has per-second counts (wrk's do not).
func throughputPlot(results []result, h vg.Length) *plot.Plot {
	p := plot.New()
	p.Title.Text = "Requests per second over time"
	p.X.Label.Text = "seconds since the start of the run"
	p.Y.Label.Text = "requests/s"
	p.Y.Min, p.X.Min = 0, 0
	p.Y.Tick.Marker = plainTicks
	drawn, top := 0, 1.0
	for i, res := range results {
		pts := rateSeries(res)
		if len(pts) == 0 {
			continue
		}
		for _, pt := range pts {
			top = math.Max(top, pt.Y)
		}
		p.X.Max = math.Max(p.X.Max, res.Seconds)
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			continue
		}
		l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i/7), vg.Points(1.5)
		s.Color, s.Shape = plotutil.Color(i), draw.CircleGlyph{}
		p.Add(l, s)
		p.Legend.Add(legendName(res), l, s)
		drawn++
	}
	if drawn == 0 {
		return nil
	}
	p.Y.Max = top / (1 - legendShare(drawn, h)) // the legend above the lines
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	return p
}

// plainTicks are the default ticks labelled as plain numbers (12000, not 1.2e+04 or 12000.00).
var plainTicks = plot.TickerFunc(func(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
		}
	}
	return ticks
})

// kind says what a result measured, by its name: the bare responder ("bare…", "baseline…"),
// the edge across a slow link ("regions…"), or the edge.
func kind(name string) string {
	n := strings.ToLower(name)
	switch {
	case strings.HasPrefix(n, "regions"):
		return "regions"
	case strings.Contains(n, "bare") || strings.HasPrefix(n, "baseline"):
		return "bare"
	default:
		return "edge"
	}
}

var kindColors = map[string]color.Color{
	"edge":    color.RGBA{R: 31, G: 119, B: 180, A: 255},
	"bare":    color.RGBA{R: 127, G: 127, B: 127, A: 255},
	"regions": color.RGBA{R: 255, G: 127, B: 14, A: 255},
}

func legendName(res result) string {
	mode := fmt.Sprintf("c=%d", res.Connections)
	if res.TargetRate > 0 {
		mode = fmt.Sprintf("%d/s", res.TargetRate)
	}
	return res.Name + " (" + mode + ")"
}

// comparePlot draws, one row per result (the first on top), p50/p99/p99.9 on a log axis and,
// beside it, the throughput, coloured by kind: edge vs bare vs regions.
func comparePlot(results []result, w, h vg.Length) func(string) (vg.CanvasWriterTo, error) {
	n := len(results)
	names := make([]string, n)
	row := func(i int) float64 { return float64(n - 1 - i) }
	for i, res := range results {
		names[n-1-i] = legendName(res)
	}
	lat := plot.New()
	lat.Title.Text = "Latency: p50 ●, p99 ▲, p99.9 ■"
	lat.NominalY(names...)
	lat.Y.Min, lat.Y.Max = -0.6, float64(n)-0.4
	lat.Add(plotter.NewGrid())
	tp := plot.New()
	tp.Title.Text = "Throughput (requests/s)"
	tp.HideY()
	tp.Y.Min, tp.Y.Max = -0.6, float64(n)-0.4
	tp.X.Min = 0
	tp.X.Tick.Marker = plainTicks
	lo, hi := math.Inf(1), 1.0
	shapes := map[string]draw.GlyphDrawer{"p50": draw.CircleGlyph{}, "p99": draw.PyramidGlyph{}, "p99.9": draw.BoxGlyph{}}
	maxTP := 1.0
	for i, res := range results {
		c := kindColors[kind(res.Name)]
		for _, q := range []string{"p50", "p99", "p99.9"} {
			us := float64(max(res.LatencyUs[q], 1))
			lo, hi = math.Min(lo, us), math.Max(hi, us)
			s, err := plotter.NewScatter(plotter.XYs{{X: us, Y: row(i)}})
			if err != nil {
				continue
			}
			s.Color, s.Shape, s.Radius = c, shapes[q], vg.Points(3.5)
			lat.Add(s)
		}
		maxTP = math.Max(maxTP, res.Throughput)
		bar, err := plotter.NewPolygon(plotter.XYs{{X: 0, Y: row(i) - 0.3}, {X: res.Throughput, Y: row(i) - 0.3},
			{X: res.Throughput, Y: row(i) + 0.3}, {X: 0, Y: row(i) + 0.3}})
		if err == nil {
			bar.Color, bar.LineStyle.Width = c, 0
			tp.Add(bar)
		}
		label, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: res.Throughput, Y: row(i)}},
			Labels: []string{" " + strconv.FormatFloat(math.Round(res.Throughput), 'f', 0, 64)}})
		if err == nil {
			for j := range label.TextStyle {
				label.TextStyle[j].Font.Size = vg.Points(8)
				label.TextStyle[j].YAlign = draw.YCenter
			}
			tp.Add(label)
		}
	}
	tp.X.Max = maxTP * 1.4 // room for the labels and the legend
	latencyAxis(&lat.X, lo, hi, 0)
	for _, k := range []string{"edge", "bare", "regions"} {
		s, _ := plotter.NewScatter(plotter.XYs{{X: 1, Y: 0}})
		s.Color, s.Shape = kindColors[k], draw.BoxGlyph{}
		tp.Legend.Add(k, s)
	}
	return func(format string) (vg.CanvasWriterTo, error) {
		c, err := draw.NewFormattedCanvas(w, h, format)
		if err != nil {
			return nil, err
		}
		canvases := plot.Align([][]*plot.Plot{{lat, tp}}, draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 4,
			PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}, draw.New(c))
		lat.Draw(canvases[0][0])
		tp.Draw(canvases[0][1])
		return c, nil
	}
}

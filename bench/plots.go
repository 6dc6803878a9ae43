package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// palette gives each target a distinct, print-friendly colour and dash.
var palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

var dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}}

func styleLine(l *plotter.Line, i int) {
	l.Color = palette[i%len(palette)]
	l.Width = vg.Points(2)
	l.Dashes = dashes[(i/len(palette)+i)%len(dashes)]
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Label.TextStyle.Font.Size = vg.Points(12)
	p.Y.Label.TextStyle.Font.Size = vg.Points(12)
	p.X.Tick.Label.Font.Size = vg.Points(11)
	p.Y.Tick.Label.Font.Size = vg.Points(11)
	p.Legend.TextStyle.Font.Size = vg.Points(11)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Add(plotter.NewGrid())
	return p
}

const plotW, plotH = 18 * vg.Centimeter, 11 * vg.Centimeter

// WritePlots writes, per scenario, memory-over-time and latency-CDF PNGs
// with one line per target, and returns their paths.
func (r *Report) WritePlots(dir string) ([]string, error) {
	var paths []string
	for _, key := range r.scenarioKeys() {
		var results []Result
		for _, res := range r.Results {
			if scenarioLabel(res.Scenario) == key {
				results = append(results, res)
			}
		}
		p := filepath.Join(dir, plotName("memory", key))
		ok, err := plotMemory(p, key, results)
		if err != nil {
			return paths, err
		}
		if ok {
			paths = append(paths, p)
		}
		p = filepath.Join(dir, plotName("latency", key))
		ok, err = plotLatency(p, key, results)
		if err != nil {
			return paths, err
		}
		if ok {
			paths = append(paths, p)
		}
	}
	return paths, nil
}

func plotMemory(path, title string, results []Result) (bool, error) {
	p := newPlot("memory (RSS) — "+title, "seconds since sampling started", "RSS (MiB)")
	n := 0
	maxY := 0.0
	for i, res := range results {
		if len(res.Memory) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(res.Memory))
		for j, m := range res.Memory {
			pts[j].X = m.T.Seconds()
			pts[j].Y = float64(m.RSS) / (1 << 20)
			maxY = math.Max(maxY, pts[j].Y)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return false, fmt.Errorf("cannot plot memory of %s: %w", res.Target, err)
		}
		styleLine(l, i)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (peak %s MiB)", res.Target, mib(res.PeakRSS)), l)
		n++
	}
	if n == 0 {
		return false, nil
	}
	p.Y.Min = 0
	p.Y.Max = maxY * 1.25 // room for the legend
	if err := p.Save(plotW, plotH, path); err != nil {
		return false, fmt.Errorf("cannot save %q: %w", path, err)
	}
	return true, nil
}

func plotLatency(path, title string, results []Result) (bool, error) {
	xlabel := "latency (ms, log scale)"
	p := newPlot("latency CDF — "+title, xlabel, "fraction of requests ≤ x")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	n := 0
	minX, maxX := math.Inf(1), 0.0
	for i, res := range results {
		cdf := res.LatencyCDF
		if res.Watch != nil {
			cdf = res.Watch.CDF
			p.X.Label.Text = "write-to-event delivery latency (ms, log scale)"
			p.Y.Label.Text = "fraction of events ≤ x"
		}
		if len(cdf) == 0 {
			continue
		}
		pts := make(plotter.XYs, 0, len(cdf)+1)
		for _, c := range cdf {
			x := math.Max(c.Millis, 0.001)
			pts = append(pts, plotter.XY{X: x, Y: c.Fraction})
			minX, maxX = math.Min(minX, x), math.Max(maxX, x)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return false, fmt.Errorf("cannot plot latency of %s: %w", res.Target, err)
		}
		styleLine(l, i)
		p.Add(l)
		lat := res.Latency
		if res.Watch != nil {
			lat = res.Watch.Latency
		}
		p.Legend.Add(fmt.Sprintf("%s (p50 %s ms, p99 %s ms)", res.Target, f1(lat.P50), f1(lat.P99)), l)
		n++
	}
	if n == 0 {
		return false, nil
	}
	p.X.Min = math.Pow(10, math.Floor(math.Log10(minX)))
	p.X.Max = math.Pow(10, math.Ceil(math.Log10(maxX*1.01)))
	p.Y.Min, p.Y.Max = 0, 1.15
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.Padding = vg.Points(2)
	if err := p.Save(plotW, plotH, path); err != nil {
		return false, fmt.Errorf("cannot save %q: %w", path, err)
	}
	return true, nil
}

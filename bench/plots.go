package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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
	p.Legend.Padding = vg.Points(2)
	p.Title.Padding = vg.Points(6)
	p.Add(plotter.NewGrid())
	return p
}

// unitTicks marks an axis every 1, 2 or 5 × 10^k units, about five major
// ticks over the range, each labelled with its value and unit ("500 MiB").
type unitTicks struct{ unit string }

func (u unitTicks) Ticks(lo, hi float64) []plot.Tick {
	step := niceStep((hi - lo) / 5)
	decimals := max(0, -int(math.Floor(math.Log10(step))))
	first := math.Ceil(lo/step) * step
	var ts []plot.Tick
	for i := 0; ; i++ {
		v := first + float64(i)*step
		if v > hi+step*1e-9 {
			break
		}
		label := strconv.FormatFloat(v, 'f', decimals, 64)
		if u.unit != "" {
			label += " " + u.unit
		}
		ts = append(ts, plot.Tick{Value: v, Label: label})
		if half := v + step/2; half < hi {
			ts = append(ts, plot.Tick{Value: half}) // minor
		}
	}
	return ts
}

// niceStep is the least 1, 2 or 5 × 10^k at least raw.
func niceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// logUnitTicks are plot.LogTicks labelled with a unit ("10 ms").
type logUnitTicks struct{ unit string }

func (u logUnitTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label += " " + u.unit
		}
	}
	return ts
}

// savePlot writes p as a PNG with its legend below the data (never over
// a line) and a margin around everything (the title clear of the edge).
func savePlot(p *plot.Plot, path string) error {
	leg := p.Legend
	p.Legend = plot.NewLegend()
	img := vgimg.NewWith(vgimg.UseWH(plotW, plotH), vgimg.UseDPI(110))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	margin := vg.Points(10)
	legH := leg.Rectangle(dc).Size().Y
	p.Draw(draw.Crop(dc, margin, -margin, legH+2*margin, -margin))
	leg.Top, leg.Left = true, true
	leg.Draw(draw.Crop(dc, margin, -margin, margin, -(plotH - legH - margin)))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cannot save %q: %w", path, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("cannot save %q: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot save %q: %w", path, err)
	}
	return nil
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
	p := newPlot("memory (RSS) — "+title, "time since sampling started", "resident set size")
	p.X.Tick.Marker = unitTicks{"s"}
	p.Y.Tick.Marker = unitTicks{"MiB"}
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
	p.Y.Max = maxY * 1.05
	if err := savePlot(p, path); err != nil {
		return false, err
	}
	return true, nil
}

func plotLatency(path, title string, results []Result) (bool, error) {
	xlabel := "latency (log scale)"
	p := newPlot("latency CDF — "+title, xlabel, "fraction of requests ≤ x")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logUnitTicks{"ms"}
	p.Y.Tick.Marker = unitTicks{}
	n := 0
	minX, maxX := math.Inf(1), 0.0
	for i, res := range results {
		cdf := res.LatencyCDF
		if res.Watch != nil {
			cdf = res.Watch.CDF
			p.X.Label.Text = "write-to-event delivery latency (log scale)"
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
	p.Y.Min, p.Y.Max = 0, 1
	if err := savePlot(p, path); err != nil {
		return false, err
	}
	return true, nil
}

package report

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot size: wide enough for a legend of a few policies, readable in docs.
const plotW, plotH = 8 * vg.Inch, 5 * vg.Inch

// maxCDFPoints bounds the points drawn per CDF line.
const maxCDFPoints = 2000

// ErrNoData is returned when a plot has nothing to draw.
var ErrNoData = errors.New("nothing to plot")

// Sample is a named set of values, such as one policy's TTFTs in ms.
type Sample struct {
	// Name labels the line (the policy).
	Name string
	// Values are the observations, in any order.
	Values []float64
}

// WorkerLoad is one policy's per-worker load sampled over (virtual) time.
type WorkerLoad struct {
	// Policy names the policy, used in the title.
	Policy string
	// Quantity names what Load measures, for the axis label (for example
	// "active requests" or "KV usage").
	Quantity string
	// Times are the sample instants, ascending.
	Times []time.Duration
	// Load[w][i] is worker w's load at Times[i].
	Load [][]float64
}

func writePNG(w io.Writer, p *plot.Plot) error {
	wt, err := p.WriterTo(plotW, plotH, "png")
	if err != nil {
		return fmt.Errorf("rendering png: %w", err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("writing png: %w", err)
	}
	return nil
}

// cdfPoints returns the empirical CDF of values (sorted copy), thinned to at
// most maxCDFPoints points, never dropping the first and last.
func cdfPoints(values []float64, floor float64) plotter.XYs {
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	step := max(1, n/maxCDFPoints)
	var pts plotter.XYs
	for i := 0; i < n; i += step {
		pts = append(pts, plotter.XY{X: max(s[i], floor), Y: float64(i+1) / float64(n)})
	}
	if last := (plotter.XY{X: max(s[n-1], floor), Y: 1}); pts[len(pts)-1] != last {
		pts = append(pts, last)
	}
	return pts
}

// WriteTTFTCDF draws the cumulative distribution of TTFT per policy as a
// PNG. The x axis is logarithmic when values span more than two decades
// (values below 0.1 ms are drawn at 0.1 ms there).
func WriteTTFTCDF(w io.Writer, series []Sample) error {
	lo, hi := 0.0, 0.0
	first := true
	for _, s := range series {
		for _, v := range s.Values {
			if v > 0 && (first || v < lo) {
				lo = v
			}
			if first || v > hi {
				hi = v
			}
			first = false
		}
	}
	if first {
		return fmt.Errorf("ttft cdf: %w", ErrNoData)
	}
	p := plot.New()
	p.Title.Text = "Time to first token, CDF per policy"
	p.X.Label.Text = "TTFT (ms)"
	p.Y.Label.Text = "fraction of requests"
	p.Y.Min, p.Y.Max = 0, 1
	floor := 0.0
	if lo > 0 && hi/lo > 100 {
		floor = 0.1
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.X.Label.Text = "TTFT (ms, log scale)"
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = false
	p.Legend.Left = false
	for i, s := range series {
		if len(s.Values) == 0 {
			continue
		}
		l, err := plotter.NewLine(cdfPoints(s.Values, floor))
		if err != nil {
			return fmt.Errorf("ttft cdf %s: %w", s.Name, err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(2)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	return writePNG(w, p)
}

// WriteHitRatioBars draws, per policy, the hit ratio next to the bound as a
// PNG bar chart.
func WriteHitRatioBars(w io.Writer, results []Result) error {
	if len(results) == 0 {
		return fmt.Errorf("hit ratio bars: %w", ErrNoData)
	}
	hit, bound := make(plotter.Values, len(results)), make(plotter.Values, len(results))
	names := make([]string, len(results))
	for i, r := range results {
		hit[i], bound[i] = r.HitRatio, r.BoundHitRatio
		names[i] = fmt.Sprintf("%s\n%.0f%% of bound", r.Policy, 100*r.HitRatioOverBound)
	}
	p := plot.New()
	p.Title.Text = "Prefix cache hit ratio vs shared-LRU-pool bound"
	p.Y.Label.Text = "hit ratio (cached / prompt tokens)"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	width := vg.Points(28)
	hb, err := plotter.NewBarChart(hit, width)
	if err != nil {
		return fmt.Errorf("hit ratio bars: %w", err)
	}
	bb, err := plotter.NewBarChart(bound, width)
	if err != nil {
		return fmt.Errorf("hit ratio bars: %w", err)
	}
	hb.Color, hb.Offset = plotutil.Color(0), -width/2
	bb.Color, bb.Offset = plotutil.Color(1), width/2
	p.Add(hb, bb)
	p.Legend.Add("hit ratio", hb)
	p.Legend.Add("bound (one LRU pool)", bb)
	p.Legend.Top = true
	p.NominalX(names...)
	// Room above the bars for the legend, and beside the outer bars.
	p.Y.Max = 1.3 * max(slices.Max(hit), slices.Max(bound), 0.01)
	p.X.Min, p.X.Max = -0.75, float64(len(results))-0.25
	return writePNG(w, p)
}

// maxLoadPoints bounds the points per worker line; longer series are
// averaged over consecutive windows so an hour of 1 s samples stays legible.
const maxLoadPoints = 120

// windowMeans pairs times with values and, when there are more than limit
// of them, averages consecutive windows (x at the window's first time).
func windowMeans(times []time.Duration, values []float64, limit int) plotter.XYs {
	n := min(len(times), len(values))
	w := max(1, (n+limit-1)/limit)
	var pts plotter.XYs
	for i := 0; i < n; i += w {
		sum, k := 0.0, 0
		for j := i; j < min(i+w, n); j++ {
			sum += values[j]
			k++
		}
		pts = append(pts, plotter.XY{X: times[i].Seconds(), Y: sum / float64(k)})
	}
	return pts
}

// workerColors are distinct colours, one per worker (repeating after ten:
// each worker has its own labelled panel anyway).
var workerColors = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
}

// niceTicks labels round values: a 1, 2 or 5 × 10^k step giving about N
// intervals, with as many decimals as the step needs, and unlabelled
// minor ticks halfway.
type niceTicks struct{ N int }

// niceStep returns a 1, 2 or 5 × 10^k step for about n intervals of span.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / p; {
	case f <= 1:
		return p
	case f <= 2:
		return 2 * p
	case f <= 5:
		return 5 * p
	}
	return 10 * p
}

// Ticks implements plot.Ticker.
func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	step := niceStep(hi-lo, max(t.N, 1))
	prec := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	var ticks []plot.Tick
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+step*1e-9; i++ {
		v := i * step
		if v == 0 {
			v = 0 // not "-0"
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
		if m := v + step/2; m <= hi {
			ticks = append(ticks, plot.Tick{Value: m})
		}
	}
	return ticks
}

// Load plot layout: one panel per worker, panelsPerColumn to a column.
const (
	panelsPerColumn = 8
	loadPanelH      = 1.05 * vg.Inch
	loadColumnW     = 8 * vg.Inch
	loadTitleH      = 0.7 * vg.Inch
)

// WriteWorkerLoad draws each worker's load over time as a PNG: small
// multiples, one panel per worker (in its own colour, named, with its mean
// and peak) on a shared y scale, with the fleet mean as a grey dashed
// line in every panel for comparison. Long series are averaged over
// windows (at most 120 points).
func WriteWorkerLoad(w io.Writer, load WorkerLoad) error {
	if len(load.Times) == 0 || len(load.Load) == 0 {
		return fmt.Errorf("worker load: %w", ErrNoData)
	}
	quantity := load.Quantity
	if quantity == "" {
		quantity = "load"
	}
	n := len(load.Load)
	series := make([]plotter.XYs, n)
	top := 0.0
	for wk, s := range load.Load {
		series[wk] = windowMeans(load.Times, s, maxLoadPoints)
		for _, pt := range series[wk] {
			top = max(top, pt.Y)
		}
	}
	// The fleet mean at each (window) time.
	var mean plotter.XYs
	for i := range series[0] {
		sum, k := 0.0, 0
		for wk := range series {
			if i < len(series[wk]) {
				sum += series[wk][i].Y
				k++
			}
		}
		mean = append(mean, plotter.XY{X: series[0][i].X, Y: sum / float64(k)})
	}
	xMax := load.Times[len(load.Times)-1].Seconds()
	yMax := top
	if yMax <= 0 {
		yMax = 1
	}
	yMax = math.Ceil(yMax/niceStep(yMax, 3)-1e-9) * niceStep(yMax, 3)

	cols := (n + panelsPerColumn - 1) / panelsPerColumn
	rows := min(n, panelsPerColumn)
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for i := range rows * cols {
		r, c := i%rows, i/rows
		p := plot.New()
		p.X.Min, p.X.Max = 0, max(xMax, 1)
		p.Y.Min, p.Y.Max = 0, yMax
		p.X.Tick.Marker = niceTicks{N: 6}
		p.Y.Tick.Marker = niceTicks{N: 2}
		p.Add(plotter.NewGrid())
		grid[r][c] = p
		if r == rows-1 {
			p.X.Label.Text = "time (s)"
		} else {
			// The bottom panel labels the shared axis; the others keep
			// its ticks, invisible, for their grid lines.
			p.X.Width, p.X.Tick.Length, p.X.Padding = 0, 0, 0
			p.X.Tick.Label.Font.Size = 0
		}
		if i >= n {
			p.HideAxes()
			continue
		}
		s := series[i]
		sum, peak := 0.0, 0.0
		for _, pt := range s {
			sum += pt.Y
			peak = max(peak, pt.Y)
		}
		p.Y.Label.Text = fmt.Sprintf("worker %d", i)
		p.Title.Text = fmt.Sprintf("mean %.1f, peak %.1f", sum/float64(max(len(s), 1)), peak)
		p.Title.TextStyle.Font.Size = vg.Points(9)
		p.Title.Padding = vg.Points(1)
		m, err := plotter.NewLine(mean)
		if err != nil {
			return fmt.Errorf("worker load mean: %w", err)
		}
		m.Color, m.Dashes, m.Width = color.Gray{Y: 0x80}, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1)
		l, err := plotter.NewLine(s)
		if err != nil {
			return fmt.Errorf("worker load %d: %w", i, err)
		}
		l.Color, l.Width = workerColors[i%len(workerColors)], vg.Points(1.5)
		p.Add(m, l)
	}

	width, height := vg.Length(cols)*loadColumnW, vg.Length(rows)*loadPanelH+loadTitleH
	img := vgimg.New(width, height)
	dc := draw.New(img)
	title := plot.New().Title.TextStyle
	title.Font.Size = vg.Points(13)
	title.XAlign = draw.XCenter
	dc.FillText(title, vg.Point{X: width / 2, Y: height - loadTitleH*0.4},
		fmt.Sprintf("%s per worker over time: %s", quantity, load.Policy))
	legend := title
	legend.Font.Size = vg.Points(9)
	legend.Color = color.Gray{Y: 0x60}
	dc.FillText(legend, vg.Point{X: width / 2, Y: height - loadTitleH*0.8},
		"one panel per worker, same scale; grey dashed: the mean over all workers")
	body := draw.Crop(dc, 0, 0, 0, -loadTitleH)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(6), PadY: vg.Points(5),
		PadTop: vg.Points(2), PadBottom: vg.Points(2), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(grid, tiles, body)
	for r := range grid {
		for c := range grid[r] {
			grid[r][c].Draw(canvases[r][c])
		}
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("writing png: %w", err)
	}
	return nil
}

// Files written by WritePlots.
const (
	// FileTTFTCDF is the TTFT CDF plot's file name.
	FileTTFTCDF = "ttft_cdf.png"
	// FileHitRatio is the hit-ratio-vs-bound plot's file name.
	FileHitRatio = "hit_ratio.png"
)

// LoadFile returns the file name of a policy's per-worker load plot.
func LoadFile(policy string) string {
	return "load_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, policy) + ".png"
}

// WritePlots writes every plot into dir (created if missing): FileTTFTCDF
// from ttfts, FileHitRatio from results, and LoadFile(policy) per load. It
// returns the paths written. Plots with no data are skipped.
func WritePlots(dir string, results []Result, ttfts []Sample, loads []WorkerLoad) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating plot dir: %w", err)
	}
	var written []string
	write := func(name string, draw func(io.Writer) error) error {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("creating plot: %w", err)
		}
		err = draw(f)
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("closing plot: %w", cerr)
		}
		if errors.Is(err, ErrNoData) {
			return os.Remove(path)
		}
		if err != nil {
			return err
		}
		written = append(written, path)
		return nil
	}
	if err := write(FileTTFTCDF, func(w io.Writer) error { return WriteTTFTCDF(w, ttfts) }); err != nil {
		return written, err
	}
	if err := write(FileHitRatio, func(w io.Writer) error { return WriteHitRatioBars(w, results) }); err != nil {
		return written, err
	}
	for _, l := range loads {
		if err := write(LoadFile(l.Policy), func(w io.Writer) error { return WriteWorkerLoad(w, l) }); err != nil {
			return written, err
		}
	}
	return written, nil
}

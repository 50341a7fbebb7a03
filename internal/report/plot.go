package report

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
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

// WriteWorkerLoad draws each worker's load over time as a PNG, one line
// per worker; long series are averaged over windows (at most 120 points).
func WriteWorkerLoad(w io.Writer, load WorkerLoad) error {
	if len(load.Times) == 0 || len(load.Load) == 0 {
		return fmt.Errorf("worker load: %w", ErrNoData)
	}
	p := plot.New()
	p.Title.Text = "Per-worker load over time: " + load.Policy
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = load.Quantity
	if p.Y.Label.Text == "" {
		p.Y.Label.Text = "load"
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	top := 0.0
	for wk, series := range load.Load {
		pts := windowMeans(load.Times, series, maxLoadPoints)
		if len(pts) == 0 {
			continue
		}
		for _, pt := range pts {
			top = max(top, pt.Y)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("worker load %d: %w", wk, err)
		}
		l.Color = plotutil.Color(wk)
		l.Dashes = plotutil.Dashes(wk / 7)
		p.Add(l)
		if len(load.Load) <= 16 {
			p.Legend.Add(fmt.Sprintf("worker %d", wk), l)
		}
	}
	// Room above the lines for the legend.
	p.Y.Min, p.Y.Max = 0, max(1.35*top, 1)
	return writePNG(w, p)
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

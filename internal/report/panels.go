package report

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Panel is one scenario's TTFT samples, one per policy.
type Panel struct {
	// Title names the scenario.
	Title string
	// Series are the policies' TTFTs in ms; a series' position sets its
	// colour and dashes, so keep the same policy at the same position in
	// every panel.
	Series []Sample
}

// CDF panel layout: up to two panels a row.
const (
	cdfPanelW       = 6 * vg.Inch
	cdfPanelH       = 3.6 * vg.Inch
	cdfPanelsPerRow = 2
	cdfTitleH       = 0.5 * vg.Inch
)

// logTicks125 labels 1, 2 and 5 × 10^k on a log axis (only the powers of
// ten when the axis spans more than four decades, the 2s and 5s then
// unlabelled).
type logTicks125 struct{}

// Ticks implements plot.Ticker.
func (logTicks125) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) {
		return nil
	}
	wide := math.Log10(hi/lo) > 4
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || !wide {
				t.Label = strconv.FormatFloat(v, 'f', max(0, int(-e)), 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// cdfPanel draws one panel: the CDF of each series, on a log x axis when
// the values span more than two decades.
func cdfPanel(pn Panel) (*plot.Plot, error) {
	lo, hi, seen := 0.0, 0.0, false
	for _, s := range pn.Series {
		for _, v := range s.Values {
			if v > 0 && (!seen || v < lo) {
				lo = v
			}
			if !seen || v > hi {
				hi = v
			}
			seen = true
		}
	}
	p := plot.New()
	p.Title.Text = pn.Title
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.X.Label.Text = "TTFT (ms)"
	p.Y.Label.Text = "fraction of requests"
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = niceTicks{N: 5}
	p.X.Tick.Marker = niceTicks{N: 6}
	p.Add(plotter.NewGrid())
	if !seen {
		return p, nil
	}
	floor := 0.0
	if lo > 0 && hi/lo > 100 {
		floor = 0.1
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logTicks125{}
		p.X.Label.Text = "TTFT (ms, log scale)"
	}
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	for i, s := range pn.Series {
		if len(s.Values) == 0 {
			continue
		}
		l, err := plotter.NewLine(cdfPoints(s.Values, floor))
		if err != nil {
			return nil, fmt.Errorf("ttft cdf %s: %w", s.Name, err)
		}
		l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(1.6)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	return p, nil
}

// WriteTTFTCDFPanels draws the TTFT CDF per policy as a PNG, one panel per
// scenario, up to two a row, under title.
func WriteTTFTCDFPanels(w io.Writer, title string, panels []Panel) error {
	n := 0
	for _, pn := range panels {
		for _, s := range pn.Series {
			n += len(s.Values)
		}
	}
	if len(panels) == 0 || n == 0 {
		return fmt.Errorf("ttft cdf panels: %w", ErrNoData)
	}
	cols := min(len(panels), cdfPanelsPerRow)
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
		for c := range grid[r] {
			i := r*cols + c
			if i >= len(panels) {
				p := plot.New()
				p.HideAxes()
				grid[r][c] = p
				continue
			}
			p, err := cdfPanel(panels[i])
			if err != nil {
				return err
			}
			grid[r][c] = p
		}
	}
	width, height := vg.Length(cols)*cdfPanelW, vg.Length(rows)*cdfPanelH+cdfTitleH
	img := vgimg.New(width, height)
	dc := draw.New(img)
	ts := plot.New().Title.TextStyle
	ts.Font.Size = vg.Points(13)
	ts.XAlign = draw.XCenter
	dc.FillText(ts, vg.Point{X: width / 2, Y: height - cdfTitleH*0.55}, title)
	body := draw.Crop(dc, 0, 0, 0, -cdfTitleH)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(14), PadY: vg.Points(12),
		PadTop: vg.Points(2), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(10)}
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

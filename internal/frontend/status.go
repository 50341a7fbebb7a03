package frontend

import (
	_ "embed"
	"html/template"
	"net/http"
	"strconv"
	"time"
)

//go:embed status.html
var statusHTML string

var statusTmpl = template.Must(template.New("status").Funcs(template.FuncMap{
	"pct": func(a, b int64) string {
		if b <= 0 {
			return "–"
		}
		return template.HTMLEscapeString(formatPct(float64(a) / float64(b)))
	},
	"ms":   func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() },
	"hhmm": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"f1":   func(v float64) string { return formatFloat(v) },
}).Parse(statusHTML))

// statusData is what the status page renders.
type statusData struct {
	Model     string
	BlockSize int
	Refresh   int
	Now       time.Time
	Rate      float64
	Totals    totals
	Workers   []workerJSON
	Recent    []record
	InFlight  int
}

func (f *Frontend) handleStatus(rw http.ResponseWriter, _ *http.Request) {
	now := f.clock()
	f.mu.Lock()
	d := statusData{Model: f.cfg.Model, BlockSize: f.blockSize, Refresh: int(f.cfg.StatusRefresh / time.Second),
		Now: now, Rate: f.reqs.perSecond(now), Totals: f.totals, Recent: f.recent.list()}
	f.mu.Unlock()
	d.Workers = f.workerViews()
	for _, w := range d.Workers {
		for _, r := range w.Ranks {
			d.InFlight += r.ActiveRequests
		}
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	if err := statusTmpl.Execute(rw, d); err != nil {
		f.log.Warn("rendering status page", "err", err)
	}
}

func formatPct(v float64) string { return formatFloat(100*v) + " %" }

func formatFloat(v float64) string {
	return template.HTMLEscapeString(trimFloat(v))
}

func trimFloat(v float64) string {
	return strconv.FormatFloat(v, 'f', 1, 64)
}

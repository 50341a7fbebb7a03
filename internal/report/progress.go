package report

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress reports how far a long run has got.
//
// Contract: Add may be called any number of times with the number of units
// just finished; Finish is called once at the end, after which the display
// is complete (a final line is written). Implementations are not safe for
// concurrent use.
type Progress interface {
	// Add records n more units done.
	Add(n int)
	// Finish completes the display.
	Finish()
}

// ProgressConfig tunes the display.
type ProgressConfig struct {
	// What names the units' owner, printed before the counts (e.g. "kv").
	What string
	// Total is the number of units expected; 0 or less means unknown.
	Total int
	// Interval is the least wall time between two plain lines when the
	// writer is not a terminal. Default 5 s.
	Interval time.Duration
	// Now reads the wall clock; nil means time.Now. Tests inject a fake.
	Now func() time.Time
	// ForceLines uses plain lines even on a terminal. Default false.
	ForceLines bool
}

// NewProgress returns a progress bar (github.com/schollz/progressbar) when
// w is a terminal, and otherwise a display that writes one plain line at
// most every Interval, plus one at Finish, such as
// "kv: 6015/12031 requests (50.0%) after 12s".
func NewProgress(w io.Writer, cfg ProgressConfig) Progress {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if f, ok := w.(*os.File); ok && !cfg.ForceLines && term.IsTerminal(int(f.Fd())) {
		total := int64(cfg.Total)
		if total <= 0 {
			total = -1
		}
		return &barProgress{bar: progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(cfg.What),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetWidth(30),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))}
	}
	start := cfg.Now()
	return &lineProgress{w: w, cfg: cfg, start: start, last: start}
}

type barProgress struct{ bar *progressbar.ProgressBar }

var _ Progress = (*barProgress)(nil)

func (b *barProgress) Add(n int) { _ = b.bar.Add(n) }
func (b *barProgress) Finish()   { _ = b.bar.Finish() }

// lineProgress writes plain lines, for logs and CI.
type lineProgress struct {
	w           io.Writer
	cfg         ProgressConfig
	start, last time.Time
	done        int
	finished    bool
}

var _ Progress = (*lineProgress)(nil)

func (l *lineProgress) Add(n int) {
	l.done += n
	if now := l.cfg.Now(); now.Sub(l.last) >= l.cfg.Interval {
		l.last = now
		l.line(now)
	}
}

func (l *lineProgress) Finish() {
	if l.finished {
		return
	}
	l.finished = true
	l.line(l.cfg.Now())
}

func (l *lineProgress) line(now time.Time) {
	elapsed := now.Sub(l.start).Round(time.Second)
	if l.cfg.Total > 0 {
		fmt.Fprintf(l.w, "%s: %d/%d requests (%.1f%%) after %v\n", l.cfg.What, l.done, l.cfg.Total,
			100*float64(l.done)/float64(l.cfg.Total), elapsed)
		return
	}
	fmt.Fprintf(l.w, "%s: %d requests after %v\n", l.cfg.What, l.done, elapsed)
}

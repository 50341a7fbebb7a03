package config

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/sim"
)

// Per-worker engine settings of a mock or simulated fleet (mocker.Fleet):
// --worker-speeds, --worker-batch-tokens and --worker-kv-blocks, each a
// comma-separated list with one value per worker or one for all; and the
// simulator's --worker-speed-change schedule. Each Set replaces the list,
// so a later layer overrides an earlier one.

var (
	_ flag.Value = (*floatList)(nil)
	_ flag.Value = (*intList)(nil)
	_ flag.Value = (*speedSchedule)(nil)
)

// floatList is a comma-separated list of numbers.
type floatList []float64

func (l *floatList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func (l *floatList) Set(s string) error {
	v, err := parseFloats(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for p := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", strings.TrimSpace(p))
		}
		out = append(out, v)
	}
	return out, nil
}

// intList is a comma-separated list of integers.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(s string) error {
	*l = nil
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for p := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return fmt.Errorf("%q is not an integer", strings.TrimSpace(p))
		}
		*l = append(*l, v)
	}
	return nil
}

// speedSchedule is --worker-speed-change: changes separated by ";", each
// TIME=SPEEDS, e.g. "120s=0.5,0.5,1,1;300s=1".
type speedSchedule []sim.SpeedChange

func (l *speedSchedule) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, c := range *l {
		sp := floatList(c.Speeds)
		s[i] = c.At.String() + "=" + sp.String()
	}
	return strings.Join(s, ";")
}

func (l *speedSchedule) Set(s string) error {
	*l = nil
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for p := range strings.SplitSeq(s, ";") {
		at, speeds, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return fmt.Errorf("%q: want TIME=SPEEDS, e.g. 120s=0.5,1", p)
		}
		d, err := time.ParseDuration(strings.TrimSpace(at))
		if err != nil {
			return fmt.Errorf("%q: %q is not a duration", p, at)
		}
		v, err := parseFloats(speeds)
		if err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
		*l = append(*l, sim.SpeedChange{At: d, Speeds: v})
	}
	return nil
}

// bindFleet registers the per-worker engine lists on fs.
func bindFleet(fs *flag.FlagSet, f *mocker.Fleet) {
	fs.Var((*floatList)(&f.Speeds), "worker-speeds", "per-worker speed multipliers of the speedup ratio, comma-separated: one per worker or one for all, e.g. 1,1,1,1,2,2,2,2 (empty: all 1)")
	fs.Var((*intList)(&f.BatchTokens), "worker-batch-tokens", "per-worker max tokens per engine step, comma-separated: one per worker or one for all (empty: --max-num-batched-tokens)")
	fs.Var((*intList)(&f.KVBlocks), "worker-kv-blocks", "per-worker device KV blocks, comma-separated: one per worker or one for all (empty: the engine's)")
}

// checkFleet reports a per-worker list whose length is neither 0, 1 nor
// the worker count given by workersFlag, naming the flags; the values are
// checked by mocker.Fleet.Validate.
func checkFleet(f mocker.Fleet, workers int, workersFlag string) error {
	for _, l := range []struct {
		name string
		n    int
	}{{"worker-speeds", len(f.Speeds)}, {"worker-batch-tokens", len(f.BatchTokens)}, {"worker-kv-blocks", len(f.KVBlocks)}} {
		if l.n > 1 && l.n != workers {
			return fmt.Errorf("--%s has %d values for %s %d: give one per worker, or one for all", l.name, l.n, workersFlag, workers)
		}
	}
	return nil
}

// checkSchedule reports a --worker-speed-change entry with the wrong
// number of speeds, naming the flags.
func checkSchedule(s []sim.SpeedChange, workers int) error {
	for _, c := range s {
		if n := len(c.Speeds); n != 1 && n != workers {
			return fmt.Errorf("--worker-speed-change at %v has %d speeds for --workers %d: give one per worker, or one for all", c.At, n, workers)
		}
	}
	return nil
}

package config

import (
	"flag"
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/internal/sim"
)

// SimGrid is `kvrouter sim --grid`: kv over every combination of its cost
// knobs beside round-robin and the other --policy names, per scenario.
type SimGrid struct {
	// On runs the grid (--grid). Default false.
	On bool
	// Replay lists the replay speeds of the scenarios (--grid-replay,
	// ×, comma-separated); empty is the workload as given. Default empty.
	Replay []float64
	// Fleets lists the fleets of the scenarios by their speeds
	// (--grid-fleets: NAME=SPEEDS separated by ";", SPEEDS as
	// --worker-speeds); empty is the fleet of --worker-speeds. Default
	// empty.
	Fleets []sim.FleetSpeeds
	// Parallel is how many simulations run at once (--parallel). Default 1.
	Parallel int
}

var _ flag.Value = (*fleetList)(nil)

// fleetList is --grid-fleets.
type fleetList []sim.FleetSpeeds

func (l *fleetList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, f := range *l {
		sp := floatList(f.Speeds)
		s[i] = f.Name + "=" + sp.String()
	}
	return strings.Join(s, ";")
}

func (l *fleetList) Set(s string) error {
	*l = nil
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for p := range strings.SplitSeq(s, ";") {
		p = strings.TrimSpace(p)
		name, speeds, ok := strings.Cut(p, "=")
		if !ok {
			name, speeds = p, p
		}
		v, err := parseFloats(speeds)
		if err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
		if name = strings.TrimSpace(name); name == "" || len(v) == 0 {
			return fmt.Errorf("%q: want NAME=SPEEDS, e.g. half-fast=1,1,2,2", p)
		}
		*l = append(*l, sim.FleetSpeeds{Name: name, Speeds: v})
	}
	return nil
}

// bind registers the grid's flags.
func (g *SimGrid) bind(fs *flag.FlagSet) {
	fs.BoolVar(&g.On, "grid", g.On, "run kv over overlap credit {0.5,1,2,4,8,16} × prefill load scale {1,4,16} × prefill clamp {on,off}, round-robin and the other --policy names, per scenario, and print each against the best kv setting")
	fs.Var((*floatList)(&g.Replay), "grid-replay", "--grid: replay speeds of the scenarios, comma-separated, e.g. 1,4 (arrival times divided, closed-loop concurrency multiplied; empty: the workload as given)")
	fs.Var((*fleetList)(&g.Fleets), "grid-fleets", "--grid: fleets of the scenarios, NAME=SPEEDS separated by ';', e.g. 'uniform=1;half-fast=1,1,1,1,2,2,2,2' (empty: the --worker-speeds fleet)")
	fs.IntVar(&g.Parallel, "parallel", g.Parallel, "--grid: simulations run at once (each is single-threaded)")
}

// validate checks the grid's options against the fleet size.
func (g *SimGrid) validate(workers int) error {
	if g.Parallel < 1 || g.Parallel > 64 {
		return fmt.Errorf("--parallel %d out of range [1, 64]", g.Parallel)
	}
	for _, r := range g.Replay {
		if !(r >= 1e-3 && r <= 1e6) {
			return fmt.Errorf("--grid-replay %v: want speeds in [0.001, 1e6]", r)
		}
	}
	seen := map[string]bool{}
	for _, f := range g.Fleets {
		if seen[f.Name] {
			return fmt.Errorf("--grid-fleets names %q twice", f.Name)
		}
		seen[f.Name] = true
		if n := len(f.Speeds); n != 1 && n != workers {
			return fmt.Errorf("--grid-fleets %s has %d speeds for --workers %d: give one per worker, or one for all", f.Name, n, workers)
		}
	}
	if !g.On && (len(g.Replay) > 0 || len(g.Fleets) > 0) {
		return fmt.Errorf("--grid-replay and --grid-fleets need --grid")
	}
	return nil
}

package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/sim"
)

func TestSimFleetFlags(t *testing.T) {
	s, _, err := LoadCommand[Sim](strings.Fields("--workers 4 --worker-speeds 1,1,2,2 --worker-batch-tokens 4096 --worker-kv-blocks 100,200,300,400"+
		" --grid --grid-replay 1,4 --parallel 2"), DefaultSim, Options{Name: "sim",
		Environ: []string{"KVROUTER_WORKER_SPEED_CHANGE=60s=0.5;2m=1,1,1,0.25", "KVROUTER_GRID_FLEETS=uniform=1; 1,3,1,3"}})
	if err != nil {
		t.Fatal(err)
	}
	f := s.Sim.Fleet
	if !reflect.DeepEqual(f.Speeds, []float64{1, 1, 2, 2}) || !reflect.DeepEqual(f.BatchTokens, []int{4096}) ||
		!reflect.DeepEqual(f.KVBlocks, []int{100, 200, 300, 400}) {
		t.Fatalf("fleet %+v", f)
	}
	want := []sim.SpeedChange{{At: time.Minute, Speeds: []float64{0.5}}, {At: 2 * time.Minute, Speeds: []float64{1, 1, 1, 0.25}}}
	if !reflect.DeepEqual(s.Sim.SpeedChanges, want) {
		t.Fatalf("speed changes %+v", s.Sim.SpeedChanges)
	}
	fl := []sim.FleetSpeeds{{Name: "uniform", Speeds: []float64{1}}, {Name: "1,3,1,3", Speeds: []float64{1, 3, 1, 3}}}
	if g := s.Grid; !g.On || g.Parallel != 2 || !reflect.DeepEqual(g.Replay, []float64{1, 4}) || !reflect.DeepEqual(g.Fleets, fl) {
		t.Fatalf("grid %+v", g)
	}
	// The values print back as they parse.
	if got := (*speedSchedule)(&s.Sim.SpeedChanges).String(); got != "1m0s=0.5;2m0s=1,1,1,0.25" {
		t.Fatalf("schedule prints %q", got)
	}
	if got := (*fleetList)(&s.Grid.Fleets).String(); got != "uniform=1;1,3,1,3=1,3,1,3" {
		t.Fatalf("fleets print %q", got)
	}
}

func TestFleetFlagErrors(t *testing.T) {
	for _, c := range []struct {
		cmd, args, want string
		usage           bool
	}{
		{"sim", "--workers 8 --worker-speeds 1,2,3", "--worker-speeds has 3 values for --workers 8", false},
		{"sim", "--workers 2 --worker-kv-blocks 1,2,3", "--worker-kv-blocks has 3 values for --workers 2", false},
		{"sim", "--workers 2 --worker-batch-tokens 1,2,3", "--worker-batch-tokens has 3 values for --workers 2", false},
		{"sim", "--workers 2 --worker-speeds 1,0", "worker speeds value 2 is 0", false},
		{"sim", "--worker-speeds 1,fast", `"fast" is not a number`, true},
		{"sim", "--worker-batch-tokens 1.5", `"1.5" is not an integer`, true},
		{"sim", "--workers 2 --worker-speed-change 60s=1,1,1", "--worker-speed-change at 1m0s has 3 speeds for --workers 2", false},
		{"sim", "--worker-speed-change 60s=1;30s=2", "times must be non-negative and increasing", false},
		{"sim", "--worker-speed-change 0.5", "want TIME=SPEEDS", true},
		{"sim", "--worker-speed-change soon=1", `"soon" is not a duration`, true},
		{"sim", "--grid-replay 4", "need --grid", false},
		{"sim", "--grid --grid-replay 0", "--grid-replay 0", false},
		{"sim", "--grid --parallel 0", "--parallel 0", false},
		{"sim", "--grid --workers 4 --grid-fleets a=1,2", "--grid-fleets a has 2 speeds for --workers 4", false},
		{"sim", "--grid --grid-fleets a=1;a=2", `names "a" twice`, false},
		{"up", "--mock-workers 4 --worker-speeds 1,2", "--worker-speeds has 2 values for --mock-workers 4", false},
		{"up", "--mock-workers 2 --worker-speeds 1,-2", "worker speeds value 2 is -2", false},
		{"mocker", "--num-workers 3 --worker-kv-blocks 64,64", "--worker-kv-blocks has 2 values for --num-workers 3", false},
		{"mocker", "--num-workers 2 --worker-kv-blocks 64,1", "worker 1: invalid mocker config: num GPU blocks 1", false},
	} {
		var err error
		args, o := strings.Fields(c.args), Options{Name: c.cmd}
		switch c.cmd {
		case "sim":
			_, _, err = LoadCommand[Sim](args, DefaultSim, o)
		case "up":
			_, _, err = LoadCommand[Up](args, DefaultUp, o)
		case "mocker":
			_, _, err = LoadCommand[Mocker](args, DefaultMocker, o)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrUsage) != c.usage {
			t.Errorf("%s %s: %v; want an error saying %q (usage error: %v)", c.cmd, c.args, err, c.want, c.usage)
		}
	}
	// One value for all workers is fine everywhere.
	if _, _, err := LoadCommand[Up](strings.Fields("--mock-workers 3 --worker-speeds 2 --worker-kv-blocks 1024"), DefaultUp, Options{Name: "up"}); err != nil {
		t.Fatal(err)
	}
}

// TestLongPrefillTokenThreshold: --long-prefill-token-threshold reaches
// the engine config of sim's engines, up's mock fleet and the mocker's
// workers (from a flag and from the environment), and a negative value is
// refused.
func TestLongPrefillTokenThreshold(t *testing.T) {
	s, _, err := LoadCommand[Sim](strings.Fields("--long-prefill-token-threshold 1024"), DefaultSim, Options{Name: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := LoadCommand[Up](nil, DefaultUp, Options{Name: "up", Environ: []string{"KVROUTER_LONG_PREFILL_TOKEN_THRESHOLD=2048"}})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := LoadCommand[Mocker](strings.Fields("--long-prefill-token-threshold 512"), DefaultMocker, Options{Name: "mocker"})
	if err != nil {
		t.Fatal(err)
	}
	if got := [3]int{s.Sim.Engine.LongPrefillTokenThreshold, u.FleetEngine().LongPrefillTokenThreshold, m.Server.Engine.LongPrefillTokenThreshold}; got != [3]int{1024, 2048, 512} {
		t.Fatalf("sim, up, mocker thresholds %v, want [1024 2048 512]", got)
	}
	for _, cmd := range []string{"sim", "up", "mocker"} {
		args := strings.Fields("--long-prefill-token-threshold -1")
		var err error
		switch cmd {
		case "sim":
			_, _, err = LoadCommand[Sim](args, DefaultSim, Options{Name: cmd})
		case "up":
			_, _, err = LoadCommand[Up](args, DefaultUp, Options{Name: cmd})
		default:
			_, _, err = LoadCommand[Mocker](args, DefaultMocker, Options{Name: cmd})
		}
		if err == nil || !strings.Contains(err.Error(), "long prefill token threshold -1") {
			t.Errorf("%s with threshold -1: got %v", cmd, err)
		}
	}
}

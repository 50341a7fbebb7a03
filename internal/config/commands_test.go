package config

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// precedenceCase is one subcommand and one of its options: how to load the
// command and read the option back as text.
type precedenceCase struct {
	cmd, key         string
	file, env, flagv string // three distinct values
	load             func(args []string, o Options) (string, error)
}

func loadAs[T any, P interface {
	*T
	Command
}](defaults func() T, get func(*T) any) func([]string, Options) (string, error) {
	return func(args []string, o Options) (string, error) {
		c, _, err := LoadCommand[T, P](args, defaults, o)
		return fmt.Sprint(get(&c)), err
	}
}

// required are the flags a command refuses to start without, given on
// every load of the precedence test.
var required = map[string][]string{"agent": {"--name", "w1", "--url", "http://127.0.0.1:9"}}

func precedenceCases() []precedenceCase {
	return []precedenceCase{
		{"serve", "router-temperature", "0.25", "0.5", "0.75", loadAs(Default, func(c *Config) any { return c.Router.Temperature })},
		{"up", "mock-workers", "3", "5", "7", loadAs(DefaultUp, func(c *Up) any { return c.MockWorkers })},
		{"up", "block-size", "32", "64", "8", loadAs(DefaultUp, func(c *Up) any { return c.FleetEngine().BlockSize })},
		{"agent", "kv-events-topic", "a", "b", "c", loadAs(DefaultAgent, func(c *Agent) any { return c.Core.Topic })},
		{"agent", "nats-token", "t1", "t2", "t3", loadAs(DefaultAgent, func(c *Agent) any { return c.NATS.Token })},
		{"mocker", "block-size", "32", "64", "8", loadAs(DefaultMocker, func(c *Mocker) any { return c.Server.Engine.BlockSize })},
		{"mocker", "kv-transfer-bandwidth", "1", "2", "3", loadAs(DefaultMocker, func(c *Mocker) any { return c.ServerConfig().Engine.KVTransferBandwidth / 1e9 })},
		{"sim", "policy", "kv", "random", "round-robin", loadAs(DefaultSim, func(c *Sim) any { return c.Policies })},
		{"sim", "isl", "100", "200", "300", loadAs(DefaultSim, func(c *Sim) any { return c.Workload.PrefixRatio.ISL })},
		{"bench online", "url", "http://a:1", "http://b:2", "http://c:3", loadAs(DefaultBenchOnline, func(c *BenchOnline) any { return c.Load.URL })},
		{"bench index", "writers", "2", "3", "5", loadAs(DefaultBenchIndex, func(c *BenchIndex) any { return c.Run.Writers })},
		{"hash", "block-size", "4", "8", "32", loadAs(DefaultHash, func(c *Hash) any { return c.BlockSize })},
	}
}

// TestEveryCommandLayers sets one option of every subcommand in each
// combination of layers and checks that the highest present wins:
// defaults < file < env < flags.
func TestEveryCommandLayers(t *testing.T) {
	for _, tc := range precedenceCases() {
		def, err := tc.load(required[tc.cmd], Options{Name: tc.cmd})
		if err != nil {
			t.Fatalf("%s with defaults: %v", tc.cmd, err)
		}
		for mask := range 8 {
			inFile, inEnv, inFlag := mask&1 != 0, mask&2 != 0, mask&4 != 0
			want, args, o := def, append([]string(nil), required[tc.cmd]...), Options{Name: tc.cmd}
			if inFile {
				args = append(args, "--config", writeFile(t, tc.key+": "+tc.file+"\n"))
				want = tc.file
			}
			if inEnv {
				o.Environ = []string{EnvName(tc.key) + "=" + tc.env}
				want = tc.env
			}
			if inFlag {
				args = append(args, "--"+tc.key+"="+tc.flagv)
				want = tc.flagv
			}
			got, err := tc.load(args, o)
			if err != nil || got != want {
				t.Errorf("%s --%s file=%v env=%v flag=%v: got %q (%v), want %q", tc.cmd, tc.key, inFile, inEnv, inFlag, got, err, want)
			}
		}
	}
}

// TestUpFleetSizeKey: the mock-fleet size has its own key, mock-workers,
// in every layer; the older workers: key sets it too in up's file (where no
// static list exists); --worker is not one of up's flags.
func TestUpFleetSizeKey(t *testing.T) {
	for _, body := range []string{"mock-workers: 3\n", "workers: 3\n"} {
		u, _, err := LoadCommand[Up]([]string{"--config", writeFile(t, body)}, DefaultUp, Options{Name: "up"})
		if err != nil || u.MockWorkers != 3 {
			t.Errorf("%q: mock workers %d, %v; want 3", body, u.MockWorkers, err)
		}
	}
	if _, _, err := LoadCommand[Up]([]string{"--config", writeFile(t, "workers: [{name: a, url: 'http://h:1'}]\n")}, DefaultUp, Options{Name: "up"}); err == nil ||
		!strings.Contains(err.Error(), "mock-workers") {
		t.Errorf("up with a static worker list: %v, want an error pointing at mock-workers", err)
	}
	_, _, err := LoadCommand[Up]([]string{"--worker", "name=w1,url=http://h:1"}, DefaultUp, Options{Name: "up"})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "-worker") {
		t.Errorf("up --worker: %v, want a usage error naming -worker", err)
	}
	var help strings.Builder
	if _, _, err := LoadCommand[Up]([]string{"-h"}, DefaultUp, Options{Name: "up", Output: &help}); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	if strings.Contains(help.String(), "  -worker ") || !strings.Contains(help.String(), "  -mock-workers ") {
		t.Errorf("up -h lists -worker or misses -mock-workers:\n%s", help.String())
	}
	if _, _, err := LoadCommand[Up]([]string{"--mock-workers", "0"}, DefaultUp, Options{Name: "up"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("--mock-workers 0: %v", err)
	}
	if _, _, err := LoadCommand[Up]([]string{"--no-nats", "--router-replica-sync"}, DefaultUp, Options{Name: "up"}); err == nil {
		t.Error("--no-nats with replica sync accepted")
	}
	u, _, err := LoadCommand[Up]([]string{"--no-nats"}, DefaultUp, Options{Name: "up"})
	if err != nil || u.Router().EventPlane.Kind != PlaneNone {
		t.Errorf("--no-nats: plane %q, %v", u.Router().EventPlane.Kind, err)
	}
}

// TestEnvironmentOfOtherCommands: a KVROUTER_ variable another subcommand
// reads is ignored, one that no subcommand reads is refused as a typo.
func TestEnvironmentOfOtherCommands(t *testing.T) {
	if _, _, err := LoadCommand[Hash](nil, DefaultHash, Options{Environ: []string{"KVROUTER_API_KEYS=k", "KVROUTER_NUM_WORKERS=3"}}); err != nil {
		t.Errorf("hash with serve's and mocker's variables: %v", err)
	}
	_, _, err := LoadCommand[Hash](nil, DefaultHash, Options{Environ: []string{"KVROUTER_BLOCK_SIZ=3"}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "KVROUTER_BLOCK_SIZ") {
		t.Errorf("misspelt variable: %v", err)
	}
}

// TestDefaultsPair: the mocker's defaults are what serve's defaults
// accept: the same block size, loopback, a port that is not the router's;
// a worker record built from them passes serve's static-list checks.
func TestDefaultsPair(t *testing.T) {
	s, m := Default(), DefaultMocker()
	if m.Server.Engine.BlockSize != s.BlockSize {
		t.Errorf("mocker block size %d, serve %d", m.Server.Engine.BlockSize, s.BlockSize)
	}
	if m.Host != "127.0.0.1" || s.Host != "127.0.0.1" {
		t.Errorf("hosts %q / %q, want loopback", m.Host, s.Host)
	}
	if m.Port <= s.Port && s.Port < m.Port+m.NumWorkers {
		t.Errorf("mocker ports [%d, %d) include the router's %d", m.Port, m.Port+m.NumWorkers, s.Port)
	}
	if a := DefaultAgent(); a.Core.Record.BlockSize != s.BlockSize {
		t.Errorf("agent block size %d, serve %d", a.Core.Record.BlockSize, s.BlockSize)
	}
	if h := DefaultHash(); h.BlockSize != s.BlockSize {
		t.Errorf("hash block size %d, serve %d", h.BlockSize, s.BlockSize)
	}
	ev, err := m.KVEvents()
	if err != nil {
		t.Fatal(err)
	}
	s.EventPlane.Kind = PlaneNone
	s.Workers = []fleet.StaticWorker{{Name: "m", URL: fmt.Sprintf("http://%s:%d", m.Host, m.Port), Events: strings.Replace(ev.Endpoint, "*", "127.0.0.1", 1),
		BlockSize: m.Server.Engine.BlockSize}}
	recs, err := s.WorkerRecords()
	if err != nil || len(recs) != 1 || recs[0].BlockSize != s.BlockSize {
		t.Fatalf("serve refuses the default mocker: %v %+v", err, recs)
	}
	for name, c := range Commands() {
		if err := c.Validate(); err != nil && name != "agent" { // the agent needs --name and --url
			t.Errorf("%s defaults: %v", name, err)
		}
	}
}

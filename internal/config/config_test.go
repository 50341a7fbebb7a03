package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvrouter.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsValidate(t *testing.T) {
	c, err := Load(nil, Options{Name: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default(), c); diff != "" {
		t.Fatalf("Load with nothing set differs from Default (-want +got):\n%s", diff)
	}
	if c.Addr() != "127.0.0.1:8000" {
		t.Fatalf("default address %s, want 127.0.0.1:8000", c.Addr())
	}
	rc := c.RouterConfig()
	if rc.BlockSize != 16 || rc.Scheduler.OverlapScoreCredit != 1 || rc.Scheduler.Temperature != 0 {
		t.Fatalf("router config from defaults: %+v", rc)
	}
	if ic := c.IndexConfig(); ic.Index.ApproxTTL != 120*time.Second || ic.Writers != 4 {
		t.Fatalf("index config from defaults: %+v", ic)
	}
}

// TestPrecedence sets one option in every layer combination and checks
// that the highest layer present wins: defaults < file < env < flags.
func TestPrecedence(t *testing.T) {
	type layer struct {
		file, env, flag bool
	}
	for _, l := range []layer{{}, {file: true}, {env: true}, {flag: true}, {true, true, false}, {true, false, true}, {false, true, true}, {true, true, true}} {
		var file, want = "", 0.0
		var env []string
		var args []string
		want = 0 // the default temperature
		if l.file {
			file = writeFile(t, "router-temperature: 0.25\nport: 9001\n")
			want = 0.25
		}
		if l.env {
			env = append(env, "KVROUTER_ROUTER_TEMPERATURE=0.5")
			want = 0.5
		}
		if l.flag {
			args = append(args, "--router-temperature", "0.75")
			want = 0.75
		}
		if file != "" {
			args = append(args, "--config", file)
		}
		c, err := Load(args, Options{Name: "serve", Environ: env})
		if err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if c.Router.Temperature != want {
			t.Errorf("%+v: temperature %v, want %v", l, c.Router.Temperature, want)
		}
		if l.file && c.Port != 9001 {
			t.Errorf("%+v: file's port lost: %d", l, c.Port)
		}
	}
}

// TestStaggerGapFromEveryLayer: --router-queue-stagger-gap takes "auto"
// or a duration from a flag, the file and the environment, and reaches
// the admission queue's config as StaggerAuto or StaggerGap.
func TestStaggerGapFromEveryLayer(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []string
		auto bool
		gap  time.Duration
	}{
		{},
		{args: []string{"--router-queue-stagger-gap", "auto"}, auto: true},
		{args: []string{"--config", writeFile(t, "router-queue-stagger-gap: auto\n")}, auto: true},
		{env: []string{"KVROUTER_ROUTER_QUEUE_STAGGER_GAP=22ms"}, gap: 22 * time.Millisecond},
		{args: []string{"--router-queue-stagger-gap", "auto"}, env: []string{"KVROUTER_ROUTER_QUEUE_STAGGER_GAP=5ms"}, auto: true},
		{args: []string{"--router-queue-stagger-gap", "0"}},
	} {
		c, err := Load(tc.args, Options{Name: "serve", Environ: tc.env})
		if err != nil {
			t.Fatalf("%v %v: %v", tc.args, tc.env, err)
		}
		a := c.Queue.admission()
		if a.StaggerAuto != tc.auto || a.StaggerGap != tc.gap {
			t.Errorf("%v %v: auto %v gap %v, want %v %v", tc.args, tc.env, a.StaggerAuto, a.StaggerGap, tc.auto, tc.gap)
		}
		if err := a.Validate(); err != nil {
			t.Errorf("%v %v: admission config invalid: %v", tc.args, tc.env, err)
		}
	}
}

func TestConfigFileFromEnv(t *testing.T) {
	p := writeFile(t, "block-size: 32\n")
	c, err := Load(nil, Options{Environ: []string{"KVROUTER_CONFIG=" + p, "PATH=/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.BlockSize != 32 || c.File != p {
		t.Fatalf("block size %d file %q", c.BlockSize, c.File)
	}
	// --config wins over KVROUTER_CONFIG.
	q := writeFile(t, "block-size: 64\n")
	c, err = Load([]string{"--config", q}, Options{Environ: []string{"KVROUTER_CONFIG=" + p}})
	if err != nil {
		t.Fatal(err)
	}
	if c.BlockSize != 64 {
		t.Fatalf("block size %d, want 64 from --config", c.BlockSize)
	}
}

func TestWorkersFromEveryLayer(t *testing.T) {
	p := writeFile(t, `
workers:
  - name: w1
    url: http://127.0.0.1:9001
    events: tcp://127.0.0.1:5557
    replay: tcp://127.0.0.1:5558
    block-size: 16
  - name: w2
    url: http://127.0.0.1:9002
api-keys: [k1, k2]
`)
	c, err := Load([]string{"--config", p, "--worker", "name=w4,url=http://127.0.0.1:9004"},
		Options{Environ: []string{"KVROUTER_WORKER=name=w3,url=http://127.0.0.1:9003;"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range c.Workers {
		names = append(names, w.Name)
	}
	if diff := cmp.Diff([]string{"w1", "w2", "w3", "w4"}, names); diff != "" {
		t.Fatalf("workers (-want +got):\n%s", diff)
	}
	if c.Workers[0].Replay != "tcp://127.0.0.1:5558" || c.Workers[0].Events != "tcp://127.0.0.1:5557" {
		t.Fatalf("w1 = %+v", c.Workers[0])
	}
	if diff := cmp.Diff([]string{"k1", "k2"}, c.Frontend.APIKeys); diff != "" {
		t.Fatalf("api keys: %s", diff)
	}
	recs, err := c.WorkerRecords()
	if err != nil || len(recs) != 4 || recs[1].BlockSize != 16 {
		t.Fatalf("records %+v, %v", recs, err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		env     []string
		args    []string
		wantErr string
	}{
		{name: "unknown yaml key", file: "router-temprature: 1\n", wantErr: `unknown key "router-temprature"`},
		{name: "unknown worker key", file: "workers:\n  - name: w1\n    url: http://h:1\n    blocksize: 16\n", wantErr: "blocksize"},
		{name: "worker singular key", file: "worker: []\n", wantErr: "workers:"},
		{name: "yaml not mapping", file: "- a\n- b\n", wantErr: "mapping"},
		{name: "yaml bad value", file: "port: eighty\n", wantErr: "port"},
		{name: "yaml list for scalar", file: "port: [1, 2]\n", wantErr: "list is not accepted"},
		{name: "yaml duplicate", file: "port: 1\nport: 2\n", wantErr: "given twice"},
		{name: "yaml syntax", file: "port: : :\n", wantErr: "config file"},
		{name: "config in file", file: "config: x.yaml\n", wantErr: "cannot be set inside"},
		{name: "unknown env", env: []string{"KVROUTER_ROUTER_TEMPRATURE=1"}, wantErr: "KVROUTER_ROUTER_TEMPRATURE"},
		{name: "bad env value", env: []string{"KVROUTER_BLOCK_SIZE=x"}, wantErr: "KVROUTER_BLOCK_SIZE"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "nope"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "port range", args: []string{"--port", "70000"}, wantErr: "--port 70000"},
		{name: "block size", args: []string{"--block-size", "0"}, wantErr: "--block-size 0"},
		{name: "negative temperature", args: []string{"--router-temperature", "-1"}, wantErr: "temperature"},
		{name: "policy", args: []string{"--router-mode", "best"}, wantErr: "best"},
		{name: "event threads", args: []string{"--router-event-threads", "0"}, wantErr: "--router-event-threads"},
		{name: "ttl", args: []string{"--router-ttl-secs", "0"}, wantErr: "--router-ttl-secs"},
		{name: "log level", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "prune ratio", args: []string{"--router-prune-target-ratio", "1.5"}, wantErr: "PruneRatio"},
		{name: "empty api key", args: []string{"--api-keys", "a,,b"}, wantErr: "api key 1 is empty"},
		{name: "bad worker", args: []string{"--worker", "name=w1"}, wantErr: "url"},
		{name: "duplicate worker", args: []string{"--worker", "name=w1,url=http://h:1", "--worker", "name=w1,url=http://h:2"}, wantErr: "duplicate"},
		{name: "missing file", args: []string{"--config", "/nonexistent/kvrouter.yaml"}, wantErr: "reading config file"},
		{name: "health failures", args: []string{"--worker-health-failures", "0"}, wantErr: "--worker-health-failures"},
		{name: "stagger gap word", args: []string{"--router-queue-stagger-gap", "soon"}, wantErr: "neither auto nor a duration"},
		{name: "negative stagger gap", env: []string{"KVROUTER_ROUTER_QUEUE_STAGGER_GAP=-1ms"}, wantErr: "KVROUTER_ROUTER_QUEUE_STAGGER_GAP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, tc.file)}, args...)
			}
			_, err := Load(args, Options{Name: "serve", Environ: tc.env})
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var b strings.Builder
	_, err := Load([]string{"-h"}, Options{Name: "serve", Output: &b, Usage: "Usage: kvrouter serve [flags]"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(b.String(), "Usage: kvrouter serve") || !strings.Contains(b.String(), "-router-temperature") {
		t.Fatalf("usage output:\n%s", b.String())
	}
}

// TestEveryOptionDocumented checks that docs/config.md lists every flag
// with its environment variable, so the reference cannot fall behind.
func TestEveryOptionDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.Bind(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !regexp.MustCompile("`--" + regexp.QuoteMeta(f.Name) + "`").MatchString(doc) {
			t.Errorf("docs/config.md does not document --%s", f.Name)
		}
		if !strings.Contains(doc, EnvName(f.Name)) {
			t.Errorf("docs/config.md does not name %s", EnvName(f.Name))
		}
	})
}

func TestEnvName(t *testing.T) {
	if got := EnvName("router-temperature"); got != "KVROUTER_ROUTER_TEMPERATURE" {
		t.Fatal(got)
	}
}

// TestEventPlaneOptions checks the event plane's combinations and that the
// NATS secrets come through the environment.
func TestEventPlaneOptions(t *testing.T) {
	c, err := Load([]string{"--nats-url", "nats://10.0.0.1:4222", "--namespace", "prod"},
		Options{Environ: []string{"KVROUTER_NATS_TOKEN=s3cret", "KVROUTER_ROUTER_REPLICA_SYNC=true"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.EventPlane.Kind != PlaneNATS || c.NATSConfig().Token != "s3cret" || c.NATSConfig().URL != "nats://10.0.0.1:4222" ||
		c.EventPlane.Namespace != "prod" || c.EventPlane.Component != "backend" || !c.EventPlane.ReplicaSync {
		t.Fatalf("event plane %+v", c.EventPlane)
	}
	if c.EventPlane.ReplicaResyncInterval != 30*time.Second {
		t.Fatalf("replica resync interval %v, want the documented 30s", c.EventPlane.ReplicaResyncInterval)
	}
	if c.NATSConfig().DataDir != c.DataDir {
		t.Fatalf("NATS data dir %q, want --data-dir %q", c.NATSConfig().DataDir, c.DataDir)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--event-plane", "kafka"}, `--event-plane "kafka"`},
		{[]string{"--event-plane", "zmq", "--router-replica-sync"}, "--router-replica-sync needs --event-plane nats"},
		{[]string{"--event-plane", "none", "--durable-kv-events"}, "--durable-kv-events needs --event-plane nats"},
		{[]string{"--namespace", "a.b"}, "--namespace"},
		{[]string{"--component", ""}, "--component"},
		{[]string{"--router-snapshot-threshold", "0"}, "--router-snapshot-threshold"},
		{[]string{"--router-replica-resync-interval", "-1s"}, "--router-replica-resync-interval"},
		{[]string{"--registry-resync", "10ms"}, "resync"},
		{[]string{"--registry-ttl", "10ms"}, "ttl"},
		{[]string{"--durable-kv-events"}, "--durable-kv-events needs --router-id"},
	} {
		_, err := Load(tc.args, Options{})
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.want)) {
			t.Errorf("%v: got %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	if _, err := Load([]string{"--event-plane", "zmq"}, Options{}); err != nil {
		t.Fatalf("--event-plane zmq: %v", err)
	}
	if c, err := Load([]string{"--durable-kv-events", "--router-id", "3"}, Options{}); err != nil || c.DurableConfig(3).RouterID != "3" {
		t.Fatalf("durable with a router id: %v", err)
	}
}

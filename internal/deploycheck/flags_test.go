package deploycheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
)

// pendingFlags are flags that docs/ and the design name for a subcommand
// and the manifests already use, but that the code does not define yet. A
// pending flag is checked for spelling only (it must be in this list); the
// rest of the arguments still go through the parser. Once the code defines a
// flag, TestKvrouterArgsParse fails until it is removed from here, so the
// list cannot rot.
var pendingFlags = map[string][]string{}

// pendingCommands are subcommands the manifests use that the binary does not
// have yet; their containers are skipped (with the reason) until it does,
// then checked like the others.
var pendingCommands = map[string]string{}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// kvrouterBinary builds cmd/kvrouter once per test run.
func kvrouterBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := tempDirShared()
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "kvrouter")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/kvrouter")
		cmd.Dir = repoRoot
		cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New("go build ./cmd/kvrouter: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// flagLine matches a flag in flag.PrintDefaults output ("  -name type").
var flagLine = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9._-]*)`)

// definedFlags runs `kvrouter <sub> -h` and reads the flag names it prints
// on stdout;
// ok is false when the binary does not know the subcommand.
func definedFlags(t *testing.T, bin, sub string) (flags map[string]bool, ok bool) {
	t.Helper()
	code, stdout, stderr := runBinary(t, bin, []string{sub, "-h"}, nil)
	if code != 0 {
		if strings.Contains(stderr, "unknown command") {
			return nil, false
		}
		t.Fatalf("kvrouter %s -h exited %d:\n%s", sub, code, stderr)
	}
	flags = map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(stdout, -1) { // help goes to stdout
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("kvrouter %s -h listed no flags:\n%s", sub, stdout)
	}
	return flags, true
}

func runBinary(t *testing.T, bin string, args, env []string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kvrouter %s did not exit: the arguments must all be flags so that the trailing -h stops it", strings.Join(args, " "))
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// splitFlag returns the name and value of "--name=value" or "--name".
func splitFlag(arg string) (name, value string, hasValue, ok bool) {
	if !strings.HasPrefix(arg, "--") || len(arg) < 3 {
		return "", "", false, false
	}
	name, value, hasValue = strings.Cut(arg[2:], "=")
	return name, value, hasValue, name != ""
}

// TestKvrouterArgsParse gives every kvrouter container's arguments to the
// real parser of its subcommand, so that a misspelt or removed flag, a bad
// value or a config the router would refuse fails here and not in a cluster.
func TestKvrouterArgsParse(t *testing.T) {
	objs := loadManifests(t)
	bin := kvrouterBinary(t)
	known := map[string]map[string]bool{}
	seen := 0
	for _, pc := range containersOf(objs) {
		c := pc.c
		if !isKvrouter(c) {
			continue
		}
		seen++
		name := filepath.Base(pc.obj.file) + "/" + pc.obj.Metadata.Name + "/" + c.Name
		t.Run(name, func(t *testing.T) {
			if len(c.Command) > 0 && !(len(c.Command) == 1 && filepath.Base(c.Command[0]) == "kvrouter") {
				t.Fatalf("command %q: leave it empty (the image's ENTRYPOINT is kvrouter) or [kvrouter]", c.Command)
			}
			if len(c.Args) == 0 {
				t.Fatal("no args: name the subcommand")
			}
			env, expand := environment(c)
			sub := c.Args[0]
			defined, ok := known[sub]
			if !ok {
				if defined, ok = definedFlags(t, bin, sub); ok {
					known[sub] = defined
				}
			}
			why, pending := pendingCommands[sub]
			switch {
			case !ok && pending:
				t.Skipf("kvrouter %s: %s; its arguments are checked once it exists", sub, why)
			case !ok:
				t.Fatalf("kvrouter has no subcommand %q", sub)
			case pending:
				t.Fatalf("kvrouter %s exists now: remove it from pendingCommands", sub)
			}
			isPending := map[string]bool{}
			for _, f := range pendingFlags[sub] {
				isPending[f] = true
				if defined[f] {
					t.Errorf("--%s is defined by kvrouter %s now: remove it from pendingFlags", f, sub)
				}
			}
			var args []string
			for _, raw := range c.Args[1:] {
				arg := expand(raw)
				fname, _, _, ok := splitFlag(arg)
				switch {
				case !ok:
					t.Errorf("argument %q: write kvrouter flags as --name=value (or --name for a boolean)", raw)
				case defined[fname]:
					args = append(args, arg)
				case isPending[fname]:
					t.Logf("--%s: pending in the code, spelling checked only", fname)
				default:
					t.Errorf("kvrouter %s has no flag --%s (argument %q)", sub, fname, raw)
				}
			}
			// The real parser: flags first, then -h, so it stops before running.
			environ := kvrouterEnviron(env)
			code, _, stderr := runBinary(t, bin, append(append([]string{sub}, args...), "-h"), environ)
			if code != 0 {
				t.Errorf("kvrouter %s %s -h exited %d:\n%s", sub, strings.Join(args, " "), code, firstLines(stderr, 5))
			}
			if sub == "serve" || sub == "up" {
				checkServe(t, pc, args, environ)
			}
		})
	}
	if seen == 0 {
		t.Fatal("no kvrouter containers found")
	}
}

// checkServe loads the router's configuration exactly as `kvrouter serve`
// does (flags, KVROUTER_* environment, validation) and checks the probes
// against the port it will listen on.
func checkServe(t *testing.T, pc podContainer, args, environ []string) {
	t.Helper()
	cfg, err := config.Load(args, config.Options{Name: "serve", Environ: environ})
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	if cfg.Host == "127.0.0.1" || cfg.Host == "localhost" {
		t.Errorf("--host %s: a pod must listen beyond loopback (--host=0.0.0.0)", cfg.Host)
	}
	c := pc.c
	for _, p := range []struct {
		name string
		pr   *probe
		path string
	}{{"livenessProbe", c.LivenessProbe, "/health"}, {"readinessProbe", c.ReadinessProbe, "/ready"}} {
		if p.pr == nil || p.pr.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe on %s", p.name, p.path)
			continue
		}
		if p.pr.HTTPGet.Path != p.path {
			t.Errorf("%s path %q, want %q", p.name, p.pr.HTTPGet.Path, p.path)
		}
		if got := containerPort(c, p.pr.HTTPGet.Port); got != cfg.Port {
			t.Errorf("%s port %v is container port %d; the router listens on --port %d", p.name, p.pr.HTTPGet.Port, got, cfg.Port)
		}
	}
	if len(cfg.Frontend.APIKeys) == 0 {
		t.Errorf("no API keys: the front door would be open (set KVROUTER_API_KEYS from a Secret)")
	}
	for _, a := range args {
		if strings.Contains(a, "api-keys") || strings.Contains(a, "admin-keys") {
			t.Errorf("argument %q: keys belong in the environment from a Secret, not in args", a)
		}
	}
}

func containerPort(c container, port any) int {
	switch v := port.(type) {
	case int:
		return v
	case string:
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		for _, p := range c.Ports {
			if p.Name == v {
				return p.ContainerPort
			}
		}
	}
	return -1
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// TestEngineEmitsKVEvents checks that every vLLM container turns KV events
// on, with a JSON --kv-events-config, and publishes them where its pod's
// agent reads them.
func TestEngineEmitsKVEvents(t *testing.T) {
	objs := loadManifests(t)
	n := 0
	for _, pc := range containersOf(objs) {
		if !strings.Contains(pc.c.Image, "vllm") {
			continue
		}
		n++
		var raw string
		for _, a := range pc.c.Args {
			if v, ok := strings.CutPrefix(a, "--kv-events-config="); ok {
				raw = v
			}
		}
		if raw == "" {
			t.Errorf("%s container %s: no --kv-events-config=", pc.obj.Metadata.Name, pc.c.Name)
			continue
		}
		var kc struct {
			Enable   bool   `json:"enable_kv_cache_events"`
			Endpoint string `json:"endpoint"`
			Replay   string `json:"replay_endpoint"`
			Topic    string `json:"topic"`
		}
		dec := json.NewDecoder(strings.NewReader(raw))
		if err := dec.Decode(&kc); err != nil {
			t.Errorf("%s: --kv-events-config is not JSON: %v", pc.obj.Metadata.Name, err)
			continue
		}
		if !kc.Enable || kc.Endpoint == "" {
			t.Errorf("%s: --kv-events-config must enable events and name an endpoint: %s", pc.obj.Metadata.Name, raw)
		}
		// The sidecar in the same pod must read that endpoint.
		found := false
		for _, side := range pc.obj.Spec.Template.Spec.Containers {
			if !isKvrouter(side) {
				continue
			}
			for _, a := range side.Args {
				if strings.HasSuffix(a, "="+kc.Endpoint) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s: no kvrouter sidecar reads the engine's event endpoint %s", pc.obj.Metadata.Name, kc.Endpoint)
		}
	}
	if n == 0 {
		t.Fatal("no vLLM worker in deploy/")
	}
}

// TestBlockSizeAgrees checks that the router, the engines and the agents
// all declare the same KV block size: a worker with another one is refused.
func TestBlockSizeAgrees(t *testing.T) {
	objs := loadManifests(t)
	sizes := map[string][]string{}
	for _, pc := range containersOf(objs) {
		for _, a := range pc.c.Args {
			if v, ok := strings.CutPrefix(a, "--block-size="); ok {
				sizes[v] = append(sizes[v], pc.obj.Metadata.Name+"/"+pc.c.Name)
			}
		}
	}
	if len(sizes) != 1 {
		t.Fatalf("containers disagree on --block-size (or none sets it): %v", sizes)
	}
	for v, who := range sizes {
		if len(who) < 3 {
			t.Errorf("--block-size=%s set only by %v: set it on the router, the engine and the agent", v, who)
		}
	}
}

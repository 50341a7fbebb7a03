package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/logtest"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// subcommands are every command line that has its own --help.
func subcommands() [][]string {
	var out [][]string
	for name := range commands {
		if name == "bench" {
			out = append(out, []string{"bench"})
			for sub := range benchSubs {
				out = append(out, []string{"bench", sub})
			}
			continue
		}
		out = append(out, []string{name})
	}
	return out
}

// TestHelpGoesToStdout: every subcommand's --help is written to stdout
// (so it pipes into less), exits 0, writes nothing to stderr, and opens
// with one sentence saying what the command is for.
func TestHelpGoesToStdout(t *testing.T) {
	sentence := regexp.MustCompile(`^[A-Z][^.]*[a-z)]\.$`) // one sentence: no period before the last
	for _, cmd := range append(subcommands(), nil) {
		for _, h := range []string{"--help", "-h"} {
			args := append(append([]string(nil), cmd...), h)
			code, out, errs := runCmd(t, "", args...)
			if code != 0 || errs != "" {
				t.Errorf("%v: exit %d, stderr %q", args, code, errs)
			}
			first, _, _ := strings.Cut(out, "\n")
			if cmd != nil && !sentence.MatchString(first) {
				t.Errorf("%v: help opens with %q, want one sentence", args, first)
			}
			if strings.Contains(out, "DESIGN") {
				t.Errorf("%v: help cites DESIGN, which is not in the repository", args)
			}
			if len(cmd) == 1 && cmd[0] != "bench" && cmd[0] != "version" && !strings.Contains(out, "\n  -") {
				t.Errorf("%v: help lists no flags:\n%s", args, out)
			}
		}
	}
}

// TestBadFlagIsOneError: an unknown flag prints the parser's one error and
// a hint to --help, not the flag list, and exits 2.
func TestBadFlagIsOneError(t *testing.T) {
	for _, cmd := range subcommands() {
		if cmd[0] == "version" || len(cmd) == 1 && cmd[0] == "bench" {
			continue
		}
		args := append(append([]string(nil), cmd...), "--bogus-flag")
		code, out, errs := runCmd(t, "", args...)
		name := strings.Join(cmd, " ")
		if name == "bench" {
			name = "bench online" // flags first: the default benchmark
		}
		want := "kvrouter " + name + ": flag provided but not defined: -bogus-flag\nRun 'kvrouter " + name + " --help' for its flags.\n"
		if code != 2 || out != "" || errs != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", args, code, out, errs, want)
		}
	}
	code, _, errs := runCmd(t, "", "up", "--worker", "name=w1,url=http://h:1")
	if code != 2 || !strings.Contains(errs, "-worker") || !strings.Contains(errs, "Run 'kvrouter up --help'") || strings.Count(errs, "\n") != 2 {
		t.Errorf("up --worker: exit %d, stderr %q", code, errs)
	}
	code, _, errs = runCmd(t, "", "nosuch")
	if code != 2 || strings.Count(errs, "\n") != 2 || !strings.Contains(errs, "kvrouter --help") {
		t.Errorf("unknown command: exit %d, stderr %q", code, errs)
	}
}

func TestVersionLine(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}
	if got := versionLine("dev", bi); !strings.Contains(got, "commit "+rev+" (with uncommitted changes)") || !strings.HasPrefix(got, "kvrouter dev\n") {
		t.Errorf("with a VCS stamp: %q", got)
	}
	if got := versionLine("v1.2.3", &debug.BuildInfo{}); !strings.HasPrefix(got, "kvrouter v1.2.3\ncommit unknown") {
		t.Errorf("-buildvcs=false: %q", got)
	}
	if got := versionLine("dev", nil); !strings.Contains(got, "commit unknown") {
		t.Errorf("no build info: %q", got)
	}
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		if code, out, _ := runCmd(t, "", args...); code != 0 || !strings.HasPrefix(out, "kvrouter ") {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
}

// TestBuiltBinaryPrintsCommit builds kvrouter from this checkout, as
// `make build` does, and checks that --version names the checked-out
// commit and that the real binary's --help goes to stdout.
func TestBuiltBinaryPrintsCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing to stamp", err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a git worktree (.git is a file): the Go toolchain stamps no VCS information there, only in a clone")
	}
	bin := filepath.Join(t.TempDir(), "kvrouter")
	build := exec.Command("go", "build", "-o", bin, ".")
	// .ci/run sets GOFLAGS=-buildvcs=false; a user's `make build` has the stamp.
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=true")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.Contains(string(out), "commit "+strings.TrimSpace(string(head))) {
		t.Fatalf("--version: %v %q, want commit %s", err, out, head)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "serve", "--help")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() != 0 || !strings.Contains(stdout.String(), "-router-temperature") {
		t.Fatalf("serve --help: %v, stdout %d bytes, stderr %q", err, stdout.Len(), stderr.String())
	}
}

// TestSecondInterruptExits: the first SIGINT starts the graceful stop
// and says a second one exits; the second calls exit at once.
func TestSecondInterruptExits(t *testing.T) {
	var stderr logtest.Buffer
	cancelled := make(chan struct{})
	var exited atomic.Bool
	exitc := make(chan struct{})
	stop := interrupts(func() { close(cancelled) }, &stderr, func() { exited.Store(true); close(exitc) })
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the first interrupt did not cancel")
	}
	if exited.Load() || !strings.Contains(stderr.String(), "Ctrl-C again") {
		t.Fatalf("after one interrupt: exited %v, stderr %q", exited.Load(), stderr.String())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exitc:
	case <-time.After(10 * time.Second):
		t.Fatal("the second interrupt did not exit")
	}
}

// TestDefaultMockerJoinsDefaultRouter pairs `kvrouter mocker --event-plane
// nats` and `kvrouter serve` with their defaults (only ports and the
// shared NATS given): the worker registers with a block size the router
// accepts, and a completion is routed to it.
func TestDefaultMockerJoinsDefaultRouter(t *testing.T) {
	ns := natstest.StartServer(t, -1, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var serveErr logtest.Buffer
	served := make(chan int, 1)
	go func() {
		served <- run(ctx, []string{"serve", "--port", "0", "--nats-url", ns.ClientURL(), "--data-dir", t.TempDir()}, nil, io.Discard, &serveErr)
	}()
	mocked := make(chan int, 1)
	go func() {
		mocked <- run(ctx, []string{"mocker", "--event-plane", "nats", "--nats-url", ns.ClientURL(), "--port", "0", "--speedup-ratio", "100", "--log-level", "warn"}, nil, io.Discard, io.Discard)
	}()
	base := "http://" + waitMatch(t, &serveErr, regexp.MustCompile(`msg="kvrouter serving" addr=(\S+)`))
	var state string
	poll.UntilState(t, 20*time.Second, func() (bool, string) {
		resp, err := http.Get(base + "/v1/workers")
		if err == nil {
			var v struct {
				Workers []struct {
					State     string `json:"state"`
					BlockSize int    `json:"block_size"`
				} `json:"workers"`
			}
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err == nil && len(v.Workers) == 1 {
				state = v.Workers[0].State
				if state == "REFUSED" {
					t.Fatalf("serve refused the default mocker: %+v", v.Workers[0])
				}
			}
		}
		return state == "EXACT", fmt.Sprintf("state %q; serve's log:\n%s", state, serveErr.String())
	}, "the default mocker EXACT")
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model":"Qwen/Qwen3-0.6B","prompt":"a b c d e f g h","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %d %s", resp.StatusCode, body)
	}
	cancel()
	if c1, c2 := <-served, <-mocked; c1 != 0 || c2 != 0 {
		t.Fatalf("serve exit %d, mocker exit %d", c1, c2)
	}
	http.DefaultClient.CloseIdleConnections()
}

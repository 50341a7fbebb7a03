package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/logtest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

func TestMockerFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--bogus"},
		{"--num-workers", "0"},
		{"--tokenizer", "nope"},
		{"--kv-events-config", `{"endpointt":"x"}`},
		{"--kv-events-encoding", "xml"},
		{"--block-size", "0", "--port", "0", "--host", "127.0.0.1"},
		{"extra"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"mocker"}, args...), nil, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("mocker %v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

func TestMockerRunsWorkersAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stderr logtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"mocker", "--host", "127.0.0.1", "--port", "0", "--num-workers", "2",
			"--data-parallel-size", "2", "--speedup-ratio", "100", "--num-gpu-blocks-override", "64",
			"--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:0","replay_endpoint":"tcp://127.0.0.1:0"}`},
			nil, &bytes.Buffer{}, &stderr)
	}()
	serving := regexp.MustCompile(`msg="mock worker serving"`)
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		out := stderr.String()
		return len(serving.FindAllString(out, -1)) >= 2, out
	}, "two workers serving")
	if n := strings.Count(stderr.String(), `msg="kv events"`); n != 4 {
		t.Fatalf("%d kv event publishers logged, want 4: %s", n, stderr.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mocker did not stop")
	}
}

package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/service"
)

// `kvrouter up --models A,B` starts mock workers for both models, B's at
// twice A's block size, and each model's requests reach only its workers.
func TestUpTwoModels(t *testing.T) {
	const second = "org/second-model"
	u, _, err := config.LoadCommand[config.Up](
		[]string{"--models", "Qwen/Qwen3-0.6B," + second, "--event-plane", "none", "--port", "0", "--data-dir", t.TempDir(),
			"--speedup-ratio", "1000"},
		config.DefaultUp, config.Options{Name: "up"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := u.Router()
	model, err := service.LoadModel("")
	if err != nil {
		t.Fatal(err)
	}
	log := discardLogger()
	fl, svc, err := startUp(context.Background(), cfg, upFleetConfig(u, cfg, model, log), log)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Stop()
	byModel := map[string][]string{}
	sizes := map[string]int{}
	for _, w := range fl.Workers {
		byModel[w.Model] = append(byModel[w.Model], w.Name)
		sizes[w.Model] = w.BlockSize
	}
	if len(byModel["Qwen/Qwen3-0.6B"]) != 2 || len(byModel[second]) != 2 || sizes["Qwen/Qwen3-0.6B"] != 16 || sizes[second] != 32 {
		t.Fatalf("fleet: %v, block sizes %v", byModel, sizes)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		resp, err := client.Get(url + "/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	}, "router ready")
	for i := range 8 {
		m := "Qwen/Qwen3-0.6B"
		if i%2 == 1 {
			m = second
		}
		b, _ := json.Marshal(map[string]any{"model": m, "max_tokens": 2,
			"messages": []map[string]string{{"role": "user", "content": strings.Repeat("tell me a story ", 20+i)}}})
		resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if w := resp.Header.Get("X-Kvrouter-Worker"); resp.StatusCode != 200 || !slices.Contains(byModel[m], w) {
			t.Fatalf("%s: status %d on %q, want one of %v", m, resp.StatusCode, w, byModel[m])
		}
	}
}

package deploycheck

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// metricRef finds metric names in PromQL: ours and vLLM's.
var metricRef = regexp.MustCompile(`\b(kvrouter_[a-z0-9_]+|vllm:[a-z0-9_:]+)`)

// dashboardMetrics returns every metric the dashboard queries, with the
// histogram series suffixes stripped.
func dashboardMetrics(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "kvrouter-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Fatal("dashboard without title or uid")
	}
	uses := map[string][]string{}
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") || strings.Count(tg.Expr, "{") != strings.Count(tg.Expr, "}") {
				t.Errorf("panel %q: unbalanced query %s", p.Title, tg.Expr)
			}
			for _, m := range metricRef.FindAllString(tg.Expr, -1) {
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(m, suf); ok && !strings.HasSuffix(m, "_total"+suf) {
						m = base
						break
					}
				}
				uses[m] = append(uses[m], p.Title)
			}
		}
	}
	if len(uses) == 0 {
		t.Fatal("dashboard queries no metric")
	}
	return uses
}

// TestDashboardMetricsExist runs a real fleet (`kvrouter up` with one mock
// worker), sends it a request, scrapes the router's and the worker's
// /metrics, and checks that every metric the dashboard queries is exported.
func TestDashboardMetricsExist(t *testing.T) {
	uses := dashboardMetrics(t)
	bin := kvrouterBinary(t)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "up", "--port=0", "--workers=1", "--no-nats", "--data-dir="+t.TempDir(), "--log-level=warn")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	url := ""
	urlRe := regexp.MustCompile(`router at (http://127\.0\.0\.1:[0-9]+)`)
	sc := bufio.NewScanner(out)
	for url == "" && sc.Scan() {
		if m := urlRe.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatal("kvrouter up did not print its URL")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	// Plain (usage with cached tokens), then streaming (inter-token latency),
	// on the same prompt so that the second one hits the cache.
	for _, stream := range []string{"false", "true"} {
		body := `{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"Hello there, how are you today?"}],"max_tokens":4,"stream":` + stream + `}`
		resp := do(t, http.MethodPost, url+"/v1/chat/completions", body)
		if resp.code != http.StatusOK {
			t.Fatalf("chat completion: %d %s", resp.code, resp.body)
		}
	}
	exported := scrapeNames(t, url+"/metrics")
	var workers struct {
		Workers []struct {
			URL string `json:"url"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(do(t, http.MethodGet, url+"/v1/workers", "").body), &workers); err != nil || len(workers.Workers) == 0 {
		t.Fatalf("/v1/workers: %v %+v", err, workers)
	}
	for name := range scrapeNames(t, workers.Workers[0].URL+"/metrics") {
		exported[name] = true
	}
	for m, panels := range uses {
		if !exported[m] {
			t.Errorf("dashboard panel(s) %q query %s, which neither the router nor the mock worker exports", panels, m)
		}
	}
}

type response struct {
	code int
	body string
}

func do(t *testing.T, method, url, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return response{resp.StatusCode, string(b)}
}

// scrapeNames returns the metric families of a /metrics page.
func scrapeNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	r := do(t, http.MethodGet, url, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET %s: %d", url, r.code)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(r.body, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	if len(names) == 0 {
		t.Fatalf("GET %s: no metrics", url)
	}
	return names
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/report"
)

type gridJSON struct {
	Scenarios []struct {
		Name     string    `json:"name"`
		Fleet    string    `json:"fleet"`
		Replay   float64   `json:"replay"`
		Speeds   []float64 `json:"speeds"`
		Best     string    `json:"best_kv"`
		Compared []string  `json:"compared"`
		Rows     []struct {
			Label string `json:"label"`
			KV    *struct {
				Credit float64 `json:"credit"`
				Scale  float64 `json:"prefill_load_scale"`
				Clamp  bool    `json:"prefill_clamp"`
			} `json:"kv_setting"`
			Result        report.Result `json:"result"`
			FastPerSlow   float64       `json:"fast_per_slow"`
			TTFTP50VsBest float64       `json:"ttft_p50_vs_best"`
		} `json:"rows"`
	} `json:"scenarios"`
}

func runJSON(t *testing.T, args ...string) []byte {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), append([]string{"sim"}, args...), nil, &out, &errb); code != 0 {
		t.Fatalf("sim %v: exit %d: %s", args, code, errb.String())
	}
	return out.Bytes()
}

// TestSimGridMatchesSingleRuns runs the grid on the head of the synthetic
// trace, two workers (the second twice as fast), at replay ×1 and ×2, and
// checks it against running the policies one by one with the same flags:
// the same numbers, whatever --parallel; the best kv setting is the
// lowest TTFT p50 (then p90) of the 36; the ratios are to it.
func TestSimGridMatchesSingleRuns(t *testing.T) {
	base := []string{"--trace", "synthetic", "--trace-limit", "80", "--workers", "2", "--num-gpu-blocks", "2048"}
	dir := t.TempDir()
	grid := append(append([]string{}, base...), "--grid", "--grid-fleets", "h=1,2", "--grid-replay", "1,2",
		"--policy", "kv,round-robin,least-loaded", "--json", "--plot", dir)
	out := runJSON(t, append(grid, "--parallel", "2")...)
	var g gridJSON
	if err := json.Unmarshal(out, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Scenarios) != 2 {
		t.Fatalf("%d scenarios", len(g.Scenarios))
	}
	sc := g.Scenarios[1]
	if sc.Fleet != "h" || sc.Replay != 2 || !reflect.DeepEqual(sc.Speeds, []float64{1, 2}) || len(sc.Rows) != 36+2 {
		t.Fatalf("scenario %s: fleet %s replay %v speeds %v, %d rows", sc.Name, sc.Fleet, sc.Replay, sc.Speeds, len(sc.Rows))
	}
	if !strings.Contains(sc.Name, "×2") {
		t.Fatalf("scenario name %q does not say ×2", sc.Name)
	}
	// The best kv row, found here independently.
	best := -1
	for i, r := range sc.Rows {
		if r.KV == nil {
			continue
		}
		if best < 0 || r.Result.TTFTP50Ms < sc.Rows[best].Result.TTFTP50Ms ||
			(r.Result.TTFTP50Ms == sc.Rows[best].Result.TTFTP50Ms && r.Result.TTFTP90Ms < sc.Rows[best].Result.TTFTP90Ms) {
			best = i
		}
	}
	b := sc.Rows[best]
	if b.Result.TTFTP50Ms != func() float64 {
		for _, r := range sc.Rows {
			if r.Label == sc.Best {
				return r.Result.TTFTP50Ms
			}
		}
		return -1
	}() || sc.Compared[0] != sc.Best {
		t.Fatalf("best %q, but %q has TTFT p50 %v", sc.Best, b.Label, b.Result.TTFTP50Ms)
	}
	// Every row against its single run: the best kv setting, two others,
	// round-robin and least-loaded.
	checked := 0
	for i, r := range sc.Rows {
		if !(i == best || i == 0 || i == 35 || r.KV == nil) {
			continue
		}
		args := append(append([]string{}, base...), "--speedup", "2", "--worker-speeds", "1,2", "--json")
		if r.KV != nil {
			args = append(args, "--policy", "kv", "--kv-overlap-score-credit", jsonNum(r.KV.Credit),
				"--router-prefill-load-scale", jsonNum(r.KV.Scale), "--router-prefill-clamp="+jsonBool(r.KV.Clamp))
		} else {
			args = append(args, "--policy", r.Label)
		}
		var single []report.Result
		if err := json.Unmarshal(runJSON(t, args...), &single); err != nil || len(single) != 1 {
			t.Fatalf("%s: %v", r.Label, err)
		}
		want, got := single[0], r.Result
		want.Policy, want.Workload = r.Label, ""
		if got != want {
			t.Fatalf("%s: grid\n%+v\nsingle run\n%+v", r.Label, got, want)
		}
		if ratio := got.TTFTP50Ms / b.Result.TTFTP50Ms; r.TTFTP50VsBest != ratio {
			t.Fatalf("%s: p50 ÷ best %v, want %v", r.Label, r.TTFTP50VsBest, ratio)
		}
		checked++
	}
	if checked < 4 {
		t.Fatalf("checked %d rows", checked)
	}
	if _, err := os.Stat(filepath.Join(dir, gridPlotFile)); err != nil {
		t.Fatal(err)
	}
	// Deterministic, one simulation at a time as two.
	if again := runJSON(t, append(grid, "--parallel", "1")...); !bytes.Equal(out, again) {
		t.Fatal("--parallel 1 and 2 differ")
	}
}

func jsonNum(v float64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonBool(v bool) string {
	if v {
		return "true"
	}
	return "false"
}

// TestSimGridTableAndErrors checks the text output names the best setting
// and each compared policy, and that an unknown policy stops the grid
// before it runs.
func TestSimGridTableAndErrors(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"sim", "--workload", "shared-prefix", "--gsp-num-groups", "2", "--gsp-prompts-per-group", "3", "--workers", "2",
		"--num-gpu-blocks", "1024", "--block-size", "16", "--grid", "--worker-speeds", "1,2", "--policy", "round-robin,random"}
	if code := run(context.Background(), args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"scenario: shared-prefix, fleet 1,2 (2 workers)", "best kv setting", "(best)", "round-robin", "random",
		"fast/slow", "c=16", "s=16 clamp=off"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	errb.Reset()
	if code := run(context.Background(), []string{"sim", "--grid", "--policy", "kv,nope"}, nil, &bytes.Buffer{}, &errb); code != 1 ||
		!strings.Contains(errb.String(), `unknown policy "nope"`) || strings.Contains(errb.String(), "grid [") {
		t.Fatalf("unknown policy: exit %d: %s", code, errb.String())
	}
}

// TestSimGridHonoursQueueFlags: with the admission-queue flags the grid
// runs the queue, as a single run with the same flags does: its
// round-robin row is the single run's, queue timeouts included (and they
// happen, so the comparison would catch a grid that ignores the queue).
func TestSimGridHonoursQueueFlags(t *testing.T) {
	base := []string{"--trace", "synthetic", "--trace-limit", "80", "--workers", "2", "--num-gpu-blocks", "2048",
		"--router-queue-threshold", "0.1", "--router-queue-timeout", "20ms", "--json"}
	var g gridJSON
	if err := json.Unmarshal(runJSON(t, append(append([]string{}, base...), "--grid", "--grid-replay", "8", "--policy", "round-robin")...), &g); err != nil {
		t.Fatal(err)
	}
	var single []report.Result
	if err := json.Unmarshal(runJSON(t, append(append([]string{}, base...), "--speedup", "8", "--policy", "round-robin")...), &single); err != nil || len(single) != 1 {
		t.Fatalf("single run: %v", err)
	}
	want := single[0]
	if want.Failed == 0 {
		t.Fatal("the single run timed nothing out of the queue: the comparison shows nothing")
	}
	want.Workload = ""
	for _, r := range g.Scenarios[0].Rows {
		if r.Label == "round-robin" {
			if r.Result != want {
				t.Fatalf("grid\n%+v\nsingle run with the same queue flags\n%+v", r.Result, want)
			}
			return
		}
	}
	t.Fatal("no round-robin row in the grid")
}

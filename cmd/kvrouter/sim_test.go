package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestSimCommand(t *testing.T) {
	dir := t.TempDir()
	args := []string{"sim", "--workload", "shared-prefix", "--gsp-num-groups", "4", "--gsp-prompts-per-group", "4",
		"--request-rate", "20", "--workers", "2", "--num-gpu-blocks", "1024", "--block-size", "16", "--json", "--plot", dir}
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res []map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(res) != 4 || res[0]["policy"] != "kv" || res[0]["requests"] != 16.0 {
		t.Fatalf("results %v", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "ttft_cdf.png")); err != nil {
		t.Fatal(err)
	}
	// Same seed, same JSON.
	var again bytes.Buffer
	run(context.Background(), args, nil, &again, &bytes.Buffer{})
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Fatal("two runs differ")
	}
	if code := run(context.Background(), []string{"sim", "--workload", "nope"}, nil, &out, &bytes.Buffer{}); code != 2 {
		t.Fatalf("bad workload: exit %d", code)
	}
}

// TestSimPrefillClampFlag checks that --router-prefill-clamp reaches the
// router: on the conversation trace's head at a high credit, turning the
// clamp off raises kv's hit ratio (ties between partial and full prefixes
// go away); a non-boolean value is a usage error.
func TestSimPrefillClampFlag(t *testing.T) {
	hit := map[string]float64{}
	for _, clamp := range []string{"true", "false"} {
		args := []string{"sim", "--trace", "conversation", "--trace-limit", "300", "--speedup", "4", "--policy", "kv", "--json",
			"--router-prefill-load-scale", "16", "--kv-overlap-score-credit", "16", "--router-prefill-clamp=" + clamp}
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, nil, &out, &errb); code != 0 {
			t.Fatalf("clamp %s: exit %d: %s", clamp, code, errb.String())
		}
		var res []struct {
			HitRatio      float64 `json:"hit_ratio"`
			BoundHitRatio float64 `json:"bound_hit_ratio"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != 1 || res[0].BoundHitRatio <= 0 {
			t.Fatalf("clamp %s: %v: %s", clamp, err, out.String())
		}
		hit[clamp] = res[0].HitRatio / res[0].BoundHitRatio
	}
	t.Logf("hit ÷ bound: clamp on %.3f, off %.3f", hit["true"], hit["false"])
	if hit["false"] <= hit["true"] {
		t.Fatalf("clamp off %.3f not above clamp on %.3f", hit["false"], hit["true"])
	}
	if code := run(context.Background(), []string{"sim", "--router-prefill-clamp=maybe"}, nil, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Fatalf("bad boolean: exit %d, want 2", code)
	}
}

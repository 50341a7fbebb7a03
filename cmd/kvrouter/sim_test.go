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
	if code := run(context.Background(), []string{"sim", "--workload", "nope"}, nil, &out, &bytes.Buffer{}); code != 1 {
		t.Fatalf("bad workload: exit %d", code)
	}
}

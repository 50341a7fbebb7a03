package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchUnknownSub(t *testing.T) {
	code, _, errs := runCmd(t, "", "bench", "nope")
	if code != 2 || !strings.Contains(errs, `unknown benchmark "nope"`) || !strings.Contains(errs, "Run 'kvrouter bench --help'") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if code, _, _ := runCmd(t, "", "bench"); code != 2 {
		t.Fatalf("bench without a sub: exit %d, want 2", code)
	}
}

func TestBenchIndexBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--block-size", "0"}, {"--workers", "-1"}, {"--queries", "0"}, {"extra"}} {
		code, _, errs := runCmd(t, "", append([]string{"bench", "index"}, args...)...)
		if code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}

// A tiny synthetic trace: 40 conversations' turns sharing prefixes.
func TestBenchIndexJSONTiny(t *testing.T) {
	var b strings.Builder
	id := uint64(1000)
	for conv := range 20 {
		ids := []uint64{0, uint64(conv + 1)}
		for turn := range 2 {
			id++
			ids = append(ids, id)
			js, _ := json.Marshal(ids)
			fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 10, "hash_ids": %s}`+"\n",
				conv*10+turn, len(ids)*512, js)
		}
	}
	path := filepath.Join(t.TempDir(), "tiny.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, "", "bench", "index", "--trace", path, "--block-size", "128",
		"--workers", "4", "--worker-blocks", "24", "--queries", "200", "--writers", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r map[string]float64
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	for _, k := range []string{"block_ops_per_sec", "query_p50_us", "query_p99_us", "bytes_per_entry", "entries", "workers",
		"concurrent_block_ops_per_sec", "queries_per_sec_1_reader", "queries_per_sec_2_readers"} {
		if _, ok := r[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, out)
		}
	}
	// 40 requests of 3 and 4 Mooncake blocks = 12 and 16 engine blocks of
	// 128 tokens; 4 workers of 24 blocks each can hold at most 96 entries.
	if r["requests"] != 40 || r["workers"] < 1 || r["workers"] > 4 {
		t.Errorf("requests %v workers %v", r["requests"], r["workers"])
	}
	if r["entries"] <= 0 || r["entries"] > 96 {
		t.Errorf("entries %v, want 1..96", r["entries"])
	}
	if r["unknown_parents"] != 0 {
		t.Errorf("the simulated workers' events must chain: %v unknown parents", r["unknown_parents"])
	}
	if r["block_ops_per_sec"] <= 0 || r["query_p50_us"] > r["query_p99_us"] {
		t.Errorf("rates %s", out)
	}
}

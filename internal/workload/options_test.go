package workload

import (
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestOptionsFlags(t *testing.T) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.RegisterFlags(fs)
	if err := fs.Parse([]string{"--workload", "shared-prefix", "--gsp-num-groups", "4", "--gsp-prompts-per-group", "3",
		"--request-rate", "2", "--workload-seed", "9", "--speedup", "4", "--mt-think-time", "2s"}); err != nil {
		t.Fatal(err)
	}
	if o.Mooncake.Speedup != 4 || o.MultiTurn.ThinkTime != 2*time.Second {
		t.Fatalf("flags not applied: %+v", o)
	}
	a, err := o.Open()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := o.Open()
	ra, rb := Collect(a, 0), Collect(b, 0)
	if len(ra) != 12 || !reflect.DeepEqual(ra, rb) {
		t.Fatalf("%d requests; replays equal: %v", len(ra), reflect.DeepEqual(ra, rb))
	}
	c := DefaultSharedPrefixConfig()
	c.NumGroups, c.PromptsPerGroup, c.RequestRate, c.Seed = 4, 3, 2, 9
	direct, _ := NewSharedPrefix(c)
	if !reflect.DeepEqual(Collect(direct, 0), ra) {
		t.Fatal("--workload-seed not applied as the generator seed")
	}

	small := filepath.Join(t.TempDir(), "small.jsonl")
	if err := os.WriteFile(small, []byte(`{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 3000, "input_length": 10, "output_length": 1, "hash_ids": [1]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, kind := range Kinds {
		o := DefaultOptions()
		o.Kind, o.Trace = kind, small
		o.Mooncake.Limit, o.PrefixRatio.Requests, o.MultiTurn.Sessions = 5, 5, 2
		src, err := o.Open()
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if n := len(Collect(src, 0)); n == 0 || n != src.Len() {
			t.Fatalf("%s: %d requests", kind, n)
		}
		if o.Name() == "" {
			t.Fatal("empty name")
		}
	}
	o = DefaultOptions()
	o.Kind = "nope"
	if _, err := o.Open(); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown kind: %v", err)
	}
	o = DefaultOptions()
	o.Trace = "/nonexistent/trace.jsonl"
	if _, err := o.Open(); err == nil {
		t.Fatal("missing trace accepted")
	}
}

func TestFaster(t *testing.T) {
	reqs := []Request{{Arrival: 0, Prompt: []uint32{1}, OutputLen: 1}, {Arrival: 4 * time.Second, Prompt: []uint32{2}, OutputLen: 1}}
	src, err := Faster(NewSlice(reqs, 0), 4)
	if err != nil {
		t.Fatal(err)
	}
	got := Collect(src, 0)
	if len(got) != 2 || got[0].Arrival != 0 || got[1].Arrival != time.Second || src.Len() != 2 || src.Concurrency() != 0 {
		t.Fatalf("%+v", got)
	}
	if src, _ := Faster(NewSlice(reqs, 5), 2.5); src.Concurrency() != 13 {
		t.Fatalf("closed loop ×2.5 of 5: concurrency %d, want 13 (12.5 rounded)", src.Concurrency())
	}
	if src, _ := Faster(NewSlice(reqs, 1), 0.1); src.Concurrency() != 1 {
		t.Fatalf("closed loop ×0.1 of 1: concurrency %d, want at least 1", src.Concurrency())
	}
	for _, k := range []float64{0, -1, math.NaN(), 1e7} {
		if _, err := Faster(NewSlice(reqs, 0), k); !errors.Is(err, ErrConfig) {
			t.Fatalf("k %v: %v", k, err)
		}
	}
}
